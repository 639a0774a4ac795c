//! `gputune health`: the audit as a Slurm `HealthCheckProgram`/`Prolog` or a Kubernetes
//! node-problem-detector plugin. Silent on success like NHC, one greppable line per failing
//! check, a hard time limit on the whole run, and with `--slurm` the drain/resume NHC does,
//! never over an administrator's decision. Run by slurmd, it judges the resource limits a
//! job will get, not slurmd's own. Every string from the node or an image is stripped of
//! control characters before it is printed or handed to `scontrol`.

use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::audit::load_profile;
use crate::checks::limits::LimitsOf;
use crate::checks::{self, AuditOptions, TimeLimits};
use crate::error::{ExitCode, Result};
use crate::finding::{Finding, Status};
use crate::host::Root;
use crate::say::clean_line;
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
    /// Judge this process's own resource limits as the job's, as when run by the job itself
    /// (a TaskProlog, a step of the job). Without it, health run by slurmd (SLURMD_NODENAME
    /// set, SLURM_PROCID not) judges what a job gets: the login session's limits as
    /// slurm.conf's PropagateResourceLimits passes them on, and slurmd's for the rest.
    #[arg(long)]
    pub as_job: bool,
    /// The most seconds the checks may take in all; an area that hangs is reported as an
    /// error naming it.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_secs)]
    pub timeout: Duration,
    /// Do not judge these checks (an ID covers its subjects, as in `audit --skip`).
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = checks::parse_skip_id)]
    pub skip: Vec<String>,
    /// Judge NVIDIA Xid events in the kernel log from TIME instead of boot: @SECONDS, a
    /// duration ago (30m, 2h, 1d) or a UTC time (2026-11-25 14:00).
    #[arg(long, value_name = "TIME", value_parser = crate::host::kmsg::parse_since)]
    pub since: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HealthFormat {
    Text,
    Npd,
}

/// `--timeout` is not a whole number of seconds in range.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected whole seconds from 1 to 3600")]
struct BadSecs;

fn parse_secs(text: &str) -> Result<Duration, BadSecs> {
    match text.parse::<u64>() {
        Ok(secs @ 1..=3600) => Ok(Duration::from_secs(secs)),
        _ => Err(BadSecs),
    }
}

/// node-problem-detector keeps messages short; longer ones are cut.
const NPD_MESSAGE_MAX: usize = 80;
/// One area may use at most this much of the run, so one hung area leaves time for the rest.
const PER_AREA_MAX: Duration = Duration::from_secs(30);

pub(crate) fn run(args: &HealthArgs, root: &Root) -> Result<ExitCode> {
    match (args.format, check(args, root)) {
        (HealthFormat::Text, result) => result,
        (HealthFormat::Npd, Ok(code)) => Ok(code),
        // The plugin contract has one code for "could not tell": 2.
        (HealthFormat::Npd, Err(e)) => {
            print(&format!("{}\n", npd_message(&format!("gputune: {e}"))))?;
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
    crate::image::check_root(root)?;
    let mode = crate::image::Mode::detect(root, false);
    let options = AuditOptions {
        persisted: mode != crate::image::Mode::Live,
        mode,
        limits_of: limits_of(args.as_job, &|name| std::env::var(name).ok()),
        skip: args.skip.clone(),
        since: args.since,
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
    let mut out = String::new();
    match args.format {
        HealthFormat::Text => {
            for f in &failing {
                out.push_str(&error_line(f));
                out.push('\n');
            }
        }
        HealthFormat::Npd => match failing.first() {
            None => out.push_str(&format!(
                "gputune: node passes profile {}\n",
                clean_line(&profile.name)
            )),
            Some(first) => {
                let more = match failing.len() {
                    1 => String::new(),
                    n => format!(" (+{} more)", n - 1),
                };
                out.push_str(&npd_message(&format!(
                    "gputune: {}{more}: {}",
                    first.id, first.actual
                )));
                out.push('\n');
            }
        },
    }
    // The verdict is printed first, but a closed stdout must not stop the drain.
    let printed = print(&out);
    if args.slurm {
        let node = node_name()?;
        let reason = failing.first().map(|f| drain_reason(f, failing.len()));
        slurm_act(&RealScontrol, &node, reason.as_deref())?;
    }
    printed?;
    Ok(if failing.is_empty() {
        ExitCode::Ok
    } else {
        ExitCode::Findings
    })
}

/// `ERROR: gputune: <id>: <actual> (want <expected>)`, NHC's shape, one line.
pub(crate) fn error_line(f: &Finding) -> String {
    let line = format!(
        "ERROR: gputune: {}: {} (want {})",
        f.id, f.actual, f.expected
    );
    let line = match f.status {
        Status::Error if !f.message.is_empty() => format!("{line}: {}", f.message),
        _ => line,
    };
    clean_line(&line)
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
    clean_line(&reason).chars().take(200).collect()
}

fn npd_message(text: &str) -> String {
    let text = clean_line(text);
    if text.chars().count() <= NPD_MESSAGE_MAX {
        text
    } else {
        let cut: String = text.chars().take(NPD_MESSAGE_MAX - 3).collect();
        format!("{cut}...")
    }
}

/// Writes the report to stdout as every command does; a reader that closed the pipe
/// (`gputune health | head -1`) ends it quietly, and the verdict's exit code still stands.
fn print(text: &str) -> Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    match super::emit(text, None) {
        Err(e) if e.is_broken_pipe() => Ok(()),
        other => other,
    }
}

/// A line on stderr for the log slurmd keeps; never a panic when stderr is closed.
fn tell(line: &str) {
    let _ = writeln!(std::io::stderr(), "gputune: {}", clean_line(line));
}

/// Whose resource limits to judge. A task of a job (`SLURM_PROCID` set) or `--as-job` is
/// the job itself; slurmd's health check or prolog (`SLURMD_NODENAME` set) is not, and
/// judges what a job will get; outside Slurm, this process is what is judged.
fn limits_of(as_job: bool, env: &dyn Fn(&str) -> Option<String>) -> LimitsOf {
    let set = |name: &str| env(name).is_some_and(|v| !v.trim().is_empty());
    if as_job || set("SLURM_PROCID") || !set("SLURMD_NODENAME") {
        LimitsOf::ThisProcess
    } else {
        LimitsOf::SlurmJob {
            slurm_conf: env("SLURM_CONF").filter(|v| !v.is_empty()),
        }
    }
}

/// Why `--slurm` stopped (exit 3).
#[derive(Debug, thiserror::Error)]
pub enum SlurmStop {
    #[error("slurm: node {node}: {source}")]
    Node {
        node: String,
        #[source]
        source: slurm::SlurmError,
    },
    #[error("slurm: cannot read the host name: {0}")]
    HostName(#[source] crate::host::HostError),
    #[error("slurm: no host name and SLURMD_NODENAME is not set")]
    NoName,
}

/// Drains or resumes the node in Slurm, and says what it did or why it left the node
/// alone; any failure to reach slurmctld stops with exit 3. The state is read again just
/// before a change, so a decision an administrator made meanwhile is not overwritten.
fn slurm_act(scontrol: &dyn Scontrol, node: &str, reason: Option<&str>) -> Result<()> {
    let failed = |source| SlurmStop::Node {
        node: node.to_string(),
        source,
    };
    let state = scontrol.show_node(node).map_err(failed)?;
    let mut action = slurm::decide(&state, reason);
    if matches!(action, Action::Drain(_) | Action::Resume) {
        let now = scontrol.show_node(node).map_err(failed)?;
        if now != state {
            action = match slurm::decide(&now, reason) {
                same if same == action => same,
                Action::Leave(why) => Action::Leave(why),
                _ => Action::Leave(format!(
                    "left alone: its state changed while gputune judged it ({} -> {})",
                    state.state, now.state
                )),
            };
        }
    }
    scontrol.update(node, &action).map_err(failed)?;
    match &action {
        Action::Drain(reason) => tell(&format!("slurm: drained node {node}: {reason}")),
        Action::Resume => tell(&format!(
            "slurm: resumed node {node}: it passes now, and the drain was gputune's"
        )),
        Action::Leave(why) => tell(&format!("slurm: node {node}: {why}")),
        Action::Healthy => {}
    }
    Ok(())
}

/// The Slurm node name: `SLURMD_NODENAME` (set for prologs and by sites that name nodes
/// apart from their hosts), else the short host name of the running machine.
fn node_name() -> Result<String> {
    if let Some(name) = std::env::var("SLURMD_NODENAME")
        .ok()
        .map(|n| clean_line(n.trim()))
        .filter(|n| !n.is_empty())
    {
        return Ok(name);
    }
    // The live machine's, also under --root: Slurm knows the node that runs the check.
    let host = Root::live()
        .read_optional("/proc/sys/kernel/hostname")
        .map_err(SlurmStop::HostName)?
        .unwrap_or_default();
    let short = clean_line(host.trim().split('.').next().unwrap_or(""));
    if short.is_empty() {
        return Err(SlurmStop::NoName.into());
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

    /// slurmctld as a list of answers to `show node`, one per call (the last repeats).
    struct Fake {
        states: Vec<Result<NodeState, ()>>,
        shown: RefCell<usize>,
        done: RefCell<Vec<Action>>,
    }

    impl Fake {
        fn new(states: Vec<Result<NodeState, ()>>) -> Self {
            Fake {
                states,
                shown: RefCell::default(),
                done: RefCell::default(),
            }
        }
    }

    impl Scontrol for Fake {
        fn show_node(&self, node: &str) -> Result<NodeState, SlurmError> {
            let mut shown = self.shown.borrow_mut();
            let state = self.states[(*shown).min(self.states.len() - 1)].clone();
            *shown += 1;
            state.map_err(|_| SlurmError::Refused {
                args: format!("show node {node}"),
                stderr: "Unable to contact slurm controller (connect failure)".into(),
            })
        }
        fn update(&self, _: &str, action: &Action) -> Result<(), SlurmError> {
            self.done.borrow_mut().push(action.clone());
            Ok(())
        }
    }

    fn state(state: &str, reason: &str) -> Result<NodeState, ()> {
        Ok(NodeState {
            state: state.into(),
            reason: reason.into(),
        })
    }

    #[test]
    fn unreachable_slurmctld_is_a_runtime_error() {
        let fake = Fake::new(vec![Err(())]);
        let err = slurm_act(&fake, "n1", None).unwrap_err();
        assert_eq!(err.exit_code(), ExitCode::Runtime);
        assert!(err.to_string().contains("Unable to contact"), "{err}");
        let fake = Fake::new(vec![state("IDLE", "")]);
        slurm_act(&fake, "n1", Some("gputune: x")).unwrap();
        assert_eq!(*fake.done.borrow(), [Action::Drain("gputune: x".into())]);
    }

    #[test]
    fn a_decision_made_while_judging_is_not_overwritten() {
        // The admin set the node down between gputune's look and its drain.
        let fake = Fake::new(vec![state("IDLE", ""), state("DOWN", "RMA [root@t]")]);
        slurm_act(&fake, "n1", Some("gputune: x")).unwrap();
        assert!(
            matches!(&fake.done.borrow()[..], [Action::Leave(why)] if why.contains("DOWN")),
            "{:?}",
            fake.done.borrow()
        );
        // The admin drained it with a reason of their own before gputune's resume.
        let ours = "gputune: x [root@t]";
        let fake = Fake::new(vec![state("IDLE+DRAIN", ours), state("IDLE+DRAIN", "mine")]);
        slurm_act(&fake, "n1", None).unwrap();
        assert!(matches!(&fake.done.borrow()[..], [Action::Leave(_)]));
        // Only the timestamp moved: the decision stands.
        let fake = Fake::new(vec![state("IDLE+DRAIN", ours), state("IDLE+DRAIN", ours)]);
        slurm_act(&fake, "n1", None).unwrap();
        assert_eq!(*fake.done.borrow(), [Action::Resume]);
    }

    #[test]
    fn slurmd_runs_judge_the_job_and_job_runs_judge_themselves() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let slurmd = env(&[("SLURMD_NODENAME", "n1"), ("SLURM_CONF", "/etc/s.conf")]);
        assert_eq!(
            limits_of(false, &slurmd),
            LimitsOf::SlurmJob {
                slurm_conf: Some("/etc/s.conf".into())
            }
        );
        assert_eq!(limits_of(true, &slurmd), LimitsOf::ThisProcess);
        let task = env(&[("SLURMD_NODENAME", "n1"), ("SLURM_PROCID", "0")]);
        assert_eq!(limits_of(false, &task), LimitsOf::ThisProcess);
        assert_eq!(limits_of(false, &env(&[])), LimitsOf::ThisProcess);
        assert_eq!(
            limits_of(false, &env(&[("SLURMD_NODENAME", "n1")])),
            LimitsOf::SlurmJob { slurm_conf: None }
        );
    }

    #[test]
    fn escapes_from_an_image_never_reach_the_terminal_or_slurm() {
        let planted = Check::new("net.core.rmem_max", Area::Network)
            .expected("16777216")
            .fail("\u{1b}[2J\u{1b}[Hall good\u{9b}31m\r\nOK", "");
        for line in [
            error_line(&planted),
            drain_reason(&planted, 1),
            npd_message(&planted.actual),
        ] {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_secs("5"), Ok(Duration::from_secs(5)));
        for bad in ["0", "-1", "x", "3601"] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
    }
}
