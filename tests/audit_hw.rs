//! `gputune audit` of the gpu, nic, numa and platform areas on fixture roots and on this
//! machine, with the real libnccl.so.2 from the nvidia-nccl-cu12 wheel (scripts/test).

use crate::common;

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

use common::{
    End, StopOnDrop, VethPair, absent, assert_field_contains, expect, find, in_netns, ip,
    real_nccl, status,
};

const HW: &str = "gpu,nic,numa,platform";

/// The hwloc snapshot of a 4-node host with a QLogic InfiniBand HCA.
const QLOGIC_NODE: &str = "hwloc/40intel64-2g2n4c+pcilocality/40intel64-2g2n4c+pcilocality.tar.bz2";

fn nccl_venv() -> String {
    std::env::var("GPUTUNE_TEST_NCCL_VENV")
        .expect("GPUTUNE_TEST_NCCL_VENV is not set: run scripts/test, which installs nvidia-nccl-cu12 in a venv")
}

/// `gputune [--root ROOT] audit ARGS... --format json` with no NCCL reachable through the
/// environment and an empty HOME of its own.
struct Audit {
    cmd: Command,
    _home: tempfile::TempDir,
}

/// An [`Audit`] of `root` (this machine when `None`) with the words of `args`.
fn audit(root: Option<&Path>, args: &str) -> Audit {
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
    cmd.arg("audit").args(args.split_whitespace());
    Audit { cmd, _home: home }
}

impl Audit {
    fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Audit {
        self.cmd.env(key, value);
        self
    }

    /// With the real NCCL named by `GPUTUNE_NCCL_LIB`.
    fn nccl(self) -> Audit {
        self.env("GPUTUNE_NCCL_LIB", real_nccl())
    }

    fn arg(mut self, arg: impl AsRef<OsStr>) -> Audit {
        self.cmd.arg(arg);
        self
    }

    /// Runs it, asserting nothing: the JSON document.
    fn doc(mut self) -> Value {
        common::stdout_json(&self.cmd.args(["--format", "json"]).output().unwrap())
    }

    /// Runs it, asserting it exits with `code`: the findings.
    fn findings(mut self, code: i32) -> Vec<Value> {
        let out = self.cmd.args(["--format", "json"]).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            common::text(&out.stdout),
            common::text(&out.stderr)
        );
        common::findings(&common::stdout_json(&out)).to_vec()
    }
}

#[test]
fn healthy_hgx_node_passes_and_reports_the_real_nccls_version_and_path() {
    let t = common::hgx(Default::default());
    let lib = real_nccl();
    let f = audit(
        Some(t.root()),
        &format!("--profile ddp-infiniband --only {HW}"),
    )
    .env("GPUTUNE_NCCL_LIB", &lib)
    .findings(0);
    assert_eq!(find(&f, "gpu.count")["actual"], "8");
    for i in 0..8 {
        expect(&f, &format!("gpu{i}.pcie_link"), "pass").is("actual", "Gen5 x16");
        // The RoCE HCA the GPU shares a switch with, its netdev named in the message.
        expect(&f, &format!("numa.gpu{i}.nic"), "pass")
            .is("actual", &format!("mlx5_{i} via PIX"))
            .has("message", &format!("mlx5_{i} (ens{i}np0)"));
        for id in [
            format!("numa.gpu{i}.node"),
            format!("nic.ens{i}np0.up"),
            format!("link.speed_mbps.ens{i}np0"),
            format!("nic.ens{i}np0.numa"),
        ] {
            assert_eq!(status(&f, &id), "pass", "{id}");
        }
    }
    expect(&f, "driver.version", "pass").is("actual", "550.54.15");
    // The wheel's exact version, and where it was found.
    expect(&f, "nccl.version", "pass")
        .is("actual", "2.32.3")
        .has("message", &lib)
        .has("message", "$GPUTUNE_NCCL_LIB");
    assert_field_contains(find(&f, "gpu.nvml"), "message", "skipped");
    // The root port, switch upstream and downstream port above each of 8 GPUs.
    expect(&f, "platform.acs", "pass").is("actual", "24 bridge(s) checked");
    assert_eq!(find(&f, "iommu.mode")["actual"], "passthrough");
    expect(&f, "cuda.version", "skip");
    expect(&f, "nvidia_peermem.loaded", "pass");
    expect(&f, "numa.nodes", "pass");
    let ifname = expect(&f, "nccl.NCCL_SOCKET_IFNAME", "warn").0;
    assert_eq!(ifname["change"]["type"], "nccl_env");
    assert_eq!(ifname["change"]["key"], "NCCL_SOCKET_IFNAME");
    assert_eq!(ifname["change"]["value"], "ens0np0");
}

#[test]
fn nccl_conf_that_selects_the_nic_passes() {
    let t = common::hgx(Default::default());
    t.file("/etc/nccl.conf", "# by hand\nNCCL_SOCKET_IFNAME=ens\n");
    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic")
        .nccl()
        .findings(0);
    expect(&f, "nccl.NCCL_SOCKET_IFNAME", "pass");
}

#[test]
fn downtrained_links_acs_and_remote_irqs_are_found_with_their_fixes() {
    let t = common::hgx(common::HgxFaults {
        downtrained: true,
        acs_on: true,
        remote_irqs: true,
    });
    let f = audit(Some(t.root()), &format!("--profile ddp-100gbe --only {HW}"))
        .nccl()
        .findings(1);
    expect(&f, "gpu3.pcie_link", "fail")
        .is("actual", "Gen5 x8")
        .is("expected", "Gen5 x16");
    expect(&f, "gpu5.pcie_link", "fail").is("actual", "Gen3 x16");
    expect(&f, "gpu0.pcie_link", "pass");
    let acs = expect(&f, "platform.acs.0000:10:01.0", "warn")
        .is("actual", "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+")
        .0;
    assert_eq!(
        acs["fix"].as_str().unwrap().split(" (").next(),
        Some("setpci -s 0000:10:01.0 ECAP_ACS+0x6.w=0000")
    );
    // NICs 4-7 are on node 1 but their IRQs were steered to node 0's CPUs.
    let irq = expect(&f, "irq.numa_local.ens4np0.108", "warn")
        .has("message", "mlx5_comp0@pci:0000:94:00.0")
        .0;
    assert_eq!(irq["change"]["type"], "irq_affinity");
    assert_eq!(irq["change"]["irq"], 108);
    assert_eq!(irq["change"]["cpus"], common::NODE1_CPUS);
    expect(&f, "irq.numa_local.ens0np0", "pass");
}

#[test]
fn irqbalance_is_named_when_it_would_undo_the_steering() {
    let t = common::hgx(common::HgxFaults {
        remote_irqs: true,
        ..Default::default()
    });
    t.file("/proc/1234/comm", "irqbalance\n");
    let f = audit(Some(t.root()), "--profile ddp-100gbe --only nic")
        .nccl()
        .findings(0);
    let irq = find(&f, "irq.numa_local.ens7np0.114");
    assert_field_contains(irq, "message", "irqbalance is running");
    assert_field_contains(irq, "message", "--banirq=114");
}

#[test]
fn no_nccl_anywhere_fails_a_gpu_node_per_the_profile() {
    let t = common::hgx(Default::default());
    let f = audit(Some(t.root()), "--profile base --only gpu").findings(1);
    expect(&f, "nccl.version", "fail")
        .is("actual", "not found")
        .has("message", "libnccl.so.2 not found; searched");

    // The same with the setting at warn severity: a warning, exit 0.
    let profile = t.root().join("warn-nccl.toml");
    std::fs::write(&profile, "include = [\"base\"]\n[gpu]\n\"nccl.version\" = { version = \">=2.14\", severity = \"warn\" }\n").unwrap();
    let f = audit(Some(t.root()), "--only gpu --profile")
        .arg(&profile)
        .findings(0);
    expect(&f, "nccl.version", "warn");
}

#[test]
fn nccl_found_through_a_python_venv_on_this_node() {
    let f = audit(None, "--profile base --only gpu")
        .env("VIRTUAL_ENV", nccl_venv())
        .findings(0);
    assert_eq!(find(&f, "nccl.version")["actual"], "2.32.3");
    let nccl = find(&f, "nccl.version");
    assert_field_contains(
        nccl,
        "message",
        "site-packages/nvidia/nccl/lib/libnccl.so.2",
    );
    assert_field_contains(nccl, "message", "a Python site-packages");
}

#[test]
fn live_audit_of_this_gpu_less_vm_is_sensible() {
    let f = audit(None, &format!("--only {HW}")).findings(0);
    assert_field_contains(
        find(&f, "driver.version"),
        "message",
        "NVIDIA driver not found",
    );
    expect(&f, "gpu.count", "skip");
    expect(&f, "nccl.version", "skip");
    expect(&f, "numa.nodes", "pass");
    expect(&f, "platform.acs", "skip");
    assert!(absent(&f, "nic.lo.up"), "loopback is never judged");
}

#[test]
fn real_snapshots_audit_without_errors() {
    // The P100 VM: one GPU, no link files, a hypervisor; the 4-node host with its HCA.
    let (_d, vm) = common::extract("ghw/linux-amd64-accel-nvidia/linux-amd64-accel-nvidia.tar.gz");
    // The capture holds sysfs only: no cuDNN in it, which base requires on a GPU node.
    let f = audit(Some(&vm), &format!("--profile base --only {HW}"))
        .nccl()
        .findings(1);
    assert_eq!(find(&f, "cudnn.version")["actual"], "not found");
    assert_eq!(find(&f, "gpu.count")["actual"], "1");
    expect(&f, "gpu0.pcie_link", "skip");
    expect(&f, "numa.gpu0.node", "pass");
    assert!(f.iter().all(|x| x["status"] != "error"), "{f:#?}");

    let (_d, hca) = common::extract(QLOGIC_NODE);
    let v = audit(Some(&hca), &format!("--only {HW}")).doc();
    assert_eq!(
        v["profile"]["name"], "ddp-infiniband",
        "chosen for the RDMA device"
    );
    let f = common::findings(&v);
    expect(f, "nic.ib0.up", "pass");
    expect(f, "link.mtu.ib0", "skip");
    expect(f, "gpu.count", "skip");
}

#[test]
fn peer_route_is_asked_of_the_kernel_over_netlink() {
    // 127.0.0.1 routes through `lo` (a route lookup sends no packet): virtual, so the
    // check says so and falls back to the default route's NIC.
    let f = audit(None, "--profile base --only nic --peer 127.0.0.1").findings(0);
    expect(&f, "nic.peer_route", "skip").has("message", "virtual interface");
    // A peer name that does not resolve fails: MASTER_ADDR would not resolve either.
    let f = audit(
        None,
        "--profile base --only nic --peer no-such-host.invalid",
    )
    .findings(1);
    assert_field_contains(find(&f, "nic.peer_route"), "message", "cannot be resolved");
    assert_eq!(find(&f, "peer.connect")["actual"], "unresolved");
}

/// The real QLogic InfiniBand node (hwloc snapshot): a 1 GbE management eth0 that is up,
/// ib0 (IPoIB) and qib0 at 4X QDR. The HCA is judged, eth0 is listed and never failed.
#[test]
fn infiniband_node_is_judged_on_its_hca_not_its_management_port() {
    let (_d, root) = common::extract(QLOGIC_NODE);
    let f = audit(Some(&root), "--profile ddp-infiniband --only nic").findings(1);
    expect(&f, "rdma.qib0.1.state", "pass").is("actual", "ACTIVE, LinkUp");
    // QDR is below the profile's EDR.
    expect(&f, "rdma.rate_mbps.qib0.1", "fail")
        .is("actual", "40000")
        .has("message", "40 Gb/sec (4X QDR)");
    assert!(absent(&f, "link.speed_mbps.eth0"));
    expect(&f, "nic.eth0.role", "skip");
    expect(&f, "nic.ib0.up", "pass");
    expect(&f, "link.speed_mbps.ib0", "skip").has("message", "IPoIB");
    // No rdma-core in the snapshot: NCCL would fall back to sockets.
    expect(&f, "nccl.net.ibverbs", "fail");

    // A site profile for this (older) fabric passes it, verbs library aside.
    let (_site, file) = common::temp_file(
        "qdr.toml",
        "include = [\"ddp-infiniband\"]\n[nic]\n\"rdma.rate_mbps\" = { min = 40000 }\n",
    );
    let f = audit(Some(&root), "--only nic --profile")
        .arg(&file)
        .findings(1);
    expect(&f, "rdma.rate_mbps.qib0.1", "pass");
}

#[test]
fn downtrained_and_down_hca_ports_fail_with_their_rate() {
    let t = common::hgx(Default::default());
    let port = |hca: &str, file: &str, text: &str| {
        t.file(&format!("/sys/class/infiniband/{hca}/ports/1/{file}"), text)
    };
    port("mlx5_3", "rate", "10 Gb/sec (4X SDR)\n");
    port("mlx5_5", "state", "1: DOWN\n");
    port("mlx5_5", "phys_state", "2: Polling\n");
    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic").findings(1);
    expect(&f, "rdma.rate_mbps.mlx5_3.1", "fail").is("actual", "10000");
    expect(&f, "rdma.mlx5_5.1.state", "fail")
        .is("actual", "DOWN, Polling")
        .has("fix", "cable");
    expect(&f, "rdma.rate_mbps.mlx5_0.1", "pass");
    expect(&f, "rdma.rate_mbps.mlx5_5.1", "skip");
    expect(&f, "rdma.mlx5_0.1.gid", "pass");

    // Under ddp-roce: the RoCE netdev of mlx5_2 left at MTU 1500 runs IB MTU 1024.
    t.file(
        "/sys/devices/pci0000:50/0000:50:01.0/0000:51:00.0/0000:52:01.0/0000:54:00.0/net/ens2np0/mtu",
        "1500\n",
    );
    let f = audit(Some(t.root()), "--profile ddp-roce --only nic").findings(1);
    expect(&f, "rdma.active_mtu.mlx5_2.1", "warn")
        .is("actual", "1024")
        .has("fix", "ens2np0");
    expect(&f, "rdma.active_mtu.mlx5_0.1", "pass");
    expect(&f, "rdma.link_layer.mlx5_0.1", "pass");
}

#[test]
fn firmware_rules_are_matched_by_driver_name() {
    let t = common::hgx(Default::default());
    t.file("/sys/class/infiniband/mlx5_2/fw_ver", "22.31.1014\n");
    let (_site, file) = common::temp_file(
        "fleet.toml",
        "include = [\"ddp-infiniband\"]\n[nic]\n\"firmware.mlx5_core\" = { version = \">=28.39\" }\n\"firmware.bnxt_en\" = { version = \">=230\" }\n",
    );
    let f = audit(Some(t.root()), "--only nic --profile")
        .arg(&file)
        .findings(1);
    expect(&f, "firmware.mlx5_core.mlx5_2", "fail")
        .is("actual", "22.31.1014")
        .has("message", "/sys/class/infiniband/mlx5_2/fw_ver");
    expect(&f, "firmware.mlx5_core.mlx5_0", "pass");
    expect(&f, "firmware.bnxt_en", "skip");
}

#[test]
fn nccl_configuration_is_read_as_nccl_reads_it_and_validated() {
    let t = common::hgx(Default::default());
    t.file(
        "/etc/nccl.conf",
        "NCCL_SOCKET_IFNAME=ens\nNCCL_IB_TIMEOUT=22\n",
    );
    // ~/.nccl.conf of the audit's $HOME, resolved under the root like every host path.
    t.file("/root/.nccl.conf", "NCCL_IB_TIMOUT=22\n");
    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic")
        .env("HOME", "/root")
        .env("NCCL_SOCKET_NTHREADS", "32")
        .env("NCCL_IB_HCA", "=mlx5_0,mlx5_9")
        .env("NCCL_IB_DISABLE", "1")
        .env("NCCL_IB_GID_INDEX", "2")
        .env("NCCL_ASYNC_ERROR_HANDLING", "1")
        .findings(1);
    expect(&f, "nccl.env.NCCL_SOCKET_NTHREADS", "fail").has("actual", "environment");
    expect(&f, "nccl.env.NCCL_IB_HCA.present", "fail").has("message", "mlx5_9");
    expect(&f, "nccl.env.NCCL_IB_DISABLE", "fail");
    expect(&f, "nccl.env.NCCL_ASYNC_ERROR_HANDLING", "warn");
    let typo = find(&f, "nccl.env.NCCL_IB_TIMOUT");
    assert_field_contains(typo, "message", "NCCL_IB_TIMEOUT");
    assert_field_contains(typo, "actual", ".nccl.conf:1");
    // Index 2 is the IPv4 address's RoCE v1 entry: NCCL's "error 12".
    expect(&f, "rdma.mlx5_0.1.gid", "fail").has("fix", "NCCL_IB_GID_INDEX=3");
    expect(&f, "nccl.env.NCCL_SOCKET_IFNAME.present", "pass");

    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic")
        .env("NCCL_SOCKET_IFNAME", "=eth9")
        .findings(1);
    expect(&f, "nccl.env.NCCL_SOCKET_IFNAME.present", "fail").has("actual", "selects no interface");
}

/// A multi-homed node: 1 GbE eth0 holds the default route, 25 GbE ens1f0 is the fabric.
fn multi_homed() -> common::Tree {
    let t = common::Tree::new();
    t.numa_node(0, "0-1", Some(4_000_000));
    t.loopback();
    for (i, name, speed, driver) in [(3u32, "eth0", 1000i64, "igb"), (4, "ens1f0", 25_000, "ice")] {
        let path = format!("/sys/devices/pci0000:00/0000:00:0{i}.0");
        let nic = common::Pci::of(0x8086, 0x1521, 0x020000, driver)
            .on(-1, "0-1")
            .link(("8.0", "8.0"), (8, 8));
        t.pci(&path, &nic);
        t.netdev(&path, name, speed, 9000, true, i);
    }
    t.file(
        "/proc/net/route",
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\neth0\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
    );
    t
}

#[test]
fn multi_homed_node_judges_and_configures_the_fast_nic() {
    let t = multi_homed();
    let f = audit(Some(t.root()), "--profile ddp-25gbe --only nic").findings(0);
    expect(&f, "link.speed_mbps.ens1f0", "pass");
    assert!(absent(&f, "link.speed_mbps.eth0"));
    expect(&f, "nic.eth0.role", "skip");
    assert_eq!(find(&f, "nccl.NCCL_SOCKET_IFNAME")["expected"], "ens1f0");

    let out = common::gputune()
        .arg("--root")
        .arg(t.root())
        .args("apply --profile ddp-25gbe --only nic --dry-run".split_whitespace())
        .output()
        .unwrap();
    let text = common::text(&out.stdout);
    assert!(out.status.success(), "{text}{}", common::text(&out.stderr));
    assert!(text.contains("+NCCL_SOCKET_IFNAME=ens1f0\n"), "{text}");
    assert!(!text.contains("=eth0"), "{text}");
}

#[test]
fn cudnn_and_torchs_cuda_are_found_and_judged() {
    let t = common::hgx(Default::default());
    let f = audit(Some(t.root()), "--profile base --only gpu")
        .nccl()
        .findings(0);
    expect(&f, "cudnn.version", "pass")
        .is("actual", "9.1.0.70")
        .has("message", "nvidia_cudnn_cu12-9.1.0.70.dist-info");
    expect(&f, "torch.cuda", "pass").is("actual", "12.4");

    // An old cuDNN from the system packages (header next to it) and a torch built for
    // CUDA 12.8 on driver 550 (CUDA 12.4).
    let site = t.root().join("usr/local/lib/python3.11/dist-packages");
    std::fs::remove_dir_all(site.join("nvidia")).unwrap();
    std::fs::remove_dir_all(site.join("nvidia_cudnn_cu12-9.1.0.70.dist-info")).unwrap();
    t.file(
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8.6.0",
        "\x7fELF placeholder\n",
    );
    t.sys_link(
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8",
        "/usr/lib/x86_64-linux-gnu/libcudnn.so.8.6.0",
    );
    t.file(
        "/usr/include/x86_64-linux-gnu/cudnn_version_v8.h",
        "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 6\n#define CUDNN_PATCHLEVEL 0\n",
    );
    t.file(
        "/usr/local/lib/python3.11/dist-packages/torch/version.py",
        "__version__ = '2.7.0+cu128'\ncuda: Optional[str] = '12.8'\n",
    );
    let f = audit(Some(t.root()), "--profile base --only gpu")
        .nccl()
        .findings(1);
    expect(&f, "cudnn.version", "fail")
        .is("actual", "8.6.0")
        .has("message", "cudnn_version_v8.h");
    expect(&f, "torch.cuda", "warn").has("message", "minor version compatibility");
}

/// Two network namespaces joined by a veth pair: `va` at 10.77.N.1 in `a`, `vb` at
/// 10.77.N.2 in `b`, each with its MTU.
fn pair(tag: u8, mtu_a: u32, mtu_b: u32) -> VethPair {
    let id = std::process::id();
    let (addr_a, addr_b) = (format!("10.77.{tag}.1"), format!("10.77.{tag}.2"));
    let pair = VethPair::new(
        format!("gtpa{tag}-{id}"),
        format!("gtpb{tag}-{id}"),
        End {
            dev: "va",
            addr: &addr_a,
        },
        End {
            dev: "vb",
            addr: &addr_b,
        },
    );
    ip(&format!("-n {} link set va mtu {mtu_a}", pair.a));
    ip(&format!("-n {} link set vb mtu {mtu_b}", pair.b));
    pair
}

/// `gputune audit --only nic --profile PROFILE --peer PEER` run inside namespace `ns`: its
/// exit code and findings.
fn audit_in(ns: &str, profile: &str, peer: &str) -> (Option<i32>, Vec<Value>) {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, common::bin()])
        .args(["audit", "--only", "nic", "--format", "json"])
        .args(["--profile", profile, "--peer", peer])
        .env_remove("GPUTUNE_ROOT")
        .output()
        .unwrap();
    let doc = common::stdout_json(&out);
    (out.status.code(), common::findings(&doc).to_vec())
}

/// A listener on the peer's rendezvous port, in namespace `ns`, until the guard is stopped
/// or dropped.
fn listen(ns: &str, addr: &'static str) -> StopOnDrop {
    let stop = Arc::new(AtomicBool::new(false));
    StopOnDrop::new(
        stop.clone(),
        in_netns(ns, move || {
            let l = std::net::TcpListener::bind(addr).unwrap();
            l.set_nonblocking(true).unwrap();
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }),
    )
}

#[test]
fn peer_rendezvous_port_rtt_and_path_mtu_between_namespaces() {
    // Node a's interface carries jumbo frames, node b's only 1500: the path MTU is 1500.
    let pair = pair(1, 9000, 1500);
    // The listener and the flood below stop (their guards dropped) even when an audit or an
    // assertion fails.
    let listener = listen(&pair.b, "10.77.1.2:29500");

    let (code, f) = audit_in(&pair.a, "ddp-25gbe", "10.77.1.2");
    expect(&f, "peer.connect", "pass").has("expected", "10.77.1.2:29500");
    let rtt = expect(&f, "peer.rtt_ms", "pass").0;
    assert!(rtt["actual"].as_str().unwrap().parse::<f64>().unwrap() < 10.0);
    // ddp-25gbe wants 9000 end to end.
    expect(&f, "peer.path_mtu", "warn").is("actual", "1500");
    assert_eq!(code, Some(0), "warnings only");

    // Nothing listens on 29999: reachable (a reset), warned.
    let (_, f) = audit_in(&pair.a, "ddp-10gbe", "10.77.1.2:29999");
    expect(&f, "peer.connect", "warn");
    expect(&f, "peer.rtt_ms", "pass");

    // Added latency on a's side of the link fails the profile's 10 ms: tc netem where the
    // kernel has it, else a token bucket whose queue a UDP flood keeps full (~100 ms).
    let netem = std::process::Command::new("ip")
        .args(["netns", "exec", &pair.a])
        .args("tc qdisc add dev va root netem delay 30ms".split_whitespace())
        .output()
        .unwrap();
    let flood = if netem.status.success() {
        None
    } else {
        ip(&format!(
            "netns exec {} tc qdisc add dev va root tbf rate 1mbit burst 1600 latency 100ms",
            pair.a
        ));
        let stop = Arc::new(AtomicBool::new(false));
        Some(StopOnDrop::new(
            stop.clone(),
            in_netns(&pair.a, move || {
                let u = std::net::UdpSocket::bind("10.77.1.1:0").unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let _ = u.send_to(&[0u8; 1400], "10.77.1.2:9");
                }
            }),
        ))
    };
    std::thread::sleep(Duration::from_millis(300));
    let (code, f) = audit_in(&pair.a, "ddp-10gbe", "10.77.1.2");
    if let Some(flood) = flood {
        flood.stop();
    }
    let rtt = expect(&f, "peer.rtt_ms", "fail").0;
    assert!(rtt["actual"].as_str().unwrap().parse::<f64>().unwrap() > 20.0);
    assert_eq!(code, Some(1));

    // A peer that does not exist on the link: unreachable, a failure.
    let (code, f) = audit_in(&pair.a, "ddp-10gbe", "10.77.1.9");
    expect(&f, "peer.connect", "fail").is("actual", "unreachable");
    assert_eq!(code, Some(1));

    listener.stop();
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
    t.bytes(
        "/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:01.0/0000:14:00.0/config",
        &config_with_devctl(0x2810),
    );
    t.file("/sys/devices/pci0000:10/0000:10:01.0/vendor", "0x8086\n");
    t.file("/sys/devices/pci0000:10/0000:10:01.0/device", "0x6f02\n");
    t.bytes(
        "/sys/devices/pci0000:90/0000:90:01.0/0000:91:00.0/0000:92:01.0/0000:94:00.0/config",
        &config_with_devctl(0x2810),
    );
    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic").findings(1);
    expect(&f, "rdma.mlx5_0.relaxed_ordering", "fail")
        .has("message", "8086:6f02")
        .has("fix", "NCCL_IB_PCI_RELAXED_ORDERING=0");
    expect(&f, "rdma.mlx5_4.relaxed_ordering", "pass").is("actual", "enabled");
}

#[test]
fn efa_needs_the_aws_ofi_nccl_plugin() {
    let t = common::Tree::new();
    t.numa_node(0, "0-1", Some(4_000_000));
    let efa = "/sys/devices/pci0000:00/0000:00:06.0";
    let adapter = common::Pci::of(0x1d0f, 0xefa1, 0x020000, "efa")
        .on(0, "0-1")
        .link(("16.0", "16.0"), (8, 8));
    t.pci(efa, &adapter);
    t.sys_link("/sys/class/infiniband/efa_0/device", efa);
    for (file, text) in [
        ("state", "4: ACTIVE\n"),
        ("phys_state", "5: LinkUp\n"),
        ("rate", "100 Gb/sec (4X EDR)\n"),
        ("link_layer", "Unspecified\n"),
    ] {
        t.file(&format!("/sys/class/infiniband/efa_0/ports/1/{file}"), text);
    }
    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic").findings(1);
    expect(&f, "nccl.net.plugin", "fail").has("message", "aws-ofi-nccl");
    assert!(
        absent(&f, "nccl.net.ibverbs"),
        "EFA alone needs no verbs check"
    );
    expect(&f, "rdma.efa_0.1.state", "pass");

    t.file(
        "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so",
        "\x7fELF placeholder\n",
    );
    let f = audit(Some(t.root()), "--profile ddp-infiniband --only nic")
        .env("NCCL_NET_PLUGIN", "aws-ofi")
        .findings(1);
    expect(&f, "nccl.net.plugin", "pass")
        .is("actual", "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
    // NCCL_NET_PLUGIN=aws-ofi names libnccl-net-aws-ofi.so, which is not there.
    expect(&f, "nccl.net.plugin_named", "fail").has("expected", "libnccl-net-aws-ofi.so");
}

/// An AWS p4d.24xlarge (constructed, tests/fixtures/aws-p4d/SOURCE.txt): its EFA devices
/// have no netdev, its only interface is the ENA eth0 on socket 0. Each GPU is judged
/// against the EFA device behind its PCIe switch, never against eth0 (which would put
/// GPUs 4-7 across the socket interconnect).
#[test]
fn efa_node_judges_each_gpu_against_its_efa_device_not_the_ena_port() {
    let root = common::fixture("aws-p4d");
    let f = audit(Some(&root), "--profile ddp-roce --only numa,nic").findings(1);
    for (gpu, efa) in [(0, 0), (3, 1), (4, 2), (7, 3)] {
        expect(&f, &format!("numa.gpu{gpu}.nic"), "pass")
            .is("actual", &format!("efa_{efa} via PIX"))
            .has("message", "aws-ofi-nccl");
    }
    assert!(
        f.iter()
            .all(|x| !x["actual"].as_str().unwrap().contains("eth0"))
    );
    // EFA's link layer is neither InfiniBand nor RoCE: the profile's rule does not apply.
    expect(&f, "rdma.link_layer.efa_0.1", "skip").has("message", "EFA");
    expect(&f, "rdma.efa_0.1.state", "pass").has("message", "Unknown");
}

/// A POWER9 node (constructed, tests/fixtures/power9-ib/SOURCE.txt): GPUs 0-1 on socket 0
/// beside the 1 GbE management port, GPUs 2-3 on socket 8 beside the InfiniBand HCA
/// (no IPoIB netdev). GPUs 0-1 warn: their only HCA is across the socket interconnect,
/// whatever port sits beside them. Its bridges' config space was not captured, so ACS
/// was never read: a skip, not a pass.
#[test]
fn power9_gpus_are_judged_against_the_hca_not_the_management_port() {
    let root = common::fixture("power9-ib");
    let f = audit(
        Some(&root),
        &format!("--profile ddp-infiniband --only {HW}"),
    )
    .findings(1);
    for gpu in [0, 1] {
        expect(&f, &format!("numa.gpu{gpu}.nic"), "warn").is("actual", "mlx5_0 via SYS");
    }
    for gpu in [2, 3] {
        expect(&f, &format!("numa.gpu{gpu}.nic"), "pass").is("actual", "mlx5_0 via NODE");
    }
    assert!(
        f.iter()
            .filter(|x| x["area"] == "numa")
            .all(|x| !x["message"].as_str().unwrap().contains("enP5p1s0f0")),
        "{f:#?}"
    );
    expect(&f, "nic.enP5p1s0f0.role", "skip");
    expect(&f, "platform.acs", "skip")
        .has("message", "cannot read ACS of any of the 8 bridge(s)")
        .has(
            "message",
            "/sys/bus/pci/devices/0004:00:00.0/config is missing",
        );
}

/// HCA port files a driver or a trimmed capture leaves out are named as missing, never
/// read as a value: no rate is no "`` is not a rate", no link_layer is not InfiniBand, no
/// phys_state is not a dangling "ACTIVE, ".
#[test]
fn missing_hca_port_files_are_named_not_guessed() {
    let t = common::hgx(Default::default());
    let port = |hca: &str, file: &str| {
        std::fs::remove_file(
            t.root()
                .join(format!("sys/class/infiniband/{hca}/ports/1/{file}")),
        )
        .unwrap()
    };
    port("mlx5_1", "rate");
    port("mlx5_2", "link_layer");
    port("mlx5_3", "phys_state");
    let f = audit(Some(t.root()), "--profile ddp-roce --only nic").findings(0);
    expect(&f, "rdma.rate_mbps.mlx5_1.1", "skip").has(
        "message",
        "/sys/class/infiniband/mlx5_1/ports/1/rate is missing",
    );
    expect(&f, "rdma.mlx5_1.1.state", "pass").has("message", "rate unknown");
    expect(&f, "rdma.link_layer.mlx5_2.1", "skip").has(
        "message",
        "/sys/class/infiniband/mlx5_2/ports/1/link_layer is missing",
    );
    expect(&f, "rdma.active_mtu.mlx5_2.1", "skip").has("message", "link_layer is missing");
    let state = expect(&f, "rdma.mlx5_2.1.state", "pass")
        .has("message", "link layer unknown")
        .0;
    assert!(
        !state["message"].as_str().unwrap().contains("InfiniBand"),
        "{state:#}"
    );
    expect(&f, "rdma.mlx5_3.1.state", "pass")
        .is("actual", "ACTIVE, physical state unknown")
        .has(
            "message",
            "/sys/class/infiniband/mlx5_3/ports/1/phys_state missing",
        );
    expect(&f, "rdma.link_layer.mlx5_0.1", "pass").is("actual", "Ethernet");

    let out = common::gputune()
        .args(["topo", "--format", "json", "--root"])
        .arg(t.root())
        .output()
        .unwrap();
    let v = common::stdout_json(&out);
    assert!(
        v["rdma_devices"][2]["ports"][0]["link_layer"].is_null(),
        "{v:#}"
    );
    assert!(
        v["rdma_devices"][3]["ports"][0]["phys_state"].is_null(),
        "{v:#}"
    );
}
