//! The journal is data, not instructions: before rollback (or an apply building on an
//! earlier journal) touches anything, every target in it must be one apply itself could
//! have written. A journal is a file on disk — inside a mounted image, or left by someone
//! with write access to `/var/lib` — and rollback runs as root, so an entry naming
//! `/../../etc/shadow`, `/proc/sys/kernel/core_pattern` or a link to anywhere must stop the
//! job with nothing touched.

use std::path::{Component, Path};

use super::target::{State, Step, Target};
use super::{cgroup, firewall, plan};
use crate::checks;
use crate::finding::Area;

/// The longest path a journal may name (PATH_MAX).
const MAX_PATH: usize = 4096;

/// The first entry of a journal apply could not have written (1-based), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("entry {entry} ({label}): {why}")]
pub(crate) struct BadEntry {
    pub entry: usize,
    pub label: String,
    pub why: Invalid,
}

/// Why a target or state is not one apply writes; paths and values quoted as found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Invalid {
    #[error("`{}` is not a NIC setting gputune apply writes", .0.escape_debug())]
    NotNic(String),
    /// `kind`: kernel knob, link or file.
    #[error("`{path}` is not a {kind} gputune apply writes")]
    NotOurs { path: String, kind: &'static str },
    #[error("a state holds a NUL byte")]
    Nul,
    #[error("the link would point to `{0}`, not {unit}", unit = firewall::UNIT_FILE)]
    Pointee(String),
    #[error("a NIC setting's value `{}` is not a number", .0.escape_debug())]
    NotNumber(String),
    #[error("a knob value longer than a page")]
    TooLong,
    #[error("`{0}` is not an absolute path")]
    NotAbsolute(String),
    #[error("`{}` is not a clean path", .0.escape_debug())]
    NotClean(String),
    #[error("`{0}` has `.` or `..` components")]
    Dots(String),
}

/// Checks every step; the error names the first bad entry (1-based) and why.
pub(crate) fn steps(steps: &[Step]) -> Result<(), BadEntry> {
    for (i, step) in steps.iter().enumerate() {
        target(&step.target)
            .and_then(|()| states(step))
            .map_err(|why| BadEntry {
                entry: i + 1,
                label: step.target.label(),
                why,
            })?;
    }
    Ok(())
}

/// Whether apply can write `target`: a clean absolute path to a knob the checks know or a
/// file gputune owns.
pub(crate) fn target(target: &Target) -> Result<(), Invalid> {
    let path = match target {
        Target::NftTable => return Ok(()),
        Target::Ethtool(p) => {
            return super::nic::parse_target(p)
                .map(|_| ())
                .ok_or_else(|| Invalid::NotNic(p.clone()));
        }
        Target::Knob(p) | Target::File(p) | Target::Link(p) => p,
    };
    clean(path)?;
    let ok = match target {
        Target::Knob(p) => is_known_knob(p),
        Target::File(p) => is_owned_file(p),
        Target::Link(p) => p == firewall::UNIT_LINK,
        Target::NftTable | Target::Ethtool(_) => true,
    };
    if ok {
        Ok(())
    } else {
        Err(Invalid::NotOurs {
            path: path.clone(),
            kind: match target {
                Target::Knob(_) => "kernel knob",
                Target::Link(_) => "link",
                _ => "file",
            },
        })
    }
}

/// A link may only point where apply points it; values must be text a knob or file can
/// hold (no NUL).
fn states(step: &Step) -> Result<(), Invalid> {
    for state in [&step.before, &step.after] {
        if let State::Present(v) = state {
            if v.contains('\0') {
                return Err(Invalid::Nul);
            }
            if matches!(step.target, Target::Link(_)) && v != firewall::UNIT_FILE {
                return Err(Invalid::Pointee(v.clone()));
            }
            if matches!(step.target, Target::Ethtool(_)) && v.parse::<u32>().is_err() {
                return Err(Invalid::NotNumber(v.clone()));
            }
            if matches!(step.target, Target::Knob(_)) && v.len() > 4096 {
                return Err(Invalid::TooLong);
            }
        }
    }
    Ok(())
}

/// Absolute, at most PATH_MAX, only plain components (no `.`, `..`, empty or control
/// characters), so the path means the same thing however it is resolved.
fn clean(path: &str) -> Result<(), Invalid> {
    if !path.starts_with('/') || path.len() > MAX_PATH {
        return Err(Invalid::NotAbsolute(path.to_string()));
    }
    if path.chars().any(char::is_control) || path.contains("//") || path.ends_with('/') {
        return Err(Invalid::NotClean(path.to_string()));
    }
    for c in Path::new(path).components() {
        match c {
            Component::RootDir | Component::Normal(_) => {}
            _ => return Err(Invalid::Dots(path.to_string())),
        }
    }
    if path.split('/').any(|c| c == "." || c == "..") {
        return Err(Invalid::Dots(path.to_string()));
    }
    Ok(())
}

/// `/proc/sys/...` of a sysctl some check judges, the THP selectors, an IRQ's affinity list,
/// or a cgroup v2 interface file.
fn is_known_knob(path: &str) -> bool {
    if let Some(rest) = path.strip_prefix("/proc/sys/") {
        let name = rest.replace('/', ".");
        return Area::ALL.iter().any(|area| {
            checks::keys(*area).iter().any(|k| {
                k.key == name
                    || k.key
                        .strip_prefix(name.as_str())
                        .is_some_and(|t| t.starts_with('.'))
            })
        });
    }
    if let Some(rest) = path.strip_prefix("/proc/irq/") {
        return rest
            .strip_suffix("/smp_affinity_list")
            .is_some_and(|irq| !irq.is_empty() && irq.bytes().all(|b| b.is_ascii_digit()));
    }
    if let Some(rest) = path.strip_prefix("/sys/kernel/mm/transparent_hugepage/") {
        return rest == "enabled" || rest == "defrag";
    }
    if let Some(rest) = path.strip_prefix("/sys/fs/cgroup/") {
        return rest
            .rsplit_once('/')
            .is_some_and(|(_, key)| cgroup::is_cgroupfs_key(key));
    }
    false
}

/// The files gputune owns at fixed paths (DESIGN.md "Files gputune writes").
pub(crate) const OWNED: &[&str] = &[
    checks::sysctl::boot::GPUTUNE_CONF,
    plan::LIMITS_CONF,
    plan::NCCL_CONF,
    firewall::RULES_FILE,
    firewall::UNIT_FILE,
    "/etc/systemd/logind.conf.d/90-gputune.conf",
    crate::host::cmdline::GRUB_DROP_IN,
];

/// Files of the system apply edits in place (they cannot carry gputune's header): only
/// kernel-install's command line.
pub(crate) const EDITED: &[&str] = &[crate::host::cmdline::KERNEL_CMDLINE];

/// The owned files, and the drop-ins of slices and services (a job's cgroup limits).
fn is_owned_file(path: &str) -> bool {
    if OWNED.contains(&path) || EDITED.contains(&path) {
        return true;
    }
    if let Some(iface) = path
        .strip_prefix(super::nic::LINK_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|r| r.strip_prefix(super::nic::LINK_PREFIX))
        .and_then(|r| r.strip_suffix(".link"))
    {
        return super::nic::valid_iface(iface);
    }
    let Some(drop_in) = path
        .strip_prefix("/etc/systemd/system/")
        .and_then(|r| r.strip_suffix("/90-gputune.conf"))
    else {
        return false;
    };
    [".slice.d", ".service.d"].iter().any(|kind| {
        drop_in
            .strip_suffix(kind)
            .is_some_and(|unit| !unit.is_empty() && !unit.contains('/') && unit != "..")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(target: Target, before: State) -> Step {
        Step {
            what: "x".into(),
            target,
            before,
            after: State::Absent,
        }
    }

    #[test]
    fn what_apply_writes_is_accepted() {
        for t in [
            Target::Knob("/proc/sys/vm/swappiness".into()),
            Target::Knob("/proc/sys/net/ipv4/ip_local_port_range".into()),
            Target::Knob("/proc/irq/24/smp_affinity_list".into()),
            Target::Knob("/sys/kernel/mm/transparent_hugepage/enabled".into()),
            Target::Knob("/sys/fs/cgroup/train.slice/cpuset.cpus".into()),
            Target::File("/etc/sysctl.d/90-gputune.conf".into()),
            Target::File("/etc/nccl.conf".into()),
            Target::File("/etc/systemd/system/train.slice.d/90-gputune.conf".into()),
            Target::File("/etc/systemd/system/nccl-job.service.d/90-gputune.conf".into()),
            Target::File("/etc/systemd/logind.conf.d/90-gputune.conf".into()),
            Target::File("/etc/default/grub.d/90-gputune.cfg".into()),
            Target::File("/etc/kernel/cmdline".into()),
            Target::File("/etc/systemd/network/70-gputune-ens1f0np0.link".into()),
            Target::Ethtool("ens1f0np0/ring.rx".into()),
            Target::Ethtool("eth0/offload.gro".into()),
            Target::NftTable,
        ] {
            assert_eq!(target(&t), Ok(()), "{t:?}");
        }
    }

    #[test]
    fn tampered_entries_are_refused_with_a_reason() {
        for t in [
            Target::Knob("/../../../../tmp/x".into()),
            Target::File("/../../../../tmp/x".into()),
            Target::Link("/../../../../tmp/x".into()),
            Target::Knob("/proc/sys/kernel/core_pattern".into()),
            Target::Knob("/etc/passwd".into()),
            Target::Knob("/proc/sys/vm/../../../etc/shadow".into()),
            Target::File("/etc/shadow".into()),
            Target::File("/etc/nccl.conf/".into()),
            Target::File("etc/nccl.conf".into()),
            Target::File("/etc/systemd/system/a/b.slice.d/90-gputune.conf".into()),
            Target::File("/etc/systemd/system/a/b.service.d/90-gputune.conf".into()),
            Target::File("/etc/systemd/system/.service.d/90-gputune.conf".into()),
            Target::Knob("/proc/irq/1x/smp_affinity_list".into()),
            Target::Link("/etc/systemd/system/x.wants/y".into()),
            Target::File("/etc/default/grub".into()),
            Target::File("/etc/default/grub.d/10-site.cfg".into()),
            Target::File("/etc/default/grub.d/../grub".into()),
            Target::File("/etc/kernel/cmdline.d/x".into()),
            Target::File("/boot/grub/grub.cfg".into()),
            Target::Knob("/etc/kernel/cmdline".into()),
            Target::File("/etc/systemd/network/70-gputune-.link".into()),
            Target::File("/etc/systemd/network/70-gputune-a/b.link".into()),
            Target::File("/etc/systemd/network/99-default.link".into()),
            Target::Ethtool("../../etc/shadow".into()),
            Target::Ethtool("eth0/link.mtu".into()),
            Target::Ethtool("eth0 x/ring.rx".into()),
        ] {
            assert!(target(&t).is_err(), "{t:?}");
        }
        let bad_link = step(
            Target::Link(firewall::UNIT_LINK.into()),
            State::Present("/etc/shadow".into()),
        );
        let err = steps(&[bad_link]).unwrap_err().to_string();
        assert!(err.starts_with("entry 1 ("), "{err}");
        let bad_value = step(
            Target::Ethtool("eth0/ring.rx".into()),
            State::Present("8192; reboot".into()),
        );
        let err = steps(&[bad_value]).unwrap_err().to_string();
        assert!(err.contains("not a number"), "{err}");
    }

    /// A cgroup knob is any `*.x` file under `/sys/fs/cgroup/`, so the path check alone
    /// stops a journal from climbing out of it or meaning two paths at once.
    #[test]
    fn cgroup_knobs_are_decided_by_the_path_check() {
        for (path, why) in [
            (
                "/sys/fs/cgroup/../../../etc/cron.d/memory.max",
                "`.` or `..`",
            ),
            ("/sys/fs/cgroup/a//cpuset.cpus", "not a clean path"),
            ("/sys/fs/cgroup/./x/memory.max", "`.` or `..`"),
            ("/sys/fs/cgroup/x/.", "`.` or `..`"),
            ("/sys/fs/cgroup/x/memory.max/", "not a clean path"),
            ("/sys/fs/cgroup/x\n/memory.max", "not a clean path"),
        ] {
            let err = target(&Target::Knob(path.into())).unwrap_err().to_string();
            assert!(err.contains(why), "{path:?}: {err}");
        }
        assert_eq!(
            target(&Target::Knob("/sys/fs/cgroup/x/memory.max".into())),
            Ok(())
        );
        assert!(target(&Target::Knob("/sys/fs/cgroup/x/cgroup".into())).is_err());
    }

    /// PATH_MAX is the longest path, the ending included; one byte more is refused.
    #[test]
    fn the_path_cap_is_path_max() {
        let at = |len: usize| {
            let fill = len - "/sys/fs/cgroup/".len() - "/memory.max".len();
            format!("/sys/fs/cgroup/{}/memory.max", "a".repeat(fill))
        };
        assert_eq!(at(MAX_PATH).len(), MAX_PATH);
        assert_eq!(target(&Target::Knob(at(MAX_PATH))), Ok(()));
        let err = target(&Target::Knob(at(MAX_PATH + 1)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an absolute path"), "{err}");
    }

    /// A knob takes at most a page (4096 bytes); a file may hold more.
    #[test]
    fn a_knob_value_is_at_most_a_page() {
        let knob = || Target::Knob("/proc/sys/vm/swappiness".into());
        let with =
            |target: Target, len: usize| steps(&[step(target, State::Present("1".repeat(len)))]);
        assert_eq!(with(knob(), 4096), Ok(()));
        let err = with(knob(), 4097).unwrap_err().to_string();
        assert!(err.contains("longer than a page"), "{err}");
        let after = Step {
            after: State::Present("1".repeat(4097)),
            ..step(knob(), State::Absent)
        };
        assert!(steps(&[after]).is_err(), "the after state is checked too");
        let file = Target::File("/etc/nccl.conf".into());
        assert_eq!(with(file, 100_000), Ok(()));
        let nul = steps(&[step(knob(), State::Present("1\0".into()))])
            .unwrap_err()
            .to_string();
        assert!(nul.contains("NUL"), "{nul}");
    }

    /// Of the THP selectors apply writes `enabled` and `defrag`, nothing else there.
    #[test]
    fn thp_knobs_are_enabled_and_defrag_only() {
        let thp = |name: &str| {
            target(&Target::Knob(format!(
                "/sys/kernel/mm/transparent_hugepage/{name}"
            )))
        };
        assert_eq!(thp("enabled"), Ok(()));
        assert_eq!(thp("defrag"), Ok(()));
        for other in ["shmem_enabled", "khugepaged/defrag", "use_zero_page"] {
            assert!(thp(other).is_err(), "{other}");
        }
    }

    /// The link is checked for what it points to; a good target with the right pointee passes.
    #[test]
    fn the_unit_link_points_at_the_unit_file_only() {
        let link = |to: &str| {
            steps(&[step(
                Target::Link(firewall::UNIT_LINK.into()),
                State::Present(to.into()),
            )])
        };
        assert_eq!(link(firewall::UNIT_FILE), Ok(()));
        assert!(link("/etc/shadow").is_err());
        let err = steps(&[
            step(Target::NftTable, State::Absent),
            step(Target::File("/etc/shadow".into()), State::Absent),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("entry 2 (") && err.contains("not a file gputune"),
            "{err}"
        );
    }
}
