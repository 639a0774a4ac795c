//! `gputune fleet` on real audit reports (of fixture roots under other host names), as files,
//! directories and streams: value groups, hostlists, what fails first, duplicates, skips,
//! and the hostile inputs a fleet's reports can be.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{fixture, gputune, text};
use serde_json::Value;

/// A copy of a fixture root under another host name (and optionally kernel).
fn node(dir: &Path, from: &str, host: &str, kernel: Option<&str>) -> PathBuf {
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

/// `gputune audit --format json` of `root`, as the documented command writes it.
fn audit(root: &Path) -> String {
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
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// One real report (of `from`) as a value, to vary per node.
fn report_of(from: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    serde_json::from_str(&audit(&node(dir.path(), from, "template", None))).unwrap()
}

fn with_host(report: &Value, host: &str) -> Value {
    let mut r = report.clone();
    r["host"]["hostname"] = Value::from(host);
    r
}

/// Sets a finding's status and actual value.
fn set(report: &mut Value, id: &str, status: &str, actual: &str) {
    let findings = report["findings"].as_array_mut().unwrap();
    let f = findings
        .iter_mut()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}"));
    f["status"] = Value::from(status);
    f["actual"] = Value::from(actual);
}

fn fleet(args: &[&str], stdin: Option<String>) -> (Option<i32>, String, String) {
    let mut cmd = gputune();
    cmd.arg("fleet")
        .args(args)
        .timeout(Duration::from_secs(120));
    if let Some(input) = stdin {
        cmd.write_stdin(input);
    }
    let out = cmd.output().unwrap();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The line of `text` that starts (after spaces) with `start`, and the lines after it.
fn block<'a>(text: &'a str, start: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no line {start:?} in:\n{text}"));
    lines[at..].to_vec()
}

#[test]
fn groups_real_reports_failing_first_with_hostlists() {
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
        std::fs::write(reports.join(format!("{name}.json")), audit(root)).unwrap();
    }
    let dir_arg = reports.to_str().unwrap();

    let (code, stdout, stderr) = fleet(&[dir_arg], None);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("gputune fleet: 4 nodes, 1 failing; "),
        "{stdout}"
    );
    assert!(stdout.lines().any(|l| l == "failing: gpu04"), "{stdout}");
    // The profile decides: the one failing node is the wrong one, listed first.
    let rmem = block(&stdout, "FAIL net.core.rmem_max (network)");
    assert!(
        rmem[1].contains(" fail ") && rmem[1].ends_with("  gpu04"),
        "{stdout}"
    );
    assert!(rmem[1].trim_start().starts_with("1  fail"), "{stdout}");
    assert!(
        rmem[2].contains(" pass ") && rmem[2].ends_with("  gpu[01-03]"),
        "{stdout}"
    );
    // A fact that must be alike: the kernel of gpu03.
    let kernel = block(&stdout, "DIFFERS kernel (fact)");
    assert!(kernel[1].ends_with("  gpu[01-02]"), "{stdout}");
    assert!(
        kernel[2..4]
            .iter()
            .any(|l| l.contains("6.8.0-31-generic") && l.ends_with("  gpu03")),
        "{stdout}"
    );
    // Failing checks come before the facts that differ.
    assert!(stdout.find("FAIL ").unwrap() < stdout.find("DIFFERS ").unwrap());

    // JSON: the same groups, with counts and hostlists.
    let (code, stdout, _) = fleet(&[dir_arg, "--format", "json"], None);
    assert_eq!(code, Some(1));
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["passed"], false);
    assert_eq!(doc["nodes"], 4);
    assert_eq!(doc["failing"]["hostlist"], "gpu04");
    let rmem = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "net.core.rmem_max")
        .unwrap();
    assert_eq!(rmem["verdict"], "fail");
    assert_eq!(rmem["groups"][0]["status"], "fail");
    assert_eq!(rmem["groups"][0]["nodes"], 1);
    assert_eq!(rmem["groups"][1]["hostlist"], "gpu[01-03]");
    assert_eq!(rmem["groups"][1]["nodes"], 3);

    // --failing: the hostlist alone, for scontrol or pdsh -w.
    let (code, stdout, _) = fleet(&[dir_arg, "--failing"], None);
    assert_eq!((code, stdout.as_str()), (Some(1), "gpu04\n"));

    // Prometheus: per check, nodes in each verdict.
    let (code, stdout, _) = fleet(&[dir_arg, "--format", "prometheus"], None);
    assert_eq!(code, Some(1));
    for line in [
        "gputune_fleet_nodes 4",
        "gputune_fleet_failing_nodes 1",
        "gputune_fleet_check_nodes{id=\"net.core.rmem_max\",area=\"network\",status=\"fail\"} 1",
        "gputune_fleet_check_nodes{id=\"net.core.rmem_max\",area=\"network\",status=\"pass\"} 3",
        "gputune_fleet_fact_values{name=\"kernel\"} 3",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "{line} not in:\n{stdout}"
        );
    }

    // The same reports as a pdsh stream: prefixed lines, interleaved between hosts.
    let bodies: Vec<(String, String)> = ["gpu01", "gpu02", "gpu04"]
        .iter()
        .map(|h| {
            let body = std::fs::read_to_string(reports.join(format!("{h}.json"))).unwrap();
            (h.to_string(), body)
        })
        .collect();
    let longest = bodies.iter().map(|(_, b)| b.lines().count()).max().unwrap();
    let mut stream = String::new();
    for i in 0..longest {
        for (host, body) in &bodies {
            if let Some(line) = body.lines().nth(i) {
                stream.push_str(&format!("{host}: {line}\n"));
            }
        }
    }
    let (code, stdout, stderr) = fleet(&["-"], Some(stream));
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("gputune fleet: 3 nodes, 1 failing"),
        "{stdout}"
    );

    // Three alike tuned nodes: nothing to say, exit 0.
    for gone in ["gpu03", "gpu04"] {
        std::fs::remove_file(reports.join(format!("{gone}.json"))).unwrap();
    }
    let (code, stdout, _) = fleet(&[dir_arg], None);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("Every node has the same verdict and value"),
        "{stdout}"
    );

    // Each node passes on its own, but one uses another GID index: it differs, exit 1,
    // and the others' absence of the setting is a value of its own.
    let odd = node(dir.path(), "tuned-node", "gpu06", None);
    std::fs::write(odd.join("etc/nccl.conf"), "NCCL_IB_GID_INDEX=5\n").unwrap();
    let report = audit(&odd);
    assert_eq!(
        serde_json::from_str::<Value>(&report).unwrap()["passed"],
        true
    );
    std::fs::write(reports.join("gpu06.json"), report).unwrap();
    let (code, stdout, _) = fleet(&[dir_arg], None);
    assert_eq!(code, Some(1), "{stdout}");
    let gid = block(&stdout, "DIFFERS nccl_conf.NCCL_IB_GID_INDEX (fact)");
    assert!(
        gid[1].contains(" 5 ") && gid[1].ends_with("gpu06"),
        "{stdout}"
    );
    assert!(
        gid[2].contains("(absent)") && gid[2].ends_with("gpu[01-02]"),
        "{stdout}"
    );
    let (_, failing, _) = fleet(&[dir_arg, "--failing"], None);
    assert_eq!(failing, "", "no node fails a check: nothing to drain");
}

/// 10,000 nodes that share six failures, with eleven odd nodes, read as one stream of
/// real reports (one per line), print in at most 40 lines.
#[test]
fn ten_thousand_nodes_read_in_forty_lines() {
    // Three variants of one real report, each node's name put in by text replacement.
    let template = with_host(&report_of("untuned-node"), "@HOST@");
    let plain = serde_json::to_string(&template).unwrap();
    let mut odd = template.clone();
    set(&mut odd, "net.core.rmem_max", "pass", "16777216");
    let odd = serde_json::to_string(&odd).unwrap();
    let mut kernel = template.clone();
    kernel["host"]["kernel"] = Value::from("6.8.0-31-generic");
    let kernel = serde_json::to_string(&kernel).unwrap();
    let mut stream = String::with_capacity(10_000 * (plain.len() + 1));
    for n in 1..=10_000 {
        let variant = match n {
            997 | 1001..=1010 => &odd,
            5000 => &kernel,
            _ => &plain,
        };
        stream.push_str(&variant.replace("@HOST@", &format!("gpu{n:05}")));
        stream.push('\n');
    }
    let (code, stdout, stderr) = fleet(&["-"], Some(stream));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stdout.lines().count() <= 40,
        "{} lines:\n{stdout}",
        stdout.lines().count()
    );
    assert!(
        stdout.starts_with("gputune fleet: 10000 nodes, 10000 failing"),
        "{stdout}"
    );
    let rmem = block(&stdout, "FAIL net.core.rmem_max");
    assert!(
        rmem[1].contains("9989  fail")
            && rmem[1].ends_with("gpu[00001-00996,00998-01000,01011-10000]"),
        "{stdout}"
    );
    assert!(
        rmem[2].contains("11  pass") && rmem[2].ends_with("gpu[00997,01001-01010]"),
        "{stdout}"
    );
    let kernel = block(&stdout, "DIFFERS kernel (fact)");
    assert!(kernel[2].ends_with(" gpu05000"), "{stdout}");
}

/// Issue 21: with three nodes, one measured and two skipped, nothing drifts: a skip is not
/// a value, and the measured node is not the odd one out.
#[test]
fn a_skip_is_not_a_value() {
    let template = report_of("tuned-node");
    let mut stream = String::new();
    for (n, host) in ["gpu01", "gpu02", "gpu03"].iter().enumerate() {
        let mut r = with_host(&template, host);
        if n == 0 {
            set(&mut r, "nccl.version", "pass", "2.21.5");
        } else {
            set(&mut r, "nccl.version", "skip", "-");
        }
        stream.push_str(&serde_json::to_string_pretty(&r).unwrap());
    }
    let (code, stdout, stderr) = fleet(&["-"], Some(stream.clone()));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(!stdout.contains("nccl.version"), "{stdout}");
    // A second measured version does differ, and fails the fleet though each passes.
    let mut r = with_host(&template, "gpu04");
    set(&mut r, "nccl.version", "pass", "2.18.1");
    stream.push_str(&serde_json::to_string(&r).unwrap());
    let (code, stdout, _) = fleet(&["-"], Some(stream));
    assert_eq!(code, Some(1), "{stdout}");
    let nccl = block(&stdout, "DIFFERS nccl.version (gpu)");
    assert!(
        nccl.iter()
            .take(4)
            .any(|l| l.contains("(skipped)") && l.ends_with("gpu[02-03]")),
        "{stdout}"
    );
}

/// One node reported twice (under names that differ in case, a trailing dot and spaces)
/// is one node, and the second report is named.
#[test]
fn a_node_reported_twice_is_named_not_counted_twice() {
    let template = report_of("tuned-node");
    let mut stream = String::new();
    for host in ["gpu01", "GPU01.", " gpu01 ", "gpu02"] {
        stream.push_str(&serde_json::to_string(&with_host(&template, host)).unwrap());
        stream.push('\n');
    }
    let (code, stdout, stderr) = fleet(&["-"], Some(stream.clone()));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("gputune fleet: 2 nodes, 0 failing"),
        "{stdout}"
    );
    let dups = block(&stdout, "2 reports name a node reported more than once");
    assert!(
        dups[1].contains("gpu01: counted <stdin>: byte 0, not <stdin>: byte "),
        "{stdout}"
    );
    let (_, stdout, _) = fleet(&["-", "--format", "json"], Some(stream));
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["nodes"], 2);
    assert_eq!(doc["duplicates"].as_array().unwrap().len(), 2);
    assert_eq!(doc["duplicates"][0]["host"], "gpu01");
}

/// Escape sequences in a report never reach the terminal: not in values, not in names.
#[test]
fn control_characters_never_reach_the_terminal() {
    let template = report_of("untuned-node");
    let mut a = with_host(&template, "gpu01");
    set(
        &mut a,
        "net.core.rmem_max",
        "fail",
        "\u{1b}[2J\u{1b}[HNo drift\r\n",
    );
    let b = with_host(&template, "gpu\u{1b}[31m02");
    let mut c = with_host(&template, "gpu03");
    c["host"]["facts"]["nic.eth0.\u{1b}]0;title\u{7}"] = Value::from("x\u{9b}y");
    let stream = [a, b, c]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    for format in ["table", "json", "prometheus"] {
        let (code, stdout, stderr) = fleet(&["-", "--format", format], Some(stream.clone()));
        assert_eq!(code, Some(1), "{stdout}{stderr}");
        for (what, out) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert!(
                !out.chars().any(|c| c.is_control() && c != '\n'),
                "{format} {what}: {out:?}"
            );
        }
        if format == "table" {
            assert!(stdout.contains("[2J[HNo drift"), "{stdout}");
            // The host name with an escape in it is not a host name: named, skipped.
            assert!(
                stderr.contains("\"gpu[31m02\" is not a host name"),
                "{stderr}"
            );
        }
    }
}

/// A malformed document is named with its file and byte and skipped; the others count.
/// Nothing readable at all is exit 3.
#[test]
fn malformed_documents_are_named_and_skipped() {
    let template = report_of("tuned-node");
    let good = |host: &str| serde_json::to_string(&with_host(&template, host)).unwrap();
    let broken =
        "{\"schema_version\": 1, \"host\": {\"hostname\": \"gpu02\"}, \"findings\": [tru]}";
    let stream = format!(
        "{}\n{broken}\n{}\n{{\"not\": \"a report\"}}\n",
        good("gpu01"),
        good("gpu03")
    );
    let at = good("gpu01").len() + 1 + broken.find("tru]").unwrap() + 3;
    let (code, stdout, stderr) = fleet(&["-"], Some(stream));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("gputune fleet: 2 nodes"), "{stdout}");
    let want = format!("<stdin>: byte {at}: not a JSON document");
    assert!(stderr.contains(&want), "{want} not in {stderr}");
    assert!(
        stderr.contains("not a gputune audit report: missing field `schema_version`"),
        "{stderr}"
    );
    assert!(stdout.contains("2 documents or files skipped"), "{stdout}");

    // A document cut off by the end of the file.
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.json");
    std::fs::write(&cut, &good("gpu01")[..500]).unwrap();
    let (code, _, stderr) = fleet(&[cut.to_str().unwrap()], None);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("cut.json: byte 0: a document cut off by the end of the input"),
        "{stderr}"
    );
    assert!(stderr.contains("no readable audit report"), "{stderr}");

    // 100,000 tiny documents in one file: each named or counted, none readable, exit 3,
    // and standard error stays short.
    let tiny = dir.path().join("tiny.json");
    std::fs::write(&tiny, "{}\n".repeat(100_000)).unwrap();
    let (code, _, stderr) = fleet(&[tiny.to_str().unwrap()], None);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.lines().count() <= 25, "{stderr}");
    assert!(stderr.contains("skipped 99980 more"), "{stderr}");
}

/// In a directory only regular files are read: a `*.json` link to /proc/kmsg (whose read
/// would wait for the kernel) and a FIFO are named and passed over, never opened to block;
/// a FIFO named directly is read.
#[test]
fn only_regular_files_are_read_from_a_directory() {
    let template = report_of("tuned-node");
    let dir = tempfile::tempdir().unwrap();
    let reports = dir.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    std::fs::write(
        reports.join("gpu01.json"),
        serde_json::to_string(&with_host(&template, "gpu01")).unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink("/proc/kmsg", reports.join("x.json")).unwrap();
    std::os::unix::fs::symlink("/proc/self/status", reports.join("y.json")).unwrap();
    let fifo = reports.join("z.json");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (code, stdout, stderr) = fleet(&[reports.to_str().unwrap()], None);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("gputune fleet: 1 node, 0 failing"),
        "{stdout}"
    );
    assert!(
        stderr.contains("x.json: a file of the kernel's pseudo file systems, passed over"),
        "{stderr}"
    );
    assert!(
        stderr.contains("y.json: a file of the kernel's pseudo file systems"),
        "{stderr}"
    );
    assert!(
        stderr.contains("z.json: not a regular file, passed over"),
        "{stderr}"
    );

    // Named directly, the FIFO is read.
    let body = serde_json::to_string(&with_host(&template, "gpu02")).unwrap();
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            f.write_all(body.as_bytes()).unwrap();
        })
    };
    let (code, stdout, stderr) = fleet(&[fifo.to_str().unwrap()], None);
    writer.join().unwrap();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("gputune fleet: 1 node, 0 failing"),
        "{stdout}"
    );
}
