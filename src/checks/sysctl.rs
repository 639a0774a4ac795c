//! Judging profile settings that are kernel sysctls, shared by the network and memory areas.
//! Multi-part sysctls (`net.ipv4.tcp_rmem`) are judged part by part, and every failing part
//! of one sysctl shares a single fix that sets all of its parts at once.

use std::collections::BTreeMap;

use crate::finding::{Area, Change, Finding, Status};
use crate::host::sysctl::{self, Vector};
use crate::profile::setting::Setting;

use super::Context;

/// Findings for every setting of `area` whose key is a sysctl (`is_sysctl`).
pub fn audit(ctx: &Context, area: Area, is_sysctl: impl Fn(&str) -> bool) -> Vec<Finding> {
    let settings: Vec<(&String, &Setting)> = ctx
        .profile
        .area(area)
        .filter(|(k, _)| is_sysctl(k))
        .collect();

    // Read each sysctl once, and work out the value every part-wise fix should set.
    let mut values: BTreeMap<String, Result<Option<String>, String>> = BTreeMap::new();
    for (key, _) in &settings {
        let name = sysctl_name(key);
        values
            .entry(name.to_string())
            .or_insert_with(|| sysctl::read(ctx.root, name).map_err(|e| e.to_string()));
    }
    let targets = vector_targets(&settings, &values);

    settings
        .iter()
        .map(|(key, setting)| {
            let name = sysctl_name(key);
            let expected = setting.rule.describe();
            let why = super::why(ctx, area, key);
            match &values[name] {
                Err(e) => Finding::error(key.as_str(), area, expected, e.clone()),
                Ok(None) => Finding::skip(
                    key.as_str(),
                    area,
                    expected,
                    format!(
                        "this kernel has no {name} ({} is absent)",
                        sysctl::host_path(name)
                    ),
                ),
                Ok(Some(value)) => judge(key, area, setting, name, value, targets.get(name), why),
            }
        })
        .collect()
}

/// The sysctl a profile key reads: the key itself, or the vector it names a part of.
fn sysctl_name(key: &str) -> &str {
    sysctl::split_part(key).map_or(key, |(v, _)| v.key)
}

fn judge(
    key: &str,
    area: Area,
    setting: &Setting,
    name: &str,
    value: &str,
    vector_target: Option<&String>,
    why: String,
) -> Finding {
    let part = sysctl::split_part(key);
    let actual = match part {
        Some((vector, index)) => match part_of(value, vector, index) {
            Ok(p) => p,
            Err(e) => return Finding::error(key, area, setting.rule.describe(), e),
        },
        None => value.to_string(),
    };
    let (status, problem) = setting.status_for(&actual);
    let mut finding = Finding {
        id: key.to_string(),
        area,
        status,
        expected: setting.rule.describe(),
        actual: actual.clone(),
        message: problem.map_or(why, |p| format!("{name}: {p}")),
        fix: String::new(),
        change: None,
    };
    if matches!(status, Status::Fail | Status::Warn) {
        let target = match part {
            Some(_) => vector_target.cloned(),
            None => setting.rule.target(&actual),
        };
        if let Some(target) = target {
            finding.fix = fix_line(name, &target);
            finding.change = Some(Change::Sysctl {
                key: name.to_string(),
                value: target,
            });
        }
    }
    finding
}

/// `sysctl -w key=value`, quoting values with spaces the way a shell needs.
pub fn fix_line(key: &str, value: &str) -> String {
    if value.contains(' ') {
        format!("sysctl -w {key}=\"{value}\"")
    } else {
        format!("sysctl -w {key}={value}")
    }
}

/// Part `index` of a vector sysctl's value, or why the value is malformed.
fn part_of(value: &str, vector: &Vector, index: usize) -> Result<String, String> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    if parts.len() != vector.parts.len() || parts.iter().any(|p| p.parse::<i64>().is_err()) {
        return Err(format!(
            "{} reads `{value}`, expected {} numbers ({})",
            vector.key,
            vector.parts.len(),
            vector.parts.join(", ")
        ));
    }
    Ok(parts[index].to_string())
}

/// For each vector sysctl, the full value with every part the profile judges moved to
/// where its rule wants it; parts that need no change keep their current value.
fn vector_targets(
    settings: &[(&String, &Setting)],
    values: &BTreeMap<String, Result<Option<String>, String>>,
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
