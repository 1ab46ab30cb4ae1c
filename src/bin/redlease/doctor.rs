//! `redlease doctor`: the diagnosis printed as lines or JSON, and the exit
//! code that says how it came out.

use std::process::ExitCode;

use redlease::{Client, ErrorKind};

use crate::show::{json, printable};
use crate::{EXIT_DEGRADED, EXIT_UNAVAILABLE, EXIT_USAGE};

/// The exit code for a diagnosis: 0, [`EXIT_DEGRADED`] or
/// [`EXIT_UNAVAILABLE`].
pub(crate) fn doctor_code(status: redlease::CheckStatus) -> ExitCode {
    ExitCode::from(match status {
        redlease::CheckStatus::Ok => 0,
        redlease::CheckStatus::Degraded => EXIT_DEGRADED,
        _ => EXIT_UNAVAILABLE,
    })
}

/// `doctor --json`: the overall status, the client's capabilities in
/// words, and every check.
#[derive(serde::Serialize)]
struct Report<'a> {
    status: redlease::CheckStatus,
    capabilities: Option<String>,
    checks: &'a [redlease::Check],
}

/// One check, for the report of a client that could not be built.
#[derive(serde::Serialize)]
struct Line<'a> {
    name: &'a str,
    status: redlease::CheckStatus,
    detail: &'a str,
    advice: Option<&'a str>,
}

pub(crate) fn doctor(client: &Client, as_json: bool) -> ExitCode {
    let d = client.diagnose();
    let status = d.status();
    if as_json {
        println!(
            "{}",
            json(&Report {
                status,
                capabilities: Some(client.capabilities().to_string()),
                checks: &d.checks,
            })
        );
    } else {
        println!(
            "{:<9} client: {}",
            "info",
            printable(&client.capabilities().to_string())
        );
        for c in &d.checks {
            println!("{}", printable(&c.to_string()));
        }
        println!("{:<9} overall", status.as_str());
    }
    doctor_code(status)
}

/// `doctor` when the client could not even be built: one refused line
/// that says what to check.
pub(crate) fn doctor_unreachable(e: &redlease::Error, as_json: bool) -> ExitCode {
    let advice = match e.kind() {
        ErrorKind::Auth => "check the user name and password (--password-file), and the ACL",
        ErrorKind::InvalidArgument => "fix the URL or option named above",
        _ => "check that the server runs, the host and port, TLS (rediss:// and --tls-ca), and firewalls",
    };
    let detail = e.to_string();
    if as_json {
        #[derive(serde::Serialize)]
        struct Unreachable<'a> {
            status: redlease::CheckStatus,
            capabilities: Option<String>,
            checks: [Line<'a>; 1],
        }
        println!(
            "{}",
            json(&Unreachable {
                status: redlease::CheckStatus::Refused,
                capabilities: None,
                checks: [Line {
                    name: "connect",
                    status: redlease::CheckStatus::Refused,
                    detail: &detail,
                    advice: Some(advice),
                }],
            })
        );
    } else {
        println!(
            "{:<9} connect: {} -- {advice}",
            "refused",
            printable(&detail)
        );
        println!("{:<9} overall", "refused");
    }
    ExitCode::from(if e.kind() == ErrorKind::InvalidArgument {
        EXIT_USAGE
    } else {
        EXIT_UNAVAILABLE
    })
}
