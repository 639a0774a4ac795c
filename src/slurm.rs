//! Talking to slurmctld through `scontrol`, the way NHC does: read a node's state and drain
//! reason, drain it with a reason of ours, and resume only nodes drained with such a reason.
//! An administrator's decision is never overwritten (DESIGN.md): a node that is DOWN, FAIL,
//! in maintenance, rebooting, power-saved or FUTURE, or that carries a reason gputune did not
//! write, is left exactly as it is.

use std::process::Command;
use std::time::Duration;

use crate::host::exec::{self, ExecError};
use crate::say;

/// Every drain reason gputune sets starts with this; only such drains are lifted.
pub(crate) const REASON_PREFIX: &str = "gputune:";
/// How long one `scontrol` call may take: slurmctld answers in milliseconds, and its own
/// message timeout is 10 s.
pub(crate) const SCONTROL_LIMIT: Duration = Duration::from_secs(15);

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
pub(crate) struct NodeState {
    /// `IDLE+DRAIN`, `MIXED`, `DOWN*+DRAIN`, `IDLE+MAINTENANCE+RESERVED`…
    pub state: String,
    /// The drain or down reason, `[user@time]` suffix included; empty when none.
    pub reason: String,
}

/// One word of a node's state, base state or flag, as `scontrol show node` (`IDLE+DRAIN`),
/// `sinfo %T` (`drained*`, `idle~`) and `sinfo %t` (`drng`, `pow_dn`) spell it, older
/// spellings (`DRAINED`, `DRAINING`, `FAILING`, `REBOOT`) included. Slurm's names are in
/// `node_states[]` and `node_state_flags[]` of `slurm_protocol_defs.c`; the one-character
/// suffixes (`*`, `~`, `$`…) of `node_state_string()` say the same as a flag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Word {
    Idle,
    Allocated,
    Mixed,
    Down,
    Future,
    Unknown,
    /// `ERROR`/`INVAL`/`INVALID_REG`: slurmctld does not accept the node as configured.
    Invalid,
    Drain,
    Fail,
    Maint,
    RebootRequested,
    RebootIssued,
    /// `POWERED_DOWN`, `POWERING_UP`/`DOWN`, `POWER_UP`/`DOWN`: power saving owns the node.
    Power,
    Reserved,
    NotResponding,
    Completing,
    Planned,
    /// `CLOUD`, `DYNAMIC_*`, `RESUME`, `PERFCTRS`, `CANCEL_REBOOT`: nothing for us to respect.
    Harmless,
    /// A word this version of gputune does not know: the node is left alone.
    Other(String),
}

impl Word {
    fn parse(word: &str) -> Word {
        match word.to_ascii_uppercase().as_str() {
            "IDLE" => Word::Idle,
            "ALLOCATED" | "ALLOC" => Word::Allocated,
            "MIXED" | "MIX" => Word::Mixed,
            "DOWN" => Word::Down,
            "FUTURE" | "FUTR" => Word::Future,
            "UNKNOWN" | "UNK" => Word::Unknown,
            "ERROR" | "INVAL" | "INVALID_REG" | "INVALID" => Word::Invalid,
            "DRAIN" | "DRAINED" | "DRAINING" | "DRNG" => Word::Drain,
            "FAIL" | "FAILING" | "FAILG" => Word::Fail,
            "MAINT" | "MAINTENANCE" => Word::Maint,
            "REBOOT" | "REBOOT_REQUESTED" | "BOOT" => Word::RebootRequested,
            "REBOOT_ISSUED" => Word::RebootIssued,
            "POWERED_DOWN" | "POWERING_DOWN" | "POWERING_UP" | "POWER_DOWN" | "POWER_UP"
            | "POW_DN" | "POW_UP" | "POWER_DOWN_PENDING" => Word::Power,
            "RESERVED" | "RESV" => Word::Reserved,
            "NOT_RESPONDING" | "NO_RESPOND" => Word::NotResponding,
            "COMPLETING" | "COMP" => Word::Completing,
            "PLANNED" | "PLND" => Word::Planned,
            "CLOUD" | "DYNAMIC_FUTURE" | "DYNAMIC_NORM" | "RESUME" | "PERFCTRS" | "NPC"
            | "CANCEL_REBOOT" => Word::Harmless,
            _ => Word::Other(word.to_string()),
        }
    }

    /// The flag a one-character suffix of `node_state_string()` stands for.
    fn from_suffix(symbol: char) -> Option<Word> {
        Some(match symbol {
            '*' => Word::NotResponding,
            '~' | '#' | '%' | '!' => Word::Power,
            '$' => Word::Maint,
            '@' => Word::RebootRequested,
            '^' => Word::RebootIssued,
            '-' => Word::Planned,
            '+' => Word::Completing,
            _ => return None,
        })
    }

    /// Why a node in this state belongs to someone else's decision (an administrator's, or
    /// Slurm's own power saving, reboot or maintenance), so gputune must not touch it.
    fn held(&self) -> Option<String> {
        Some(match self {
            Word::Down => "it is DOWN".into(),
            Word::Fail => "it is FAIL (set to fail by an administrator)".into(),
            Word::Maint => "it is in a maintenance reservation (MAINT)".into(),
            Word::RebootRequested => "a reboot is requested (REBOOT_REQUESTED)".into(),
            Word::RebootIssued => "a reboot is under way (REBOOT_ISSUED)".into(),
            Word::Power => "power saving owns it (powered down or powering up/down)".into(),
            Word::Future => "it is FUTURE (not in service yet)".into(),
            Word::Invalid => "slurmctld does not accept its registration (INVAL)".into(),
            Word::Other(word) => format!("its state word {word:?} is unknown to gputune"),
            _ => return None,
        })
    }
}

impl NodeState {
    /// Every word of the state: `DOWN*+DRAIN` is Down, NotResponding, Drain.
    pub(crate) fn words(&self) -> Vec<Word> {
        let mut words = Vec::new();
        for part in self.state.split('+') {
            let name = part.trim_end_matches(|c: char| Word::from_suffix(c).is_some());
            words.extend(part[name.len()..].chars().filter_map(Word::from_suffix));
            if !name.is_empty() {
                words.push(Word::parse(name));
            }
        }
        if words.is_empty() {
            words.push(Word::Other(self.state.clone()));
        }
        words.sort();
        words.dedup();
        words
    }

    /// Drained or draining (the `DRAIN` flag; `DRAINED`/`DRAINING` in older outputs).
    pub(crate) fn drained(&self) -> bool {
        self.words().contains(&Word::Drain)
    }

    /// The reason was written by gputune (its prefix), so gputune may lift its drain.
    pub(crate) fn reason_is_ours(&self) -> bool {
        self.reason.starts_with(REASON_PREFIX)
    }

    /// Drained by gputune itself, so gputune may lift it.
    pub(crate) fn drained_by_us(&self) -> bool {
        self.drained() && self.reason_is_ours()
    }

    /// Why the node's state is someone else's decision, when it is.
    pub(crate) fn held(&self) -> Option<String> {
        let why: Vec<String> = self.words().iter().filter_map(Word::held).collect();
        (!why.is_empty()).then(|| why.join(", "))
    }
}

/// Parses `scontrol show node -o NAME`: space-separated `Key=Value` fields, `Reason=` last
/// with spaces of its own.
pub(crate) fn parse_node(node: &str, answer: &str) -> Result<NodeState, SlurmError> {
    let line = answer.lines().next().unwrap_or("");
    let (fields, reason) = match line.find(" Reason=") {
        Some(at) => (&line[..at], line[at + " Reason=".len()..].trim()),
        None => (line, ""),
    };
    let state = fields
        .split_whitespace()
        .find_map(|f| f.strip_prefix("State="))
        .filter(|s| !s.is_empty())
        .ok_or_else(|| SlurmError::Unparsed {
            node: node.to_string(),
            answer: say::clean_line(&line.chars().take(200).collect::<String>()),
        })?;
    Ok(NodeState {
        state: state.to_string(),
        reason: reason.to_string(),
    })
}

/// What the health check does to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    Drain(String),
    Resume,
    /// The node is left as it is, and why (shown to the person reading the log).
    Leave(String),
    /// It passes and nothing of ours is to lift: nothing to do, nothing to say.
    Healthy,
}

/// NHC's rule, with every state that is someone else's decision respected: a node that is
/// DOWN, FAIL, in maintenance, rebooting, power-saved, FUTURE or in a state gputune does not
/// know is never touched; a drain goes only onto a node with no reason at all; a resume only
/// lifts a drain whose reason gputune wrote. `scontrol update state=drain` would replace an
/// administrator's reason, and `state=resume` clears DOWN and FAIL as well as DRAIN.
pub(crate) fn decide(node: &NodeState, failing_reason: Option<&str>) -> Action {
    let reason = || say::clean_line(&node.reason);
    let state = || say::clean_line(&node.state);
    if let Some(held) = node.held() {
        let with = match node.reason.is_empty() {
            true => String::new(),
            false => format!(", reason {:?}", reason()),
        };
        return Action::Leave(format!(
            "left alone: {held} (State={}{with}); an administrator or Slurm decides when it returns",
            state()
        ));
    }
    match failing_reason {
        Some(_) if node.drained_by_us() => Action::Leave(format!(
            "already drained by gputune (reason {:?}); left as it is",
            reason()
        )),
        Some(_) if !node.reason.is_empty() => Action::Leave(format!(
            "left alone: its reason is not gputune's ({:?}, State={}); never overwritten",
            reason(),
            state()
        )),
        Some(_) if node.drained() => Action::Leave(format!(
            "left alone: drained by someone else (State={}, no reason)",
            state()
        )),
        Some(reason) => Action::Drain(reason.to_string()),
        None if node.drained_by_us() => Action::Resume,
        None if node.drained() => Action::Leave(format!(
            "left alone: its drain is not gputune's (State={}, reason {:?}); not lifted, though the node passes",
            state(),
            reason()
        )),
        None => Action::Healthy,
    }
}

/// The `scontrol` calls, behind a trait so the decision can be tested without slurmctld.
pub(crate) trait Scontrol {
    fn show_node(&self, node: &str) -> Result<NodeState, SlurmError>;
    fn update(&self, node: &str, action: &Action) -> Result<(), SlurmError>;
}

/// The real `scontrol` from `PATH`, each call within [`SCONTROL_LIMIT`].
pub(crate) struct RealScontrol;

impl RealScontrol {
    fn call(&self, args: &[&str]) -> Result<String, SlurmError> {
        let mut command = Command::new("scontrol");
        command.args(args);
        let out = exec::run(command, SCONTROL_LIMIT)?;
        if !out.success {
            return Err(SlurmError::Refused {
                args: args.join(" "),
                stderr: say::clean_line(&out.stderr.trim().chars().take(500).collect::<String>()),
            });
        }
        Ok(out.stdout)
    }
}

impl Scontrol for RealScontrol {
    fn show_node(&self, node: &str) -> Result<NodeState, SlurmError> {
        // `--future`: a FUTURE node is hidden without it ("Node n1 not found").
        parse_node(node, &self.call(&["--future", "show", "node", "-o", node])?)
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
            Action::Leave(_) | Action::Healthy => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
