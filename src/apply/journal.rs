//! `/var/lib/gputune/journal.json`: every target's state before apply, written and fsynced
//! before the first change, so `rollback` can put the node back after a failure, a kill -9
//! or a reboot.

use serde::{Deserialize, Serialize};

use super::error::ApplyError;
use super::target::Step;
use crate::host::Root;

/// Where the journal lives (under the root).
pub(crate) const PATH: &str = "/var/lib/gputune/journal.json";

/// The journal format this build reads and writes.
pub(crate) const VERSION: u32 = 1;

/// Where an apply got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Phase {
    /// Changes are being written; a journal left in this phase means apply was interrupted.
    Applying,
    /// Every change was written and verified.
    Applied,
    /// `rollback` restored the states; nothing is left to undo.
    RolledBack,
}

/// The journal: for each target, its state before gputune first changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Journal {
    pub version: u32,
    pub phase: Phase,
    /// Profiles applied since the node was last as it started, oldest first.
    pub profiles: Vec<String>,
    pub steps: Vec<Step>,
    /// When, by whom and with which gputune each of `profiles` was applied, oldest first.
    /// Added after version 1 shipped: a journal without it still reads (and rolls back), so
    /// `status` says the older gputune did not record it; older gputunes ignore the field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applies: Vec<Applied>,
    /// Who rolled the applies back, and when (phase `rolled_back`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<Event>,
}

/// One apply as `gputune status` reports it, the way `tuned-adm active` names the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Applied {
    pub profile: String,
    /// How many writes this apply made.
    pub changes: usize,
    #[serde(flatten)]
    pub by: Event,
}

/// When an apply or rollback ran, who ran it and what they typed: the audit trail an
/// administrator asks for when a node behaves differently from its neighbours. Read from a
/// file on disk, so every string is shown only after [`crate::say::clean_line`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Event {
    /// UTC, RFC 3339 to the second (`2026-11-25T14:23:02Z`).
    pub at: String,
    /// The process's real user id and its name on the invoking host.
    pub uid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The user who logged in (the kernel's audit login uid, kept across `sudo` and `su`),
    /// when the login set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_user: Option<String>,
    /// The command line, one argument per entry.
    #[serde(default)]
    pub command: Vec<String>,
    pub gputune_version: String,
}

impl Event {
    /// This process, now.
    pub(crate) fn now() -> Event {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let uid = nix::unistd::getuid().as_raw();
        // The invoking process's own login uid, wherever --root points; 4294967295 (-1)
        // means the login set none (a daemon, a container).
        let login_uid = Root::live()
            .read_optional("/proc/self/loginuid")
            .ok()
            .flatten()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|l| *l != u32::MAX);
        Event {
            at: crate::host::clock::rfc3339(secs),
            uid,
            user: user_name(uid),
            login_uid,
            login_user: login_uid.and_then(user_name),
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            gputune_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// `alice (uid 1000)`, and the login behind it when that is someone else
    /// (`root (uid 0), logged in as alice (uid 1000)`); cleaned for a terminal.
    pub(crate) fn who(&self) -> String {
        let name = |user: &Option<String>, uid: u32| match user {
            Some(u) => format!("{} (uid {uid})", crate::say::clean_line(u)),
            None => format!("uid {uid}"),
        };
        let mut who = name(&self.user, self.uid);
        if let Some(login) = self.login_uid.filter(|l| *l != self.uid) {
            who.push_str(&format!(", logged in as {}", name(&self.login_user, login)));
        }
        who
    }
}

/// The name of `uid` in the invoking host's user database.
fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

impl Journal {
    /// The journal for `steps` on top of an earlier applied one: a target already changed
    /// by an earlier apply keeps its original `before`, so rollback goes back to the node
    /// as it was before gputune.
    pub(crate) fn begin(previous: Option<&Journal>, profile: &str, steps: &[Step]) -> Journal {
        let mut journal = match previous {
            Some(p) if p.phase == Phase::Applied => p.clone(),
            _ => Journal {
                version: VERSION,
                phase: Phase::Applying,
                profiles: Vec::new(),
                steps: Vec::new(),
                applies: Vec::new(),
                rolled_back: None,
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
pub(crate) fn load(root: &Root) -> Result<Option<Journal>, ApplyError> {
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
pub(crate) fn save(root: &Root, journal: &Journal) -> Result<(), ApplyError> {
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
pub(crate) fn restore(root: &Root, previous: Option<&Journal>) -> Result<(), ApplyError> {
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
    fn timestamps_are_utc_rfc3339() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_709_251_199, "2024-02-29T23:59:59Z"),
            (1_795_616_582, "2026-11-25T14:23:02Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
        ];
        crate::testing::assert_cases(cases, crate::host::clock::rfc3339);
    }

    /// A journal written before `applies` and `rolled_back` existed still loads (rollback
    /// must work after an upgrade), and a journal without them is written as before.
    #[test]
    fn journals_of_the_first_format_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        std::fs::create_dir_all(dir.path().join("var/lib/gputune")).unwrap();
        let old = r#"{"version":1,"phase":"applied","profiles":["base"],"steps":[{"what":"vm.swappiness","target":{"kind":"knob","path":"/proc/sys/vm/swappiness"},"before":{"state":"present","value":"60\n"},"after":{"state":"present","value":"10"}}]}"#;
        std::fs::write(root.path(PATH), old).unwrap();
        let j = load(&root).unwrap().unwrap();
        assert_eq!(j.applies, vec![]);
        assert_eq!(j.rolled_back, None);
        assert_eq!(j.steps[0].before, State::Present("60\n".into()));
        save(&root, &j).unwrap();
        let text = std::fs::read_to_string(root.path(PATH)).unwrap();
        assert!(
            !text.contains("applies") && !text.contains("rolled_back"),
            "{text}"
        );

        let mut j = j;
        let by = Event::now();
        assert_eq!(by.gputune_version, env!("CARGO_PKG_VERSION"));
        assert!(by.at.ends_with('Z') && by.at.len() == 20, "{}", by.at);
        j.applies.push(Applied {
            profile: "base".into(),
            changes: 1,
            by: by.clone(),
        });
        j.rolled_back = Some(by);
        save(&root, &j).unwrap();
        assert_eq!(load(&root).unwrap(), Some(j));
    }

    #[test]
    fn who_names_the_login_behind_sudo() {
        let mut by = Event {
            at: "2026-11-25T14:23:02Z".into(),
            uid: 0,
            user: Some("root".into()),
            login_uid: Some(1000),
            login_user: Some("al\u{1b}[2Jice".into()),
            command: vec![],
            gputune_version: "0.1.0".into(),
        };
        assert_eq!(by.who(), "root (uid 0), logged in as al[2Jice (uid 1000)");
        by.login_uid = Some(0);
        by.user = None;
        assert_eq!(by.who(), "uid 0");
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
