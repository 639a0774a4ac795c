//! Reading and writing targets: the [`Io`] boundary between the apply engine and the node.
//! [`HostIo`] is the real one (files under the root, kernel knobs, the real `nft`); tests
//! wrap it to fail at a chosen write.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::error::ApplyError;
use super::nft::{self, Nft};
use super::target::{State, Target, knob_value};
use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root, atomic};

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
            Target::Link(p) => {
                let path = self.root.path(p);
                match fs::read_link(&path) {
                    Ok(dest) => Ok(State::Present(dest.to_string_lossy().into_owned())),
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                        ) =>
                    {
                        Ok(State::Absent)
                    }
                    Err(e) => Err(HostError::new(path, e).into()),
                }
            }
            Target::NftTable => Ok(self
                .nft()?
                .list_table()?
                .map_or(State::Absent, State::Present)),
        }
    }

    fn write(&self, target: &Target, state: &State) -> Result<(), ApplyError> {
        match (target, state) {
            (Target::Knob(p), State::Present(v)) => Ok(write_knob(&self.root.path(p), v)?),
            (Target::Knob(p), State::Absent) => Err(ApplyError::Refused(format!(
                "{p} is a kernel knob and cannot be removed"
            ))),
            (Target::File(p), State::Present(text)) => {
                let path = self.root.path(p);
                create_parent(&path)?;
                atomic::write_atomic(&path, text.as_bytes())
                    .map_err(|e| HostError::new(path, e).into())
            }
            (Target::File(p) | Target::Link(p), State::Absent) => Ok(remove(&self.root.path(p))?),
            (Target::Link(p), State::Present(dest)) => Ok(link_atomic(&self.root.path(p), dest)?),
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

impl HostIo<'_> {
    fn nft(&self) -> Result<&dyn Nft, ApplyError> {
        self.nft.ok_or_else(|| {
            ApplyError::Nft(format!(
                "the root {} is not the running kernel's, so its live firewall cannot be read or changed",
                self.root.dir().display()
            ))
        })
    }
}

/// True when the root's `/proc` is the running kernel's (`/` or a tree whose `proc` links
/// to `/proc`), so live kernel objects such as the nftables ruleset belong to this node.
pub fn has_live_kernel(root: &Root) -> bool {
    root.is_live() || fs::canonicalize(root.path("/proc")).is_ok_and(|p| p == Path::new("/proc"))
}

/// Writes a `/proc/sys` or `/sys` knob in place with one `write`, as the kernel requires.
fn write_knob(path: &Path, value: &str) -> Result<(), HostError> {
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| HostError::new(path, e))?;
    file.write_all(value.as_bytes())
        .map_err(|e| HostError::new(path, e))
}

/// Creates the missing directories above `path` as 0755 whatever the umask, since the
/// files in them (limits.d, nccl.conf's readers) are read by unprivileged users.
fn create_parent(path: &Path) -> Result<(), HostError> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
    for d in missing.into_iter().rev() {
        fs::create_dir(d)
            .and_then(|()| fs::set_permissions(d, fs::Permissions::from_mode(0o755)))
            .map_err(|e| HostError::new(d, e))?;
    }
    Ok(())
}

/// Removes a file or link and syncs its directory; an already missing one is fine.
fn remove(path: &Path) -> Result<(), HostError> {
    match fs::remove_file(path) {
        Ok(()) => sync_parent(path),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(HostError::new(path, e)),
    }
}

/// Makes `path` a link to `dest` through a temporary link and a rename.
fn link_atomic(path: &Path, dest: &str) -> Result<(), HostError> {
    create_parent(path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        ".{}.{}.tmp",
        name.unwrap_or_default(),
        std::process::id()
    ));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(dest, &tmp).map_err(|e| HostError::new(&tmp, e))?;
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(HostError::new(path, e));
    }
    sync_parent(path)
}

fn sync_parent(path: &Path) -> Result<(), HostError> {
    match path.parent() {
        Some(dir) => fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| HostError::new(dir, e)),
        None => Ok(()),
    }
}

/// Whether a target read back as `got` holds what apply wrote (`want`). Knobs compare the
/// way the kernel echoes them: white space folded (`4096 131072 16777216`), CPU lists by
/// their CPUs (`0,1,2` reads back as `0-2`); the nftables table by the ports it accepts.
pub fn holds(target: &Target, want: &State, got: &State) -> bool {
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
