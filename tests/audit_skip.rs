//! Shaping checks to the site: `--skip ID` on audit, apply and health, and a site profile
//! that softens (`severity = "warn"`) or turns off (`severity = "off"`) what it inherits.

use crate::common;

use std::path::Path;

use common::{fixture, gputune, put, stdout_json, text};
use serde_json::Value;

/// A copy of the untuned fixture node (tests never write into fixtures), with `profiles`
/// (name, content) as site profiles.
fn node(profiles: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("untuned-node").join("."))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    for (name, content) in profiles {
        put(
            dir.path(),
            &format!("etc/gputune/profiles/{name}.toml"),
            content,
        );
    }
    dir
}

fn run(root: &Path, args: &[&str]) -> std::process::Output {
    gputune()
        .args(args)
        .arg("--root")
        .arg(root)
        .output()
        .unwrap()
}

/// `audit ARGS --format json` on `root`: exit code, document and stderr.
fn audit(root: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let mut all = vec!["audit", "--format", "json"];
    all.extend_from_slice(args);
    let out = run(root, &all);
    (out.status.code(), stdout_json(&out), text(&out.stderr))
}

#[test]
fn skip_reports_a_check_as_skipped_and_can_turn_the_verdict() {
    let root = node(&[]);
    let (code, doc, _) = audit(root.path(), &["--only", "memory"]);
    assert_eq!(code, Some(1), "vm.swappiness fails");
    let (code, doc_skipped, stderr) = audit(
        root.path(),
        &["--only", "memory", "--skip", "vm.swappiness"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr.matches("--skip").count(), 0, "{stderr}");
    let swap = common::finding(&doc_skipped, "vm.swappiness");
    assert_eq!(swap["status"], "skip");
    assert_eq!(swap["message"], "skipped by --skip");
    assert_eq!(swap["severity"], "off");
    assert_eq!(swap["fix"], "");
    assert!(swap.get("change").is_none(), "{swap}");
    // Nothing else moved.
    assert_eq!(
        common::findings(&doc).len(),
        common::findings(&doc_skipped).len()
    );
    assert_eq!(doc_skipped["summary"]["skipped"], 1);

    // An id covers its subjects; a typo is said, with the id meant.
    let (_, doc, stderr) = audit(
        root.path(),
        &[
            "--only",
            "network,memory",
            "--skip",
            "net.ipv4.tcp_wmem,vm.swapines",
        ],
    );
    for id in ["net.ipv4.tcp_wmem.default", "net.ipv4.tcp_wmem.max"] {
        assert_eq!(common::finding(&doc, id)["message"], "skipped by --skip");
    }
    assert!(
        stderr.contains(
            "--skip vm.swapines: no check of this run has this id (did you mean vm.swappiness?)"
        ),
        "{stderr}"
    );

    // The table says it too.
    let out = run(
        root.path(),
        &["audit", "--only", "memory", "--skip", "vm.swappiness"],
    );
    assert!(
        text(&out.stdout).contains(
            "  SKIP  vm.swappiness: expected <= 10, found -\n        skipped by --skip\n"
        ),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_skip_id_with_spaces_or_nothing_is_a_usage_error() {
    let root = node(&[]);
    for (bad, says) in [
        ("vm swappiness", "a check id has no spaces"),
        ("", "an empty check id"),
    ] {
        let out = run(root.path(), &["audit", "--skip", bad]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(stderr.contains("--skip"), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(
            stderr.contains("ids look like net.core.rmem_max"),
            "{stderr}"
        );
    }
}

#[test]
fn apply_plans_nothing_for_a_skipped_check_and_health_does_not_judge_it() {
    let root = node(&[]);
    let apply = |skip: &str| {
        run(
            root.path(),
            &[
                "apply",
                "--profile",
                "ddp-10gbe",
                "--dry-run",
                "--only",
                "network,memory",
                "--skip",
                skip,
            ],
        )
    };
    // The unreadable tcp_wmem stops apply until it is skipped.
    let out = apply("net.core.rmem_max");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("net.ipv4.tcp_wmem.max"));
    let out = apply("net.core.rmem_max,net.ipv4.tcp_wmem");
    let plan = text(&out.stdout);
    assert!(plan.contains("  vm.swappiness: 60 -> 10\n"), "{plan}");
    assert!(plan.contains("  net.core.wmem_max: "), "{plan}");
    assert!(!plan.contains("net.core.rmem_max"), "{plan}");

    let health = |extra: &[&str]| {
        let mut args = vec!["health", "--profile", "ddp-10gbe"];
        args.extend_from_slice(extra);
        text(&run(root.path(), &args).stdout)
    };
    let rmem = "ERROR: gputune: net.core.rmem_max: ";
    assert!(health(&[]).contains(rmem));
    let skipped = health(&["--skip", "net.core.rmem_max"]);
    assert!(!skipped.contains(rmem), "{skipped}");
    assert!(
        skipped.contains("ERROR: gputune: vm.swappiness: "),
        "{skipped}"
    );
}

const SITE: &str = r#"description = "our 25 GbE cluster"
include = ["ddp-25gbe"]

[network]
"net.core.rmem_max" = { severity = "warn", why = "our RTT is tiny" }
[memory]
"vm.swappiness" = { severity = "off" }
"#;

#[test]
fn a_site_profile_softens_and_turns_off_what_it_inherits() {
    let root = node(&[("site", SITE)]);
    let (_, doc, stderr) = audit(
        root.path(),
        &["--profile", "site", "--only", "network,memory"],
    );
    let rmem = common::finding(&doc, "net.core.rmem_max");
    assert_eq!(
        (rmem["status"].as_str(), rmem["severity"].as_str()),
        (Some("warn"), Some("warn")),
        "{stderr}"
    );
    // The rule is ddp-25gbe's, the reason the site's.
    assert_eq!(rmem["expected"], ">= 33554432");
    assert_eq!(rmem["message"], "our RTT is tiny");
    let swap = common::finding(&doc, "vm.swappiness");
    assert_eq!(swap["status"], "skip");
    assert_eq!(swap["severity"], "off");
    let site = root.path().join("etc/gputune/profiles/site.toml");
    assert_eq!(
        swap["message"],
        format!("turned off by profile site ({}:7)", site.display())
    );

    // apply leaves it alone; `profiles show` writes what resolved.
    let out = run(
        root.path(),
        &[
            "apply",
            "--profile",
            "site",
            "--dry-run",
            "--only",
            "memory",
        ],
    );
    assert!(
        !text(&out.stdout).contains("vm.swappiness"),
        "{}",
        text(&out.stdout)
    );
    let shown = text(&run(root.path(), &["profiles", "show", "site"]).stdout);
    assert!(
        shown.contains("\"vm.swappiness\" = { max = 10, severity = \"off\" }  # "),
        "{shown}"
    );
    assert!(
        shown.contains("\"net.core.rmem_max\" = { min = 33554432, severity = \"warn\", why = \"our RTT is tiny\" }"),
        "{shown}"
    );
}

#[test]
fn a_severity_without_anything_to_change_names_the_file_line_and_key() {
    let cases = [
        (
            "[network]\n\"net.ipv4.tcp_rmem.min\" = { severity = \"warn\" }\n",
            ":2: [network] net.ipv4.tcp_rmem.min: severity `warn` alone changes a setting an included profile makes",
        ),
        (
            "include = [\"base\"]\n[memory]\n\"vm.swappiness\" = { max = 5, severity = \"never\" }\n",
            ":3: [memory] vm.swappiness: severity `never` is not `fail`, `warn` or `off`",
        ),
        (
            "[memory]\n\"vm.swappiness\" = { }\n",
            ":2: [memory] vm.swappiness: no rule: give one of equals, min, max, one_of or version",
        ),
    ];
    for (content, says) in cases {
        let root = node(&[("bad", content)]);
        let out = run(root.path(), &["audit", "--profile", "bad"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("bad.toml"), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    // Off needs no rule: nothing to judge by is nothing to judge.
    let root = node(&[(
        "quiet",
        "include = [\"base\"]\n[network]\n\"net.ipv4.tcp_rmem.min\" = { severity = \"off\" }\n",
    )]);
    let (code, _, stderr) = audit(root.path(), &["--profile", "quiet", "--only", "network"]);
    assert!(matches!(code, Some(0 | 1)), "{stderr}");
}
