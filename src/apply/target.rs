//! What apply changes and what it remembers: a [`Target`] on the node and its [`State`]
//! before and after. The journal stores these, so a target must say everything needed to
//! put it back after a crash or a reboot.

use serde::{Deserialize, Serialize};

/// One thing on the node apply writes. Paths are host paths, resolved under the root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum Target {
    /// A kernel knob under `/proc` or `/sys`, written in place (the kernel allows nothing
    /// else); it always exists.
    Knob(String),
    /// A file gputune owns, written atomically; rollback deletes it if it did not exist.
    File(String),
    /// A symbolic link gputune owns (a systemd unit's `.wants/` entry).
    Link(String),
    /// The nftables table `inet gputune` of the running kernel.
    NftTable,
    /// A NIC setting through ethtool netlink, named `IFACE/KEY` (`eth0/offload.gro`); its
    /// state is the number the kernel reports (0 or 1 for on/off settings).
    Ethtool(String),
}

impl Target {
    /// The name people see in the plan and in rollback messages.
    pub(crate) fn label(&self) -> String {
        match self {
            Target::Knob(p) | Target::File(p) => p.clone(),
            Target::Link(p) => format!("{p} (link)"),
            Target::NftTable => "nftables table inet gputune".into(),
            Target::Ethtool(p) => match super::nic::parse_target(p) {
                Some((iface, knob)) => format!("ethtool {iface} {knob}"),
                None => format!("ethtool {p}"),
            },
        }
    }
}

/// A target's content: a knob's writable value, a file's bytes, a link's destination or
/// the nftables table's definition; `Absent` when the file, link or table does not exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "value", rename_all = "snake_case")]
pub enum State {
    Absent,
    Present(String),
}

impl State {
    /// A one-line rendering for the plan (`before -> after`).
    pub(crate) fn summary(&self) -> String {
        match self {
            State::Absent => "(absent)".into(),
            State::Present(v) => {
                let lines: Vec<&str> = v.lines().filter(|l| !l.trim().is_empty()).collect();
                match lines.as_slice() {
                    [] => "(empty)".into(),
                    [one] => one.split_whitespace().collect::<Vec<_>>().join(" "),
                    many => format!("{} lines", many.len()),
                }
            }
        }
    }
}

/// The writable value of a knob from what reading it gives: the bracketed choice of sysfs
/// selectors (`always [madvise] never` → `madvise`), else the text as read (the kernel
/// accepts its own output, newline included), so writing it back restores the knob byte
/// for byte.
pub(crate) fn knob_value(raw: &str) -> String {
    match crate::checks::memory::parse_bracketed(raw) {
        Some(choice) => choice.to_string(),
        None => raw.to_string(),
    }
}

/// One write of the plan: the target, what it holds now and what apply makes it hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The setting this write serves (`net.core.somaxconn`, `persist sysctls`).
    pub what: String,
    pub target: Target,
    pub before: State,
    pub after: State,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_cases;

    #[test]
    fn knob_values_are_writable_back() {
        let cases = [
            ("always [madvise] never\n", "madvise"),
            ("4096\t131072\t6291456\n", "4096\t131072\t6291456\n"),
            ("60\n", "60\n"),
            ("0-3", "0-3"),
            ("", ""),
        ];
        assert_cases(cases, knob_value);
    }

    #[test]
    fn summaries_are_one_line() {
        assert_eq!(State::Absent.summary(), "(absent)");
        assert_eq!(State::Present("10".into()).summary(), "10");
        assert_eq!(
            State::Present("4096\t131072 6291456\n".into()).summary(),
            "4096 131072 6291456"
        );
        assert_eq!(State::Present("# x\na\nb\n".into()).summary(), "3 lines");
        assert_eq!(State::Present("\n".into()).summary(), "(empty)");
    }
}
