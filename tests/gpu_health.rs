//! Node health as NHC and Azure's health checks know it, through the built binary on fixture
//! roots: the GPUs and HCAs a profile expects (`gpu.count` naming the address of a GPU the
//! last healthy audit remembered, `gpu.model`, `rdma.hca_count`) and NVIDIA Xid events in a
//! captured kernel log (real lines from public bug reports, tests/fixtures/xid/), under
//! `audit` and `health`. NVML facts (memory, NVLinks, row remapping) need a GPU: they are
//! tested with fixed NVML answers in src/checks/gpu/.

use crate::common;

use std::path::Path;

use serde_json::Value;

use common::{Pci, Tree, expect, find, gputune, text};

/// The captured kernel log of tests/fixtures/xid/kmsg.
fn kmsg() -> String {
    std::fs::read_to_string(common::fixture("xid/kmsg")).unwrap()
}

/// The node booted at this time (seconds since the epoch), as its `/proc/stat` says.
const BOOT: u64 = 1_764_000_000;

/// A node with four H100s at the addresses the fixture's Xid lines name, the driver's model
/// for each, booted at [`BOOT`].
fn node() -> Tree {
    let t = Tree::new();
    t.numa_node(0, "0-1", Some(4_000_000));
    for bdf in [
        "0000:01:00.0",
        "0000:44:00.0",
        "0000:9b:00.0",
        "0000:cb:00.0",
    ] {
        t.pci(
            &format!("/sys/devices/pci0000:00/{bdf}"),
            &Pci::h100().on(0, "0-1"),
        );
        t.file(
            &format!("/proc/driver/nvidia/gpus/{bdf}/information"),
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 83\n",
        );
    }
    t.file("/sys/module/nvidia/version", "550.54.15\n");
    t.file("/proc/stat", &format!("cpu  1 2 3 4\nbtime {BOOT}\n"));
    t
}

/// A profile file holding only `gpu` (and `nic`) settings.
fn profile(body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    common::temp_file(
        "site.toml",
        &format!("description = \"gpu health test\"\n{body}"),
    )
}

/// `gputune --root ROOT audit --profile FILE --only AREAS --format json ARGS...` with a
/// fresh HOME: the exit code and the findings.
fn audit(root: &Path, profile: &Path, only: &str, args: &[&str]) -> (i32, Vec<Value>) {
    let home = tempfile::tempdir().unwrap();
    let out = gputune()
        .env("HOME", home.path())
        .env_remove("GPUTUNE_ROOT")
        .arg("--root")
        .arg(root)
        .args(["audit", "--format", "json", "--only", only, "--profile"])
        .arg(profile)
        .args(args)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "exit {code}\nstdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    (code, common::findings(&common::stdout_json(&out)).to_vec())
}

/// What a live audit as root would have remembered of `gpus`.
fn remembered(gpus: &[&str]) -> String {
    let list: Vec<String> = gpus
        .iter()
        .map(|a| {
            format!(
                r#"{{"pci_address":"{a}","device_id":"10de:2330","model":"NVIDIA H100 80GB HBM3"}}"#
            )
        })
        .collect();
    format!(
        r#"{{"schema_version":1,"written_at":1763990000,"gpus":[{}]}}"#,
        list.join(",")
    )
}

#[test]
fn a_gpu_that_fell_off_the_bus_fails_the_count_naming_its_address() {
    let t = node();
    let (_d, p) = profile("[gpu]\n\"gpu.count\" = { equals = 4 }\n");
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 0, "{f:#?}");
    expect(&f, "gpu.count", "pass").is("actual", "4");

    // The last healthy audit saw a fifth GPU at 0000:b3:00.0: it is named, even though the
    // profile's count holds.
    t.file(
        "/var/lib/gputune/gpus.json",
        &remembered(&[
            "0000:01:00.0",
            "0000:44:00.0",
            "0000:9b:00.0",
            "0000:b3:00.0",
            "0000:cb:00.0",
        ]),
    );
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 1);
    expect(&f, "gpu.count", "fail")
        .is("actual", "4")
        .has(
            "message",
            "missing: 0000:b3:00.0 (10de:2330, NVIDIA H100 80GB HBM3)",
        )
        .has("message", "the audit of 2025-11-24 13:13:20 UTC (/var/lib/gputune/gpus.json) found 5 GPU(s) there")
        .has("fix", "Xid 79");

    // Without a remembered inventory, the profile's count alone fails a node short of one.
    std::fs::remove_file(t.root().join("var/lib/gputune/gpus.json")).unwrap();
    std::fs::remove_file(t.root().join("sys/bus/pci/devices/0000:44:00.0")).unwrap();
    std::fs::remove_dir_all(t.root().join("proc/driver/nvidia/gpus/0000:44:00.0")).unwrap();
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 1);
    expect(&f, "gpu.count", "fail")
        .is("actual", "3")
        .is("expected", "= 4");

    // A hand-edited inventory is named and ignored, never trusted or a crash.
    t.file("/var/lib/gputune/gpus.json", "{\"schema_version\": 9}");
    let (_, f) = audit(t.root(), &p, "gpu", &[]);
    expect(&f, "gpu.count", "fail").has("message", "remembered inventory was not used");
}

#[test]
fn the_model_is_judged_as_a_substring_of_the_drivers_name() {
    let t = node();
    let (_d, p) = profile("[gpu]\n\"gpu.model\" = { one_of = [\"h100\", \"H200\"] }\n");
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 0, "{f:#?}");
    expect(&f, "gpu.model.gpu0", "pass").is("actual", "NVIDIA H100 80GB HBM3");
    let (_d, p) = profile("[gpu]\n\"gpu.model\" = { equals = \"A100\", severity = \"warn\" }\n");
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 0);
    expect(&f, "gpu.model.gpu3", "warn").has("expected", "`A100`");
    // Memory and NVLinks are NVML's: skipped under --root, with the reason.
    let (_d, p) = profile(
        "[gpu]\n\"gpu.memory_mib\" = { min = 80000 }\n\"gpu.nvlink_count\" = { min = 18 }\n",
    );
    let (_, f) = audit(t.root(), &p, "gpu", &[]);
    expect(&f, "gpu.memory_mib.gpu0", "skip").has("message", "NVML");
    expect(&f, "gpu.nvlink_count.gpu2", "skip").has("message", "NVML");
}

#[test]
fn xids_that_need_action_fail_with_the_gpus_address_and_nvidias_meaning() {
    let t = node();
    let (_d, p) = profile("[gpu]\n");
    // No captured log: said so, never the host's log read instead.
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 0);
    expect(&f, "gpu.xid", "skip").has("message", "no kernel log under --root");

    t.file("/dev/kmsg", &kmsg());
    let (code, f) = audit(t.root(), &p, "gpu", &[]);
    assert_eq!(code, 1);
    // 0000:01:00.0: an MMU fault, the application's: a warning.
    expect(&f, "gpu0.xid", "warn")
        .is("actual", "Xid 31 x1")
        .has("message", "GPU memory page fault")
        .has(
            "message",
            "at 2025-11-24 22:20:59 UTC (22859.1 s after boot)",
        )
        .has("message", "name=python, Ch 00000030");
    // 0000:44:00.0 fell off the bus.
    expect(&f, "gpu1.xid", "fail")
        .is("actual", "Xid 79 x1")
        .has(
            "message",
            "0000:44:00.0: Xid 79 (GPU has fallen off the bus",
        )
        .has("fix", "reboot");
    // 0000:9b:00.0: a contained ECC error, then the GSP stopped answering.
    expect(&f, "gpu2.xid", "fail")
        .is("actual", "Xid 94 x1, Xid 119 x1")
        .has("message", "contained ECC error")
        .has("message", "GSP RPC timeout")
        .has("fix", "nvidia-smi -r -i 0000:9b:00.0");
    expect(&f, "gpu3.xid", "warn").is("actual", "Xid 13 x1");
    // Xids of GPUs this node does not list are named by their address.
    expect(&f, "gpu.xid.0000:dc:00.0", "warn")
        .has("message", "no longer lists")
        .has("message", "caused by previous Xid 149");
    expect(&f, "gpu.xid.0000:0a:00.0", "warn").is("actual", "Xid 45 x1");

    // --since: only what came after; a GPU whose Xids are older passes.
    let since = format!("@{}", BOOT + 4000);
    let (code, f) = audit(t.root(), &p, "gpu", &["--since", &since]);
    assert_eq!(code, 0, "{f:#?}");
    expect(&f, "gpu1.xid", "pass").is("actual", "none");
    expect(&f, "gpu2.xid", "pass").has("message", "since 2025-11-24 17:06:40 UTC (--since)");
    expect(&f, "gpu0.xid", "warn");
}

#[test]
fn health_fails_the_node_on_an_xid_and_a_log_that_is_no_file_is_refused() {
    let t = node();
    t.file("/dev/kmsg", &kmsg());
    let (_d, p) = profile("[gpu]\n\"gpu.count\" = { min = 4 }\n");
    let home = tempfile::tempdir().unwrap();
    let out = gputune()
        .env("HOME", home.path())
        .arg("--root")
        .arg(t.root())
        .args(["health", "--profile"])
        .arg(&p)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("gpu1.xid"), "{stdout}");
    assert!(stdout.contains("Xid 79"), "{stdout}");

    // A FIFO where the captured log belongs: refused at once, the audit goes on.
    let fifo = t.root().join("dev/kmsg");
    std::fs::remove_file(&fifo).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    let (_, f) = audit(t.root(), &p, "gpu", &[]);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    expect(&f, "gpu.xid", "skip").has("message", "never the host's");
}

#[test]
fn bad_since_values_are_usage_errors() {
    for bad in ["yesterday", "2026-13-01 00:00", "5 hours"] {
        let out = gputune().args(["audit", "--since", bad]).output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(stderr.contains("--since"), "{stderr}");
        // The accepted forms, not just clap's word for an unknown flag.
        assert!(stderr.contains("@SECONDS"), "{stderr}");
    }
}

#[test]
fn the_hca_count_is_judged_against_the_profile() {
    let t = common::hgx(Default::default());
    let (_d, p) = profile("[nic]\n\"rdma.hca_count\" = { equals = 8 }\n");
    let (_, f) = audit(t.root(), &p, "nic", &[]);
    expect(&f, "rdma.hca_count", "pass")
        .is("actual", "8")
        .has("message", "mlx5_0 (0000:14:00.0, 1 of 1 port(s) ACTIVE)");
    std::fs::remove_file(t.root().join("sys/class/infiniband/mlx5_7/device")).unwrap();
    std::fs::remove_dir_all(t.root().join("sys/class/infiniband/mlx5_7")).unwrap();
    let (code, f) = audit(t.root(), &p, "nic", &[]);
    assert_eq!(code, 1);
    expect(&f, "rdma.hca_count", "fail").is("actual", "7");
    assert!(
        find(&f, "rdma.hca_count")["fix"]
            .as_str()
            .unwrap()
            .contains("lspci")
    );
}
