//! `gputune audit` of the gpu, nic, numa and platform areas on fixture roots and on this
//! machine, with the real libnccl.so.2 from the nvidia-nccl-cu12 wheel (scripts/test).

use crate::common;

use assert_cmd::Command;
use serde_json::Value;

const HW: &str = "gpu,nic,numa,platform";

/// The real libnccl.so.2 that scripts/test installs; a clear failure without it.
fn nccl_lib() -> String {
    std::env::var("GPUTUNE_TEST_NCCL_LIB").expect(
        "GPUTUNE_TEST_NCCL_LIB is not set: run scripts/test, which installs the real libnccl.so.2",
    )
}

fn nccl_venv() -> String {
    std::env::var("GPUTUNE_TEST_NCCL_VENV")
        .expect("GPUTUNE_TEST_NCCL_VENV is not set: run scripts/test, which installs nvidia-nccl-cu12 in a venv")
}

/// `gputune audit` with no NCCL reachable through the environment.
fn audit(root: Option<&std::path::Path>) -> (Command, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = common::gputune();
    for var in [
        "GPUTUNE_NCCL_LIB",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "GPUTUNE_ROOT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", home.path());
    if let Some(root) = root {
        cmd.arg("--root").arg(root);
    }
    cmd.arg("audit");
    (cmd, home)
}

fn run_json(mut cmd: Command, code: i32) -> Vec<Value> {
    let out = cmd.args(["--format", "json"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    v["findings"].as_array().unwrap().clone()
}

fn find<'a>(findings: &'a [Value], id: &str) -> &'a Value {
    findings
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id} in {findings:#?}"))
}

fn status<'a>(findings: &'a [Value], id: &str) -> &'a str {
    find(findings, id)["status"].as_str().unwrap()
}

#[test]
fn healthy_hgx_node_passes_and_reports_the_real_nccls_version_and_path() {
    let t = common::hgx(Default::default());
    let lib = nccl_lib();
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("GPUTUNE_NCCL_LIB", &lib)
        .args(["--profile", "ddp-infiniband", "--only", HW]);
    let f = run_json(cmd, 0);
    assert_eq!(find(&f, "gpu.count")["actual"], "8");
    for i in 0..8 {
        assert_eq!(status(&f, &format!("gpu{i}.pcie_link")), "pass");
        assert_eq!(find(&f, &format!("gpu{i}.pcie_link"))["actual"], "Gen5 x16");
        assert_eq!(status(&f, &format!("numa.gpu{i}.node")), "pass");
        assert_eq!(
            find(&f, &format!("numa.gpu{i}.nic"))["actual"],
            format!("ens{i}np0 via PIX")
        );
        assert_eq!(status(&f, &format!("nic.ens{i}np0.up")), "pass");
        assert_eq!(status(&f, &format!("link.speed_mbps.ens{i}np0")), "pass");
        assert_eq!(status(&f, &format!("nic.ens{i}np0.numa")), "pass");
    }
    let driver = find(&f, "driver.version");
    assert_eq!(
        (driver["status"].as_str(), driver["actual"].as_str()),
        (Some("pass"), Some("550.54.15"))
    );
    let nccl = find(&f, "nccl.version");
    assert_eq!(nccl["status"], "pass");
    assert_eq!(nccl["actual"], "2.32.3", "the wheel's exact version");
    let msg = nccl["message"].as_str().unwrap();
    assert!(
        msg.contains(&lib) && msg.contains("$GPUTUNE_NCCL_LIB"),
        "{msg}"
    );
    assert!(
        find(&f, "gpu.nvml")["message"]
            .as_str()
            .unwrap()
            .contains("skipped")
    );
    assert_eq!(status(&f, "cuda.version"), "skip");
    assert_eq!(status(&f, "platform.acs"), "pass");
    assert_eq!(
        find(&f, "platform.acs")["actual"],
        "24 bridge(s) checked",
        "root port, switch upstream and downstream port above each of 8 GPUs"
    );
    assert_eq!(find(&f, "iommu.mode")["actual"], "passthrough");
    assert_eq!(status(&f, "nvidia_peermem.loaded"), "pass");
    assert_eq!(status(&f, "numa.nodes"), "pass");
    let ifname = find(&f, "nccl.NCCL_SOCKET_IFNAME");
    assert_eq!(ifname["status"], "warn");
    assert_eq!(ifname["change"]["type"], "nccl_env");
    assert_eq!(ifname["change"]["key"], "NCCL_SOCKET_IFNAME");
    assert_eq!(ifname["change"]["value"], "ens0np0");
}

#[test]
fn nccl_conf_that_selects_the_nic_passes() {
    let t = common::hgx(Default::default());
    t.write("/etc/nccl.conf", "# by hand\nNCCL_SOCKET_IFNAME=ens\n");
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("GPUTUNE_NCCL_LIB", nccl_lib())
        .args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 0);
    assert_eq!(status(&f, "nccl.NCCL_SOCKET_IFNAME"), "pass");
}

#[test]
fn downtrained_links_acs_and_remote_irqs_are_found_with_their_fixes() {
    let t = common::hgx(common::HgxFaults {
        downtrained: true,
        acs_on: true,
        remote_irqs: true,
    });
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("GPUTUNE_NCCL_LIB", nccl_lib())
        .args(["--profile", "ddp-100gbe", "--only", HW]);
    let f = run_json(cmd, 1);
    let gpu3 = find(&f, "gpu3.pcie_link");
    assert_eq!(gpu3["status"], "fail");
    assert_eq!(
        (gpu3["actual"].as_str(), gpu3["expected"].as_str()),
        (Some("Gen5 x8"), Some("Gen5 x16"))
    );
    let gpu5 = find(&f, "gpu5.pcie_link");
    assert_eq!(gpu5["status"], "fail");
    assert_eq!(gpu5["actual"], "Gen3 x16");
    assert_eq!(status(&f, "gpu0.pcie_link"), "pass");
    let acs = find(&f, "platform.acs.0000:10:01.0");
    assert_eq!(acs["status"], "warn");
    assert_eq!(
        acs["actual"],
        "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
    );
    assert_eq!(
        acs["fix"].as_str().unwrap().split(" (").next(),
        Some("setpci -s 0000:10:01.0 ECAP_ACS+0x6.w=0000")
    );
    // NICs 4-7 are on node 1 but their IRQs were steered to node 0's CPUs.
    let irq = find(&f, "irq.numa_local.ens4np0.108");
    assert_eq!(irq["status"], "warn");
    assert_eq!(irq["change"]["type"], "irq_affinity");
    assert_eq!(irq["change"]["irq"], 108);
    assert_eq!(irq["change"]["cpus"], common::NODE1_CPUS);
    assert!(
        irq["message"]
            .as_str()
            .unwrap()
            .contains("mlx5_comp0@pci:0000:94:00.0")
    );
    assert_eq!(status(&f, "irq.numa_local.ens0np0"), "pass");
}

#[test]
fn irqbalance_is_named_when_it_would_undo_the_steering() {
    let t = common::hgx(common::HgxFaults {
        remote_irqs: true,
        ..Default::default()
    });
    t.write("/proc/1234/comm", "irqbalance\n");
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("GPUTUNE_NCCL_LIB", nccl_lib())
        .args(["--profile", "ddp-100gbe", "--only", "nic"]);
    let f = run_json(cmd, 0);
    let msg = find(&f, "irq.numa_local.ens7np0.114")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("irqbalance is running"), "{msg}");
    assert!(msg.contains("--banirq=114"), "{msg}");
}

#[test]
fn no_nccl_anywhere_fails_a_gpu_node_per_the_profile() {
    let t = common::hgx(Default::default());
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--profile", "base", "--only", "gpu"]);
    let f = run_json(cmd, 1);
    let nccl = find(&f, "nccl.version");
    assert_eq!(nccl["status"], "fail");
    assert_eq!(nccl["actual"], "not found");
    assert!(
        nccl["message"]
            .as_str()
            .unwrap()
            .contains("libnccl.so.2 not found; searched")
    );

    // The same with the setting at warn severity: a warning, exit 0.
    let profile = t.root().join("warn-nccl.toml");
    std::fs::write(&profile, "include = [\"base\"]\n[gpu]\n\"nccl.version\" = { version = \">=2.14\", severity = \"warn\" }\n").unwrap();
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.arg("--profile").arg(&profile).args(["--only", "gpu"]);
    let f = run_json(cmd, 0);
    assert_eq!(status(&f, "nccl.version"), "warn");
}

#[test]
fn nccl_found_through_a_python_venv_on_this_node() {
    let (mut cmd, _home) = audit(None);
    cmd.env("VIRTUAL_ENV", nccl_venv())
        .args(["--profile", "base", "--only", "gpu"]);
    let f = run_json(cmd, 0);
    let nccl = find(&f, "nccl.version");
    assert_eq!(nccl["actual"], "2.32.3");
    let msg = nccl["message"].as_str().unwrap();
    assert!(
        msg.contains("site-packages/nvidia/nccl/lib/libnccl.so.2"),
        "{msg}"
    );
    assert!(msg.contains("a Python site-packages"), "{msg}");
}

#[test]
fn live_audit_of_this_gpu_less_vm_is_sensible() {
    let (mut cmd, _home) = audit(None);
    cmd.args(["--only", HW]);
    let f = run_json(cmd, 0);
    assert_eq!(status(&f, "gpu.count"), "skip");
    assert!(
        find(&f, "driver.version")["message"]
            .as_str()
            .unwrap()
            .contains("NVIDIA driver not found")
    );
    assert_eq!(status(&f, "nccl.version"), "skip");
    assert_eq!(status(&f, "numa.nodes"), "pass");
    assert_eq!(status(&f, "platform.acs"), "skip");
    assert!(
        f.iter().all(|x| x["id"] != "nic.lo.up"),
        "loopback is never judged"
    );
}

#[test]
fn real_snapshots_audit_without_errors() {
    // The P100 VM: one GPU, no link files, a hypervisor; the 4-node host with its HCA.
    let (_d, vm) = common::extract("ghw/linux-amd64-accel-nvidia/linux-amd64-accel-nvidia.tar.gz");
    let (mut cmd, _home) = audit(Some(&vm));
    cmd.env("GPUTUNE_NCCL_LIB", nccl_lib())
        .args(["--profile", "base", "--only", HW]);
    // The capture holds sysfs only: no cuDNN in it, which base requires on a GPU node.
    let f = run_json(cmd, 1);
    assert_eq!(find(&f, "cudnn.version")["actual"], "not found");
    assert_eq!(find(&f, "gpu.count")["actual"], "1");
    assert_eq!(status(&f, "gpu0.pcie_link"), "skip");
    assert_eq!(status(&f, "numa.gpu0.node"), "pass");
    assert!(f.iter().all(|x| x["status"] != "error"), "{f:#?}");

    let (_d, hca) =
        common::extract("hwloc/40intel64-2g2n4c+pcilocality/40intel64-2g2n4c+pcilocality.tar.bz2");
    let (mut cmd, _home) = audit(Some(&hca));
    cmd.args(["--only", HW]);
    let out = cmd.args(["--format", "json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["profile"]["name"], "ddp-infiniband",
        "chosen for the RDMA device"
    );
    let f = v["findings"].as_array().unwrap();
    assert_eq!(status(f, "nic.ib0.up"), "pass");
    assert_eq!(status(f, "link.mtu.ib0"), "skip");
    assert_eq!(status(f, "gpu.count"), "skip");
}

#[test]
fn peer_route_is_asked_of_the_kernel_over_netlink() {
    // 127.0.0.1 routes through `lo` (a route lookup sends no packet): virtual, so the
    // check says so and falls back to the default route's NIC.
    let (mut cmd, _home) = audit(None);
    cmd.args(["--profile", "base", "--only", "nic", "--peer", "127.0.0.1"]);
    let f = run_json(cmd, 0);
    let skip = find(&f, "nic.peer_route");
    assert_eq!(skip["status"], "skip");
    assert!(
        skip["message"]
            .as_str()
            .unwrap()
            .contains("virtual interface"),
        "{skip}"
    );
    let (mut cmd, _home) = audit(None);
    cmd.args([
        "--profile",
        "base",
        "--only",
        "nic",
        "--peer",
        "no-such-host.invalid",
    ]);
    // A peer name that does not resolve fails: MASTER_ADDR would not resolve either.
    let f = run_json(cmd, 1);
    assert!(
        find(&f, "nic.peer_route")["message"]
            .as_str()
            .unwrap()
            .contains("cannot be resolved")
    );
    assert_eq!(find(&f, "peer.connect")["actual"], "unresolved");
}

/// The real QLogic InfiniBand node (hwloc snapshot): a 1 GbE management eth0 that is up,
/// ib0 (IPoIB) and qib0 at 4X QDR. The HCA is judged, eth0 is listed and never failed.
#[test]
fn infiniband_node_is_judged_on_its_hca_not_its_management_port() {
    let (_d, root) =
        common::extract("hwloc/40intel64-2g2n4c+pcilocality/40intel64-2g2n4c+pcilocality.tar.bz2");
    let (mut cmd, _home) = audit(Some(&root));
    cmd.args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let state = find(&f, "rdma.qib0.1.state");
    assert_eq!(state["status"], "pass");
    assert_eq!(state["actual"], "ACTIVE, LinkUp");
    let rate = find(&f, "rdma.rate_mbps.qib0.1");
    assert_eq!(rate["status"], "fail", "QDR is below the profile's EDR");
    assert_eq!(rate["actual"], "40000");
    assert!(
        rate["message"]
            .as_str()
            .unwrap()
            .contains("40 Gb/sec (4X QDR)")
    );
    assert!(f.iter().all(|x| x["id"] != "link.speed_mbps.eth0"));
    assert_eq!(status(&f, "nic.eth0.role"), "skip");
    assert_eq!(status(&f, "nic.ib0.up"), "pass");
    let ipoib = find(&f, "link.speed_mbps.ib0");
    assert_eq!(ipoib["status"], "skip");
    assert!(ipoib["message"].as_str().unwrap().contains("IPoIB"));
    // No rdma-core in the snapshot: NCCL would fall back to sockets.
    assert_eq!(status(&f, "nccl.net.ibverbs"), "fail");

    // A site profile for this (older) fabric passes it, verbs library aside.
    let site = tempfile::tempdir().unwrap();
    let file = site.path().join("qdr.toml");
    std::fs::write(
        &file,
        "include = [\"ddp-infiniband\"]\n[nic]\n\"rdma.rate_mbps\" = { min = 40000 }\n",
    )
    .unwrap();
    let (mut cmd, _home) = audit(Some(&root));
    cmd.args(["--only", "nic", "--profile"]).arg(&file);
    let f = run_json(cmd, 1);
    assert_eq!(status(&f, "rdma.rate_mbps.qib0.1"), "pass");
}

#[test]
fn downtrained_and_down_hca_ports_fail_with_their_rate() {
    let t = common::hgx(Default::default());
    t.write(
        "/sys/class/infiniband/mlx5_3/ports/1/rate",
        "10 Gb/sec (4X SDR)\n",
    );
    t.write("/sys/class/infiniband/mlx5_5/ports/1/state", "1: DOWN\n");
    t.write(
        "/sys/class/infiniband/mlx5_5/ports/1/phys_state",
        "2: Polling\n",
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let slow = find(&f, "rdma.rate_mbps.mlx5_3.1");
    assert_eq!(slow["status"], "fail");
    assert_eq!(slow["actual"], "10000");
    assert_eq!(status(&f, "rdma.rate_mbps.mlx5_0.1"), "pass");
    let down = find(&f, "rdma.mlx5_5.1.state");
    assert_eq!(down["status"], "fail");
    assert_eq!(down["actual"], "DOWN, Polling");
    assert!(down["fix"].as_str().unwrap().contains("cable"));
    assert_eq!(status(&f, "rdma.rate_mbps.mlx5_5.1"), "skip");
    assert_eq!(status(&f, "rdma.mlx5_0.1.gid"), "pass");

    // Under ddp-roce: the RoCE netdev of mlx5_2 left at MTU 1500 runs IB MTU 1024.
    t.write(
        "/sys/devices/pci0000:50/0000:50:01.0/0000:51:00.0/0000:52:01.0/0000:54:00.0/net/ens2np0/mtu",
        "1500\n",
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--profile", "ddp-roce", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let mtu = find(&f, "rdma.active_mtu.mlx5_2.1");
    assert_eq!(mtu["status"], "warn");
    assert_eq!(mtu["actual"], "1024");
    assert!(mtu["fix"].as_str().unwrap().contains("ens2np0"));
    assert_eq!(status(&f, "rdma.active_mtu.mlx5_0.1"), "pass");
    assert_eq!(status(&f, "rdma.link_layer.mlx5_0.1"), "pass");
}

#[test]
fn firmware_rules_are_matched_by_driver_name() {
    let t = common::hgx(Default::default());
    t.write("/sys/class/infiniband/mlx5_2/fw_ver", "22.31.1014\n");
    let site = tempfile::tempdir().unwrap();
    let file = site.path().join("fleet.toml");
    std::fs::write(
        &file,
        "include = [\"ddp-infiniband\"]\n[nic]\n\"firmware.mlx5_core\" = { version = \">=28.39\" }\n\"firmware.bnxt_en\" = { version = \">=230\" }\n",
    )
    .unwrap();
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--only", "nic", "--profile"]).arg(&file);
    let f = run_json(cmd, 1);
    let old = find(&f, "firmware.mlx5_core.mlx5_2");
    assert_eq!(old["status"], "fail");
    assert_eq!(old["actual"], "22.31.1014");
    assert!(
        old["message"]
            .as_str()
            .unwrap()
            .contains("/sys/class/infiniband/mlx5_2/fw_ver")
    );
    assert_eq!(status(&f, "firmware.mlx5_core.mlx5_0"), "pass");
    assert_eq!(status(&f, "firmware.bnxt_en"), "skip");
}

#[test]
fn nccl_configuration_is_read_as_nccl_reads_it_and_validated() {
    let t = common::hgx(Default::default());
    t.write(
        "/etc/nccl.conf",
        "NCCL_SOCKET_IFNAME=ens\nNCCL_IB_TIMEOUT=22\n",
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    // ~/.nccl.conf of the audit's $HOME, resolved under the root like every host path.
    t.write("/root/.nccl.conf", "NCCL_IB_TIMOUT=22\n");
    cmd.env("HOME", "/root")
        .env("NCCL_SOCKET_NTHREADS", "32")
        .env("NCCL_IB_HCA", "=mlx5_0,mlx5_9")
        .env("NCCL_IB_DISABLE", "1")
        .env("NCCL_IB_GID_INDEX", "2")
        .env("NCCL_ASYNC_ERROR_HANDLING", "1")
        .args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let threads = find(&f, "nccl.env.NCCL_SOCKET_NTHREADS");
    assert_eq!(threads["status"], "fail");
    assert!(threads["actual"].as_str().unwrap().contains("environment"));
    let hca = find(&f, "nccl.env.NCCL_IB_HCA.present");
    assert_eq!(hca["status"], "fail");
    assert!(hca["message"].as_str().unwrap().contains("mlx5_9"));
    assert_eq!(status(&f, "nccl.env.NCCL_IB_DISABLE"), "fail");
    assert_eq!(status(&f, "nccl.env.NCCL_ASYNC_ERROR_HANDLING"), "warn");
    let typo = find(&f, "nccl.env.NCCL_IB_TIMOUT");
    assert!(
        typo["message"]
            .as_str()
            .unwrap()
            .contains("NCCL_IB_TIMEOUT")
    );
    assert!(typo["actual"].as_str().unwrap().contains(".nccl.conf:1"));
    // Index 2 is the IPv4 address's RoCE v1 entry: NCCL's "error 12".
    let gid = find(&f, "rdma.mlx5_0.1.gid");
    assert_eq!(gid["status"], "fail");
    assert!(gid["fix"].as_str().unwrap().contains("NCCL_IB_GID_INDEX=3"));
    assert_eq!(status(&f, "nccl.env.NCCL_SOCKET_IFNAME.present"), "pass");

    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("NCCL_SOCKET_IFNAME", "=eth9")
        .args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let ifname = find(&f, "nccl.env.NCCL_SOCKET_IFNAME.present");
    assert_eq!(ifname["status"], "fail");
    assert!(
        ifname["actual"]
            .as_str()
            .unwrap()
            .contains("selects no interface")
    );
}

/// A multi-homed node: 1 GbE eth0 holds the default route, 25 GbE ens1f0 is the fabric.
fn multi_homed() -> common::Tree {
    let t = common::Tree::new();
    t.numa_node(0, "0-1", Some(4_000_000));
    t.loopback();
    for (i, name, speed) in [(3u32, "eth0", 1000i64), (4, "ens1f0", 25_000)] {
        let path = format!("/sys/devices/pci0000:00/0000:00:0{i}.0");
        t.pci(
            &path,
            &common::Pci {
                vendor: 0x8086,
                device: 0x1521,
                class: 0x020000,
                numa_node: -1,
                cpus: "0-1".into(),
                speed: ("8.0", "8.0"),
                width: (8, 8),
                driver: Some(if i == 3 { "igb" } else { "ice" }),
                config: None,
            },
        );
        t.netdev(&path, name, speed, 9000, true, i);
    }
    t.write(
        "/proc/net/route",
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\neth0\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
    );
    t
}

#[test]
fn multi_homed_node_judges_and_configures_the_fast_nic() {
    let t = multi_homed();
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--profile", "ddp-25gbe", "--only", "nic"]);
    let f = run_json(cmd, 0);
    assert_eq!(status(&f, "link.speed_mbps.ens1f0"), "pass");
    assert!(f.iter().all(|x| x["id"] != "link.speed_mbps.eth0"));
    assert_eq!(status(&f, "nic.eth0.role"), "skip");
    assert_eq!(find(&f, "nccl.NCCL_SOCKET_IFNAME")["expected"], "ens1f0");

    let out = common::gputune()
        .arg("--root")
        .arg(t.root())
        .args([
            "apply",
            "--profile",
            "ddp-25gbe",
            "--only",
            "nic",
            "--dry-run",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("+NCCL_SOCKET_IFNAME=ens1f0\n"), "{text}");
    assert!(!text.contains("=eth0"), "{text}");
}

#[test]
fn cudnn_and_torchs_cuda_are_found_and_judged() {
    let t = common::hgx(Default::default());
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("GPUTUNE_NCCL_LIB", nccl_lib())
        .args(["--profile", "base", "--only", "gpu"]);
    let f = run_json(cmd, 0);
    let cudnn = find(&f, "cudnn.version");
    assert_eq!(cudnn["status"], "pass");
    assert_eq!(cudnn["actual"], "9.1.0.70");
    let msg = cudnn["message"].as_str().unwrap();
    assert!(
        msg.contains("nvidia_cudnn_cu12-9.1.0.70.dist-info"),
        "{msg}"
    );
    let torch = find(&f, "torch.cuda");
    assert_eq!(torch["status"], "pass");
    assert_eq!(torch["actual"], "12.4");

    // An old cuDNN from the system packages (header next to it) and a torch built for
    // CUDA 12.8 on driver 550 (CUDA 12.4).
    let site = "/usr/local/lib/python3.11/dist-packages";
    std::fs::remove_dir_all(t.root().join(&site[1..]).join("nvidia")).unwrap();
    std::fs::remove_dir_all(
        t.root()
            .join(&site[1..])
            .join("nvidia_cudnn_cu12-9.1.0.70.dist-info"),
    )
    .unwrap();
    t.write(
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8.6.0",
        "\x7fELF placeholder\n",
    );
    t.link(
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8",
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8.6.0",
    );
    t.write(
        "/usr/include/x86_64-linux-gnu/cudnn_version_v8.h",
        "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 6\n#define CUDNN_PATCHLEVEL 0\n",
    );
    t.write(
        &format!("{site}/torch/version.py"),
        "__version__ = '2.7.0+cu128'\ncuda: Optional[str] = '12.8'\n",
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("GPUTUNE_NCCL_LIB", nccl_lib())
        .args(["--profile", "base", "--only", "gpu"]);
    let f = run_json(cmd, 1);
    let cudnn = find(&f, "cudnn.version");
    assert_eq!(cudnn["status"], "fail");
    assert_eq!(cudnn["actual"], "8.6.0");
    assert!(
        cudnn["message"]
            .as_str()
            .unwrap()
            .contains("cudnn_version_v8.h")
    );
    let torch = find(&f, "torch.cuda");
    assert_eq!(torch["status"], "warn");
    assert!(
        torch["message"]
            .as_str()
            .unwrap()
            .contains("minor version compatibility")
    );
}

/// Two network namespaces joined by a veth pair (10.77.N.1 in `a`, 10.77.N.2 in `b`),
/// removed on drop.
struct Pair {
    a: String,
    b: String,
}

impl Pair {
    fn new(tag: u8, mtu_a: u32, mtu_b: u32) -> Pair {
        let id = std::process::id();
        let (a, b) = (format!("gtpa{tag}-{id}"), format!("gtpb{tag}-{id}"));
        let pair = Pair { a, b };
        let (a, b) = (&pair.a, &pair.b);
        for cmd in [
            format!("netns add {a}"),
            format!("netns add {b}"),
            format!("link add va netns {a} type veth peer name vb netns {b}"),
            format!("-n {a} addr add 10.77.{tag}.1/24 dev va"),
            format!("-n {b} addr add 10.77.{tag}.2/24 dev vb"),
            format!("-n {a} link set va mtu {mtu_a} up"),
            format!("-n {b} link set vb mtu {mtu_b} up"),
            format!("-n {a} link set lo up"),
            format!("-n {b} link set lo up"),
        ] {
            sh("ip", &cmd);
        }
        pair
    }

    /// Runs `f` on a thread inside namespace `ns` (sockets it makes stay there).
    fn within<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let file = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            // SAFETY: setns(2) on this thread only, with an open namespace descriptor.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
    }

    /// `gputune audit --only nic` run inside namespace `a`.
    fn audit(&self, profile: &str, peer: &str) -> (Option<i32>, Vec<Value>) {
        let bin = crate::common::bin();
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.a])
            .arg(bin)
            .args([
                "audit",
                "--only",
                "nic",
                "--format",
                "json",
                "--profile",
                profile,
            ])
            .args(["--peer", peer])
            .env_remove("GPUTUNE_ROOT")
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), v["findings"].as_array().unwrap().clone())
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

fn sh(program: &str, args: &str) {
    let out = std::process::Command::new(program)
        .args(args.split_whitespace())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (scripts/test installs iproute2): {e}"));
    assert!(
        out.status.success(),
        "{program} {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A listener on the peer's rendezvous port, in namespace `ns`, until `stop` is set.
fn listen(
    ns: &str,
    addr: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    Pair::within(ns, move || {
        let l = std::net::TcpListener::bind(addr).unwrap();
        l.set_nonblocking(true).unwrap();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match l.accept() {
                Ok(_) => {}
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    })
}

#[test]
fn peer_rendezvous_port_rtt_and_path_mtu_between_namespaces() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    // Node a's interface carries jumbo frames, node b's only 1500: the path MTU is 1500.
    let pair = Pair::new(1, 9000, 1500);
    let stop = Arc::new(AtomicBool::new(false));
    let listener = listen(&pair.b, "10.77.1.2:29500", stop.clone());

    let (code, f) = pair.audit("ddp-25gbe", "10.77.1.2");
    let connect = find(&f, "peer.connect");
    assert_eq!(connect["status"], "pass", "{connect}");
    assert!(
        connect["expected"]
            .as_str()
            .unwrap()
            .contains("10.77.1.2:29500")
    );
    let rtt = find(&f, "peer.rtt_ms");
    assert_eq!(rtt["status"], "pass", "{rtt}");
    assert!(rtt["actual"].as_str().unwrap().parse::<f64>().unwrap() < 10.0);
    let mtu = find(&f, "peer.path_mtu");
    assert_eq!(mtu["actual"], "1500", "{mtu}");
    assert_eq!(mtu["status"], "warn", "ddp-25gbe wants 9000 end to end");
    assert_eq!(code, Some(0), "warnings only");

    // Nothing listens on 29999: reachable (a reset), warned.
    let (_, f) = pair.audit("ddp-10gbe", "10.77.1.2:29999");
    assert_eq!(status(&f, "peer.connect"), "warn");
    assert_eq!(status(&f, "peer.rtt_ms"), "pass");

    // Added latency on a's side of the link fails the profile's 10 ms: tc netem where the
    // kernel has it, else a token bucket whose queue a UDP flood keeps full (~100 ms).
    let netem = std::process::Command::new("ip")
        .args([
            "netns", "exec", &pair.a, "tc", "qdisc", "add", "dev", "va", "root",
        ])
        .args(["netem", "delay", "30ms"])
        .output()
        .unwrap();
    let flood_stop = Arc::new(AtomicBool::new(false));
    let flood = if netem.status.success() {
        None
    } else {
        sh(
            "ip",
            &format!(
                "netns exec {} tc qdisc add dev va root tbf rate 1mbit burst 1600 latency 100ms",
                pair.a
            ),
        );
        let stop = flood_stop.clone();
        Some(Pair::within(&pair.a, move || {
            let u = std::net::UdpSocket::bind("10.77.1.1:0").unwrap();
            while !stop.load(Ordering::Relaxed) {
                let _ = u.send_to(&[0u8; 1400], "10.77.1.2:9");
            }
        }))
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (code, f) = pair.audit("ddp-10gbe", "10.77.1.2");
    flood_stop.store(true, Ordering::Relaxed);
    let rtt = find(&f, "peer.rtt_ms");
    assert_eq!(rtt["status"], "fail", "{rtt}");
    assert!(rtt["actual"].as_str().unwrap().parse::<f64>().unwrap() > 20.0);
    assert_eq!(code, Some(1));
    if let Some(f) = flood {
        f.join().unwrap();
    }

    // A peer that does not exist on the link: unreachable, a failure.
    let (code, f) = pair.audit("ddp-10gbe", "10.77.1.9");
    let connect = find(&f, "peer.connect");
    assert_eq!(connect["status"], "fail", "{connect}");
    assert_eq!(connect["actual"], "unreachable");
    assert_eq!(code, Some(1));

    stop.store(true, Ordering::Relaxed);
    listener.join().unwrap();
}

/// PCIe config space with the PCI Express capability at 0x40 whose Device Control holds
/// `control` (bit 4: relaxed ordering enabled).
fn config_with_devctl(control: u16) -> Vec<u8> {
    let mut c = vec![0u8; 256];
    c[0x06] = 1 << 4;
    c[0x34] = 0x40;
    c[0x40] = 0x10;
    c[0x48..0x4a].copy_from_slice(&control.to_le_bytes());
    c
}

#[test]
fn relaxed_ordering_is_judged_against_the_root_port() {
    let t = common::hgx(Default::default());
    // mlx5_0's function: relaxed ordering on; its root port an Intel Broadwell-EP one,
    // which Linux distrusts. mlx5_4's: on, below a root port that handles it.
    t.write_bytes(
        "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:01.0/0000:14:00.0/config",
        &config_with_devctl(0x2810),
    );
    t.write("/sys/devices/pci0000:10/0000:10:01.0/vendor", "0x8086\n");
    t.write("/sys/devices/pci0000:10/0000:10:01.0/device", "0x6f02\n");
    t.write_bytes(
        "/sys/devices/pci0000:90/0000:90:01.0/0000:91:00.0/0000:92:01.0/0000:94:00.0/config",
        &config_with_devctl(0x2810),
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let bad = find(&f, "rdma.mlx5_0.relaxed_ordering");
    assert_eq!(bad["status"], "fail");
    assert!(bad["message"].as_str().unwrap().contains("8086:6f02"));
    assert!(
        bad["fix"]
            .as_str()
            .unwrap()
            .contains("NCCL_IB_PCI_RELAXED_ORDERING=0")
    );
    let good = find(&f, "rdma.mlx5_4.relaxed_ordering");
    assert_eq!(good["status"], "pass");
    assert_eq!(good["actual"], "enabled");
}

#[test]
fn efa_needs_the_aws_ofi_nccl_plugin() {
    let t = common::Tree::new();
    t.numa_node(0, "0-1", Some(4_000_000));
    let efa = "/sys/devices/pci0000:00/0000:00:06.0";
    t.pci(
        efa,
        &common::Pci {
            vendor: 0x1d0f,
            device: 0xefa1,
            class: 0x020000,
            numa_node: 0,
            cpus: "0-1".into(),
            speed: ("16.0", "16.0"),
            width: (8, 8),
            driver: Some("efa"),
            config: None,
        },
    );
    t.link("/sys/class/infiniband/efa_0/device", efa);
    t.write("/sys/class/infiniband/efa_0/ports/1/state", "4: ACTIVE\n");
    t.write(
        "/sys/class/infiniband/efa_0/ports/1/phys_state",
        "5: LinkUp\n",
    );
    t.write(
        "/sys/class/infiniband/efa_0/ports/1/rate",
        "100 Gb/sec (4X EDR)\n",
    );
    t.write(
        "/sys/class/infiniband/efa_0/ports/1/link_layer",
        "Unspecified\n",
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let plugin = find(&f, "nccl.net.plugin");
    assert_eq!(plugin["status"], "fail");
    assert!(plugin["message"].as_str().unwrap().contains("aws-ofi-nccl"));
    assert!(
        f.iter().all(|x| x["id"] != "nccl.net.ibverbs"),
        "EFA alone needs no verbs check"
    );
    assert_eq!(status(&f, "rdma.efa_0.1.state"), "pass");

    t.write(
        "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
        "\x7fELF placeholder\n",
    );
    let (mut cmd, _home) = audit(Some(t.root()));
    cmd.env("NCCL_NET_PLUGIN", "aws-ofi")
        .args(["--profile", "ddp-infiniband", "--only", "nic"]);
    let f = run_json(cmd, 1);
    let plugin = find(&f, "nccl.net.plugin");
    assert_eq!(plugin["status"], "pass");
    assert_eq!(
        plugin["actual"],
        "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    );
    // NCCL_NET_PLUGIN=aws-ofi names libnccl-net-aws-ofi.so, which is not there.
    let named = find(&f, "nccl.net.plugin_named");
    assert_eq!(named["status"], "fail");
    assert!(
        named["expected"]
            .as_str()
            .unwrap()
            .contains("libnccl-net-aws-ofi.so")
    );
}
