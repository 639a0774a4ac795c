#![allow(dead_code)]
//! Fixture roots for the hardware tests: the real snapshots in `tests/fixtures/` (extracted
//! at test time so their symlinks stay intact and the repository small), and trees built
//! here for what no snapshot has: an 8-GPU, 2-socket HGX-style node, a node with a
//! downtrained GPU link, and small topologies for `gputune pin`.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use tempfile::TempDir;

use super::Tree;

/// Extracts `tests/fixtures/<archive>` and returns the temp dir and the root inside it.
pub fn extract(archive: &str) -> (TempDir, PathBuf) {
    let src = super::fixture(archive);
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("tar")
        .arg("xf")
        .arg(&src)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("tar runs (scripts/test installs bzip2 for .tar.bz2)");
    assert!(status.success(), "extracting {}", src.display());
    // hwloc archives hold one top folder (the root); ghw archives are the root itself.
    let entries: Vec<PathBuf> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let root = match entries.as_slice() {
        [only] if !only.ends_with("sys") && !only.ends_with("proc") => only.clone(),
        _ => dir.path().to_path_buf(),
    };
    (dir, root)
}

/// The one fixture builder ([`super::Tree`]), with the sysfs shapes the hardware tests need.
impl Tree {
    pub fn numa_node(&self, id: u32, cpus: &str, mem_kib: Option<u64>) {
        let dir = format!("/sys/devices/system/node/node{id}");
        self.file(&format!("{dir}/cpulist"), &format!("{cpus}\n"));
        if let Some(kib) = mem_kib {
            self.file(
                &format!("{dir}/meminfo"),
                &format!(
                    "Node {id} MemTotal:       {kib} kB\nNode {id} MemFree:        {kib} kB\n"
                ),
            );
        }
    }

    /// A PCI function at `path` (`/sys/devices/pci0000:10/0000:10:01.0/...`), listed in
    /// `/sys/bus/pci/devices`.
    pub fn pci(&self, path: &str, dev: &Pci) {
        let bdf = path.rsplit('/').next().unwrap();
        for (file, value) in [
            ("vendor", format!("0x{:04x}", dev.vendor)),
            ("device", format!("0x{:04x}", dev.device)),
            ("class", format!("0x{:06x}", dev.class)),
            ("numa_node", dev.numa_node.to_string()),
            ("local_cpulist", dev.cpus.clone()),
            ("current_link_speed", format!("{} GT/s PCIe", dev.speed.0)),
            ("max_link_speed", format!("{} GT/s PCIe", dev.speed.1)),
            ("current_link_width", dev.width.0.to_string()),
            ("max_link_width", dev.width.1.to_string()),
        ] {
            self.file(&format!("{path}/{file}"), &format!("{value}\n"));
        }
        if let Some(driver) = dev.driver {
            self.dir(&format!("/sys/bus/pci/drivers/{driver}"));
            self.sys_link(
                &format!("{path}/driver"),
                &format!("/sys/bus/pci/drivers/{driver}"),
            );
        }
        if let Some(config) = &dev.config {
            self.bytes(&format!("{path}/config"), config);
        }
        self.sys_link(&format!("/sys/bus/pci/devices/{bdf}"), path);
    }

    /// A network interface of the PCI function at `pci_path`.
    pub fn netdev(&self, pci_path: &str, name: &str, speed: i64, mtu: u32, up: bool, ifindex: u32) {
        let dir = format!("{pci_path}/net/{name}");
        self.file(&format!("{dir}/speed"), &format!("{speed}\n"));
        self.file(&format!("{dir}/mtu"), &format!("{mtu}\n"));
        self.file(
            &format!("{dir}/operstate"),
            if up { "up\n" } else { "down\n" },
        );
        self.file(&format!("{dir}/type"), "1\n");
        self.file(&format!("{dir}/ifindex"), &format!("{ifindex}\n"));
        self.sys_link(&format!("{dir}/device"), pci_path);
        self.sys_link(&format!("/sys/class/net/{name}"), &dir);
    }

    /// The loopback interface, which every node has and gputune must skip.
    pub fn loopback(&self) {
        let dir = "/sys/devices/virtual/net/lo";
        self.file(&format!("{dir}/mtu"), "65536\n");
        self.file(&format!("{dir}/operstate"), "unknown\n");
        self.file(&format!("{dir}/type"), "772\n");
        self.sys_link("/sys/class/net/lo", dir);
    }
}

/// What a fixture PCI function says about itself.
pub struct Pci {
    pub vendor: u32,
    pub device: u32,
    pub class: u32,
    pub numa_node: i32,
    pub cpus: String,
    /// GT/s (current, max).
    pub speed: (&'static str, &'static str),
    /// Lanes (current, max).
    pub width: (u32, u32),
    pub driver: Option<&'static str>,
    pub config: Option<Vec<u8>>,
}

impl Pci {
    /// `vendor:device` of `class`, bound to `driver`, trained at its maximum (Gen5 x16), on
    /// no NUMA node and no local CPUs.
    pub fn of(vendor: u32, device: u32, class: u32, driver: &'static str) -> Pci {
        Pci {
            vendor,
            device,
            class,
            numa_node: -1,
            cpus: String::new(),
            speed: ("32.0", "32.0"),
            width: (16, 16),
            driver: Some(driver),
            config: None,
        }
    }

    /// An H100 SXM (10de:2330) bound to nvidia.
    pub fn h100() -> Pci {
        Pci::of(0x10de, 0x2330, 0x030200, "nvidia")
    }

    /// On NUMA node `node` (-1: unknown), local to `cpus`.
    pub fn on(self, node: i32, cpus: &str) -> Pci {
        Pci {
            numa_node: node,
            cpus: cpus.into(),
            ..self
        }
    }

    /// Trained at `speed` GT/s and `width` lanes, each (current, max).
    pub fn link(self, speed: (&'static str, &'static str), width: (u32, u32)) -> Pci {
        Pci {
            speed,
            width,
            ..self
        }
    }
}

/// 4 KiB of config space with an ACS capability at 0x148 whose control register is `acs`.
fn config_with_acs(acs: u16) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x148 << 20)).to_le_bytes());
    c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
    c[0x14e..0x150].copy_from_slice(&acs.to_le_bytes());
    c
}

/// What to break in the HGX fixture.
#[derive(Default, Clone, Copy)]
pub struct HgxFaults {
    /// GPU3 trained at x8 of x16, GPU5 at Gen3 of Gen5.
    pub downtrained: bool,
    /// ACS left on (SrcValid, ReqRedir, CmpltRedir, UpstreamFwd) on the switch ports.
    pub acs_on: bool,
    /// NIC interrupts of node-1 NICs steered to node-0 CPUs.
    pub remote_irqs: bool,
}

pub const NODE0_CPUS: &str = "0-15,32-47";
pub const NODE1_CPUS: &str = "16-31,48-63";

/// An HGX H100-style node, as NVIDIA documents the DGX H100: 2 sockets (here 32 cores,
/// 64 threads), 8 GPUs (10de:2330, Gen5 x16) and 8 ConnectX-7 400 Gb/s NICs (15b3:1021,
/// mlx5_core), each GPU paired with a NIC behind one PCIe switch (root port → switch
/// upstream port → two downstream ports), pairs 0-3 on node 0 and 4-7 on node 1. Driver
/// 550.54.15 loaded, nvidia-peermem loaded, IOMMU in pass-through.
pub fn hgx(faults: HgxFaults) -> Tree {
    let t = Tree::new();
    t.numa_node(0, NODE0_CPUS, Some(1_056_000_000));
    t.numa_node(1, NODE1_CPUS, Some(1_056_000_000));
    t.file("/sys/devices/system/cpu/online", "0-63\n");
    t.loopback();
    let acs = if faults.acs_on { 0x001d } else { 0 };
    let mut interrupts = String::from("            CPU0       CPU1\n");
    for i in 0..8u32 {
        let node = i / 4;
        let cpus = if node == 0 { NODE0_CPUS } else { NODE1_CPUS };
        let hb = 0x10 + i * 0x20;
        let root = format!("/sys/devices/pci0000:{hb:02x}");
        let rp = format!("{root}/0000:{hb:02x}:01.0");
        let up = format!("{rp}/0000:{:02x}:00.0", hb + 1);
        let dn_gpu = format!("{up}/0000:{:02x}:00.0", hb + 2);
        let dn_nic = format!("{up}/0000:{:02x}:01.0", hb + 2);
        let gpu = format!("{dn_gpu}/0000:{:02x}:00.0", hb + 3);
        let nic = format!("{dn_nic}/0000:{:02x}:00.0", hb + 4);
        let bridge = |path: &str| {
            let port = Pci::of(0x1000, 0xc030, 0x060400, "pcieport").on(node as i32, cpus);
            let config = Some(config_with_acs(acs));
            t.pci(path, &Pci { config, ..port })
        };
        for b in [&rp, &up, &dn_gpu, &dn_nic] {
            bridge(b);
        }
        let mut gpu_speed = ("32.0", "32.0");
        let mut gpu_width = (16, 16);
        if faults.downtrained && i == 3 {
            gpu_width = (8, 16);
        }
        if faults.downtrained && i == 5 {
            gpu_speed = ("8.0", "32.0");
        }
        let on_node = |pci: Pci| pci.on(node as i32, cpus);
        t.pci(&gpu, &on_node(Pci::h100()).link(gpu_speed, gpu_width));
        let cx7 = Pci::of(0x15b3, 0x1021, 0x020000, "mlx5_core");
        t.pci(&nic, &on_node(cx7));
        let name = format!("ens{i}np0");
        t.netdev(&nic, &name, 400_000, 9000, true, 10 + i);
        let ib = format!("/sys/class/infiniband/mlx5_{i}");
        t.sys_link(&format!("{ib}/device"), &nic);
        t.file(&format!("{ib}/ports/1/state"), "4: ACTIVE\n");
        t.file(&format!("{ib}/ports/1/rate"), "400 Gb/sec (4X NDR)\n");
        t.file(&format!("{ib}/ports/1/phys_state"), "5: LinkUp\n");
        t.file(&format!("{ib}/ports/1/link_layer"), "Ethernet\n");
        t.file(&format!("{ib}/fw_ver"), "28.39.1002\n");
        // RoCE GID table: link-local v1/v2 at 0/1, the IPv4 address's v1/v2 at 2/3.
        for (g, gid, kind) in [
            (0, "fe80:0000:0000:0000:0e42:a1ff:fe00:0000", "IB/RoCE v1"),
            (1, "fe80:0000:0000:0000:0e42:a1ff:fe00:0000", "RoCE v2"),
            (2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"),
            (3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"),
        ] {
            t.file(&format!("{ib}/ports/1/gids/{g}"), &format!("{gid}\n"));
            t.file(
                &format!("{ib}/ports/1/gid_attrs/types/{g}"),
                &format!("{kind}\n"),
            );
            t.file(
                &format!("{ib}/ports/1/gid_attrs/ndevs/{g}"),
                &format!("{name}\n"),
            );
        }
        t.file(
            &format!("{ib}/ports/1/gids/4"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        );
        for q in 0..2u32 {
            let irq = 100 + i * 2 + q;
            t.file(&format!("{nic}/msi_irqs/{irq}"), "msix\n");
            let steer = if faults.remote_irqs { NODE0_CPUS } else { cpus };
            t.file(
                &format!("/proc/irq/{irq}/smp_affinity_list"),
                &format!("{steer}\n"),
            );
            interrupts += &format!(
                " {irq}:          5          0  PCI-MSIX-{} {q}-edge      mlx5_comp{q}@pci:{}\n",
                &nic[nic.len() - 12..],
                &nic[nic.len() - 12..]
            );
        }
    }
    t.file("/proc/interrupts", &interrupts);
    t.file(
        "/proc/cmdline",
        "BOOT_IMAGE=/vmlinuz-6.8.0 root=/dev/md0 ro iommu=pt\n",
    );
    t.file(
        "/proc/cpuinfo",
        "processor\t: 0\nflags\t\t: fpu vme de pse tsc msr pae mce\n",
    );
    t.file(
        "/proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0\n",
    );
    t.file("/sys/module/nvidia/version", "550.54.15\n");
    // rdma-core's verbs library, which NCCL's IB transport loads (a placeholder file: only
    // its presence is judged, nothing under a fixture root is ever loaded).
    t.file(
        "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        "\x7fELF placeholder\n",
    );
    // PyTorch's wheels as pip lays them out: cuDNN's wheel (found by its metadata) and
    // torch built for CUDA 12.4, which driver 550 supports.
    let site = "/usr/local/lib/python3.11/dist-packages";
    t.file(
        &format!("{site}/nvidia/cudnn/lib/libcudnn.so.9"),
        "\x7fELF placeholder\n",
    );
    t.file(
        &format!("{site}/nvidia_cudnn_cu12-9.1.0.70.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: 9.1.0.70\n",
    );
    t.file(
        &format!("{site}/torch/version.py"),
        "__version__ = '2.4.0+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\nhip: Optional[str] = None\n",
    );
    t.dir("/sys/module/nvidia_peermem");
    for g in 0..4 {
        t.file(&format!("/sys/kernel/iommu_groups/{g}/type"), "identity\n");
    }
    t
}

/// A topology for `gputune pin` whose CPUs exist on this 2-CPU machine: GPU0 on node 0
/// (CPU 1, with memory), GPU1 on node 1 (CPU 0, no memory of its own).
pub fn pin_fixture() -> Tree {
    let t = Tree::new();
    t.numa_node(0, "1", Some(4_000_000));
    t.numa_node(1, "0", None);
    for (i, node, cpus) in [(0u32, 0, "1"), (1, 1, "0")] {
        t.pci(
            &format!("/sys/devices/pci0000:00/0000:00:0{}.0", 4 + i),
            &Pci::h100().on(node, cpus),
        );
    }
    t
}

/// Two NUMA nodes and one GPU whose firmware reports no node (`numa_node = -1`).
pub fn unknown_numa_fixture() -> Tree {
    let t = Tree::new();
    t.numa_node(0, "0", Some(4_000_000));
    t.numa_node(1, "1", Some(4_000_000));
    t.pci(
        "/sys/devices/pci0000:00/0000:00:04.0",
        &Pci::h100().on(-1, "0-1"),
    );
    t
}
