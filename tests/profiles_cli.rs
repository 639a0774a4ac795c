//! `gputune profiles list | show`, and the shipped profiles themselves.

use crate::common;

use common::{fixture, gputune};
use predicates::prelude::*;

const SHIPPED: [&str; 7] = [
    "base",
    "single-node",
    "ddp-10gbe",
    "ddp-25gbe",
    "ddp-100gbe",
    "ddp-infiniband",
    "ddp-roce",
];

#[test]
fn list_shows_every_shipped_profile_and_the_default() {
    let out = gputune()
        .args(["profiles", "list", "--root"])
        .arg(fixture("untuned-node"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for name in SHIPPED {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(name)),
            "{name} missing:\n{text}"
        );
    }
    assert!(text.contains("Default for this node: ddp-25gbe"));
}

#[test]
fn show_prints_the_resolved_profile_with_origins() {
    let out = gputune()
        .args(["profiles", "show", "ddp-100gbe"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("merged from: base -> ddp-10gbe -> ddp-25gbe -> ddp-100gbe"));
    // The child's value wins, and says where it came from.
    assert!(text.contains("\"net.core.rmem_max\" = { min = 134217728, severity = \"fail\" }  # profiles/ddp-100gbe.toml:"), "{text}");
    // Inherited values keep their origin.
    assert!(
        text.contains(
            "\"vm.swappiness\" = { max = 10, severity = \"fail\" }  # profiles/base.toml:"
        ),
        "{text}"
    );
}

#[test]
fn buffer_minimums_grow_with_link_speed() {
    let rmem = |name: &str| -> u64 {
        let out = gputune().args(["profiles", "show", name]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("\"net.core.rmem_max\""))
            .unwrap_or_else(|| panic!("{name} has no rmem_max"));
        line.split("min = ")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(rmem("ddp-10gbe"), 16777216);
    assert!(rmem("ddp-10gbe") < rmem("ddp-25gbe") && rmem("ddp-25gbe") < rmem("ddp-100gbe"));
}

#[test]
fn site_profiles_override_built_in_ones_under_the_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc/gputune/profiles")).unwrap();
    std::fs::write(
        dir.path().join("etc/gputune/profiles/ddp-10gbe.toml"),
        "description = \"site tuning\"\ninclude = [\"base\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("etc/gputune/profiles/lab.toml"),
        "description = \"lab nodes\"\ninclude = [\"ddp-10gbe\"]\n",
    )
    .unwrap();
    let out = gputune()
        .args(["profiles", "list", "--root"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("site tuning"), "{text}");
    assert!(text.contains("lab nodes"), "{text}");
    assert_eq!(text.matches("ddp-10gbe ").count(), 1, "{text}");
}

#[test]
fn show_of_an_unknown_profile_exits_2() {
    gputune()
        .args(["profiles", "show", "ddp-400gbe"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no profile named `ddp-400gbe`"));
}

#[test]
fn list_names_prints_built_in_and_site_names_one_per_line_for_completion() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc/gputune/profiles")).unwrap();
    std::fs::write(
        dir.path().join("etc/gputune/profiles/lab.toml"),
        "description = \"lab nodes\"\ninclude = [\"base\"]\n",
    )
    .unwrap();
    let out = gputune()
        .args(["profiles", "list", "--names", "--root"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let mut want: Vec<String> = SHIPPED.iter().map(|s| s.to_string()).collect();
    want.push("lab".into());
    for name in &want {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    assert_eq!(names.len(), want.len(), "{names:?}");
}
