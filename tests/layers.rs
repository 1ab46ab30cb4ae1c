//! The crate's layers, checked from its `use` lines (ARCHITECTURE.md,
//! "Layers"): every reference `crate::<module>` in `src/` points to a
//! lower layer, so no import cycle can come back unnoticed. A folder is
//! one module. A new top-level module fails here until it is given a
//! layer below.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level modules from the top down. A module may use only modules of
/// a later row; the modules of one row use none of each other.
const LAYERS: &[&[&str]] = &[
    &["doctor"],
    // The facade: `Client`, its builder, and what it offers beside the handles.
    &["client"],
    // `Lock`, `RwLock`, `Semaphore`, `CountDownLatch`, `MultiLock` and guards.
    &["handles"],
    // The lease lifecycle, re-entry, and the client's shared `Context`.
    &["lease"],
    // The waiting loop and the subscriber.
    &["wakeup"],
    // The renewal thread.
    &["renewal"],
    // Servers and topologies: knows no lease, no handle, no waiting.
    &["backend"],
    // The protocol core without I/O: keys, scripts, timings, decision rules.
    &["protocol"],
    // Leaves.
    &["error", "events", "metrics", "util"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its unit tests (which
/// may reach anywhere).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The names `lib.rs` re-exports at the crate root, with the module each
/// comes from (`crate::Client` is a use of `client`).
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("pub use ") else {
            continue;
        };
        let module = ident_at(rest).to_string();
        let list = rest.trim_end_matches(';');
        let list = match (list.find('{'), list.rfind('}')) {
            (Some(a), Some(b)) => &list[a + 1..b],
            _ => list.rsplit("::").next().unwrap_or(""),
        };
        for name in list.split(',') {
            let name = name.trim().rsplit(' ').next().unwrap_or("");
            if !name.is_empty() {
                names.insert(name.to_string(), module.clone());
            }
        }
    }
    names
}

/// Every top-level module `code` refers to through `crate::`.
fn uses(code: &str, roots: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut add = |name: &str| {
        let module = roots.get(name).map(String::as_str).unwrap_or(name);
        if !module.is_empty() && module != "self" {
            found.insert(module.to_string());
        }
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c};`: the first name of each item.
            let group = &group[..group.find("};").unwrap_or(group.len())];
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_ascii_alphanumeric() || c == '_') => {
                        add(ident_at(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            add(ident_at(rest));
        }
    }
    found
}

#[test]
fn every_module_uses_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let roots = root_names(&lib);
    let mut files = Vec::new();
    source_files(&src, &mut files);
    files.sort();

    let mut wrong = Vec::new();
    let mut modules = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let first = rel.components().next().expect("a path");
        let first = first.as_os_str().to_string_lossy();
        if first == "bin" || first == "lib.rs" {
            continue;
        }
        let module = first.trim_end_matches(".rs").to_string();
        modules.insert(module.clone());
        let Some(from) = layer_of(&module) else {
            wrong.push(format!("{}: module `{module}` has no layer", rel.display()));
            continue;
        };
        let text = fs::read_to_string(file).expect("a source file");
        for used in uses(&code_of(&text), &roots) {
            if used == module {
                continue;
            }
            match layer_of(&used) {
                Some(to) if to > from => {}
                Some(_) => wrong.push(format!(
                    "{}: `{module}` uses `{used}`, which is not below it",
                    rel.display()
                )),
                None => wrong.push(format!(
                    "{}: `{module}` uses `{used}`, which has no layer",
                    rel.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "layer rules broken:\n{}",
        wrong.join("\n")
    );
    // The table names no module that is gone.
    for row in LAYERS {
        for module in *row {
            assert!(
                modules.contains(*module),
                "`{module}` is in LAYERS but not in src/"
            );
        }
    }
}

/// The checker itself can fail: an upward use is found, in both forms.
#[test]
fn an_upward_use_is_seen() {
    let roots = root_names("pub use client::Client;\npub use handles::lock::{Lock, LockGuard};\n");
    let found = uses(
        "use crate::{Client, error::Result};\nfn f() { crate::handles::lock::x(); }",
        &roots,
    );
    let want: BTreeSet<String> = ["client", "error", "handles"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
    assert_eq!(
        uses(
            &code_of("// crate::client\nuse crate::lease::context::Context; // crate::handles"),
            &roots
        )
        .into_iter()
        .collect::<Vec<_>>(),
        vec!["lease".to_string()]
    );
}
