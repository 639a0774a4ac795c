//! Memory settings: swap, swappiness, transparent huge pages, NUMA balancing, zone reclaim
//! and the system-wide file limit.

use crate::finding::{Area, Change, Finding, Remedy, Status};
use crate::host::cmdline;
use crate::profile::setting::{KeySpec, Setting, ValueKind::Number, ValueKind::Text};

use super::judged::{Judged, judge_of, specs};
use super::{Context, by_rule, setting_check};

const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const THP_DEFRAG: &str = "/sys/kernel/mm/transparent_hugepage/defrag";

const JUDGED: &[Judged<Judge>] = &[
    Judged {
        judge: Judge::Sysctl,
        spec: KeySpec {
            key: "vm.swappiness",
            kind: Number,
            why: "High swappiness pages out data-loader workers and pinned-memory neighbours; one stalled rank stalls every rank of a synchronous job.",
        },
    },
    Judged {
        judge: Judge::Swap,
        spec: KeySpec {
            key: "swap.devices",
            kind: Number,
            why: "Active swap lets the kernel page out training processes under pressure instead of failing fast; GPU nodes usually run without swap.",
        },
    },
    Judged {
        judge: Judge::ThpEnabled,
        spec: KeySpec {
            key: "transparent_hugepage.enabled",
            kind: Text,
            why: "THP `always` makes khugepaged compact and collapse pages behind the job, causing latency spikes; `madvise` lets allocators opt in.",
        },
    },
    Judged {
        judge: Judge::ThpDefrag,
        spec: KeySpec {
            key: "transparent_hugepage.defrag",
            kind: Text,
            why: "Synchronous THP defragmentation stalls allocations in the training loop.",
        },
    },
    Judged {
        judge: Judge::Sysctl,
        spec: KeySpec {
            key: "kernel.numa_balancing",
            kind: Number,
            why: "Automatic NUMA balancing unmaps and migrates pages under pinned DMA buffers and data loaders, adding page faults to the hot path.",
        },
    },
    Judged {
        judge: Judge::Sysctl,
        spec: KeySpec {
            key: "vm.zone_reclaim_mode",
            kind: Number,
            why: "Zone reclaim evicts the page cache holding the dataset instead of using the other socket's memory.",
        },
    },
    Judged {
        judge: Judge::Sysctl,
        spec: KeySpec {
            key: "fs.file-max",
            kind: Number,
            why: "Data-loader workers, NCCL sockets and checkpoint shards open many files; hitting the system limit fails the job.",
        },
    },
];

pub(crate) const KEYS: &[KeySpec] = &specs::<_, { JUDGED.len() }>(JUDGED);

/// What reads a memory key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    /// A sysctl, judged with the other sysctls by [`super::sysctl::audit`].
    Sysctl,
    Swap,
    ThpEnabled,
    ThpDefrag,
}

pub(crate) fn audit(ctx: &Context) -> Vec<Finding> {
    let mut findings = super::sysctl::audit(ctx, Area::Memory, |key| {
        judge_of(JUDGED, key) == Some(Judge::Sysctl)
    });
    for (key, setting) in ctx.profile.area(Area::Memory) {
        let Some(judge) = judge_of(JUDGED, key) else {
            continue;
        };
        match judge {
            Judge::Sysctl => {}
            Judge::Swap if ctx.options.persisted => findings.push(swap_at_boot(ctx, setting)),
            Judge::Swap => findings.push(swap(ctx, setting)),
            Judge::ThpEnabled if ctx.options.persisted => {
                findings.push(thp_at_boot(ctx, key, setting))
            }
            Judge::ThpDefrag if ctx.options.image() => findings.push(
                setting_check(ctx, Area::Memory, key, setting).skip(format!(
                    "{}: THP defrag has no kernel command-line form; set it at boot with a systemd-tmpfiles rule (`w /sys/kernel/mm/transparent_hugepage/defrag - - - - madvise`)",
                    crate::image::NO_KERNEL
                )),
            ),
            Judge::ThpEnabled => findings.push(thp(ctx, key, setting, THP_ENABLED)),
            Judge::ThpDefrag => findings.push(thp(ctx, key, setting, THP_DEFRAG)),
        }
    }
    findings
}

/// One active swap area from `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SwapArea {
    pub name: String,
    pub size_kib: u64,
}

/// `/proc/swaps` text that is not what the kernel writes there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadSwaps {
    #[error("/proc/swaps has no `Filename Type Size Used Priority` header")]
    NoHeader,
    #[error("/proc/swaps: size `{size}` of {name} is not a number")]
    NotASize { name: String, size: String },
    #[error("/proc/swaps: malformed line `{0}`")]
    Malformed(String),
}

/// Parses `/proc/swaps`: a header line, then `Filename Type Size Used Priority` rows.
pub(crate) fn parse_swaps(text: &str) -> Result<Vec<SwapArea>, BadSwaps> {
    let mut lines = text.lines();
    match lines.next() {
        Some(header) if header.starts_with("Filename") => {}
        _ => return Err(BadSwaps::NoHeader),
    }
    lines
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [name, _kind, size, _used, _prio] => size
                    .parse()
                    .map(|size_kib| SwapArea {
                        name: name.to_string(),
                        size_kib,
                    })
                    .map_err(|_| BadSwaps::NotASize {
                        name: name.to_string(),
                        size: size.to_string(),
                    }),
                _ => Err(BadSwaps::Malformed(line.into())),
            }
        })
        .collect()
}

fn swap(ctx: &Context, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Memory, "swap.devices", setting);
    let text = match ctx.root.read_optional("/proc/swaps") {
        Ok(Some(text)) => text,
        Ok(None) => return check.skip("/proc/swaps is absent (kernel built without swap)"),
        Err(e) => return check.error(e.to_string()),
    };
    let areas = match parse_swaps(&text) {
        Ok(areas) => areas,
        Err(e) => return check.error(e.to_string()),
    };
    let count = areas.len().to_string();
    let total_mib: u64 = areas.iter().map(|a| a.size_kib).sum::<u64>() / 1024;
    let names: Vec<&str> = areas.iter().map(|a| a.name.as_str()).collect();
    let actual = if areas.is_empty() {
        "0".to_string()
    } else {
        format!("{count} ({total_mib} MiB: {})", names.join(", "))
    };
    by_rule(
        &check,
        setting,
        &count,
        actual,
        "swapoff -a, and remove the swap entries from /etc/fstab (and any swap .swap units) so it stays off",
    )
}

/// The swap areas `/etc/fstab` activates at boot (`swap` entries without `noauto`), with
/// their 1-based lines.
pub(crate) fn parse_fstab_swaps(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [spec, _, kind, rest @ ..] if !spec.starts_with('#') && *kind == "swap" => {
                    let noauto = rest
                        .first()
                        .is_some_and(|o| o.split(',').any(|o| o == "noauto"));
                    (!noauto).then(|| (i + 1, spec.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

/// `--persisted` and images: the swap `/etc/fstab` turns on at boot, not what is on now.
fn swap_at_boot(ctx: &Context, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Memory, "swap.devices", setting);
    let text = match ctx.root.read_optional("/etc/fstab") {
        Ok(text) => text.unwrap_or_default(),
        Err(e) => return check.error(e.to_string()),
    };
    let swaps = parse_fstab_swaps(&text);
    let count = swaps.len().to_string();
    let actual = if swaps.is_empty() {
        "0 (no swap in /etc/fstab)".to_string()
    } else {
        let named: Vec<String> = swaps
            .iter()
            .map(|(line, spec)| format!("{spec} (/etc/fstab:{line})"))
            .collect();
        format!("{count}: {}", named.join(", "))
    };
    by_rule(
        &check,
        setting,
        &count,
        actual,
        "remove or comment out the swap entries in /etc/fstab (and mask any .swap units) so no swap is turned on at boot",
    )
}

/// `--persisted` and images: THP `enabled` from `transparent_hugepage=` on the command line
/// the boot loader's files give ([`cmdline`]), the kernel's build default otherwise (which
/// gputune cannot know: a warning). The change is apply's: it writes the parameter where the
/// root's boot loader reads it.
fn thp_at_boot(ctx: &Context, key: &str, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Memory, key, setting);
    let words = match cmdline::words(ctx.root) {
        Ok(words) => words.unwrap_or_default(),
        Err(e) => return check.error(e.to_string()),
    };
    let loader = cmdline::loader(ctx.root);
    // Where apply cannot write the command line, the fix is by hand and carries no change.
    let remedy = |target: String| match (&loader, loader.file()) {
        (_, Some(file)) => Remedy::applied(
            format!(
                "`gputune apply` writes transparent_hugepage={target} into {file}{}",
                if file == cmdline::GRUB_DROP_IN {
                    " (then update-grub)"
                } else {
                    ""
                }
            ),
            Change::Sysfs {
                path: THP_ENABLED.into(),
                value: target,
            },
        ),
        (cmdline::Loader::Manual(why), None) => Remedy::by_hand(format!(
            "add transparent_hugepage={target} to the kernel command line: {why}"
        )),
        (_, None) => Remedy::by_hand(format!(
            "add transparent_hugepage={target} to the kernel command line"
        )),
    };
    if let Some((value, file)) = cmdline::param(&words, "transparent_hugepage") {
        return by_rule(&check, setting, value, format!("{value} ({file})"), || {
            Some(remedy(setting.rule.target(value)?))
        });
    }
    check
        .why(format!(
            "no transparent_hugepage= on the kernel command line ({} or GRUB's {} and {}/*.cfg): the kernel's build default will decide at boot (`always` on many distributions)",
            cmdline::KERNEL_CMDLINE,
            cmdline::GRUB_DEFAULT,
            cmdline::GRUB_DROP_INS
        ))
        .judge(Status::Warn, "unset", || {
            Some(remedy(
                setting
                    .rule
                    .target("")
                    .unwrap_or_else(|| "madvise".into()),
            ))
        })
}

/// The selected word of a THP knob: `always [madvise] never` → `madvise`.
pub(crate) fn parse_bracketed(text: &str) -> Option<&str> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].trim()).filter(|s| !s.is_empty())
}

fn thp(ctx: &Context, key: &str, setting: &Setting, path: &str) -> Finding {
    let check = setting_check(ctx, Area::Memory, key, setting);
    let text = match ctx.root.read_optional(path) {
        Ok(Some(text)) => text,
        Ok(None) => {
            return check.skip(format!(
                "{path} is absent (kernel without transparent huge pages)"
            ));
        }
        Err(e) => return check.error(e.to_string()),
    };
    let Some(actual) = parse_bracketed(&text) else {
        return check.error(format!(
            "{path} reads `{}`, expected a bracketed choice such as `always [madvise] never`",
            text.trim()
        ));
    };
    by_rule(&check, setting, actual, actual, || {
        let target = setting.rule.target(actual)?;
        let persist = if path == THP_ENABLED {
            format!(
                "`gputune apply` also writes transparent_hugepage={target} for the next boot ({} or {})",
                cmdline::GRUB_DROP_IN,
                cmdline::KERNEL_CMDLINE
            )
        } else {
            "persist it with a systemd-tmpfiles rule: defrag has no kernel command-line form".into()
        };
        Some(Remedy::applied(
            format!("echo {target} > {path}; {persist}"),
            Change::Sysfs {
                path: path.into(),
                value: target,
            },
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_reaches_its_judge() {
        crate::checks::judged::assert_each_key_reaches_its_judge(JUDGED);
    }
    use crate::testing::assert_cases;

    #[test]
    fn swaps() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        let cases = [
            (header, Ok(vec![])),
            (
                "Filename Type Size Used Priority\n/swapfile file 2097148 0 -2\n/dev/sda2 partition 1048572 0 -3\n",
                Ok(vec![
                    SwapArea {
                        name: "/swapfile".into(),
                        size_kib: 2097148,
                    },
                    SwapArea {
                        name: "/dev/sda2".into(),
                        size_kib: 1048572,
                    },
                ]),
            ),
            ("", Err(BadSwaps::NoHeader)),
            ("garbage\n", Err(BadSwaps::NoHeader)),
            (
                "Filename Type Size Used Priority\n/swapfile file big 0 -2\n",
                Err(BadSwaps::NotASize {
                    name: "/swapfile".into(),
                    size: "big".into(),
                }),
            ),
            (
                "Filename Type Size Used Priority\n/swapfile file\n",
                Err(BadSwaps::Malformed("/swapfile file".into())),
            ),
        ];
        assert_cases(cases, parse_swaps);
        assert_eq!(
            BadSwaps::NotASize {
                name: "/swapfile".into(),
                size: "big".into()
            }
            .to_string(),
            "/proc/swaps: size `big` of /swapfile is not a number"
        );
    }

    #[test]
    fn fstab_swaps() {
        let text = "# /etc/fstab\nUUID=1 / ext4 defaults 0 1\n/swapfile none swap sw 0 0\n#/dev/sda2 none swap sw 0 0\n/dev/sdb1 none swap noauto 0 0\nLABEL=s none swap\n";
        assert_eq!(
            parse_fstab_swaps(text),
            vec![(3, "/swapfile".to_string()), (6, "LABEL=s".to_string())]
        );
        assert!(parse_fstab_swaps("").is_empty());
    }

    #[test]
    fn bracketed() {
        let cases = [
            ("always [madvise] never\n", Some("madvise")),
            ("[always] madvise never", Some("always")),
            (
                "always defer defer+madvise [madvise] never",
                Some("madvise"),
            ),
            ("always madvise never", None),
            ("[]", None),
            ("", None),
        ];
        assert_cases(cases, parse_bracketed);
    }
}
