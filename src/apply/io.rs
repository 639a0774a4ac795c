//! Reading and writing targets: the [`Io`] boundary between the apply engine and the node.
//! [`HostIo`] is the real one (files under the root, kernel knobs, the real `nft`); tests
//! wrap it to fail at a chosen write.

use std::fs;
use std::io;
use std::path::Path;

use super::error::ApplyError;
use super::nft::{self, Nft};
use super::target::{State, Target, knob_value};
use crate::host::Root;
use crate::host::cpulist::CpuList;
use crate::host::ethtool::Ethtool;

/// Reads and writes the state of targets.
pub trait Io {
    /// The target's current state.
    fn read(&self, target: &Target) -> Result<State, ApplyError>;
    /// Makes the target hold `state` (removing it for `Absent`).
    fn write(&self, target: &Target, state: &State) -> Result<(), ApplyError>;
}

/// The node under a root. `nft` is `None` when the root is not the running kernel's (a
/// mounted image): then the live firewall is not touched, only its files.
pub struct HostIo<'a> {
    pub root: &'a Root,
    pub nft: Option<&'a dyn Nft>,
}

impl Io for HostIo<'_> {
    fn read(&self, target: &Target) -> Result<State, ApplyError> {
        match target {
            Target::Knob(p) => match self.root.read_optional(p)? {
                Some(raw) => Ok(State::Present(knob_value(&raw))),
                None => Err(ApplyError::Missing {
                    path: self.root.path(p),
                    hint: String::new(),
                }),
            },
            Target::File(p) => match self.root.read_optional(p) {
                Ok(text) => Ok(text.map_or(State::Absent, State::Present)),
                // A file under something that is not a directory does not exist either.
                Err(e) if e.source.kind() == io::ErrorKind::NotADirectory => Ok(State::Absent),
                Err(e) => Err(e.into()),
            },
            Target::Link(p) => Ok(self
                .root
                .read_link(p)?
                .map_or(State::Absent, State::Present)),
            Target::NftTable => Ok(self
                .nft()?
                .list_table()?
                .map_or(State::Absent, State::Present)),
            Target::Ethtool(p) => read_nic(self.nic()?, p),
        }
    }

    fn write(&self, target: &Target, state: &State) -> Result<(), ApplyError> {
        match (target, state) {
            (Target::Knob(p), State::Present(v)) => Ok(self.root.write_knob(p, v)?),
            (Target::Knob(p), State::Absent) => Err(ApplyError::Refused(format!(
                "{p} is a kernel knob and cannot be removed"
            ))),
            (Target::File(p), State::Present(text)) => {
                Ok(self.root.write_file(p, text.as_bytes())?)
            }
            (Target::File(p) | Target::Link(p), State::Absent) => Ok(self.root.remove_file(p)?),
            (Target::Link(p), State::Present(dest)) => Ok(self.root.symlink(p, dest)?),
            (Target::Ethtool(p), State::Present(v)) => write_nic(self.nic()?, p, v),
            (Target::Ethtool(p), State::Absent) => Err(ApplyError::Refused(format!(
                "ethtool {p} is a NIC setting and cannot be removed"
            ))),
            (Target::NftTable, state) => {
                let def = match state {
                    State::Present(d) => Some(d.as_str()),
                    State::Absent => None,
                };
                self.nft()?.run_script(&nft::replace_script(def))
            }
        }
    }
}

/// A NIC setting's state: the number the kernel reports.
pub fn read_nic(e: &dyn Ethtool, path: &str) -> Result<State, ApplyError> {
    let (iface, knob) = super::nic::parse_target(path)
        .ok_or_else(|| ApplyError::Refused(format!("`{path}` is not an IFACE/setting pair")))?;
    match knob.read(e, iface) {
        Ok(Some(v)) => Ok(State::Present(v.to_string())),
        Ok(None) => Err(ApplyError::Refused(format!(
            "the driver of {iface} reports no {knob}"
        ))),
        Err(err) => Err(ApplyError::Refused(err.to_string())),
    }
}

/// Sets a NIC setting to the number `value`.
pub fn write_nic(e: &dyn Ethtool, path: &str, value: &str) -> Result<(), ApplyError> {
    let (iface, knob) = super::nic::parse_target(path)
        .ok_or_else(|| ApplyError::Refused(format!("`{path}` is not an IFACE/setting pair")))?;
    let v: u32 = value
        .trim()
        .parse()
        .map_err(|_| ApplyError::Refused(format!("`{value}` is not a value for {knob}")))?;
    e.set(iface, knob, v)
        .map_err(|err| ApplyError::Refused(err.to_string()))
}

impl HostIo<'_> {
    /// The kernel's ethtool netlink, only when the root's kernel is the running one.
    fn nic(&self) -> Result<&'static dyn Ethtool, ApplyError> {
        if has_live_kernel(self.root) {
            Ok(&crate::host::ethtool::netlink::Netlink)
        } else {
            Err(ApplyError::Refused(format!(
                "the root {} is not the running kernel's, so its NICs cannot be read or set",
                self.root.dir().display()
            )))
        }
    }

    fn nft(&self) -> Result<&dyn Nft, ApplyError> {
        self.nft.ok_or_else(|| {
            ApplyError::Nft(format!(
                "the root {} is not the running kernel's, so its live firewall cannot be read or changed",
                self.root.dir().display()
            ))
        })
    }
}

/// True when the root's `/proc` is the running kernel's (`/`, or a tree with the live
/// `/proc` bind-mounted at its `proc`), so live kernel objects such as the nftables ruleset
/// belong to this node. Decided by the mounted file system's identity, not by a link: a
/// link to `/proc` inside the root resolves inside it, as every path does.
pub fn has_live_kernel(root: &Root) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    if root.is_live() {
        return true;
    }
    let Ok(fd) = root.open("/proc", libc::O_PATH | libc::O_DIRECTORY) else {
        return false;
    };
    match (
        crate::host::confine::fstat(fd.as_fd()),
        fs::metadata(Path::new("/proc")),
    ) {
        (Ok(inside), Ok(live)) => inside.st_dev == live.dev() && inside.st_ino == live.ino(),
        _ => false,
    }
}

/// Whether a target read back as `got` holds what apply wrote (`want`). Knobs compare the
/// way the kernel echoes them: white space folded (`4096 131072 16777216`), CPU lists by
/// their CPUs (`0,1,2` reads back as `0-2`); the nftables table by the ports it accepts.
pub(crate) fn holds(target: &Target, want: &State, got: &State) -> bool {
    match (target, want, got) {
        (Target::Knob(_), State::Present(w), State::Present(g)) => {
            let (w, g) = (
                crate::host::sysctl::normalize(w),
                crate::host::sysctl::normalize(g),
            );
            w == g || matches!((CpuList::parse(&w), CpuList::parse(&g)), (Ok(a), Ok(b)) if a == b)
        }
        (Target::NftTable, State::Present(w), State::Present(g)) => {
            matches!((nft::accepted_ports(w), nft::accepted_ports(g)), (Ok(a), Ok(b)) if a == b)
        }
        _ => want == got,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_back_values_compare_the_kernel_way() {
        let knob = Target::Knob("/proc/sys/x".into());
        let p = |s: &str| State::Present(s.into());
        assert!(holds(
            &knob,
            &p("4096 131072 16777216"),
            &p("4096\t131072\t16777216")
        ));
        assert!(holds(&knob, &p("0,1,2"), &p("0-2")));
        assert!(!holds(&knob, &p("10"), &p("60")));
        let file = Target::File("/etc/x".into());
        assert!(!holds(&file, &p("a\n"), &p("a")));
        assert!(holds(&file, &State::Absent, &State::Absent));
        let table = Target::NftTable;
        let want = nft::render_table(&[(29500, 29550)]);
        let listed = "table inet gputune {\n\tchain input {\n\t\ttype filter hook input priority filter - 1; policy accept;\n\t\ttcp dport 29500-29550 accept\n\t}\n}\n";
        assert!(holds(&table, &p(&want), &p(listed)));
        assert!(!holds(&table, &p(&want), &State::Absent));
    }

    #[test]
    fn files_links_and_knobs_round_trip_under_a_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let io = HostIo {
            root: &root,
            nft: None,
        };
        let file = Target::File("/etc/sysctl.d/90-gputune.conf".into());
        assert_eq!(io.read(&file).unwrap(), State::Absent);
        io.write(&file, &State::Present("a = 1\n".into())).unwrap();
        assert_eq!(io.read(&file).unwrap(), State::Present("a = 1\n".into()));
        io.write(&file, &State::Absent).unwrap();
        assert_eq!(io.read(&file).unwrap(), State::Absent);

        let link = Target::Link("/etc/systemd/system/x.target.wants/y.service".into());
        io.write(
            &link,
            &State::Present("/etc/systemd/system/y.service".into()),
        )
        .unwrap();
        assert_eq!(
            io.read(&link).unwrap(),
            State::Present("/etc/systemd/system/y.service".into())
        );
        io.write(&link, &State::Absent).unwrap();
        assert_eq!(io.read(&link).unwrap(), State::Absent);

        let knob = Target::Knob("/sys/kernel/mm/transparent_hugepage/enabled".into());
        assert!(
            io.read(&knob).is_err(),
            "a missing knob is an error, not absent"
        );
        fs::create_dir_all(dir.path().join("sys/kernel/mm/transparent_hugepage")).unwrap();
        fs::write(
            dir.path()
                .join("sys/kernel/mm/transparent_hugepage/enabled"),
            "[always] madvise never\n",
        )
        .unwrap();
        assert_eq!(io.read(&knob).unwrap(), State::Present("always".into()));
        assert!(io.write(&knob, &State::Absent).is_err());
        assert!(
            io.read(&Target::NftTable)
                .unwrap_err()
                .to_string()
                .contains("not the running kernel")
        );
    }
}
