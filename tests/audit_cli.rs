//! `gputune audit` end to end on fixture roots: statuses, exit codes and every output format.

use crate::common;

use common::{assert_exit, audit_json, finding, fixture, gputune, gputune_words, temp_file};
use predicates::prelude::*;

const KERNEL_AREAS: &str = "network,memory";

/// Runs `gputune audit --only network,memory --root FIXTURE ARGS...`: exit code and stdout.
fn audit_text(fixture_name: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = gputune()
        .args(["audit", "--only", KERNEL_AREAS, "--root"])
        .arg(fixture(fixture_name))
        .args(args)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

#[test]
fn a_tuned_node_passes_and_exits_0() {
    let (code, doc) = audit_json("tuned-node", &["--only", KERNEL_AREAS]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["schema_version"], 2);
    assert_eq!(doc["profile"]["name"], "ddp-10gbe");
    assert_eq!(
        doc["profile"]["chain"],
        serde_json::json!(["base", "ddp-10gbe"])
    );
    assert!(
        doc["profile"]["chosen_by"]
            .as_str()
            .unwrap()
            .contains("eth0 at 10000 Mb/s")
    );
    assert_eq!(doc["host"]["hostname"], "tuned-node");
    let summary = &doc["summary"];
    assert_eq!(
        (summary["warned"].as_u64(), summary["failed"].as_u64()),
        (Some(0), Some(0)),
        "{summary}"
    );
    assert!(summary["passed"].as_u64().unwrap() >= 20);
    for f in doc["findings"].as_array().unwrap() {
        assert_eq!(f["status"], "pass", "{f}");
        assert_eq!(f["fix"], "", "{f}");
    }
}

#[test]
fn an_untuned_node_fails_with_expected_actual_why_and_fix() {
    let (code, doc) = audit_json("untuned-node", &["--only", KERNEL_AREAS]);
    assert_eq!(code, 1);
    assert_eq!(
        doc["profile"]["name"], "ddp-25gbe",
        "chosen from the 25 GbE link"
    );
    assert_eq!(doc["passed"], false);

    let rmem = finding(&doc, "net.core.rmem_max");
    assert_eq!(rmem["status"], "fail");
    // Typed beside the text, for scripts: the rule and the value in bytes, the severity.
    assert_eq!(rmem["expected_value"], serde_json::json!({"min": 33554432}));
    assert_eq!(rmem["actual_value"], 212992);
    assert_eq!(rmem["severity"], "fail");
    let thp = finding(&doc, "transparent_hugepage.enabled");
    assert_eq!(
        thp["expected_value"],
        serde_json::json!({"one_of": ["madvise", "never"]})
    );
    assert_eq!(thp["actual_value"], "always");
    assert_eq!(thp["severity"], "warn");
    assert_eq!(rmem["area"], "network");
    assert_eq!(rmem["expected"], ">= 33554432");
    assert_eq!(rmem["actual"], "212992");
    assert_eq!(rmem["fix"], "sysctl -w net.core.rmem_max=33554432");
    assert!(rmem["message"].as_str().unwrap().contains("NCCL"));
    assert_eq!(
        rmem["change"],
        serde_json::json!({"type": "sysctl", "key": "net.core.rmem_max", "value": "33554432"})
    );

    // Both judged parts of tcp_rmem share one fix that sets all three numbers.
    let fix = "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 33554432\"";
    assert_eq!(finding(&doc, "net.ipv4.tcp_rmem.max")["fix"], fix);
    assert_eq!(finding(&doc, "net.ipv4.tcp_rmem.default")["fix"], fix);
    assert_eq!(finding(&doc, "net.ipv4.tcp_rmem.default")["status"], "warn");

    let mtu = finding(&doc, "net.ipv4.tcp_mtu_probing");
    assert_eq!(mtu["status"], "skip");
    assert!(
        mtu["message"]
            .as_str()
            .unwrap()
            .contains("this kernel has no net.ipv4.tcp_mtu_probing")
    );

    // A malformed /proc value is an error finding, never a crash.
    let wmem = finding(&doc, "net.ipv4.tcp_wmem.max");
    assert_eq!(wmem["status"], "error");
    assert!(wmem["message"].as_str().unwrap().contains("`4096 16384`"));

    let swap = finding(&doc, "swap.devices");
    assert_eq!(
        (swap["status"].as_str(), swap["actual"].as_str()),
        (Some("warn"), Some("1 (8191 MiB: /dev/dm-1)"))
    );
    let thp = finding(&doc, "transparent_hugepage.enabled");
    assert_eq!(thp["actual"], "always");
    assert_eq!(thp["change"]["type"], "sysfs");
    assert_eq!(
        finding(&doc, "vm.swappiness")["fix"],
        "sysctl -w vm.swappiness=10"
    );

    let s = &doc["summary"];
    let total: u64 = ["passed", "warned", "failed", "skipped", "errors"]
        .iter()
        .map(|k| s[k].as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, doc["findings"].as_array().unwrap().len());
}

#[test]
fn the_table_groups_by_area_and_ends_with_the_summary() {
    let (code, text) = audit_text("untuned-node", &[]);
    assert_eq!(code, Some(1));
    assert!(text.contains("against profile ddp-25gbe"));
    assert!(text.contains("profile chosen from the node: fastest link ens1f0 at 25000 Mb/s"));
    let network = text
        .find("\nnetwork: 5 of 17 checks pass\n")
        .expect("network heading");
    let memory = text
        .find("\nmemory: 1 of 6 checks pass\n")
        .expect("memory heading");
    assert!(network < memory);
    assert!(text[network..memory].contains("net.core.rmem_max"));
    assert!(text[memory..].contains("vm.swappiness"));
    assert!(text.contains("\n       fix: sysctl -w net.core.rmem_max=33554432\n"));
    let last = text.lines().last().unwrap();
    assert_eq!(last, "6 passed, 10 warned, 4 failed, 1 skipped, 2 errors");
}

#[test]
fn junit_is_valid_xml_with_a_suite_per_area_and_a_case_per_check() {
    let (code, text) = audit_text("untuned-node", &["--format", "junit"]);
    assert_eq!(code, Some(1));
    let xml = roxmltree::Document::parse(&text).expect("valid XML");
    let root = xml.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suites: Vec<_> = root
        .children()
        .filter(|n| n.has_tag_name("testsuite"))
        .collect();
    let names: Vec<_> = suites
        .iter()
        .map(|s| s.attribute("name").unwrap())
        .collect();
    assert_eq!(names, ["network", "memory"]);
    let cases: Vec<_> = xml
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 23);
    let failures: Vec<_> = xml
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .collect();
    assert_eq!(failures.len(), 4);
    assert_eq!(root.attribute("failures"), Some("4"));
    assert_eq!(root.attribute("errors"), Some("2"));
    assert_eq!(root.attribute("skipped"), Some("1"));
    let rmem = cases
        .iter()
        .find(|c| c.attribute("name") == Some("net.core.rmem_max"))
        .unwrap();
    let failure = rmem.children().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(
        failure.attribute("message"),
        Some("expected >= 33554432, found 212992")
    );
    assert!(
        failure
            .text()
            .unwrap()
            .contains("fix: sysctl -w net.core.rmem_max=33554432")
    );
    // A suite's counts agree with its cases.
    for suite in suites {
        let n = suite
            .children()
            .filter(|c| c.has_tag_name("testcase"))
            .count();
        assert_eq!(suite.attribute("tests"), Some(n.to_string().as_str()));
    }
}

#[test]
fn strict_junit_turns_warnings_into_failures() {
    let (_, text) = audit_text("untuned-node", &["--format", "junit", "--strict"]);
    let xml = roxmltree::Document::parse(&text).unwrap();
    assert_eq!(xml.root_element().attribute("failures"), Some("14"));
}

#[test]
fn prometheus_output_is_well_formed_and_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gputune.prom");
    gputune()
        .args([
            "audit",
            "--only",
            KERNEL_AREAS,
            "--format",
            "prometheus",
            "--output",
        ])
        .arg(&path)
        .arg("--root")
        .arg(fixture("untuned-node"))
        .assert()
        .code(1)
        .stdout("");
    let text = std::fs::read_to_string(&path).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["gputune.prom"], "no temporary file is left behind");

    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            typed.insert(parts.next().unwrap().to_string());
            assert_eq!(parts.next(), Some("gauge"));
        } else if !line.starts_with("# HELP ") {
            assert!(is_sample_line(line), "malformed sample line: {line}");
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(typed.contains(name), "{name} has no TYPE line before it");
        }
    }
    assert!(text.contains(
        "gputune_check_status{area=\"network\",id=\"net.core.rmem_max\",mode=\"live\",profile=\"ddp-25gbe\"} 2\n"
    ));
    assert!(text.contains(
        "gputune_check_status{area=\"memory\",id=\"vm.swappiness\",mode=\"live\",profile=\"ddp-25gbe\"} 2\n"
    ));
    assert!(text.contains("gputune_checks{status=\"fail\"} 4\n"));
    assert!(text.contains("gputune_audit_passed 0\n"));
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("gputune_check_status{"))
            .count(),
        23
    );
}

/// True for `name{label="value",...} number`, the exposition format's sample line.
fn is_sample_line(line: &str) -> bool {
    {
        let (series, value) = match line.rsplit_once(' ') {
            Some(parts) => parts,
            None => return false,
        };
        let value_ok = value.parse::<f64>().is_ok();
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        let labels = &series[name_end..];
        let labels_ok = labels.is_empty()
            || (labels.starts_with('{')
                && labels.ends_with('}')
                && labels[1..labels.len() - 1].split("\",").all(|pair| {
                    let pair = pair.trim_end_matches('"');
                    matches!(pair.split_once("=\""), Some((k, _)) if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                }));
        value_ok && name_ok && labels_ok
    }
}

#[test]
fn strict_makes_warnings_fail() {
    let (_dir, profile) = temp_file(
        "picky.toml",
        "include = [\"ddp-10gbe\"]\n[memory]\n\"vm.swappiness\" = { max = 1, severity = \"warn\" }\n",
    );
    let run = |strict: bool| {
        let mut cmd = gputune();
        cmd.args([
            "audit",
            "--only",
            KERNEL_AREAS,
            "--format",
            "json",
            "--profile",
        ])
        .arg(&profile)
        .arg("--root")
        .arg(fixture("tuned-node"));
        if strict {
            cmd.arg("--strict");
        }
        cmd.output().unwrap().status.code()
    };
    assert_eq!(run(false), Some(0));
    assert_eq!(run(true), Some(1));
}

#[test]
fn only_limits_the_areas() {
    let (_, doc) = audit_json("untuned-node", &["--only", "memory"]);
    let areas: std::collections::BTreeSet<_> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["area"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(areas.into_iter().collect::<Vec<_>>(), ["memory"]);
}

#[test]
fn a_bad_profile_exits_2_naming_file_line_and_key() {
    let (_dir, profile) = temp_file(
        "typo.toml",
        "include = [\"base\"]\n\n[network]\n\"net.core.rmem_mx\" = { min = 1 }\n",
    );
    gputune()
        .args(["audit", "--profile"])
        .arg(&profile)
        .arg("--root")
        .arg(fixture("tuned-node"))
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains(format!(
            "{}:4: [network] net.core.rmem_mx: unknown key",
            profile.display()
        )));
}

#[test]
fn usage_errors_exit_2() {
    for (args, code, says) in [
        ("audit --only disks", 2, "disks"),
        (
            "audit --format yaml",
            2,
            "invalid value 'yaml' for '--format <FORMAT>'",
        ),
        (
            "audit --root /nonexistent/root",
            3,
            "--root /nonexistent/root",
        ),
    ] {
        let out = gputune_words(args).output().unwrap();
        let stderr = common::text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args}: {stderr}");
        assert!(stderr.contains(says), "{args}: {stderr}");
    }
    let unknown = gputune_words("audit --profile no-such-profile --root")
        .arg(fixture("tuned-node"))
        .output()
        .unwrap();
    assert_exit(&unknown, 2, "no profile named `no-such-profile`");
}

#[test]
fn the_root_can_come_from_the_environment() {
    let out = gputune()
        .env("GPUTUNE_ROOT", fixture("tuned-node"))
        .args(["audit", "--only", KERNEL_AREAS, "--format", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["host"]["hostname"], "tuned-node");
}

#[test]
fn an_unwritable_output_exits_3_and_names_the_path() {
    // Missing directories are created (issue 21); a file where one should be cannot be.
    let (_dir, flat) = temp_file("flat", "");
    let report = flat.join("report.json");
    gputune()
        .args(["audit", "--only", KERNEL_AREAS, "--output"])
        .arg(&report)
        .args(["--format", "json", "--root"])
        .arg(fixture("tuned-node"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains(report.to_str().unwrap()));
}
