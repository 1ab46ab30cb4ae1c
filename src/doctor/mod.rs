//! [`Client::diagnose`]: whether every guarantee can hold on these servers,
//! checked as the application would meet them (same URL, TLS, user,
//! prefix). `redlease doctor` prints it.
//!
//! It writes only scratch names under the prefix (`redlease-doctor-<id>`)
//! and deletes them, and runs nothing that touches other applications'
//! state: no `SCRIPT FLUSH`, no `CONFIG SET`, no `FLUSH*`.

mod master;
mod primitives;

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::Client;
use master::check_master;
use primitives::{check_primitives, clean_up};

/// How one check came out (serialized as `"ok"`, `"degraded"`,
/// `"refused"` with the `serde` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum CheckStatus {
    /// Works as documented.
    Ok,
    /// Works, with a guarantee, or the speed, reduced (see the advice).
    Degraded,
    /// The library cannot work here until this is fixed.
    Refused,
}

impl CheckStatus {
    /// `Degraded` if `cond`, else `Ok`.
    fn degraded_if(cond: bool) -> CheckStatus {
        if cond {
            CheckStatus::Degraded
        } else {
            CheckStatus::Ok
        }
    }

    /// `ok`, `degraded` or `refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Degraded => "degraded",
            CheckStatus::Refused => "refused",
        }
    }
}

/// One line of a [`Diagnosis`].
#[derive(Debug, Clone)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Check {
    /// What was checked, and where: `scripts 127.0.0.1:6379`.
    pub name: String,
    /// How it came out.
    pub status: CheckStatus,
    /// What was found.
    pub detail: String,
    /// What to do, when it is not `Ok`.
    pub advice: Option<String>,
}

/// Every check [`Client::diagnose`] ran, in order.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Diagnosis {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
}

impl Diagnosis {
    /// The worst status of any check (`Ok` when there are none).
    pub fn status(&self) -> CheckStatus {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(CheckStatus::Ok)
    }

    fn push(&mut self, name: String, status: CheckStatus, detail: String, advice: Option<&str>) {
        self.checks.push(Check {
            name,
            status,
            detail,
            advice: advice.map(str::to_owned),
        });
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<9} {}: {}",
            self.status.as_str(),
            self.name,
            self.detail
        )?;
        if let Some(a) = &self.advice {
            write!(f, " -- {a}")?;
        }
        Ok(())
    }
}

/// What to do when the server refuses blocking pops.
const BLOCKING_REFUSED: &str = "lock waiters fall back to release messages (slower hand-overs, \
     a look every fallback_poll): allow +blpop +blmove +lpop +rpush as the README's ACL line does";

/// The clock offset beyond which NTP is not keeping time here.
const CLOCK_SLACK: Duration = Duration::from_secs(1);
/// The median round trip beyond which every wait and renewal is slow.
const SLOW_ROUND_TRIP: Duration = Duration::from_millis(50);

/// A server error's code (`NOPERM`, `ERR`), or `None` for a value.
fn refused(v: &redis::RedisResult<Value>) -> Option<String> {
    match v {
        Ok(Value::ServerError(e)) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

impl Client {
    /// Checks, as this application meets them, everything the library
    /// relies on: each master's kind and version, round trip and clock,
    /// eviction policy, scripts, pub/sub and replicas; then every
    /// primitive on a scratch name under the prefix (deleted afterwards),
    /// which exercises the ACL exactly as the application will, and
    /// whether waiters can block for direct grants. Bounded by the
    /// client's timeouts; never panics.
    ///
    /// ```no_run
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// let report = client.diagnose();
    /// for check in &report.checks {
    ///     println!("{check}");
    /// }
    /// assert_eq!(report.status(), redlease::CheckStatus::Ok);
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn diagnose(&self) -> Diagnosis {
        let mut d = Diagnosis::default();
        let backend = self.backend().clone();
        let scratch = format!("redlease-doctor-{}", uuid::Uuid::new_v4().simple());
        let mut offsets: Vec<(String, f64)> = Vec::new();
        let (mut masters, mut answered) = (0, 0);
        backend.each_master(&mut |node| {
            masters += 1;
            if check_master(self, node, &mut d, &mut offsets) {
                answered += 1;
            }
        });
        if masters == 0 {
            d.push(
                "masters".into(),
                CheckStatus::Refused,
                "no master could be found".into(),
                Some("check the URL, and that the cluster or Sentinels answer"),
            );
        }
        if backend.is_cluster() {
            let sharded = backend.sharded();
            d.push(
                "sharded pub/sub".into(),
                CheckStatus::Ok,
                if sharded {
                    "wake-ups go to the name's shard alone (SPUBLISH / SSUBSCRIBE)".into()
                } else {
                    "not available (Redis before 7.0, or refused): wake-ups use classic \
                     pub/sub, which every node of the cluster carries"
                        .into()
                },
                None,
            );
        }
        if offsets.len() > 1 {
            let min = offsets.iter().map(|o| o.1).fold(f64::INFINITY, f64::min);
            let max = offsets
                .iter()
                .map(|o| o.1)
                .fold(f64::NEG_INFINITY, f64::max);
            let spread = max - min;
            let ok = spread <= CLOCK_SLACK.as_secs_f64() * 1e3;
            d.push(
                "clock spread".into(),
                CheckStatus::degraded_if(!ok),
                format!("the masters' clocks differ by up to {spread:.0} ms"),
                (!ok).then_some(
                    "run NTP on every master: a master whose clock steps expires (or stretches) \
                     the leases it holds, and Redlock counts on its masters' clocks running alike",
                ),
            );
        }
        // A master that stopped answering would cost every primitive its
        // whole wait: said once instead (Redlock works on a majority).
        let enough = if backend.is_redlock() {
            answered > masters / 2
        } else {
            answered == masters
        };
        if enough {
            check_primitives(self, &scratch, &mut d);
            clean_up(self, &scratch, &mut d);
        } else {
            d.push(
                "primitives".into(),
                CheckStatus::Refused,
                "not checked: a master did not answer (see above)".into(),
                None,
            );
        }
        d
    }
}
