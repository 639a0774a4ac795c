//! `gputune health` on fixture roots and on the live node with a hung `nft`, and
//! `gputune fleet` on reports of several fixture roots with different host names.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{fixture, gputune, text};

#[test]
fn health_prints_one_greppable_line_per_failing_check() {
    let out = gputune()
        .args(["health", "--profile", "ddp-10gbe", "--root"])
        .arg(fixture("untuned-node"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ERROR: gputune: net.core.rmem_max: ")
                && l.contains("(want >= 16777216)")),
        "{stdout}"
    );
    assert!(
        stdout.lines().all(|l| l.starts_with("ERROR: gputune: ")),
        "{stdout}"
    );

    // A tuned node is silent, like NHC.
    let out = gputune()
        .args(["health", "--profile", "ddp-10gbe", "--root"])
        .arg(fixture("tuned-node"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn health_speaks_node_problem_detector() {
    let npd = |root: &str, profile: &str| {
        let out = gputune()
            .args(["health", "--format", "npd", "--profile", profile, "--root"])
            .arg(fixture(root))
            .output()
            .unwrap();
        (out.status.code(), text(&out.stdout))
    };
    let (code, message) = npd("untuned-node", "ddp-10gbe");
    assert_eq!(code, Some(1), "{message}");
    assert!(message.starts_with("gputune: ") && message.trim_end().chars().count() <= 80);
    assert_eq!(message.lines().count(), 1);
    let (code, message) = npd("tuned-node", "ddp-10gbe");
    assert_eq!(code, Some(0), "{message}");
    // Could not tell (here: an unknown profile) is "unknown", 2, with a message.
    let (code, message) = npd("tuned-node", "no-such-profile");
    assert_eq!(code, Some(2), "{message}");
    assert!(message.contains("no-such-profile"), "{message}");
}

/// A `nft` (and `iptables-*-save`) that never returns: the firewall area is abandoned at the
/// health limit with an error naming it, the program is killed, and health still answers.
#[test]
fn a_hung_nft_becomes_an_error_naming_the_firewall_check() {
    let stubs = tempfile::tempdir().unwrap();
    let pids = stubs.path().join("pids");
    for tool in [
        "nft",
        "iptables-save",
        "iptables-legacy-save",
        "iptables-nft-save",
        "ip6tables-save",
    ] {
        let path = stubs.path().join(tool);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho $$ >> {}\nexec sleep 1000\n",
                pids.display()
            ),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    let path = format!(
        "{}:{}",
        stubs.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let start = Instant::now();
    let out = gputune()
        .args(["health", "--timeout", "5"])
        .env("PATH", path)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ERROR: gputune: firewall: ")
                && l.contains("did not finish within ")
                && l.contains("(hung)")),
        "{stdout}"
    );
    // The stub really ran and was killed, not left behind.
    let started = std::fs::read_to_string(&pids).unwrap_or_default();
    assert!(!started.trim().is_empty(), "the stub nft never ran");
    for pid in started.split_whitespace() {
        let proc_dir = Path::new("/proc").join(pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while proc_dir.exists()
            && !std::fs::read_to_string(proc_dir.join("stat"))
                .unwrap_or_default()
                .contains(") Z")
        {
            assert!(Instant::now() < deadline, "stub {pid} still runs");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A copy of a fixture root under another host name (and optionally kernel).
fn node(dir: &Path, from: &str, host: &str, kernel: Option<&str>) -> std::path::PathBuf {
    let root = dir.join(host);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture(from))
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(root.join("proc/sys/kernel/hostname"), format!("{host}\n")).unwrap();
    if let Some(kernel) = kernel {
        std::fs::write(
            root.join("proc/sys/kernel/osrelease"),
            format!("{kernel}\n"),
        )
        .unwrap();
    }
    root
}

fn audit_into(root: &Path, report: &Path) {
    let out = gputune()
        .args([
            "audit",
            "--profile",
            "ddp-10gbe",
            "--format",
            "json",
            "--root",
        ])
        .arg(root)
        .arg("--output")
        .arg(report)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn fleet_names_the_odd_node_out() {
    let dir = tempfile::tempdir().unwrap();
    let reports = dir.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    let roots = [
        node(dir.path(), "tuned-node", "gpu01", None),
        node(dir.path(), "tuned-node", "gpu02", None),
        node(dir.path(), "tuned-node", "gpu03", Some("6.8.0-31-generic")),
        node(dir.path(), "untuned-node", "gpu04", None),
    ];
    for root in &roots {
        let name = root.file_name().unwrap().to_string_lossy().into_owned();
        audit_into(root, &reports.join(format!("{name}.json")));
    }

    let out = gputune().arg("fleet").arg(&reports).output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("gputune fleet: 4 nodes"), "{stdout}");
    // The kernel of gpu03 and everything of gpu04 differ from the majority.
    let kernel = stdout
        .lines()
        .position(|l| l.contains("fact:kernel"))
        .unwrap();
    assert!(
        stdout
            .lines()
            .nth(kernel)
            .unwrap()
            .contains("6.8.0-45-generic on 2 node(s)"),
        "{stdout}"
    );
    let rmem = stdout
        .lines()
        .position(|l| l.contains("net.core.rmem_max (network): 16777216 [pass] on 3 node(s)"));
    let rmem = rmem.unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        stdout
            .lines()
            .nth(rmem + 1)
            .unwrap()
            .trim_start()
            .starts_with("gpu04: "),
        "{stdout}"
    );
    let failures = stdout.split("Failures per node:").nth(1).unwrap();
    assert!(
        failures.contains("gpu04 (") && !failures.contains("gpu01"),
        "{stdout}"
    );

    // JSON, and the same reports as a pdsh stream (prefixed, interleaved by line).
    let out = gputune()
        .args(["fleet", "--format", "json"])
        .arg(&reports)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["passed"], false);
    assert_eq!(doc["failures"][0]["node"], "gpu04");

    let mut stream = String::new();
    let bodies: Vec<(String, String)> = ["gpu01", "gpu02", "gpu04"]
        .iter()
        .map(|h| {
            let body = std::fs::read_to_string(reports.join(format!("{h}.json"))).unwrap();
            (h.to_string(), body)
        })
        .collect();
    let longest = bodies.iter().map(|(_, b)| b.lines().count()).max().unwrap();
    for i in 0..longest {
        for (host, body) in &bodies {
            if let Some(line) = body.lines().nth(i) {
                stream.push_str(&format!("{host}: {line}\n"));
            }
        }
    }
    let out = gputune()
        .args(["fleet", "-"])
        .write_stdin(stream)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("gputune fleet: 3 nodes"), "{stdout}");

    // Three alike tuned nodes: no drift, exit 0.
    std::fs::remove_file(reports.join("gpu03.json")).unwrap();
    std::fs::remove_file(reports.join("gpu04.json")).unwrap();
    audit_into(
        &node(dir.path(), "tuned-node", "gpu05", None),
        &reports.join("gpu05.json"),
    );
    let out = gputune().arg("fleet").arg(&reports).output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("No drift"), "{stdout}");

    // Each node passes on its own, but one uses another GID index: named, exit 1.
    let odd = node(dir.path(), "tuned-node", "gpu06", None);
    std::fs::write(odd.join("etc/nccl.conf"), "NCCL_IB_GID_INDEX=5\n").unwrap();
    audit_into(&odd, &reports.join("gpu06.json"));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("gpu06.json")).unwrap())
            .unwrap();
    assert_eq!(report["passed"], true, "{report:#}");
    let out = gputune().arg("fleet").arg(&reports).output().unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let gid = stdout
        .lines()
        .position(|l| l.contains("fact:nccl_conf.NCCL_IB_GID_INDEX"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        stdout
            .lines()
            .nth(gid)
            .unwrap()
            .contains("(absent) on 3 node(s)"),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().nth(gid + 1).unwrap().trim(),
        "gpu06: 5",
        "{stdout}"
    );

    // Not a report: exit 2 naming the file.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"schema_version\": 1}\n").unwrap();
    let out = gputune().arg("fleet").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("bad.json:1: not a gputune audit report"),
        "{}",
        text(&out.stderr)
    );
}
