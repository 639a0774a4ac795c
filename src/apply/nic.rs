//! NIC settings in a plan: each [`Change::Ethtool`](crate::finding::Change::Ethtool) becomes
//! a live write through ethtool netlink ([`Target::Ethtool`]) and a line of the interface's
//! systemd `.link` file, which udev applies when the device appears at boot
//! (systemd.link(5)). Only the first `.link` file matching a device applies, so gputune's
//! carries the interface's current name (`Name=`) and sorts before the distribution's
//! `99-default.link`; an earlier one of the administrator's wins over it, which a note says.

use std::collections::BTreeMap;

use super::error::ApplyError;
use super::io::Io;
use super::owned;
use super::plan::PlanOptions;
use super::target::{State, Target};
use crate::host::Root;
use crate::host::ethtool::Knob;

/// Where gputune's `.link` files live.
pub const LINK_DIR: &str = "/etc/systemd/network";
/// The name prefix of gputune's `.link` files (`70-gputune-IFACE.link`).
pub const LINK_PREFIX: &str = "70-gputune-";

/// Directories udev reads `.link` files from (systemd.link(5)).
const LINK_DIRS: &[&str] = &[
    "/etc/systemd/network",
    "/run/systemd/network",
    "/usr/lib/systemd/network",
    "/lib/systemd/network",
];

/// The `.link` file of `iface`.
pub fn link_file(iface: &str) -> String {
    format!("{LINK_DIR}/{LINK_PREFIX}{iface}.link")
}

/// Whether `name` is an interface name the kernel accepts (IFNAMSIZ, no `/`, no white space,
/// not `.` or `..`), so it is safe in a path and a journal.
pub fn valid_iface(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
}

/// The journal's name of one NIC knob: `IFACE/KEY` (`eth0/offload.gro`).
pub fn target(iface: &str, knob: Knob) -> Target {
    Target::Ethtool(format!("{iface}/{}", knob.key()))
}

/// Splits a [`Target::Ethtool`] path back into the interface and its knob.
pub fn parse_target(path: &str) -> Option<(&str, Knob)> {
    let (iface, key) = path.split_once('/')?;
    let knob = Knob::from_key(key)?;
    valid_iface(iface).then_some((iface, knob))
}

/// One planned write: what it serves, the target and the state apply makes it hold.
pub type Planned = (String, Target, State);

/// The NIC changes of one plan, by interface.
#[derive(Debug, Default)]
pub struct NicChanges {
    by_iface: BTreeMap<String, Vec<(Knob, u32)>>,
}

impl NicChanges {
    /// Adds one change; malformed ones are refused before anything is written.
    pub fn add(&mut self, iface: &str, key: &str, value: u32) -> Result<(), ApplyError> {
        if !valid_iface(iface) {
            return Err(ApplyError::Refused(format!(
                "`{}` is not a network interface name",
                iface.escape_debug()
            )));
        }
        let knob = Knob::from_key(key).ok_or_else(|| {
            ApplyError::Refused(format!("`{key}` is not a NIC setting gputune sets"))
        })?;
        if knob.is_bool() && value > 1 {
            return Err(ApplyError::Refused(format!(
                "{key} takes 0 or 1, not {value}"
            )));
        }
        let knobs = self.by_iface.entry(iface.to_string()).or_default();
        // A driver without combined queues gets its rx and tx queues set together.
        let all = if knob == Knob::RxChannels {
            vec![Knob::RxChannels, Knob::TxChannels]
        } else {
            vec![knob]
        };
        for k in all {
            knobs.retain(|(old, _)| *old != k);
            knobs.push((k, value));
        }
        Ok(())
    }

    /// The writes (live knobs first, then each `.link` file) and notes.
    pub fn steps(
        self,
        root: &Root,
        io: &dyn Io,
        options: PlanOptions,
    ) -> Result<(Vec<Planned>, Vec<String>), ApplyError> {
        let mut steps = Vec::new();
        let mut notes = Vec::new();
        if self.by_iface.is_empty() {
            return Ok((steps, notes));
        }
        for (iface, knobs) in &self.by_iface {
            if options.live_kernel && !options.image {
                for (knob, value) in knobs {
                    steps.push((
                        knob.command(iface, *value),
                        target(iface, *knob),
                        State::Present(value.to_string()),
                    ));
                }
            } else {
                notes.push(format!(
                    "{iface}'s NIC settings are not set live: --root is not the running kernel's"
                ));
            }
            if !options.persist {
                notes.push(format!("{iface}'s NIC settings are live only: the driver resets them when the device is re-created or the node reboots, and {} is what --no-persist does not write", link_file(iface)));
                continue;
            }
            match link_text(root, io, iface, knobs)? {
                Ok(text) => steps.push((
                    format!("persist {iface}'s NIC settings"),
                    Target::File(link_file(iface)),
                    State::Present(text),
                )),
                Err(why) => notes.push(why),
            }
        }
        notes.push("udev applies the .link files in /etc/systemd/network when a device appears (at boot, or `udevadm trigger --action=add /sys/class/net/IFACE`); coalescing settings need systemd >= 250, ring sizes >= 244, flow control >= 246".into());
        let first = self
            .by_iface
            .keys()
            .map(|i| link_file(i))
            .min()
            .unwrap_or_default();
        let first = first.rsplit('/').next().unwrap_or_default().to_string();
        if let Some(other) = other_link_files(root, &first) {
            notes.push(format!("other .link files exist ({other}): they sort before gputune's, and only the first .link file (in name order) that matches a device applies: if one matches the NIC, it wins and gputune's settings are not applied at boot"));
        }
        Ok((steps, notes))
    }
}

/// The `.link` file for `iface` with `knobs`, merged with the settings of gputune's earlier
/// file; the inner error says why it is not written (no MAC address to match on).
fn link_text(
    root: &Root,
    io: &dyn Io,
    iface: &str,
    knobs: &[(Knob, u32)],
) -> Result<Result<String, String>, ApplyError> {
    let path = link_file(iface);
    let mut settings: Vec<(String, String)> = Vec::new();
    if let State::Present(text) = io.read(&Target::File(path.clone()))? {
        if !owned::is_ours(&text) {
            return Err(ApplyError::Refused(format!(
                "{path} exists and was not written by gputune; gputune never edits files it did not create"
            )));
        }
        let mut in_link = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_link = line == "[Link]";
            } else if in_link
                && let Some((k, v)) = line.split_once('=')
                && k != "Name"
            {
                settings.push((k.to_string(), v.to_string()));
            }
        }
    }
    let mac = root
        .read_optional(&format!("/sys/class/net/{iface}/address"))
        .ok()
        .flatten()
        .map(|m| m.trim().to_string())
        .filter(|m| is_mac(m) && m != "00:00:00:00:00:00");
    let Some(mac) = mac else {
        return Ok(Err(format!(
            "{iface}'s NIC settings are not persisted: it has no MAC address to match a .link file on"
        )));
    };
    for (knob, value) in knobs {
        let (k, v) = knob.link_setting(*value);
        settings.retain(|(old, _)| old != k);
        settings.push((k.to_string(), v));
    }
    let mut out = String::from(owned::HEADER);
    out.push_str(&format!(
        "[Match]\nMACAddress={mac}\n\n[Link]\nName={iface}\n"
    ));
    for (k, v) in settings {
        out.push_str(&format!("{k}={v}\n"));
    }
    Ok(Ok(out))
}

fn is_mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `.link` files that sort before gputune's (`ours`, a file name) and so would win over it
/// for a device both match.
fn other_link_files(root: &Root, ours: &str) -> Option<String> {
    let mut found = Vec::new();
    for dir in LINK_DIRS {
        for name in root.list_dir(dir).ok().flatten().unwrap_or_default() {
            if name.ends_with(".link") && !name.starts_with(LINK_PREFIX) && name.as_str() < ours {
                found.push(format!("{dir}/{}", crate::say::clean_line(&name)));
            }
        }
    }
    (!found.is_empty()).then(|| found.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_targets() {
        for good in ["eth0", "ens1f0np0", "veth-gt.1", "a"] {
            assert!(valid_iface(good), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "eth0 x",
            "sixteen-chars-xx",
            "e\n",
            "a:1",
        ] {
            assert!(!valid_iface(bad), "{bad:?}");
        }
        assert_eq!(parse_target("eth0/offload.gro"), Some(("eth0", Knob::Gro)));
        assert_eq!(parse_target("eth0/ring.jumbo"), None);
        assert_eq!(parse_target("../x/ring.rx"), None);
        assert_eq!(parse_target("eth0"), None);
        let mut c = NicChanges::default();
        assert!(c.add("eth0", "offload.gro", 2).is_err());
        assert!(c.add("eth0", "link.mtu", 9000).is_err());
        assert!(c.add("a/b", "ring.rx", 1).is_err());
        c.add("eth0", "channels.rx", 4).unwrap();
        assert_eq!(
            c.by_iface["eth0"],
            vec![(Knob::RxChannels, 4), (Knob::TxChannels, 4)]
        );
        assert!(is_mac("0a:1b:2c:3d:4e:5f"));
        assert!(!is_mac("0a:1b:2c:3d:4e"));
    }
}
