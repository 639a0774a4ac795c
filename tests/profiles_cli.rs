//! `gputune profiles list | show`, and the shipped profiles themselves.

use crate::common;

use common::{assert_exit, fixture, gputune_words, put, text};

const SHIPPED: [&str; 7] = [
    "base",
    "single-node",
    "ddp-10gbe",
    "ddp-25gbe",
    "ddp-100gbe",
    "ddp-infiniband",
    "ddp-roce",
];

/// Runs `cmd`, which must succeed: its stdout.
fn stdout_of(cmd: &mut assert_cmd::Command) -> String {
    let out = cmd.output().unwrap();
    common::assert_success(&out);
    text(&out.stdout)
}

/// A root holding site profiles (name, content) in /etc/gputune/profiles.
fn site(profiles: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in profiles {
        put(
            dir.path(),
            &format!("etc/gputune/profiles/{name}.toml"),
            content,
        );
    }
    dir
}

#[test]
fn list_shows_every_shipped_profile_and_the_default() {
    let text = stdout_of(gputune_words("profiles list --root").arg(fixture("untuned-node")));
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
    let text = stdout_of(&mut gputune_words("profiles show ddp-100gbe"));
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
        let text = stdout_of(gputune_words("profiles show").arg(name));
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
    let root = site(&[
        (
            "ddp-10gbe",
            "description = \"site tuning\"\ninclude = [\"base\"]\n",
        ),
        (
            "lab",
            "description = \"lab nodes\"\ninclude = [\"ddp-10gbe\"]\n",
        ),
    ]);
    let text = stdout_of(gputune_words("profiles list --root").arg(root.path()));
    assert!(text.contains("site tuning"), "{text}");
    assert!(text.contains("lab nodes"), "{text}");
    assert_eq!(text.matches("ddp-10gbe ").count(), 1, "{text}");
}

#[test]
fn show_of_an_unknown_profile_exits_2() {
    let out = gputune_words("profiles show ddp-400gbe").output().unwrap();
    assert_exit(&out, 2, "no profile named `ddp-400gbe`");
}

#[test]
fn list_names_prints_built_in_and_site_names_one_per_line_for_completion() {
    let root = site(&[("lab", "description = \"lab nodes\"\ninclude = [\"base\"]\n")]);
    let names: Vec<String> =
        stdout_of(gputune_words("profiles list --names --root").arg(root.path()))
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

#[test]
fn a_misspelt_profile_name_or_key_is_answered_with_the_one_meant() {
    let root = site(&[
        ("our-cluster", "include = [\"ddp-25gbe\"]\n"),
        (
            "typo",
            "include = [\"base\"]\n\n[network]\n\"net.core.rmem_mx\" = { min = 1 }\n",
        ),
    ]);
    // A root audit accepts: an image with its os-release.
    put(root.path(), "etc/os-release", "ID=debian\n");
    let cases = [
        (
            "ddp-10gb",
            "no profile named `ddp-10gb` (did you mean `ddp-10gbe`? built-in: ",
        ),
        (
            "our-clustr",
            "no profile named `our-clustr` (did you mean `our-cluster`? ",
        ),
        (
            "typo",
            "typo.toml:4: [network] net.core.rmem_mx: unknown key (did you mean `net.core.rmem_max`? known in [network]: ",
        ),
        ("production", "no profile named `production` (built-in: "),
    ];
    for (name, says) in cases {
        for command in ["audit --profile", "profiles show"] {
            let out = gputune_words(command)
                .arg(name)
                .arg("--root")
                .arg(root.path())
                .output()
                .unwrap();
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {name}: {stderr}");
            assert!(stderr.contains(says), "{command} {name}: {stderr}");
        }
    }
}
