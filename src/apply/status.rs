//! `gputune status` underneath the command line: whether what the journal says apply wrote
//! still holds (`tuned-adm verify` for gputune). Every target of the journal is read again
//! and compared with what apply made it; every sysctl gputune persisted is followed through
//! the boot order (sysctl.d files, then tuned, which applies after systemd-sysctl) to the
//! one that wins at boot. Reads only: nothing is written, no lock is taken.

use std::collections::BTreeMap;

use serde::Serialize;

use super::io::{Io, holds};
use super::journal::Journal;
use super::owned;
use super::target::{State, Step, Target};
use crate::checks::sysctl::boot::{self, Assignment, GPUTUNE_CONF};
use crate::checks::tuned::{self, Tuned};
use crate::host::{HostError, Root, sysctl};
use crate::say::clean_line;

/// Whether a target still holds what apply made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    Holds,
    /// Changed since apply, or overridden at boot.
    Drifted,
    /// Could not be read: gputune cannot vouch for it.
    Unknown,
}

impl Verdict {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Drifted => "drifted",
            Verdict::Unknown => "unknown",
        }
    }
}

/// What an item judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A kernel knob's value now (`/proc/sys`, `/sys`, `/proc/irq`).
    Live,
    /// A file gputune wrote.
    File,
    /// A link gputune made (a unit's `.wants/` entry).
    Link,
    /// gputune's nftables table.
    Firewall,
    /// The value a sysctl gputune persisted gets at boot, after every file and tuned.
    Boot,
}

/// One owned target or persisted setting and whether it holds. Every string is clean for a
/// terminal (journal and host files are not trusted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Item {
    /// What people look for: the sysctl (`net.core.somaxconn`), the file, the knob.
    pub setting: String,
    pub kind: Kind,
    /// The path (or table) the item reads.
    pub target: String,
    /// What apply made it, on one line.
    pub applied: String,
    /// What it is now, on one line (`?` when it cannot be read).
    pub now: String,
    pub status: Verdict,
    /// Why it drifted and who wins at boot; for what holds, anything worth knowing.
    pub message: String,
}

/// Every owned target of `journal` and every sysctl it persisted, judged on the node behind
/// `io` (whose files are under `root`). `live`: the root is a running node (its knobs and a
/// running tuned are read); an image has only files, judged at boot.
pub(crate) fn check(journal: &Journal, root: &Root, io: &dyn Io, live: bool) -> Vec<Item> {
    let boot = Boot::read(root);
    let persisted = persisted(&journal.steps);
    let tuned_now = if live {
        tuned::read(root, true).ok().flatten()
    } else {
        None
    };
    let mut items: Vec<Item> = journal
        .steps
        .iter()
        .map(|step| target_item(step, io, &persisted, &boot, tuned_now.as_ref()))
        .collect();
    items.extend(persisted.values().map(|ours| boot_item(ours, &boot)));
    if let Err(e) = &boot.tuned {
        items.push(Item {
            setting: "tuned profile".into(),
            kind: Kind::Boot,
            target: "/etc/tuned/active_profile".into(),
            applied: "-".into(),
            now: "?".into(),
            status: Verdict::Unknown,
            message: format!(
                "tuned is enabled but its profile cannot be read ({}): it may override gputune's sysctls at boot",
                clean_line(&e.to_string())
            ),
        });
    }
    items
}

/// The sysctls gputune's own sysctl.d file sets after the applies, by key, from the journal.
fn persisted(steps: &[Step]) -> BTreeMap<String, Assignment> {
    let text = steps.iter().find_map(|s| match (&s.target, &s.after) {
        (Target::File(p), State::Present(text)) if p == GPUTUNE_CONF => Some(text.as_str()),
        _ => None,
    });
    text.map(|t| boot::parse(t, GPUTUNE_CONF))
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.key.clone(), a))
        .collect()
}

/// What decides a sysctl at boot: the sysctl.d files in systemd-sysctl's order, then the
/// tuned profile enabled at boot (tuned applies after systemd-sysctl).
struct Boot {
    files: Result<BTreeMap<String, Assignment>, HostError>,
    tuned: Result<Option<Tuned>, tuned::TunedError>,
}

/// Who sets a sysctl last at boot.
enum Winner<'a> {
    Tuned {
        profile: &'a str,
        file: &'a str,
        value: &'a str,
    },
    File(&'a Assignment),
    Nothing,
}

impl Boot {
    fn read(root: &Root) -> Boot {
        Boot {
            files: boot::assignments(root).map(|a| boot::effective(&a)),
            tuned: tuned::read(root, false),
        }
    }

    fn winner(&self, key: &str) -> Result<Winner<'_>, &HostError> {
        if let Ok(Some(t)) = &self.tuned
            && let Some(v) = t.sysctl.get(key)
        {
            return Ok(Winner::Tuned {
                profile: &t.profile,
                file: &v.file,
                value: &v.value,
            });
        }
        match &self.files {
            Ok(files) => Ok(files.get(key).map_or(Winner::Nothing, Winner::File)),
            Err(e) => Err(e),
        }
    }
}

impl Winner<'_> {
    /// Whether the winner leaves `key` at `value` (kernel-normalised). tuned's `>N` only
    /// raises a value below N, `<N` only lowers one above.
    fn agrees(&self, value: &str) -> bool {
        match self {
            Winner::File(a) => a.rejected.is_none() && a.value == value,
            Winner::Tuned { value: tv, .. } => {
                let num = |s: &str| s.trim().parse::<i64>().ok();
                if let Some(min) = tv.strip_prefix('>') {
                    matches!((num(value), num(min)), (Some(v), Some(m)) if v >= m)
                } else if let Some(max) = tv.strip_prefix('<') {
                    matches!((num(value), num(max)), (Some(v), Some(m)) if v <= m)
                } else {
                    sysctl::normalize(tv) == value
                }
            }
            Winner::Nothing => false,
        }
    }

    /// The value it sets, for the `now` column of a boot item.
    fn value(&self) -> String {
        match self {
            Winner::File(a) => clean_line(&a.value),
            Winner::Tuned { value, .. } => clean_line(value),
            Winner::Nothing => "(unset)".into(),
        }
    }

    /// Who it is, as a sentence part: `/etc/sysctl.d/99-x.conf:3 sets k = v`.
    fn describe(&self, key: &str) -> String {
        match self {
            Winner::File(a) => {
                let rejected = a.rejected.as_ref().map_or(String::new(), |why| {
                    format!(
                        ", which the kernel rejects ({}), so the kernel keeps its default",
                        clean_line(why)
                    )
                });
                format!(
                    "{} sets {key} = {}{rejected}",
                    clean_line(&a.origin()),
                    clean_line(&a.value)
                )
            }
            Winner::Tuned {
                profile,
                file,
                value,
            } => format!(
                "tuned profile `{}` sets {key} = {} in {} (tuned applies after systemd-sysctl)",
                clean_line(profile),
                clean_line(value),
                clean_line(file)
            ),
            Winner::Nothing => {
                format!("no file sets {key}: the kernel default applies")
            }
        }
    }

    fn is_ours(&self) -> bool {
        matches!(self, Winner::File(a) if a.file == GPUTUNE_CONF)
    }
}

/// A sysctl's name from its knob path (`/proc/sys/net/core/somaxconn`).
fn sysctl_name(path: &str) -> Option<String> {
    path.strip_prefix("/proc/sys/").map(|k| k.replace('/', "."))
}

fn target_item(
    step: &Step,
    io: &dyn Io,
    persisted: &BTreeMap<String, Assignment>,
    boot: &Boot,
    tuned_now: Option<&Tuned>,
) -> Item {
    let (kind, setting) = match &step.target {
        Target::Knob(p) => (Kind::Live, sysctl_name(p).unwrap_or_else(|| p.clone())),
        Target::File(p) => (Kind::File, p.clone()),
        Target::Link(_) => (Kind::Link, step.target.label()),
        Target::NftTable => (Kind::Firewall, step.target.label()),
        Target::Ethtool(_) => (Kind::Live, step.target.label()),
    };
    let mut item = Item {
        setting: clean_line(&setting),
        kind,
        target: clean_line(&step.target.label()),
        applied: clean_line(&step.after.summary()),
        now: "?".into(),
        status: Verdict::Holds,
        message: String::new(),
    };
    let current = match io.read(&step.target) {
        Ok(state) => state,
        Err(e) => {
            item.status = Verdict::Unknown;
            item.message = format!("cannot read it: {}", clean_line(&e.to_string()));
            return item;
        }
    };
    item.now = clean_line(&current.summary());
    let key = match &step.target {
        Target::Knob(p) => sysctl_name(p),
        _ => None,
    };
    if holds(&step.target, &step.after, &current) {
        if let Some(key) = &key
            && !persisted.contains_key(key)
        {
            item.message =
                "set live only (applied with --no-persist): the kernel default returns at reboot"
                    .into();
        }
        return item;
    }
    item.status = Verdict::Drifted;
    item.message = match (&step.target, &current) {
        (Target::Knob(_), State::Present(now)) => match &key {
            Some(key) => knob_drift(key, now, persisted, boot, tuned_now),
            None => "changed since apply (by hand or by another tool)".into(),
        },
        (Target::File(_), State::Absent) => {
            "removed since apply: what it set is gone at the next boot or restart".into()
        }
        (Target::File(_), State::Present(text)) if !owned::is_ours(text) => {
            "replaced by a file gputune did not write (its header is gone): gputune no longer owns it and rollback leaves it alone".into()
        }
        (Target::File(_), State::Present(text)) => format!(
            "edited since apply: {}",
            line_changes(&step.after, text)
        ),
        _ => "changed since apply (by hand or by another tool)".into(),
    };
    item
}

/// Who likely changed a live sysctl and who wins at boot.
fn knob_drift(
    key: &str,
    now: &str,
    persisted: &BTreeMap<String, Assignment>,
    boot: &Boot,
    tuned_now: Option<&Tuned>,
) -> String {
    let now = sysctl::normalize(now);
    let tuned_set = tuned_now.and_then(|t| t.sysctl.get(key).map(|v| (t, v)));
    let cause = match tuned_set {
        Some((t, v)) if sysctl::normalize(v.value.trim_start_matches(['>', '<'])) == now => {
            format!(
                "tuned (profile `{}`, running) sets this value in {}",
                clean_line(&t.profile),
                clean_line(&v.file)
            )
        }
        _ => match boot.files.as_ref().ok().and_then(|f| f.get(key)) {
            Some(a) if a.file != GPUTUNE_CONF && a.value == now => format!(
                "{} sets this value (`sysctl --system` or a package re-applied it?)",
                clean_line(&a.origin())
            ),
            _ => "by hand or by another tool".into(),
        },
    };
    let at_boot = match boot.winner(key) {
        Err(e) => format!(
            "what wins at boot is unknown: {}",
            clean_line(&e.to_string())
        ),
        Ok(w) => {
            let whose = match persisted.get(key) {
                Some(ours) if w.agrees(&ours.value) && w.is_ours() => {
                    ", so gputune's value comes back at reboot".to_string()
                }
                Some(ours) if w.agrees(&ours.value) => {
                    ", gputune's value, so it comes back at reboot".to_string()
                }
                Some(_) => format!(" and wins at boot over {GPUTUNE_CONF}"),
                None => " (gputune applied it live only, --no-persist)".into(),
            };
            format!("at boot {}{whose}", w.describe(key))
        }
    };
    format!("changed since apply ({cause}); {at_boot}")
}

fn boot_item(ours: &Assignment, boot: &Boot) -> Item {
    let key = clean_line(&ours.key);
    let mut item = Item {
        setting: format!("{key} at boot"),
        kind: Kind::Boot,
        target: GPUTUNE_CONF.into(),
        applied: clean_line(&ours.value),
        now: "?".into(),
        status: Verdict::Holds,
        message: String::new(),
    };
    let winner = match boot.winner(&ours.key) {
        Ok(w) => w,
        Err(e) => {
            item.status = Verdict::Unknown;
            item.message = format!(
                "the sysctl configuration files cannot be read: {}",
                clean_line(&e.to_string())
            );
            return item;
        }
    };
    item.now = winner.value();
    let said = winner.describe(&key);
    item.message = match (&winner, winner.agrees(&ours.value)) {
        (_, true) if winner.is_ours() => format!("{said}, and nothing later overrides it"),
        (_, true) => format!("{said}, the same value, so gputune's still holds"),
        (Winner::File(a), false) if a.file == GPUTUNE_CONF => {
            item.status = Verdict::Drifted;
            format!("{GPUTUNE_CONF} was edited since apply: {said}")
        }
        (Winner::Nothing, false) => {
            item.status = Verdict::Drifted;
            format!("{GPUTUNE_CONF} no longer sets it: {said} at reboot")
        }
        (Winner::File(_), false) => {
            item.status = Verdict::Drifted;
            format!(
                "{said} and wins at boot over {GPUTUNE_CONF} (systemd-sysctl applies the files in the lexical order of their names, the last one wins); gputune does not edit files it did not create: change or remove that line"
            )
        }
        (Winner::Tuned { .. }, false) => {
            item.status = Verdict::Drifted;
            format!(
                "{said} and wins at boot over {GPUTUNE_CONF}: align the tuned profile with gputune's value, or disable tuned"
            )
        }
    };
    item
}

/// A file's edit as the lines that went and came, on one line.
fn line_changes(applied: &State, now: &str) -> String {
    let applied: Vec<&str> = match applied {
        State::Present(t) => t.lines().collect(),
        State::Absent => Vec::new(),
    };
    let now: Vec<&str> = now.lines().collect();
    let gone: Vec<String> = applied
        .iter()
        .filter(|l| !now.contains(l))
        .map(|l| format!("-{}", clean_line(l)))
        .collect();
    let came: Vec<String> = now
        .iter()
        .filter(|l| !applied.contains(l))
        .map(|l| format!("+{}", clean_line(l)))
        .collect();
    let all = [gone, came].concat();
    if all.is_empty() {
        "the same lines in another order or with other white space".into()
    } else {
        all.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::io::HostIo;
    use crate::apply::journal::Phase;
    use crate::testing::Tree;

    const OURS: &str =
        "# Written by gputune apply; x\nnet.core.somaxconn = 8192\nvm.swappiness = 10\n";
    const KNOB: &str = "/proc/sys/net/core/somaxconn";

    fn journal() -> Journal {
        let present = |s: &str| State::Present(s.into());
        let mut j = Journal::begin(
            None,
            "p",
            &[
                Step {
                    what: "net.core.somaxconn".into(),
                    target: Target::Knob(KNOB.into()),
                    before: present("4096\n"),
                    after: present("8192"),
                },
                Step {
                    what: "persist".into(),
                    target: Target::File(GPUTUNE_CONF.into()),
                    before: State::Absent,
                    after: present(OURS),
                },
            ],
        );
        j.phase = Phase::Applied;
        j
    }

    fn judge(tree: &Tree, live: bool) -> Vec<Item> {
        let root = tree.root();
        let io = HostIo {
            root: &root,
            nft: None,
        };
        check(&journal(), &root, &io, live)
    }

    fn find<'a>(items: &'a [Item], setting: &str) -> &'a Item {
        items
            .iter()
            .find(|i| i.setting == setting)
            .unwrap_or_else(|| panic!("no {setting} in {items:#?}"))
    }

    #[test]
    fn what_apply_left_holds() {
        let tree = Tree::with(&[(KNOB, "8192\n"), (GPUTUNE_CONF, OURS)]);
        let items = judge(&tree, true);
        assert_eq!(items.len(), 4, "{items:#?}");
        assert!(
            items.iter().all(|i| i.status == Verdict::Holds),
            "{items:#?}"
        );
        let boot = find(&items, "net.core.somaxconn at boot");
        assert_eq!(boot.now, "8192");
        assert!(boot.message.contains("90-gputune.conf:2 sets"), "{boot:?}");
    }

    #[test]
    fn a_value_changed_by_hand_names_who_wins_at_boot() {
        let tree = Tree::with(&[(KNOB, "1024\n"), (GPUTUNE_CONF, OURS)]);
        let items = judge(&tree, true);
        let live = find(&items, "net.core.somaxconn");
        assert_eq!(live.status, Verdict::Drifted);
        assert_eq!((live.applied.as_str(), live.now.as_str()), ("8192", "1024"));
        assert!(live.message.contains("by hand"), "{live:?}");
        assert!(
            live.message.contains(
                "90-gputune.conf:2 sets net.core.somaxconn = 8192, so gputune's value comes back"
            ),
            "{live:?}"
        );
    }

    #[test]
    fn a_later_file_or_tuned_that_wins_at_boot_is_drift() {
        let tree = Tree::with(&[
            (KNOB, "8192\n"),
            (GPUTUNE_CONF, OURS),
            (
                "/usr/lib/sysctl.d/99-pkg.conf",
                "net.core.somaxconn = 1024\n",
            ),
        ]);
        let items = judge(&tree, true);
        assert_eq!(find(&items, "net.core.somaxconn").status, Verdict::Holds);
        let boot = find(&items, "net.core.somaxconn at boot");
        assert_eq!(boot.status, Verdict::Drifted);
        assert_eq!(boot.now, "1024");
        assert!(
            boot.message.starts_with(
                "/usr/lib/sysctl.d/99-pkg.conf:1 sets net.core.somaxconn = 1024 and wins at boot"
            ),
            "{boot:?}"
        );
        assert_eq!(find(&items, "vm.swappiness at boot").status, Verdict::Holds);

        let tree = Tree::with(&[
            (KNOB, "8192\n"),
            (GPUTUNE_CONF, OURS),
            (
                "/etc/systemd/system/multi-user.target.wants/tuned.service",
                "",
            ),
            ("/etc/tuned/active_profile", "hpc\n"),
            (
                "/usr/lib/tuned/hpc/tuned.conf",
                "[sysctl]\nvm.swappiness=30\nnet.core.somaxconn=>4096\n",
            ),
        ]);
        let items = judge(&tree, false);
        let boot = find(&items, "vm.swappiness at boot");
        assert_eq!(boot.status, Verdict::Drifted);
        assert!(boot.message.contains("tuned profile `hpc`"), "{boot:?}");
        // `>4096` only raises: 8192 stays.
        assert_eq!(
            find(&items, "net.core.somaxconn at boot").status,
            Verdict::Holds
        );
    }

    #[test]
    fn files_edited_removed_or_taken_over_drift() {
        let edited = OURS.replace("= 10", "= 60");
        let cases = [
            (
                edited.as_str(),
                "edited since apply: -vm.swappiness = 10; +vm.swappiness = 60",
            ),
            (
                "net.core.somaxconn = 8192\n",
                "replaced by a file gputune did not write",
            ),
        ];
        for (text, says) in cases {
            let tree = Tree::with(&[(KNOB, "8192\n"), (GPUTUNE_CONF, text)]);
            let items = judge(&tree, true);
            let file = find(&items, GPUTUNE_CONF);
            assert_eq!(file.status, Verdict::Drifted);
            assert!(file.message.starts_with(says), "{file:?}");
        }
        let tree = Tree::with(&[(KNOB, "8192\n")]);
        let items = judge(&tree, true);
        assert!(
            find(&items, GPUTUNE_CONF)
                .message
                .starts_with("removed since apply")
        );
        let boot = find(&items, "net.core.somaxconn at boot");
        assert_eq!(boot.status, Verdict::Drifted);
        assert_eq!(boot.now, "(unset)");
    }

    #[test]
    fn a_running_tuned_is_named_as_who_changed_a_value() {
        let tree = Tree::with(&[
            (KNOB, "1024\n"),
            (GPUTUNE_CONF, OURS),
            ("/run/tuned/tuned.pid", "1\n"),
            ("/etc/tuned/active_profile", "hpc\n"),
            (
                "/usr/lib/tuned/hpc/tuned.conf",
                "[sysctl]\nnet.core.somaxconn=1024\n",
            ),
        ]);
        let live = judge(&tree, true);
        let live = find(&live, "net.core.somaxconn");
        assert!(
            live.message.starts_with(
                "changed since apply (tuned (profile `hpc`, running) sets this value in /usr/lib/tuned/hpc/tuned.conf)"
            ),
            "{live:?}"
        );
    }

    #[test]
    fn a_value_applied_live_only_holds_and_says_it_is_lost_at_reboot() {
        let tree = Tree::with(&[(KNOB, "8192\n")]);
        let root = tree.root();
        let io = HostIo {
            root: &root,
            nft: None,
        };
        let mut j = journal();
        j.steps.truncate(1);
        let items = check(&j, &root, &io, true);
        assert_eq!(items.len(), 1, "{items:#?}");
        assert_eq!(items[0].status, Verdict::Holds);
        assert!(items[0].message.contains("--no-persist"), "{items:?}");
    }

    #[test]
    fn an_unreadable_knob_is_unknown_and_strings_are_clean() {
        let tree = Tree::with(&[(GPUTUNE_CONF, OURS)]);
        let items = judge(&tree, true);
        let live = find(&items, "net.core.somaxconn");
        assert_eq!(live.status, Verdict::Unknown);
        assert_eq!(live.now, "?");
        let tree = Tree::with(&[
            (KNOB, "8192\n"),
            (GPUTUNE_CONF, "# Written by gputune\n\u{1b}[2Jx = 1\n"),
        ]);
        let items = judge(&tree, true);
        let file = find(&items, GPUTUNE_CONF);
        assert!(!file.message.contains('\u{1b}'), "{file:?}");
    }
}
