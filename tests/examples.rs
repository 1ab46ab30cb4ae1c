//! The examples, run without a server: they say which URL they tried and
//! how to get a server, quickly, instead of a bare connection error.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The newest build of example `name` (cargo builds examples along with the
/// tests, under `target/<profile>/examples/`).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples");
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no examples built in {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let f = p.file_name().unwrap().to_string_lossy().to_string();
            (f == name || f.starts_with(&format!("{name}-"))) && p.extension().is_none()
        })
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| panic!("example {name} not built in {}", dir.display()))
        .1
}

#[test]
fn examples_explain_a_missing_server() {
    let dead = redis_test::utils::get_random_available_port();
    for name in ["quickstart", "deploy_gate", "transfer"] {
        let t = Instant::now();
        let out = Command::new(example(name))
            .env("REDIS_URL", format!("redis://:pw@127.0.0.1:{dead}/"))
            .output()
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{name}: {:?}",
            t.elapsed()
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("127.0.0.1:{dead}")), "{name}: {err}");
        assert!(
            err.contains("REDIS_URL") && err.contains("scripts/demo.sh"),
            "{name}: {err}"
        );
        assert!(!err.contains(":pw@"), "{name}: {err}");
    }
}
