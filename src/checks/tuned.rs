//! tuned (RHEL-family nodes) applies its profile's `[sysctl]` values when its service starts,
//! after systemd-sysctl: what boots is then tuned's value, not sysctl.d's. When tuned is
//! active (live) or enabled (files and images), every sysctl of the gputune profile that the
//! tuned profile sets to a failing value is a finding naming the tuned profile and its file.

use std::collections::BTreeMap;

use crate::finding::{Area, Check, Finding, Status};
use crate::host::{HostError, Root, sysctl};
use crate::profile::setting::Setting;

use super::Context;

/// Where tuned keeps profiles, in lookup order (user profiles win; tuned ≥ 2.23 moved both
/// under `profiles/`).
const PROFILE_DIRS: &[&str] = &[
    "/etc/tuned/profiles",
    "/etc/tuned",
    "/usr/lib/tuned/profiles",
    "/usr/lib/tuned",
];

/// How deep `include=` may nest before the profile is called broken.
const MAX_DEPTH: usize = 8;

/// One `[sysctl]` value of a tuned profile and the file that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TunedValue {
    pub value: String,
    pub file: String,
}

/// The tuned profile that applies on this root, and its merged `[sysctl]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tuned {
    pub profile: String,
    pub sysctl: BTreeMap<String, TunedValue>,
}

/// Why tuned's profile could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TunedError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("tuned profile `{0}` not found under {dirs}", dirs = PROFILE_DIRS.join(", "))]
    Missing(String),
    #[error("tuned profile `{0}`: include= nests deeper than {MAX_DEPTH} (a cycle?)")]
    TooDeep(String),
}

/// True when tuned will apply its profile: running now (live), or enabled at boot.
pub(crate) fn in_effect(root: &Root, live: bool) -> bool {
    if live {
        root.exists("/run/tuned/tuned.pid")
    } else {
        ["multi-user.target.wants", "graphical.target.wants"]
            .iter()
            .any(|t| root.exists(&format!("/etc/systemd/system/{t}/tuned.service")))
    }
}

/// The active tuned profile(s) (`/etc/tuned/active_profile`, space-separated, later wins),
/// merged; `None` when tuned is not in effect or no profile is active.
pub(crate) fn read(root: &Root, live: bool) -> Result<Option<Tuned>, TunedError> {
    if !in_effect(root, live) {
        return Ok(None);
    }
    let Some(active) = root.read_optional("/etc/tuned/active_profile")? else {
        return Ok(None);
    };
    let names: Vec<&str> = active.split_whitespace().collect();
    if names.is_empty() {
        return Ok(None);
    }
    let mut sysctl = BTreeMap::new();
    for name in &names {
        merge(root, name, 0, &mut sysctl)?;
    }
    Ok(Some(Tuned {
        profile: names.join(" "),
        sysctl,
    }))
}

fn merge(
    root: &Root,
    name: &str,
    depth: usize,
    into: &mut BTreeMap<String, TunedValue>,
) -> Result<(), TunedError> {
    if depth > MAX_DEPTH {
        return Err(TunedError::TooDeep(name.into()));
    }
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(TunedError::Missing(name.into()));
    }
    let mut found = None;
    for dir in PROFILE_DIRS {
        let file = format!("{dir}/{name}/tuned.conf");
        if let Some(text) = root.read_optional(&file)? {
            found = Some((file, text));
            break;
        }
    }
    let (file, text) = found.ok_or_else(|| TunedError::Missing(name.into()))?;
    let parsed = parse(&text);
    for parent in parsed.includes {
        merge(root, &parent, depth + 1, into)?;
    }
    for (key, value) in parsed.sysctl {
        into.insert(
            key,
            TunedValue {
                value,
                file: file.clone(),
            },
        );
    }
    Ok(())
}

/// What gputune needs of one tuned.conf: its `include=` parents and `[sysctl]` values.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub includes: Vec<String>,
    pub sysctl: Vec<(String, String)>,
}

/// Parses tuned's INI: `[section]`, `key=value`, `#` comments; values may be quoted.
pub(crate) fn parse(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim().trim_matches('"').trim());
        match section.as_str() {
            "main" if key == "include" => parsed.includes.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            ),
            "sysctl" => parsed
                .sysctl
                .push((key.to_string(), sysctl::normalize(value))),
            _ => {}
        }
    }
    parsed
}

/// Findings `tuned.KEY` for the profile's sysctl settings of `area` that tuned sets to a
/// value the profile fails; a tuned profile that cannot be read is an error finding.
pub(crate) fn conflicts(
    ctx: &Context,
    area: Area,
    settings: &[(&String, &Setting)],
) -> Vec<Finding> {
    let tuned = match ctx.tuned() {
        Ok(Some(t)) => t,
        Ok(None) => return Vec::new(),
        Err(e) => {
            return if area == Area::Network {
                vec![
                    Check::new("tuned.profile", area)
                        .expected("a readable tuned profile")
                        .error(e.to_string()),
                ]
            } else {
                Vec::new()
            };
        }
    };
    let mut out = Vec::new();
    for (key, setting) in settings {
        let name = sysctl::sysctl_of(key);
        let Some(set) = tuned.sysctl.get(name) else {
            continue;
        };
        // `>N` / `<N` only raise / only lower: N is what tuned guarantees at least / at most.
        let raw = set.value.trim_start_matches(['>', '<']);
        let actual = match sysctl::split_part(key) {
            Some((_, index)) => match raw.split_whitespace().nth(index) {
                Some(part) => part.to_string(),
                None => continue,
            },
            None => raw.to_string(),
        };
        let (status, problem) = setting.status_for(&actual);
        if status == Status::Pass {
            continue;
        }
        let why = format!(
            "tuned profile `{}` sets {name} = {} in {}; tuned applies it after systemd-sysctl, so tuned wins at boot over sysctl.d{}",
            tuned.profile,
            set.value,
            set.file,
            problem.map_or_else(String::new, |p| format!(" ({p})"))
        );
        let fix = format!(
            "tuned applies after systemd-sysctl and wins at boot: align it with gputune in a custom profile /etc/tuned/profiles/gputune/tuned.conf with `[main]` `include={}` and `[sysctl]` `{name}=<the profile's value>`, then `tuned-adm profile gputune` (or disable tuned); gputune does not edit tuned's profiles",
            tuned.profile
        );
        out.push(
            Check::new(format!("tuned.{key}"), area)
                .expected(setting.rule.describe())
                .why(why)
                .judge(
                    status,
                    format!("{actual} (tuned profile {})", tuned.profile),
                    fix,
                ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn parses_includes_and_sysctls() {
        let parsed = parse(
            "# c\n[main]\nsummary=x\ninclude=throughput-performance, network-latency\n[sysctl]\nnet.core.rmem_max=\"212992\"\nvm.swappiness = >10\n[cpu]\ngovernor=performance\n",
        );
        assert_eq!(
            parsed.includes,
            vec!["throughput-performance", "network-latency"]
        );
        assert_eq!(
            parsed.sysctl,
            vec![
                ("net.core.rmem_max".to_string(), "212992".to_string()),
                ("vm.swappiness".to_string(), ">10".to_string())
            ]
        );
        assert_eq!(parse(""), Parsed::default());
    }

    const WANTS: &str = "/etc/systemd/system/multi-user.target.wants/tuned.service";

    #[test]
    fn enabled_profiles_merge_children_over_parents() {
        let tree = Tree::with(&[
            (WANTS, ""),
            ("/etc/tuned/active_profile", "mine\n"),
            (
                "/usr/lib/tuned/throughput-performance/tuned.conf",
                "[sysctl]\nvm.swappiness=10\nnet.core.rmem_max=4194304\n",
            ),
            (
                "/etc/tuned/mine/tuned.conf",
                "[main]\ninclude=throughput-performance\n[sysctl]\nnet.core.rmem_max=1048576\n",
            ),
        ]);
        let root = tree.root();
        let tuned = read(&root, false).unwrap().unwrap();
        assert_eq!(tuned.profile, "mine");
        assert_eq!(tuned.sysctl["net.core.rmem_max"].value, "1048576");
        assert_eq!(
            tuned.sysctl["net.core.rmem_max"].file,
            "/etc/tuned/mine/tuned.conf"
        );
        assert_eq!(tuned.sysctl["vm.swappiness"].value, "10");
        // Not running: nothing applies live.
        assert_eq!(read(&root, true).unwrap(), None);
    }

    #[test]
    fn broken_profiles_are_errors() {
        let cycle = Tree::with(&[
            (WANTS, ""),
            ("/etc/tuned/active_profile", "a"),
            ("/etc/tuned/a/tuned.conf", "[main]\ninclude=a\n"),
        ]);
        assert!(matches!(
            read(&cycle.root(), false),
            Err(TunedError::TooDeep(_))
        ));
        let missing = Tree::with(&[(WANTS, ""), ("/etc/tuned/active_profile", "gone")]);
        assert!(matches!(
            read(&missing.root(), false),
            Err(TunedError::Missing(_))
        ));
        let disabled = Tree::with(&[("/etc/tuned/active_profile", "gone")]);
        assert_eq!(read(&disabled.root(), false).unwrap(), None);
    }
}
