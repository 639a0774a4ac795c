//! `/var/lib/gputune/journal.json`: every target's state before apply, written and fsynced
//! before the first change, so `rollback` can put the node back after a failure, a kill -9
//! or a reboot.

use serde::{Deserialize, Serialize};

use super::error::ApplyError;
use super::target::Step;
use crate::host::Root;

/// Where the journal lives (under the root).
pub const PATH: &str = "/var/lib/gputune/journal.json";

/// The journal format this build reads and writes.
pub const VERSION: u32 = 1;

/// Where an apply got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Changes are being written; a journal left in this phase means apply was interrupted.
    Applying,
    /// Every change was written and verified.
    Applied,
    /// `rollback` restored the states; nothing is left to undo.
    RolledBack,
}

/// The journal: for each target, its state before gputune first changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    pub version: u32,
    pub phase: Phase,
    /// Profiles applied since the node was last as it started, oldest first.
    pub profiles: Vec<String>,
    pub steps: Vec<Step>,
}

impl Journal {
    /// The journal for `steps` on top of an earlier applied one: a target already changed
    /// by an earlier apply keeps its original `before`, so rollback goes back to the node
    /// as it was before gputune.
    pub fn begin(previous: Option<&Journal>, profile: &str, steps: &[Step]) -> Journal {
        let mut journal = match previous {
            Some(p) if p.phase == Phase::Applied => p.clone(),
            _ => Journal {
                version: VERSION,
                phase: Phase::Applying,
                profiles: Vec::new(),
                steps: Vec::new(),
            },
        };
        journal.phase = Phase::Applying;
        journal.profiles.push(profile.to_string());
        for step in steps {
            match journal.steps.iter_mut().find(|s| s.target == step.target) {
                Some(old) => old.after = step.after.clone(),
                None => journal.steps.push(step.clone()),
            }
        }
        journal
    }
}

/// Reads and validates the journal; `None` when there is none.
pub fn load(root: &Root) -> Result<Option<Journal>, ApplyError> {
    match root.read_optional(PATH)? {
        None => Ok(None),
        Some(text) => {
            let journal: Journal =
                serde_json::from_str(&text).map_err(|e| ApplyError::Journal {
                    path: root.path(PATH),
                    message: format!("not a gputune journal ({e}); move it away to apply again"),
                })?;
            if journal.version != VERSION {
                return Err(ApplyError::Journal {
                    path: root.path(PATH),
                    message: format!(
                        "journal version {} is not {VERSION}; use the gputune that wrote it to roll back",
                        journal.version
                    ),
                });
            }
            // Nothing in it is acted on before every entry is known to be something
            // apply itself writes (see [`super::validate`]).
            super::validate::steps(&journal.steps).map_err(|why| ApplyError::Journal {
                path: root.path(PATH),
                message: format!(
                    "invalid journal, nothing was touched: {why}; it was not written by gputune apply, so move it away"
                ),
            })?;
            Ok(Some(journal))
        }
    }
}

/// Writes the journal atomically and durably (temp + fsync + rename + directory fsync).
pub fn save(root: &Root, journal: &Journal) -> Result<(), ApplyError> {
    let path = root.path(PATH);
    let mut text = serde_json::to_string_pretty(journal).map_err(|e| ApplyError::Journal {
        path: path.clone(),
        message: e.to_string(),
    })?;
    text.push('\n');
    Ok(root.write_file(PATH, text.as_bytes())?)
}

/// Puts back the journal an apply started from (or removes it when there was none), after
/// that apply failed and restored the node.
pub fn restore(root: &Root, previous: Option<&Journal>) -> Result<(), ApplyError> {
    match previous {
        Some(p) => save(root, p),
        None => Ok(root.remove_file(PATH)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::target::{State, Target};

    fn step(path: &str, before: &str, after: &str) -> Step {
        Step {
            what: path.into(),
            target: Target::Knob(path.into()),
            before: State::Present(before.into()),
            after: State::Present(after.into()),
        }
    }

    #[test]
    fn later_applies_keep_the_first_before() {
        let first = Journal::begin(None, "base", &[step("/a", "1", "2")]);
        assert_eq!(first.phase, Phase::Applying);
        let mut applied = first.clone();
        applied.phase = Phase::Applied;
        let second = Journal::begin(
            Some(&applied),
            "ddp-10gbe",
            &[step("/a", "2", "3"), step("/b", "x", "y")],
        );
        assert_eq!(second.profiles, ["base", "ddp-10gbe"]);
        assert_eq!(second.steps[0].before, State::Present("1".into()));
        assert_eq!(second.steps[0].after, State::Present("3".into()));
        assert_eq!(second.steps[1], step("/b", "x", "y"));
        let mut rolled = second.clone();
        rolled.phase = Phase::RolledBack;
        assert_eq!(Journal::begin(Some(&rolled), "base", &[]).steps, vec![]);
    }

    #[test]
    fn journals_round_trip_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        assert_eq!(load(&root).unwrap(), None);
        let mut j = Journal::begin(None, "base", &[step("/proc/sys/vm/swappiness", "1", "2")]);
        j.steps.push(Step {
            what: "f".into(),
            target: Target::File("/etc/nccl.conf".into()),
            before: State::Absent,
            after: State::Present("x\n".into()),
        });
        save(&root, &j).unwrap();
        assert_eq!(load(&root).unwrap(), Some(j.clone()));
        restore(&root, None).unwrap();
        assert_eq!(load(&root).unwrap(), None);
        let newer = serde_json::to_string(&j)
            .unwrap()
            .replace("\"version\":1", "\"version\":2");
        std::fs::write(root.path(PATH), newer).unwrap();
        assert!(
            load(&root)
                .unwrap_err()
                .to_string()
                .contains("journal version 2")
        );
        let tampered = serde_json::to_string(&j)
            .unwrap()
            .replace("/etc/nccl.conf", "/../../../../tmp/x");
        std::fs::write(root.path(PATH), tampered).unwrap();
        let err = load(&root).unwrap_err().to_string();
        assert!(
            err.contains("invalid journal") && err.contains("/../../../../tmp/x"),
            "{err}"
        );
        std::fs::write(root.path(PATH), "{ not json").unwrap();
        assert!(
            load(&root)
                .unwrap_err()
                .to_string()
                .contains("journal.json")
        );
    }
}
