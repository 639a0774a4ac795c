//! The limits, cgroup and firewall checks through the built binary on a fixture node: every
//! check appears under `--only` in all four report formats.

use serde_json::Value;

use crate::common::{fixture, text};

const IDS: &[(&str, &str, &str)] = &[
    ("limits", "ulimit.memlock", "skip"),
    ("limits", "ulimit.memlock.login", "warn"),
    ("limits", "ulimit.nofile", "skip"),
    ("limits", "ulimit.nofile.login", "pass"),
    ("limits", "ulimit.stack", "skip"),
    ("limits", "ulimit.stack.login", "fail"),
    ("limits", "dev_shm.size", "fail"),
    ("limits", "dev_shm.free", "skip"),
    ("limits", "logind.RemoveIPC", "pass"),
    ("cgroup", "cgroup.hierarchy", "pass"),
    ("cgroup", "cpu.max", "warn"),
    ("cgroup", "cpuset.gpus_without_local_cpus", "warn"),
    ("cgroup", "cpuset.gpus_without_local_memory", "warn"),
    ("cgroup", "memory.high", "warn"),
    ("cgroup", "pids.max", "warn"),
    ("firewall", "firewall.rendezvous_ports", "skip"),
    ("firewall", "firewall.nccl_ports", "skip"),
];

fn audit(format: &str) -> (Option<i32>, String) {
    let out = crate::common::gputune()
        .args([
            "audit",
            "--profile",
            "ddp-infiniband",
            "--only",
            "limits,cgroup,firewall",
        ])
        .args(["--format", format, "--root"])
        .arg(fixture("node"))
        // The table lists passing checks only when asked.
        .args(if format == "table" {
            &["--verbose"][..]
        } else {
            &[]
        })
        .output()
        .unwrap();
    (out.status.code(), text(&out.stdout))
}

#[test]
fn json_lists_every_check_of_the_three_areas() {
    let (code, stdout) = audit("json");
    assert_eq!(code, Some(1), "{stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    let got: Vec<(String, String, String)> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("area"), s("id"), s("status"))
        })
        .collect();
    let mut want: Vec<(String, String, String)> = IDS
        .iter()
        .map(|(a, i, s)| (a.to_string(), i.to_string(), s.to_string()))
        .collect();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    want.sort();
    assert_eq!(got_sorted, want, "{stdout}");
    // Every failure says how to fix it.
    for f in doc["findings"].as_array().unwrap() {
        if f["status"] == "fail" {
            assert_ne!(f["fix"], "", "{f:#}");
        }
    }
}

#[test]
fn table_junit_and_prometheus_carry_the_same_checks() {
    for format in ["table", "junit", "prometheus"] {
        let (code, stdout) = audit(format);
        assert_eq!(code, Some(1), "{format}: {stdout}");
        for (area, id, _) in IDS {
            let needle = match format {
                "prometheus" => format!("{{area=\"{area}\",id=\"{id}\","),
                "junit" => format!("name=\"{id}\""),
                _ => id.to_string(),
            };
            assert!(
                stdout.contains(&needle),
                "{format} lacks {needle}:\n{stdout}"
            );
        }
    }
}
