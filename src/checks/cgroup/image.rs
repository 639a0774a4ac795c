//! The cgroup area in an image: no cgroup exists until the image boots, so the profile's
//! `[job] slice` is judged from the unit files systemd will load for it (and for its parent
//! slices: `a-b.slice` runs inside `a.slice`, and the tightest limit wins, as in live mode).
//! Everything about a running process is skipped.

use crate::finding::{Area, Change, Check, Finding, Remedy};
use crate::image::NO_KERNEL;
use crate::profile::amount::Amount;
use crate::profile::setting::Setting;

use super::super::{Context, by_rule, setting_check};
use super::hierarchy::lineage;
use super::units::{self, Assignment, Value};

/// The drop-in `gputune apply` writes for a slice; a drop-in sorting after it wins over it.
const OWN_DROP_IN: &str = "90-gputune.conf";

pub(crate) fn audit(ctx: &Context, keys: &[(&String, &Setting)]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let process = match &ctx.options.cgroup {
        Some(given) => format!("--cgroup {given}"),
        None => "this process's cgroup".into(),
    };
    for (key, setting) in keys {
        let reason = if key.as_str() == "cgroup.hierarchy" {
            format!("{NO_KERNEL} (the hierarchy is chosen at boot)")
        } else {
            format!("{NO_KERNEL} ({process} exists only on a running node)")
        };
        findings.push(setting_check(ctx, Area::Cgroup, key, setting).skip(reason));
    }
    let Some(slice) = &ctx.profile.job.slice else {
        return findings;
    };
    for (key, setting) in keys {
        match units::property_of(key) {
            Some(property) => findings.push(slice_finding(ctx, slice, key, property, setting)),
            None if key.starts_with("cpuset.") => {
                findings.push(slice_check(ctx, slice, key, setting).skip(format!(
                    "{NO_KERNEL} (a cpuset is judged against the GPUs of a running node)"
                )))
            }
            None => {}
        }
    }
    findings
}

/// The tightest value among the lineage and where it was set.
enum Judged {
    Amount(Amount, Option<(String, Assignment)>),
    Relative(String, String, Assignment),
}

/// The check of setting `key` for the profile's slice (`memory.max@training.slice`).
fn slice_check(ctx: &Context, slice: &str, key: &str, setting: &Setting) -> Check {
    setting_check(ctx, Area::Cgroup, key, setting).suffixed(&format!("@{slice}"))
}

/// Setting `key` of the slice, from the unit files of its lineage.
fn slice_finding(
    ctx: &Context,
    slice: &str,
    key: &str,
    property: &str,
    setting: &Setting,
) -> Finding {
    let check = &slice_check(ctx, slice, key, setting);
    let mut judged = Judged::Amount(Amount::Unlimited, None);
    for unit in lineage(slice) {
        let settings = match units::slice_settings(ctx.root, &unit) {
            Ok(s) => s,
            Err(e) => return check.error(e.to_string()),
        };
        let Some(at) = settings.get(property) else {
            continue;
        };
        let value = match units::parse(property, &at.value) {
            Ok(v) => v,
            Err(e) => {
                return check.error(format!("{}:{}: {e}", at.file, at.line));
            }
        };
        match (value, &judged) {
            (Value::Relative(what), _) => judged = Judged::Relative(what, unit, at.clone()),
            (Value::Amount(a), Judged::Amount(best, _)) if a < *best => {
                judged = Judged::Amount(a, Some((unit, at.clone())));
            }
            _ => {}
        }
    }
    let label = format!("slice {slice} as the image boots it");
    let (amount, set) = match judged {
        Judged::Relative(what, unit, at) => {
            let parent = if unit == slice {
                String::new()
            } else {
                format!(", on parent slice {unit}")
            };
            return check
                .clone()
                .why(format!(
                    "cannot tell: the limit is {what}, which only the running node knows; the running system decides"
                ))
                .warn(
                    format!(
                        "{what} ({property}={} at {}:{}{parent}), {label}",
                        at.value, at.file, at.line
                    ),
                    format!(
                        "to judge it here, replace {property}={} at {}:{} with an absolute value ({})",
                        at.value,
                        at.file,
                        at.line,
                        setting.rule.describe()
                    ),
                );
        }
        Judged::Amount(amount, set) => (amount, set),
    };
    let shown = super::show(key, amount);
    let actual = match &set {
        Some((unit, at)) if unit == slice => {
            format!(
                "{shown} ({property}={} at {}:{})",
                at.value, at.file, at.line
            )
        }
        Some((unit, at)) => format!(
            "{shown} ({property}={} at {}:{}, on parent slice {unit})",
            at.value, at.file, at.line
        ),
        None => format!("{shown} (no unit file sets {property}=: systemd's default, no limit)"),
    };
    let judged_text = amount.to_string();
    by_rule(
        check,
        setting,
        &judged_text,
        format!("{actual}, {label}"),
        || {
            let wanted = Amount::parse(&setting.rule.target(&judged_text)?).ok()?;
            let value = match (key, wanted) {
                ("cpu.max", Amount::Unlimited) => "max 100000".to_string(),
                ("cpu.max", Amount::Finite(m)) => format!("{} 100000", m * 100),
                (_, Amount::Unlimited) => "max".into(),
                (_, Amount::Finite(n)) => n.to_string(),
            };
            let unit = set.as_ref().map_or(slice, |(u, _)| u.as_str());
            let directive = super::systemd_property(key, &value);
            let drop_in = format!("/etc/systemd/system/{unit}.d/{OWN_DROP_IN}");
            Some(match &set {
                // A drop-in that sorts after gputune's would still win over it: edit that one.
                Some((_, at)) if sorts_after_own(&at.file) => {
                    Remedy::by_hand(format!("set {directive} at {}:{}", at.file, at.line))
                }
                _ => Remedy::applied(
                    format!("add {directive} under [Slice] in {drop_in}"),
                    Change::Cgroup {
                        slice: unit.to_string(),
                        key: key.to_string(),
                        value,
                    },
                ),
            })
        },
    )
}

/// True for a drop-in whose name sorts after gputune's, so its assignments win.
fn sorts_after_own(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    file.contains(".slice.d/") && name > OWN_DROP_IN
}
