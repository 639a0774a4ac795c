//! `/dev/shm`: its size and free space. Live, statvfs says both; under another root the
//! size comes from the tmpfs `size=` option in that root's `/proc/mounts` (tmpfs(5): a
//! percentage is of RAM, no option means half of RAM) and free space cannot be known.

use crate::finding::{Area, Check, Finding, Remedy, Status};
use crate::host::mounts;
use crate::probe_error::{Probe, ProbeError};
use crate::profile::amount::Amount;
use crate::profile::setting::Setting;

use super::super::{Context, by_rule, setting_check};
use super::human;
use crate::probe::limits::LimitsProbe;

const SHM: &str = "/dev/shm";

/// Why a tmpfs `size=` option gives no size; each names the option as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SizeError {
    #[error("no size= option (half of RAM) and MemTotal is unknown")]
    HalfOfUnknown,
    #[error("size={0} is not a percentage")]
    NotPercentage(String),
    #[error("size={0} is of RAM, and MemTotal is unknown")]
    PercentOfUnknown(String),
    #[error("size={0} is not a size")]
    NotSize(String),
    #[error("size={0} has an unknown suffix")]
    UnknownSuffix(String),
    #[error("size={0} is too large")]
    TooLarge(String),
}

/// Bytes of a tmpfs `size=` option given the node's RAM: `65536k`, `1g`, `50%`, `1073741824`.
pub(crate) fn tmpfs_size(option: Option<&str>, mem_total: Option<u64>) -> Result<u64, SizeError> {
    let Some(text) = option else {
        return mem_total.map(|m| m / 2).ok_or(SizeError::HalfOfUnknown);
    };
    if let Some(pct) = text.strip_suffix('%') {
        let pct: u64 = pct
            .parse()
            .map_err(|_| SizeError::NotPercentage(text.into()))?;
        let mem = mem_total.ok_or_else(|| SizeError::PercentOfUnknown(text.into()))?;
        return Ok((u128::from(mem) * u128::from(pct) / 100) as u64);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| SizeError::NotSize(text.into()))?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        "e" => 60,
        _ => return Err(SizeError::UnknownSuffix(text.into())),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::TooLarge(text.into()))
}

/// `MemTotal` of `/proc/meminfo` in bytes.
pub(crate) fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn fix(target: &str) -> String {
    format!(
        "mount -o remount,size={target} /dev/shm, and persist it with `tmpfs /dev/shm tmpfs defaults,size={target} 0 0` in /etc/fstab; \
         in a container: docker run --shm-size={target}, or in Kubernetes an emptyDir with medium: Memory mounted at /dev/shm"
    )
}

fn judge(check: &Check, setting: &Setting, bytes: u64, actual: String) -> Finding {
    let judged = bytes.to_string();
    by_rule(check, setting, &judged, actual, || {
        let target = setting.rule.target(&judged)?;
        let target = Amount::parse(&target)
            .map(Amount::in_units)
            .unwrap_or(target);
        Some(Remedy::by_hand(if check.id() == "dev_shm.free" {
            format!(
                "remove stale segments (ls -la /dev/shm: leftovers of killed jobs such as nccl-*), or grow it: {}",
                fix(&target)
            )
        } else {
            fix(&target)
        }))
    })
}

/// Whether `/dev/shm` is its own mount under the root (else it is a directory of `/`).
fn shm_mount(ctx: &Context) -> Result<Option<mounts::Mount>, mounts::TableError> {
    let Some(list) = mounts::read(ctx.root)? else {
        return Ok(None);
    };
    Ok(list?.into_iter().rev().find(|m| m.target == SHM))
}

/// The `/dev/shm` line of `/etc/fstab` (same fields as `/proc/mounts`), if any.
pub fn fstab_entry(text: &str) -> Result<Option<mounts::Mount>, mounts::MalformedIn> {
    // Comment lines become blank, so a malformed line keeps its number in the file.
    let lines: Vec<&str> = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with('#') {
                ""
            } else {
                l
            }
        })
        .collect();
    let list = mounts::parse(&lines.join("\n")).map_err(|e| e.in_file("/etc/fstab"))?;
    Ok(list.into_iter().rev().find(|m| m.target == SHM))
}

/// What `/dev/shm` will be after a reboot: the fstab entry's size, else the tmpfs default
/// systemd mounts it with (half of RAM).
fn persisted_size(ctx: &Context, check: &Check, setting: &Setting) -> Finding {
    let entry = match ctx.root.read_optional("/etc/fstab") {
        Ok(text) => match fstab_entry(text.as_deref().unwrap_or_default()) {
            Ok(entry) => entry,
            Err(e) => return check.error(e.to_string()),
        },
        Err(e) => return check.error(e.to_string()),
    };
    let option = entry.as_ref().and_then(|m| m.option("size"));
    match tmpfs_size(option, mem_total_of(ctx)) {
        Ok(bytes) => judge(
            check,
            setting,
            bytes,
            format!(
                "{} after reboot ({})",
                human(Amount::Finite(bytes.into())),
                match option {
                    Some(size) => format!("size={size} in /etc/fstab"),
                    None => "no /etc/fstab size: tmpfs default, half of RAM".into(),
                }
            ),
        ),
        Err(e) => check.skip(format!("/dev/shm after reboot: {e}")),
    }
}

/// The root's `MemTotal`, which a tmpfs size in percent (or none) is taken of.
fn mem_total_of(ctx: &Context) -> Option<u64> {
    let meminfo = ctx.root.read_optional("/proc/meminfo").ok().flatten();
    meminfo.as_deref().and_then(mem_total)
}

/// `dev_shm.size`: live from statvfs, else from the root's mounts, or fstab with `--persisted`.
pub(crate) fn size(ctx: &Context, probe: &dyn LimitsProbe, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Limits, "dev_shm.size", setting);
    if ctx.options.persisted {
        return persisted_size(ctx, &check, setting);
    }
    let mount = match shm_mount(ctx) {
        Ok(m) => m,
        Err(e) => return check.error(e.to_string()),
    };
    if ctx.root.is_live() {
        return match probe.space(&ctx.root.path(SHM)) {
            Ok(space) => {
                let note = if mount.is_none() {
                    " (not a separate mount: a directory of the / file system)"
                } else {
                    ""
                };
                judge(
                    &check,
                    setting,
                    space.size,
                    format!("{}{note}", human(Amount::Finite(space.size.into()))),
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let missing = "missing: /dev/shm does not exist";
                let finding = judge(&check, setting, 0, missing.into());
                // No /dev/shm fails even a rule that a size of 0 meets.
                if finding.status == Status::Pass {
                    check.judge(setting.severity.status(), missing, "")
                } else {
                    finding
                }
            }
            Err(e) => ProbeError::io_finding(Probe::Limits, &check, "statvfs /dev/shm", &e),
        };
    }
    let Some(mount) = mount else {
        return check
            .skip("--root is not the running node and its /proc/mounts has no /dev/shm mount");
    };
    if mount.fstype != "tmpfs" {
        return check.skip(format!(
            "/dev/shm is {} under --root; only tmpfs sizes can be read from mount options",
            mount.fstype
        ));
    }
    match tmpfs_size(mount.option("size"), mem_total_of(ctx)) {
        Ok(bytes) => judge(
            &check,
            setting,
            bytes,
            format!(
                "{} (tmpfs size={} in /proc/mounts)",
                human(Amount::Finite(bytes.into())),
                mount.option("size").unwrap_or("default")
            ),
        ),
        Err(e) => check.error(format!("/dev/shm in /proc/mounts: {e}")),
    }
}

/// `dev_shm.free`: live only (statvfs `f_bavail`).
pub(crate) fn free(ctx: &Context, probe: &dyn LimitsProbe, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Limits, "dev_shm.free", setting);
    if ctx.options.persisted {
        return check.skip("--persisted judges configuration files; free space is a live fact");
    }
    if !ctx.root.is_live() {
        return check.skip(
            "--root is not the running node: free space in /dev/shm can only be measured live",
        );
    }
    match probe.space(&ctx.root.path(SHM)) {
        Ok(space) => judge(
            &check,
            setting,
            space.free,
            format!(
                "{} free of {}",
                human(Amount::Finite(space.free.into())),
                human(Amount::Finite(space.size.into()))
            ),
        ),
        Err(e) => ProbeError::io_finding(Probe::Limits, &check, "statvfs /dev/shm", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_sizes() {
        use SizeError::*;
        let gib = 1u64 << 30;
        type Case<'a> = (Option<&'a str>, Option<u64>, Result<u64, SizeError>);
        let cases: &[Case] = &[
            (Some("65536k"), None, Ok(64 << 20)),
            (Some("1g"), None, Ok(gib)),
            (Some("1G"), None, Ok(gib)),
            (Some("1073741824"), None, Ok(gib)),
            (Some("50%"), Some(16 * gib), Ok(8 * gib)),
            (Some("50%"), None, Err(PercentOfUnknown("50%".into()))),
            (None, Some(16 * gib), Ok(8 * gib)),
            (None, None, Err(HalfOfUnknown)),
            (Some("lots"), None, Err(NotSize("lots".into()))),
            (Some("1q"), None, Err(UnknownSuffix("1q".into()))),
            (Some("x%"), Some(gib), Err(NotPercentage("x%".into()))),
            (
                Some("99999999999e"),
                None,
                Err(TooLarge("99999999999e".into())),
            ),
        ];
        for (option, mem, want) in cases {
            assert_eq!(tmpfs_size(*option, *mem), *want, "{option:?}");
        }
        assert_eq!(
            HalfOfUnknown.to_string(),
            "no size= option (half of RAM) and MemTotal is unknown"
        );
        assert_eq!(
            PercentOfUnknown("50%".into()).to_string(),
            "size=50% is of RAM, and MemTotal is unknown"
        );
        assert_eq!(
            UnknownSuffix("1q".into()).to_string(),
            "size=1q has an unknown suffix"
        );
    }

    #[test]
    fn fstab() {
        let text =
            "# /etc/fstab\nUUID=1 / ext4 defaults 0 1\ntmpfs /dev/shm tmpfs defaults,size=2g 0 0\n";
        assert_eq!(
            fstab_entry(text).unwrap().unwrap().option("size"),
            Some("2g")
        );
        assert_eq!(fstab_entry("UUID=1 / ext4 defaults 0 1\n").unwrap(), None);
        assert_eq!(fstab_entry("").unwrap(), None);
        let bad = fstab_entry("# comment\ntmpfs /dev/shm\n").unwrap_err();
        assert_eq!(bad.file, "/etc/fstab");
        assert_eq!(bad.line.line, 2);
        assert_eq!(
            bad.to_string(),
            "/etc/fstab:2: malformed line `tmpfs /dev/shm`"
        );
    }

    #[test]
    fn meminfo() {
        assert_eq!(
            mem_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"),
            Some(16 << 20)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }
}
