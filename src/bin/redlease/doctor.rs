//! `redlease doctor`: the diagnosis printed as lines or JSON, and the exit
//! code that says how it came out.

use std::process::ExitCode;

use redlease::{Client, ErrorKind};

use crate::show::{json_str, printable};
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

pub(crate) fn check_json(name: &str, status: &str, detail: &str, advice: Option<&str>) -> String {
    format!(
        "{{\"name\":{},\"status\":{},\"detail\":{},\"advice\":{}}}",
        json_str(name),
        json_str(status),
        json_str(detail),
        advice.map_or("null".into(), json_str)
    )
}

pub(crate) fn doctor(client: &Client, json: bool) -> ExitCode {
    let d = client.diagnose();
    let status = d.status();
    if json {
        let checks: Vec<String> = d
            .checks
            .iter()
            .map(|c| check_json(&c.name, c.status.as_str(), &c.detail, c.advice.as_deref()))
            .collect();
        println!(
            "{{\"status\":{},\"capabilities\":{},\"checks\":[{}]}}",
            json_str(status.as_str()),
            json_str(&client.capabilities().to_string()),
            checks.join(",")
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
pub(crate) fn doctor_unreachable(e: &redlease::Error, json: bool) -> ExitCode {
    let advice = match e.kind() {
        ErrorKind::Auth => "check the user name and password (--password-file), and the ACL",
        ErrorKind::InvalidArgument => "fix the URL or option named above",
        _ => "check that the server runs, the host and port, TLS (rediss:// and --tls-ca), and firewalls",
    };
    let detail = e.to_string();
    if json {
        println!(
            "{{\"status\":\"refused\",\"capabilities\":null,\"checks\":[{}]}}",
            check_json("connect", "refused", &detail, Some(advice))
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
