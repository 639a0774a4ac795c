//! `gputune health`: the audit as a Slurm `HealthCheckProgram`/`Prolog` or a Kubernetes
//! node-problem-detector plugin. Silent on success like NHC, one greppable line per failing
//! check, a hard time limit on the whole run, and with `--slurm` the drain/resume NHC does.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::audit::load_profile;
use crate::checks::{self, AuditOptions, TimeLimits};
use crate::error::{Error, ExitCode, Result};
use crate::finding::{Finding, Status};
use crate::host::Root;
use crate::slurm::{self, Action, RealScontrol, Scontrol};

#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Profile name or TOML file [default: chosen from the node, as audit does]
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Drain the node in Slurm when a check fails (reason "gputune: ..."), and resume it once
    /// it passes if gputune drained it.
    #[arg(long)]
    pub slurm: bool,
    /// Output: `text` (NHC style) or `npd` (node-problem-detector plugin: exit 0 OK,
    /// 1 problem, 2 unknown, one short line).
    #[arg(long, value_enum, default_value = "text")]
    pub format: HealthFormat,
    /// Treat warnings as failures.
    #[arg(long)]
    pub strict: bool,
    /// The most seconds the checks may take in all; an area that hangs is reported as an
    /// error naming it.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_secs)]
    pub timeout: Duration,
    /// Do not judge these checks (an ID covers its subjects, as in `audit --skip`).
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = checks::parse_skip_id)]
    pub skip: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HealthFormat {
    Text,
    Npd,
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    match text.parse::<u64>() {
        Ok(secs @ 1..=3600) => Ok(Duration::from_secs(secs)),
        _ => Err("expected whole seconds from 1 to 3600".into()),
    }
}

/// node-problem-detector keeps messages short; longer ones are cut.
const NPD_MESSAGE_MAX: usize = 80;
/// One area may use at most this much of the run, so one hung area leaves time for the rest.
const PER_AREA_MAX: Duration = Duration::from_secs(30);

pub fn run(args: &HealthArgs, root: &Root) -> Result<ExitCode> {
    match (args.format, check(args, root)) {
        (HealthFormat::Text, result) => result,
        (HealthFormat::Npd, Ok(code)) => Ok(code),
        // The plugin contract has one code for "could not tell": 2.
        (HealthFormat::Npd, Err(e)) => {
            println!("{}", npd_message(&format!("gputune: {e}")));
            Ok(ExitCode::Usage)
        }
    }
}

fn check(args: &HealthArgs, root: &Root) -> Result<ExitCode> {
    let (profile, _) = load_profile(args.profile.as_deref(), root)?;
    let limits = TimeLimits {
        per_area: PER_AREA_MAX.min(args.timeout),
        total: args.timeout,
    };
    // A health check of an image (a golden image's CI gate) judges it as audit does.
    crate::image::check_root(root).map_err(|e| crate::Error::Runtime(e.to_string()))?;
    let mode = crate::image::Mode::detect(root, false);
    let options = AuditOptions {
        persisted: mode != crate::image::Mode::Live,
        mode,
        skip: args.skip.clone(),
        ..AuditOptions::default()
    };
    let findings = checks::run_limited(root, &profile, &options, &[], limits);
    super::audit::warn_unmatched_skips(&args.skip, &findings);
    let failing: Vec<&Finding> = findings
        .iter()
        .filter(|f| {
            matches!(f.status, Status::Fail | Status::Error)
                || (args.strict && f.status == Status::Warn)
        })
        .collect();
    match args.format {
        HealthFormat::Text => {
            for f in &failing {
                println!("{}", error_line(f));
            }
        }
        HealthFormat::Npd => match failing.first() {
            None => println!("gputune: node passes profile {}", profile.name),
            Some(first) => {
                let more = match failing.len() {
                    1 => String::new(),
                    n => format!(" (+{} more)", n - 1),
                };
                println!(
                    "{}",
                    npd_message(&format!("gputune: {}{more}: {}", first.id, first.actual))
                );
            }
        },
    }
    if args.slurm {
        let node = node_name()?;
        let reason = failing.first().map(|f| drain_reason(f, failing.len()));
        slurm_act(&RealScontrol, &node, reason.as_deref())?;
    }
    Ok(if failing.is_empty() {
        ExitCode::Ok
    } else {
        ExitCode::Findings
    })
}

/// `ERROR: gputune: <id>: <actual> (want <expected>)`, NHC's shape, one line.
pub fn error_line(f: &Finding) -> String {
    let line = format!(
        "ERROR: gputune: {}: {} (want {})",
        f.id, f.actual, f.expected
    );
    let line = match f.status {
        Status::Error if !f.message.is_empty() => format!("{line}: {}", f.message),
        _ => line,
    };
    line.replace(['\n', '\r'], " ")
}

/// The Slurm drain reason: the first failing check and how many more.
fn drain_reason(first: &Finding, failing: usize) -> String {
    let more = match failing {
        1 => String::new(),
        n => format!(" (+{} more)", n - 1),
    };
    let reason = format!(
        "{} {}: {} (want {}){more}",
        slurm::REASON_PREFIX,
        first.id,
        first.actual,
        first.expected
    );
    reason
        .replace(['\n', '\r'], " ")
        .chars()
        .take(200)
        .collect()
}

fn npd_message(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    if text.chars().count() <= NPD_MESSAGE_MAX {
        text
    } else {
        let cut: String = text.chars().take(NPD_MESSAGE_MAX - 3).collect();
        format!("{cut}...")
    }
}

/// Drains or resumes the node in Slurm; any failure to reach slurmctld stops with exit 3.
fn slurm_act(scontrol: &dyn Scontrol, node: &str, reason: Option<&str>) -> Result<()> {
    let state = scontrol
        .show_node(node)
        .map_err(|e| Error::Runtime(format!("slurm: node {node}: {e}")))?;
    let action = slurm::decide(&state, reason);
    scontrol
        .update(node, &action)
        .map_err(|e| Error::Runtime(format!("slurm: node {node}: {e}")))?;
    match action {
        Action::Drain(reason) => eprintln!("gputune: drained node {node}: {reason}"),
        Action::Resume => eprintln!("gputune: resumed node {node} (it passes now)"),
        Action::Leave(_) => {}
    }
    Ok(())
}

/// The Slurm node name: `SLURMD_NODENAME` (set for prologs and by sites that name nodes
/// apart from their hosts), else the short host name of the running machine.
fn node_name() -> Result<String> {
    if let Some(name) = std::env::var("SLURMD_NODENAME")
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
    {
        return Ok(name);
    }
    // The live machine's, also under --root: Slurm knows the node that runs the check.
    let host = Root::live()
        .read_optional("/proc/sys/kernel/hostname")
        .map_err(|e| Error::Runtime(format!("slurm: cannot read the host name: {e}")))?
        .unwrap_or_default();
    let short = host.trim().split('.').next().unwrap_or("").to_string();
    if short.is_empty() {
        return Err(Error::Runtime(
            "slurm: no host name and SLURMD_NODENAME is not set".into(),
        ));
    }
    Ok(short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Area, Check};
    use crate::slurm::{NodeState, SlurmError};
    use std::cell::RefCell;

    fn failing(id: &str) -> Finding {
        Check::new(id, Area::Network)
            .expected("16777216")
            .why("why")
            .fail("212992", "")
    }

    #[test]
    fn lines_people_grep() {
        assert_eq!(
            error_line(&failing("net.core.rmem_max")),
            "ERROR: gputune: net.core.rmem_max: 212992 (want 16777216)"
        );
        let hung = Check::new("firewall", Area::Firewall)
            .expected("finish")
            .error("hung\nthere");
        assert_eq!(
            error_line(&hung),
            "ERROR: gputune: firewall: ? (want finish): hung there"
        );
        assert_eq!(
            drain_reason(&failing("a"), 3),
            "gputune: a: 212992 (want 16777216) (+2 more)"
        );
        assert_eq!(npd_message(&"x".repeat(200)).chars().count(), 80);
    }

    struct Fake {
        state: Result<NodeState, ()>,
        done: RefCell<Vec<Action>>,
    }

    impl Scontrol for Fake {
        fn show_node(&self, node: &str) -> Result<NodeState, SlurmError> {
            self.state.clone().map_err(|_| SlurmError::Refused {
                args: format!("show node {node}"),
                stderr: "Unable to contact slurm controller (connect failure)".into(),
            })
        }
        fn update(&self, _: &str, action: &Action) -> Result<(), SlurmError> {
            self.done.borrow_mut().push(action.clone());
            Ok(())
        }
    }

    #[test]
    fn unreachable_slurmctld_is_a_runtime_error() {
        let fake = Fake {
            state: Err(()),
            done: RefCell::default(),
        };
        let err = slurm_act(&fake, "n1", None).unwrap_err();
        assert_eq!(err.exit_code(), ExitCode::Runtime);
        assert!(err.to_string().contains("Unable to contact"), "{err}");
        let fake = Fake {
            state: Ok(NodeState {
                state: "IDLE".into(),
                reason: String::new(),
            }),
            done: RefCell::default(),
        };
        slurm_act(&fake, "n1", Some("gputune: x")).unwrap();
        assert_eq!(*fake.done.borrow(), [Action::Drain("gputune: x".into())]);
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_secs("5"), Ok(Duration::from_secs(5)));
        for bad in ["0", "-1", "x", "3601"] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
    }
}
