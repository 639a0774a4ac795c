//! Judging profile settings that are kernel sysctls, shared by the network and memory areas.
//! Multi-part sysctls (`net.ipv4.tcp_rmem`) are judged part by part, and every failing part
//! of one sysctl shares a single fix that sets all of its parts at once. What the files set
//! at boot is [`boot`]'s, how the kernel parses a value [`kernel`]'s; reading `/proc/sys` is
//! [`crate::host::sysctl`]'s.

pub mod boot;
pub mod kernel;
pub(crate) mod writable;

use std::collections::BTreeMap;

use crate::finding::{Area, Change, Check, Finding, Remedy, Status};
use crate::host::HostError;
use crate::host::sysctl::{self, Vector};
use crate::profile::setting::Setting;

use super::Context;
use boot::Assignment;

/// Findings for every setting of `area` whose key is a sysctl (`is_sysctl`).
pub(crate) fn audit(ctx: &Context, area: Area, is_sysctl: impl Fn(&str) -> bool) -> Vec<Finding> {
    let settings: Vec<(&String, &Setting)> = ctx
        .profile
        .area(area)
        .filter(|(k, _)| is_sysctl(k))
        .collect();

    if settings.is_empty() {
        return Vec::new();
    }
    let boot = ctx.boot_sysctls();
    let persisted = ctx.options.persisted;
    let image = ctx.options.image();

    // Read each sysctl once (from the files with --persisted, where they set it), and work
    // out the value every part-wise fix should set.
    let mut values: BTreeMap<String, Read> = BTreeMap::new();
    for (key, _) in &settings {
        let name = sysctl::sysctl_of(key);
        values
            .entry(name.to_string())
            .or_insert_with(|| match (persisted, boot) {
                (true, Ok(b)) if b.contains_key(name) => Ok(Some(b[name].value.clone())),
                (true, Err(e)) => Err(Unread::Files(e)),
                // No file sets it: after a reboot the kernel default applies, where it is known.
                (true, Ok(_)) if sysctl::kernel_default(name).is_some() => {
                    Ok(sysctl::kernel_default(name).map(str::to_string))
                }
                (true, Ok(_)) if image => Ok(None),
                _ => sysctl::read(ctx.root, name).map_err(Unread::Own),
            });
    }
    let targets = vector_targets(&settings, &values);

    let mut findings: Vec<Finding> = settings
        .iter()
        .map(|(key, setting)| {
            let name = sysctl::sysctl_of(key);
            let check = super::setting_check(ctx, area, key, setting);
            let (read, target) = (&values[name], targets.get(name));
            match boot {
                Err(_) => read_finding(&check, setting, read, target, fix_line),
                Ok(boot) if persisted => {
                    at_boot(&check, setting, read, target, boot.get(name), image)
                }
                Ok(boot) => live_and_boot(&check, setting, read, target, boot.get(name)),
            }
        })
        .map(|f| {
            if persisted {
                f
            } else {
                unless_read_only(ctx, f)
            }
        })
        .collect();
    findings.extend(super::tuned::conflicts(ctx, area, &settings));
    findings
}

/// A live finding apply would fix on a sysctl this node will not let anyone change here (a
/// container, a network namespace): a skip with the reason, keeping what was read and the
/// change, which apply then lists as left out instead of failing on it.
fn unless_read_only(ctx: &Context, finding: Finding) -> Finding {
    if !matches!(finding.status, Status::Fail | Status::Warn) {
        return finding;
    }
    let Some(Change::Sysctl { key, .. }) = &finding.change else {
        return finding;
    };
    let Some(why) = writable::read_only(ctx.root, key) else {
        return finding;
    };
    let verdict = finding.status.name();
    Finding {
        status: Status::Skip,
        message: format!("read-only here, so not judged ({verdict} otherwise): {why}"),
        fix: String::new(),
        ..finding
    }
}

/// A sysctl's value as read: live, or with `--persisted` what the files set (else the kernel
/// default); `None` when the kernel has no such sysctl, or nothing says what it will be.
type Read<'a> = Result<Option<String>, Unread<'a>>;

/// Why a sysctl's value could not be read: the sysctl files every key shares, or its own
/// `/proc/sys` file.
#[derive(Debug, thiserror::Error)]
enum Unread<'a> {
    #[error(transparent)]
    Files(&'a HostError),
    #[error(transparent)]
    Own(HostError),
}

/// A vector sysctl's value that is not its count of numbers.
#[derive(Debug, thiserror::Error)]
#[error("{} reads `{value}`, expected {} numbers ({})", vector.key, vector.parts.len(), vector.parts.join(", "))]
struct Malformed {
    vector: &'static Vector,
    value: String,
}

/// How a fix words setting sysctl `name` to a value: live (`sysctl -w`) or persisted.
type Wording = fn(&str, &str) -> String;

/// The finding on the value read, a failing one fixed as `fix` words it.
fn read_finding(
    check: &Check,
    setting: &Setting,
    read: &Read<'_>,
    vector_target: Option<&String>,
    fix: Wording,
) -> Finding {
    let name = sysctl::sysctl_of(check.id());
    match read {
        Err(e) => check.error(e.to_string()),
        // Kernels before 6.x show the init namespace's net.core limits in no other one.
        Ok(None) if writable::INIT_NETNS_ONLY.contains(&name) => check.skip(format!(
            "{} is absent: this kernel has no {name}, or it belongs to the init network namespace and this process runs in another one (set it on the host)",
            sysctl::host_path(name)
        )),
        Ok(None) => check.skip(format!(
            "this kernel has no {name} ({} is absent)",
            sysctl::host_path(name)
        )),
        Ok(Some(value)) => match judge(check.id(), setting, value, vector_target) {
            Ok(judged) => judged.finding(check, fix),
            Err(e) => check.error(e.to_string()),
        },
    }
}

/// `--persisted` and images: the files' value is judged, or the kernel default where no file
/// sets the key and gputune knows it; the finding says where the value comes from, and every
/// fix is a persisted one (there is no live value to write).
fn at_boot(
    check: &Check,
    setting: &Setting,
    read: &Read<'_>,
    vector_target: Option<&String>,
    assignment: Option<&Assignment>,
    image: bool,
) -> Finding {
    let name = sysctl::sysctl_of(check.id());
    if let Some(a) = assignment {
        if let Some(why) = &a.rejected {
            return rejected_at_boot(check, setting, name, a, why);
        }
        let check = check.clone().found(
            format!("at boot {} sets {name} = {}", a.origin(), a.value),
            "; ",
        );
        return read_finding(&check, setting, read, vector_target, persist_fix);
    }
    let judged = match read {
        Ok(Some(value)) => judge(check.id(), setting, value, vector_target),
        Ok(None) => return unset_at_boot(check, setting, name, image),
        Err(e) => return check.error(e.to_string()),
    };
    let judged = match judged {
        Ok(judged) if judged.status != Status::Error => judged,
        Ok(judged) => return judged.finding(check, persist_fix),
        Err(e) => return check.error(e.to_string()),
    };
    let unset = format!("no sysctl.d file sets {name}: after a reboot the kernel default applies");
    match (sysctl::kernel_default(name), judged.status) {
        (Some(default), Status::Pass) => check
            .clone()
            .why(format!("{unset}, and its default `{default}` passes"))
            .pass(format!("{} (kernel default)", judged.actual)),
        (Some(default), _) => Judged {
            actual: format!("{} (kernel default)", judged.actual),
            ..judged
        }
        .finding(
            &check.clone().found(format!("{unset}, `{default}`"), "; "),
            persist_fix,
        ),
        (None, Status::Pass) => check
            .clone()
            .why(format!(
                "{unset}; it passes only while the default is `{}`",
                judged.actual
            ))
            .warn(
                judged.actual.clone(),
                Remedy::applied(
                    persist_fix(name, &judged.actual),
                    sysctl_change(name, judged.actual),
                ),
            ),
        (None, _) => judged.finding(&check.clone().found(unset, "; "), persist_fix),
    }
}

/// `--persisted` where no file sets the key and its value cannot be read either: the kernel
/// decides at boot, so a plain key whose rule names a value is fixed by persisting that.
fn unset_at_boot(check: &Check, setting: &Setting, name: &str, image: bool) -> Finding {
    let subject = if image { "the image" } else { "the node" };
    let vector = sysctl::split_part(check.id()).is_some();
    check
        .clone()
        .why(format!(
            "no sysctl.d file in {subject} sets {name}: the running kernel will decide its value at boot (it varies by kernel version or memory size)"
        ))
        .judge(Status::Warn, "unset", || {
            if vector {
                return None;
            }
            let target = setting.rule.target("")?;
            Some(Remedy::applied(
                persist_fix(name, &target),
                sysctl_change(name, target),
            ))
        })
}

/// `--persisted` where the winning line holds a value the kernel rejects: systemd-sysctl
/// fails on it at boot, so the setting is not made whatever the text says. The fix is an
/// edit of that line, which `apply` does not make: no change.
fn rejected_at_boot(
    check: &Check,
    setting: &Setting,
    name: &str,
    a: &Assignment,
    why: &str,
) -> Finding {
    check
        .clone()
        .why(format!(
            "at boot {} sets {name} = {}, which the kernel rejects ({why}): systemd-sysctl fails to set it and the kernel keeps its default",
            a.origin(),
            a.value
        ))
        .judge(
            setting.severity.status(),
            a.value.clone(),
            format!(
                "write a plain decimal value in range at {} (`sysctl -w {name}=...` shows whether the kernel takes it)",
                a.origin()
            ),
        )
}

/// A live finding, with what the files would set at boot: right live but not persisted
/// (lost at reboot) is a warning whose change persists the live value; persisted but not
/// live says how to load it.
fn live_and_boot(
    check: &Check,
    setting: &Setting,
    read: &Read<'_>,
    vector_target: Option<&String>,
    assignment: Option<&Assignment>,
) -> Finding {
    let finding = read_finding(check, setting, read, vector_target, fix_line);
    let Ok(Some(live)) = read else {
        return finding;
    };
    let key = check.id();
    let name = sysctl::sysctl_of(key);
    let passes = |value: &str| {
        actual_of(key, value).is_ok_and(|part| setting.status_for(&part).0 == Status::Pass)
    };
    let boot_ok = assignment.map(|a| a.rejected.is_none() && passes(&a.value));
    match (finding.status, assignment, boot_ok) {
        (Status::Pass, None, _) => {
            // Only a default known to fail makes a reboot lose anything; an unknown default
            // (it varies by kernel or machine) is left to `audit --persisted`.
            match sysctl::kernel_default(name) {
                Some(default) if !passes(default) => lost_at_reboot(
                    check,
                    finding.actual,
                    live,
                    format!(
                        "right live, but no sysctl.d file sets {name}: a reboot brings back the kernel default `{default}`"
                    ),
                ),
                _ => finding,
            }
        }
        (Status::Pass, Some(a), Some(false)) => lost_at_reboot(
            check,
            finding.actual,
            live,
            match &a.rejected {
                Some(why) => format!(
                    "right live, but at boot {} sets {name} = {}, which the kernel rejects ({why}): systemd-sysctl fails to set it, so it is lost at reboot",
                    a.origin(),
                    a.value
                ),
                None => format!(
                    "right live, but at boot {} sets {name} = {}: lost at reboot",
                    a.origin(),
                    a.value
                ),
            },
        ),
        (Status::Fail | Status::Warn, Some(a), Some(true)) => {
            let message = format!(
                "{}; {} sets {name} = {} for boot but it is not live (run `sysctl --system` or `gputune apply`)",
                finding.message,
                a.origin(),
                a.value
            );
            Finding { message, ..finding }
        }
        _ => finding,
    }
}

/// Right live but lost at reboot: a warning whose change persists the `live` value.
fn lost_at_reboot(check: &Check, actual: String, live: &str, message: String) -> Finding {
    let name = sysctl::sysctl_of(check.id());
    check.clone().why(message).warn(
        actual,
        Remedy::applied(
            persist_fix(name, live),
            sysctl_change(name, live.to_string()),
        ),
    )
}

/// How to persist a sysctl by hand (apply does it in its own file).
fn persist_fix(name: &str, value: &str) -> String {
    format!(
        "persist it: `gputune apply`, or a line `{name} = {value}` in a file under /etc/sysctl.d/ ({} is gputune's)",
        boot::GPUTUNE_CONF
    )
}

/// The change that sets sysctl `name` to `value`, live and persisted.
fn sysctl_change(name: &str, value: String) -> Change {
    Change::Sysctl {
        key: name.to_string(),
        value,
    }
}

/// The value a profile key judges: the sysctl's value or the part it names.
fn actual_of(key: &str, value: &str) -> Result<String, Malformed> {
    match sysctl::split_part(key) {
        Some((vector, index)) => part_of(value, vector, index),
        None => Ok(value.to_string()),
    }
}

/// A key's value judged against its setting, before it is worded as a finding.
struct Judged {
    /// What the report shows: the value the key judges (the sysctl's, or the part it names).
    actual: String,
    status: Status,
    /// The rule's complaint when it cannot compare.
    problem: Option<String>,
    /// The whole sysctl's value that makes it pass, when one does.
    target: Option<String>,
}

/// Key `key`'s part of the sysctl's `value` against `setting`; a failing part of a vector is
/// fixed with `vector_target`, the value for all its parts. An error when the value is
/// malformed.
fn judge(
    key: &str,
    setting: &Setting,
    value: &str,
    vector_target: Option<&String>,
) -> Result<Judged, Malformed> {
    let (actual, target) = match sysctl::split_part(key) {
        Some((vector, index)) => (part_of(value, vector, index)?, vector_target.cloned()),
        None => (value.to_string(), setting.rule.target(value)),
    };
    let (status, problem) = setting.status_for(&actual);
    Ok(Judged {
        actual,
        status,
        problem,
        target,
    })
}

impl Judged {
    /// The finding of `check`; a failing one sets the sysctl to the target as `fix` words it.
    fn finding(self, check: &Check, fix: Wording) -> Finding {
        let name = sysctl::sysctl_of(check.id());
        let target = self.target;
        let check = match &self.problem {
            Some(p) => check.clone().why(format!("{name}: {p}")),
            None => check.clone(),
        };
        check.judge(self.status, self.actual, || {
            let target = target?;
            Some(Remedy::applied(
                fix(name, &target),
                sysctl_change(name, target),
            ))
        })
    }
}

/// `sysctl -w key=value`, quoting values with spaces the way a shell needs.
pub(crate) fn fix_line(key: &str, value: &str) -> String {
    if value.contains(' ') {
        format!("sysctl -w {key}=\"{value}\"")
    } else {
        format!("sysctl -w {key}={value}")
    }
}

/// Part `index` of a vector sysctl's value, or why the value is malformed.
fn part_of(value: &str, vector: &'static Vector, index: usize) -> Result<String, Malformed> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    if parts.len() != vector.parts.len() || parts.iter().any(|p| p.parse::<i64>().is_err()) {
        return Err(Malformed {
            vector,
            value: value.to_string(),
        });
    }
    Ok(parts[index].to_string())
}

/// For each vector sysctl, the full value with every part the profile judges moved to
/// where its rule wants it; parts that need no change keep their current value.
fn vector_targets(
    settings: &[(&String, &Setting)],
    values: &BTreeMap<String, Read<'_>>,
) -> BTreeMap<String, String> {
    let mut targets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (key, setting) in settings {
        let Some((vector, index)) = sysctl::split_part(key) else {
            continue;
        };
        let Some(Ok(Some(value))) = values.get(vector.key) else {
            continue;
        };
        if part_of(value, vector, index).is_err() {
            continue;
        }
        let parts = targets
            .entry(vector.key.to_string())
            .or_insert_with(|| value.split_whitespace().map(str::to_string).collect());
        if let Some(target) = setting.rule.target(&parts[index]) {
            parts[index] = target;
        }
    }
    targets
        .into_iter()
        .map(|(k, parts)| (k, parts.join(" ")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::AuditOptions;
    use crate::probe::Probes;
    use crate::testing::Tree;

    const PROFILE: &str = r#"
description = "test"
[network]
"net.core.somaxconn" = { min = 4096 }
"net.ipv4.tcp_rmem.max" = { min = 16777216 }
"net.ipv4.tcp_fin_timeout" = { max = 30 }
"net.ipv4.tcp_sack" = { equals = 1 }
"#;

    /// Findings by id for a node with these files (host path, content), live or `--persisted`.
    fn audit_node(files: &[(&str, &str)], persisted: bool) -> BTreeMap<String, Finding> {
        let tree = Tree::with(files);
        let profile = tree.profile("/p.toml", PROFILE);
        let root = tree.root();
        let options = AuditOptions {
            persisted,
            ..AuditOptions::default()
        };
        let probes = Probes::for_root(&root);
        crate::testing::audit(&root, &profile, &options, probes, Area::Network)
    }

    const SOMAXCONN: &str = "/proc/sys/net/core/somaxconn";
    const OURS: &str = "/etc/sysctl.d/90-gputune.conf";

    #[test]
    fn read_only_sysctls_are_skipped_with_the_value_and_the_change_kept() {
        let rw = "proc /proc proc rw 0 0\n";
        let ro = "proc /proc proc rw 0 0\nproc /proc/sys proc ro,nosuid 0 0\n";
        let node = |mounts: &str| {
            audit_node(
                &[
                    (SOMAXCONN, "128\n"),
                    ("/proc/sys/net/ipv4/tcp_sack", "1\n"),
                    ("/proc/mounts", mounts),
                ],
                false,
            )
        };
        assert_eq!(node(rw)["net.core.somaxconn"].status, Status::Fail);
        let findings = node(ro);
        let f = &findings["net.core.somaxconn"];
        assert_eq!(
            (f.status, f.actual.as_str()),
            (Status::Skip, "128"),
            "{f:?}"
        );
        assert!(
            f.message.starts_with(
                "read-only here, so not judged (fail otherwise): /proc/sys is mounted read-only"
            ),
            "{}",
            f.message
        );
        assert_eq!(f.fix, "");
        assert_eq!(
            f.change,
            Some(Change::Sysctl {
                key: "net.core.somaxconn".into(),
                value: "4096".into()
            })
        );
        // What passes stays a pass; --persisted judges files, which a read-only /proc/sys
        // does not touch.
        assert_eq!(findings["net.ipv4.tcp_sack"].status, Status::Pass);
        let persisted = audit_node(&[(SOMAXCONN, "128\n"), ("/proc/mounts", ro)], true);
        assert_ne!(persisted["net.core.somaxconn"].status, Status::Skip);
    }

    #[test]
    fn live_values_are_checked_against_boot_files() {
        type Case<'a> = (&'a [(&'a str, &'a str)], Status, &'a str, Option<&'a str>);
        let cases: &[Case] = &[
            // right live, no file, and no known kernel default (128 before 5.4): left to
            // `audit --persisted` rather than warning on every default
            (&[(SOMAXCONN, "4096\n")], Status::Pass, "", None),
            (
                &[(SOMAXCONN, "4096\n"), (OURS, "net.core.somaxconn = 4096\n")],
                Status::Pass,
                "",
                None,
            ),
            // a later user file sets it back at boot
            (
                &[
                    (SOMAXCONN, "4096\n"),
                    (OURS, "net.core.somaxconn = 4096\n"),
                    ("/etc/sysctl.d/99-user.conf", "net.core.somaxconn = 128\n"),
                ],
                Status::Warn,
                "at boot /etc/sysctl.d/99-user.conf:1 sets net.core.somaxconn = 128",
                Some("4096"),
            ),
            // a file after gputune's (here the distributions' link to /etc/sysctl.conf)
            (
                &[
                    (SOMAXCONN, "4096\n"),
                    (OURS, "net.core.somaxconn = 4096\n"),
                    ("/etc/sysctl.d/99-sysctl.conf", "net.core.somaxconn=10\n"),
                ],
                Status::Warn,
                "/etc/sysctl.d/99-sysctl.conf:1",
                Some("4096"),
            ),
            // persisted but not live
            (
                &[
                    (SOMAXCONN, "128\n"),
                    ("/usr/lib/sysctl.d/50-x.conf", "net.core.somaxconn = 8192\n"),
                ],
                Status::Fail,
                "/usr/lib/sysctl.d/50-x.conf:1 sets net.core.somaxconn = 8192 for boot but it is not live",
                Some("4096"),
            ),
        ];
        for (files, status, message, change) in cases {
            let findings = audit_node(files, false);
            let f = &findings["net.core.somaxconn"];
            assert_eq!(f.status, *status, "{files:?}: {f:?}");
            assert!(f.message.contains(message), "{files:?}: {}", f.message);
            let want = change.map(|v| Change::Sysctl {
                key: "net.core.somaxconn".into(),
                value: v.into(),
            });
            assert_eq!(f.change, want, "{files:?}");
        }
    }

    #[test]
    fn known_kernel_defaults_decide_what_a_reboot_loses() {
        let fin = "/proc/sys/net/ipv4/tcp_fin_timeout";
        let sack = "/proc/sys/net/ipv4/tcp_sack";
        let find = |findings: &BTreeMap<String, Finding>, id: &str| findings[id].clone();

        // Live: fin_timeout 30 is right, but the kernel default 60 comes back at reboot.
        let live = audit_node(&[(fin, "30\n"), (sack, "1\n")], false);
        let f = find(&live, "net.ipv4.tcp_fin_timeout");
        assert_eq!(f.status, Status::Warn, "{f:?}");
        assert!(f.message.contains("kernel default `60`"), "{}", f.message);
        assert_eq!(
            f.change,
            Some(Change::Sysctl {
                key: "net.ipv4.tcp_fin_timeout".into(),
                value: "30".into()
            })
        );
        // sack's default 1 passes: nothing is lost at reboot.
        assert_eq!(find(&live, "net.ipv4.tcp_sack").status, Status::Pass);

        // Persisted, on an image with no files: the defaults are judged.
        let image = audit_node(&[], true);
        let f = find(&image, "net.ipv4.tcp_fin_timeout");
        assert_eq!(
            (f.status, f.actual.as_str()),
            (Status::Fail, "60 (kernel default)"),
            "{f:?}"
        );
        assert!(f.fix.contains("net.ipv4.tcp_fin_timeout = 30"), "{}", f.fix);
        let f = find(&image, "net.ipv4.tcp_sack");
        assert_eq!(
            (f.status, f.actual.as_str()),
            (Status::Pass, "1 (kernel default)"),
            "{f:?}"
        );
    }

    #[test]
    fn persisted_audits_judge_the_files() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, Status, &'a str);
        let cases: &[Case] = &[
            (
                &[(OURS, "net.core.somaxconn = 64M\n")],
                "net.core.somaxconn",
                Status::Fail,
                "which the kernel rejects",
            ),
            (
                &[(OURS, "net.ipv4.tcp_fin_timeout = +5\n")],
                "net.ipv4.tcp_fin_timeout",
                Status::Fail,
                "systemd-sysctl fails to set it",
            ),
            (
                &[(OURS, "net.core.somaxconn = 010000\n")],
                "net.core.somaxconn",
                Status::Pass,
                "net.core.somaxconn = 4096",
            ),
            (
                &[(SOMAXCONN, "128\n"), (OURS, "net.core.somaxconn = 4096\n")],
                "net.core.somaxconn",
                Status::Pass,
                "at boot /etc/sysctl.d/90-gputune.conf:1",
            ),
            // no file, no known default (128 before 5.4, 4096 since): the kernel decides
            (
                &[],
                "net.core.somaxconn",
                Status::Warn,
                "sets net.core.somaxconn: the running kernel will decide",
            ),
            // a known default that fails carries the change that persists the fix
            (
                &[],
                "net.ipv4.tcp_rmem.max",
                Status::Fail,
                "no sysctl.d file sets net.ipv4.tcp_rmem: after a reboot the kernel default applies, `4096 131072 6291456`",
            ),
            (
                &[(SOMAXCONN, "4096\n")],
                "net.core.somaxconn",
                Status::Warn,
                "passes only while the default is `4096`",
            ),
            (
                &[(SOMAXCONN, "128\n")],
                "net.core.somaxconn",
                Status::Fail,
                "no sysctl.d file sets",
            ),
            (
                &[(
                    "/run/sysctl.d/x.conf",
                    "net.ipv4.tcp_rmem = 4096 131072 16777216\n",
                )],
                "net.ipv4.tcp_rmem.max",
                Status::Pass,
                "/run/sysctl.d/x.conf:1",
            ),
            (
                &[(
                    "/etc/sysctl.d/x.conf",
                    "net.ipv4.tcp_rmem = 4096 131072 6291456\n",
                )],
                "net.ipv4.tcp_rmem.max",
                Status::Fail,
                "/etc/sysctl.d/x.conf:1",
            ),
        ];
        for (files, id, status, message) in cases {
            let findings = audit_node(files, true);
            let f = &findings[*id];
            assert_eq!(f.status, *status, "{files:?}: {f:?}");
            assert!(f.message.contains(message), "{files:?}: {}", f.message);
        }
        let tcp_rmem = audit_node(&[], true);
        let f = &tcp_rmem["net.ipv4.tcp_rmem.max"];
        assert_eq!(
            f.change,
            Some(Change::Sysctl {
                key: "net.ipv4.tcp_rmem".into(),
                value: "4096 131072 16777216".into()
            })
        );
        assert!(
            f.fix.contains("net.ipv4.tcp_rmem = 4096 131072 16777216"),
            "{}",
            f.fix
        );
        let unset = audit_node(&[], true);
        assert_eq!(
            unset["net.core.somaxconn"].change,
            Some(Change::Sysctl {
                key: "net.core.somaxconn".into(),
                value: "4096".into()
            })
        );
    }

    #[test]
    fn an_absent_init_namespace_limit_points_to_the_host() {
        let tree = Tree::with(&[(SOMAXCONN, "4096\n")]);
        let profile = tree.profile(
            "/p.toml",
            "description = \"t\"\n[network]\n\"net.core.rmem_max\" = { min = 16777216 }\n\"net.ipv4.tcp_sack\" = { equals = 1 }\n",
        );
        let root = tree.root();
        let probes = Probes::for_root(&root);
        let options = AuditOptions::default();
        let findings = crate::testing::audit(&root, &profile, &options, probes, Area::Network);
        let rmem = &findings["net.core.rmem_max"];
        assert_eq!(rmem.status, Status::Skip, "{rmem:?}");
        assert!(
            rmem.message
                .contains("belongs to the init network namespace"),
            "{}",
            rmem.message
        );
        let sack = &findings["net.ipv4.tcp_sack"];
        assert_eq!(sack.status, Status::Skip, "{sack:?}");
        assert!(!sack.message.contains("namespace"), "{}", sack.message);
    }

    #[test]
    fn live_fixes_are_sysctl_lines_and_a_vector_short_of_numbers_is_an_error() {
        let rmem = "/proc/sys/net/ipv4/tcp_rmem";
        let findings = audit_node(
            &[(SOMAXCONN, "128\n"), (rmem, "4096 131072 6291456\n")],
            false,
        );
        let f = &findings["net.core.somaxconn"];
        assert!(
            f.fix.contains("sysctl -w net.core.somaxconn=4096"),
            "{}",
            f.fix
        );
        let f = &findings["net.ipv4.tcp_rmem.max"];
        assert!(
            f.fix
                .contains("sysctl -w net.ipv4.tcp_rmem=\"4096 131072 16777216\""),
            "{}",
            f.fix
        );

        let short = audit_node(&[(rmem, "4096 131072\n")], false);
        let f = &short["net.ipv4.tcp_rmem.max"];
        assert_eq!(f.status, Status::Error, "{f:?}");
        assert!(f.message.contains("expected 3 numbers"), "{}", f.message);
    }
}
