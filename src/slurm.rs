//! Talking to slurmctld through `scontrol`, the way NHC does: read a node's state and drain
//! reason, drain it with a reason of ours, and resume only nodes drained with such a reason,
//! so a drain set by an administrator is never lifted.

use std::process::Command;
use std::time::Duration;

use crate::host::exec::{self, ExecError};

/// Every drain reason gputune sets starts with this; only such drains are lifted.
pub const REASON_PREFIX: &str = "gputune:";
/// How long one `scontrol` call may take: slurmctld answers in milliseconds, and its own
/// message timeout is 10 s.
pub const SCONTROL_LIMIT: Duration = Duration::from_secs(15);

/// slurmctld could not be asked or refused; the health check must say so, never pass.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run scontrol: {0}")]
    Exec(#[from] ExecError),
    #[error("scontrol {args} failed: {stderr}")]
    Refused { args: String, stderr: String },
    #[error("scontrol show node {node}: no State= in its answer {answer:?}")]
    Unparsed { node: String, answer: String },
}

/// A node as slurmctld sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// `IDLE+DRAIN`, `MIXED`, `DOWN*+DRAIN`…
    pub state: String,
    /// The drain or down reason, `[user@time]` suffix included; empty when none.
    pub reason: String,
}

impl NodeState {
    /// Drained or draining (the `DRAIN` flag; `DRAINED`/`DRAINING` in older outputs).
    pub fn drained(&self) -> bool {
        self.state
            .split(['+', '*'])
            .any(|f| f.eq_ignore_ascii_case("DRAIN") || f.starts_with("DRAIN"))
    }

    /// Drained by gputune itself, so gputune may lift it.
    pub fn drained_by_us(&self) -> bool {
        self.drained() && self.reason.starts_with(REASON_PREFIX)
    }
}

/// Parses `scontrol show node -o NAME`: space-separated `Key=Value` fields, `Reason=` last
/// with spaces of its own.
pub fn parse_node(node: &str, answer: &str) -> Result<NodeState, SlurmError> {
    let line = answer.lines().next().unwrap_or("");
    let (fields, reason) = match line.find(" Reason=") {
        Some(at) => (&line[..at], line[at + " Reason=".len()..].trim()),
        None => (line, ""),
    };
    let state = fields
        .split_whitespace()
        .find_map(|f| f.strip_prefix("State="))
        .ok_or_else(|| SlurmError::Unparsed {
            node: node.to_string(),
            answer: line.chars().take(200).collect(),
        })?;
    Ok(NodeState {
        state: state.to_string(),
        reason: reason.to_string(),
    })
}

/// What the health check does to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Drain(String),
    Resume,
    /// Nothing to do, and why (shown to the person reading the log).
    Leave(&'static str),
}

/// NHC's rule: drain a failing node unless it is drained already (ours or someone else's);
/// resume a passing node only when the drain is ours.
pub fn decide(node: &NodeState, failing_reason: Option<&str>) -> Action {
    match failing_reason {
        Some(_) if node.drained_by_us() => Action::Leave("already drained by gputune"),
        Some(_) if node.drained() => Action::Leave("already drained by someone else; left alone"),
        Some(reason) => Action::Drain(reason.to_string()),
        None if node.drained_by_us() => Action::Resume,
        None if node.drained() => Action::Leave("drained by someone else; not lifted"),
        None => Action::Leave("passes"),
    }
}

/// The `scontrol` calls, behind a trait so the decision can be tested without slurmctld.
pub trait Scontrol {
    fn show_node(&self, node: &str) -> Result<NodeState, SlurmError>;
    fn update(&self, node: &str, action: &Action) -> Result<(), SlurmError>;
}

/// The real `scontrol` from `PATH`, each call within [`SCONTROL_LIMIT`].
pub struct RealScontrol;

impl RealScontrol {
    fn call(&self, args: &[&str]) -> Result<String, SlurmError> {
        let mut command = Command::new("scontrol");
        command.args(args);
        let out = exec::run(command, SCONTROL_LIMIT)?;
        if !out.success {
            return Err(SlurmError::Refused {
                args: args.join(" "),
                stderr: out.stderr.trim().chars().take(500).collect(),
            });
        }
        Ok(out.stdout)
    }
}

impl Scontrol for RealScontrol {
    fn show_node(&self, node: &str) -> Result<NodeState, SlurmError> {
        parse_node(node, &self.call(&["show", "node", "-o", node])?)
    }

    fn update(&self, node: &str, action: &Action) -> Result<(), SlurmError> {
        let name = format!("nodename={node}");
        match action {
            Action::Drain(reason) => {
                let reason = format!("reason={reason}");
                self.call(&["update", &name, "state=drain", &reason])?;
            }
            Action::Resume => {
                self.call(&["update", &name, "state=resume"])?;
            }
            Action::Leave(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 State=IDLE ThreadsPerCore=1 Partitions=debug CurrentWatts=0\n";
    const OURS: &str = "NodeName=n1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=gputune: net.core.rmem_max: 212992 (want 16777216) [root@2026-11-23T20:00:01]\n";
    const ADMIN: &str =
        "NodeName=n1 State=MIXED+DRAIN Reason=bad dimm [slurm@2026-11-23T20:00:01]\n";
    const DOWN: &str =
        "NodeName=n1 State=DOWN*+DRAIN Reason=Not responding [slurm@2026-11-23T20:00:01]\n";

    #[test]
    fn parses_state_and_reason() {
        let idle = parse_node("n1", IDLE).unwrap();
        assert_eq!((idle.state.as_str(), idle.reason.as_str()), ("IDLE", ""));
        assert!(!idle.drained());
        let ours = parse_node("n1", OURS).unwrap();
        assert_eq!(ours.state, "IDLE+DRAIN");
        assert!(ours.drained_by_us());
        let admin = parse_node("n1", ADMIN).unwrap();
        assert!(admin.drained() && !admin.drained_by_us());
        assert_eq!(admin.reason, "bad dimm [slurm@2026-11-23T20:00:01]");
        assert!(parse_node("n1", DOWN).unwrap().drained());
        let err = parse_node("n1", "Node n1 not found\n").unwrap_err();
        assert!(err.to_string().contains("no State="), "{err}");
        assert!(parse_node("n1", "").is_err());
    }

    #[test]
    fn drains_ours_and_lifts_only_ours() {
        let node = |text| parse_node("n1", text).unwrap();
        let reason = Some("gputune: x");
        assert_eq!(
            decide(&node(IDLE), reason),
            Action::Drain("gputune: x".into())
        );
        assert!(matches!(decide(&node(OURS), reason), Action::Leave(_)));
        assert!(matches!(decide(&node(ADMIN), reason), Action::Leave(_)));
        assert_eq!(decide(&node(OURS), None), Action::Resume);
        assert!(matches!(decide(&node(ADMIN), None), Action::Leave(_)));
        assert!(matches!(decide(&node(DOWN), None), Action::Leave(_)));
        assert!(matches!(decide(&node(IDLE), None), Action::Leave("passes")));
    }
}
