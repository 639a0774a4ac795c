//! `gputune-checks(7)`: every check id with what it reads, from the profile keys' declarations
//! and [`CHECKS`] for the checks no key names.

use crate::finding::Area;

use super::{area_is_sysctl, header, para, term};

/// A check, by id pattern (UPPER-CASE words stand for names: NIC, HCA, PORT, N, KEY...),
/// with what it reads.
pub(crate) struct CheckDoc {
    pub id: &'static str,
    pub area: Area,
    pub reads: &'static str,
}

/// What the checks named by profile keys read, and the forms their ids take (a key judged
/// per NIC is `link.speed_mbps.NIC`). A key missing here fails `every_key_is_documented`.
const KEY_CHECKS: &[(&str, &[&str], &str)] = &[
    (
        "swap.devices",
        &["swap.devices"],
        "/proc/swaps (live); swap entries of /etc/fstab (--persisted, images).",
    ),
    (
        "transparent_hugepage.enabled",
        &["transparent_hugepage.enabled"],
        "/sys/kernel/mm/transparent_hugepage/enabled (live); transparent_hugepage= on the kernel command line of /etc/kernel/cmdline, or /etc/default/grub and /etc/default/grub.d/*.cfg (--persisted, images).",
    ),
    (
        "transparent_hugepage.defrag",
        &["transparent_hugepage.defrag"],
        "/sys/kernel/mm/transparent_hugepage/defrag (live only).",
    ),
    (
        "ulimit.",
        &["KEY", "KEY.login"],
        "The process's own rlimits, and KEY.login what a login session gets from /etc/security/limits.conf and limits.d.",
    ),
    (
        "dev_shm.",
        &["KEY"],
        "statvfs of /dev/shm and its entry in /proc/mounts.",
    ),
    (
        "logind.RemoveIPC",
        &["logind.RemoveIPC"],
        "RemoveIPC= in /etc/systemd/logind.conf and its drop-ins, in systemd's order.",
    ),
    (
        "link.",
        &["KEY.NIC"],
        "/sys/class/net/NIC (speed, mtu) of the judged NICs.",
    ),
    (
        "irq.numa_local",
        &[
            "irq.numa_local.NIC",
            "irq.numa_local.NIC.IRQ",
            "irq.numa_local.NIC.irqbalance",
        ],
        "/proc/irq/IRQ/smp_affinity_list and effective_affinity_list of the NIC's MSI interrupts, against its NUMA node's CPUs; a running irqbalance (/proc/PID/comm, its --banirq arguments and IRQBALANCE_BANNED_CPULIST) that would move them back.",
    ),
    (
        "ring.",
        &["KEY.NIC"],
        "The kernel's ethtool netlink family (ETHTOOL_MSG_RINGS_GET, as ethtool -g): ring sizes and their maxima; live node only.",
    ),
    (
        "offload.",
        &["KEY.NIC"],
        "ethtool netlink ETHTOOL_MSG_FEATURES_GET (as ethtool -k): active and changeable features; live node only.",
    ),
    (
        "coalesce.",
        &["KEY.NIC"],
        "ethtool netlink ETHTOOL_MSG_COALESCE_GET (as ethtool -c); live node only.",
    ),
    (
        "pause.",
        &["KEY.NIC"],
        "ethtool netlink ETHTOOL_MSG_PAUSE_GET (as ethtool -a); live node only.",
    ),
    (
        "channels.combined",
        &["channels.combined.NIC"],
        "ethtool netlink ETHTOOL_MSG_CHANNELS_GET (as ethtool -l), against the CPUs in /sys/class/net/NIC/device/local_cpulist; live node only.",
    ),
    (
        "rdma.",
        &["KEY.HCA.PORT"],
        "/sys/class/infiniband/HCA/ports/PORT (rate, state, link_layer, active_mtu).",
    ),
    (
        "peer.",
        &["KEY"],
        "A TCP connection to --peer's rendezvous port (round trip; path MTU from the socket).",
    ),
    (
        "driver_version.*",
        &["driver_version.DRIVER", "driver_version.DRIVER.DEVICE"],
        "/sys/module/DRIVER/version, or ethtool -i.",
    ),
    (
        "firmware.*",
        &["firmware.DRIVER", "firmware.DRIVER.DEVICE"],
        "The HCA's fw_ver, or ethtool -i.",
    ),
    (
        "cgroup.hierarchy",
        &["cgroup.hierarchy"],
        "/proc/mounts and /sys/fs/cgroup (v2, v1 or hybrid).",
    ),
    (
        "memory.",
        &["KEY", "KEY@SLICE"],
        "The cgroup of the process (cgroupfs), or with a [job] slice its unit file and drop-ins (MemoryMax=, MemoryHigh=).",
    ),
    (
        "cpu.max",
        &["cpu.max", "cpu.max@SLICE"],
        "cpu.max of the cgroup, or CPUQuota= of the slice's unit files.",
    ),
    (
        "pids.max",
        &["pids.max", "pids.max@SLICE"],
        "pids.max of the cgroup, or TasksMax= of the slice's unit files.",
    ),
    (
        "cpuset.",
        &["KEY", "KEY@SLICE"],
        "cpuset.cpus.effective and cpuset.mems.effective of the cgroup, against each GPU's NUMA-local CPUs and memory.",
    ),
    (
        "gpu.count",
        &["gpu.count"],
        "NVIDIA GPUs on the PCI bus (or /proc/driver/nvidia/gpus), against the rule and against /var/lib/gputune/gpus.json, the GPUs the last passing live audit saw, naming one that went missing.",
    ),
    (
        "gpu.model",
        &["gpu.model.gpuN"],
        "NVML's device name, else /proc/driver/nvidia/gpus/BDF/information.",
    ),
    (
        "gpu.memory_mib",
        &["gpu.memory_mib.gpuN"],
        "NVML's total memory of GPU N.",
    ),
    (
        "gpu.nvlink_count",
        &["gpu.nvlink_count.gpuN"],
        "NVML's active NVLinks of GPU N.",
    ),
    (
        "rdma.hca_count",
        &["rdma.hca_count"],
        "The RDMA devices in /sys/class/infiniband.",
    ),
    (
        "driver.version",
        &["driver.version"],
        "NVML (live), or the driver's version file (images).",
    ),
    (
        "cuda.version",
        &["cuda.version"],
        "libcuda's cuDriverGetVersion (live), or the library's file name (images).",
    ),
    (
        "nccl.version",
        &["nccl.version"],
        "libnccl.so.2's ncclGetVersion, or its version read from the file under --root.",
    ),
    (
        "cudnn.version",
        &["cudnn.version"],
        "cudnn_version.h or libcudnn's file name.",
    ),
    (
        "iommu.mode",
        &["iommu.mode"],
        "/proc/cmdline (iommu=, intel_iommu=, amd_iommu=) and /sys/kernel/iommu_groups.",
    ),
    (
        "nvidia_peermem.loaded",
        &["nvidia_peermem.loaded"],
        "/sys/module/nvidia_peermem.",
    ),
];

/// Checks no profile key names: they run whenever their area does.
pub(crate) const CHECKS: &[CheckDoc] = &[
    CheckDoc {
        id: "gpu.nvml",
        area: Area::Gpu,
        reads: "libnvidia-ml.so.1 (NVML): whether the driver answers.",
    },
    CheckDoc {
        id: "gpu.count",
        area: Area::Gpu,
        reads: "NVML's device count, against /sys/bus/pci NVIDIA devices.",
    },
    CheckDoc {
        id: "gpuN.nvml",
        area: Area::Gpu,
        reads: "NVML for GPU N.",
    },
    CheckDoc {
        id: "gpuN.pcie_link",
        area: Area::Gpu,
        reads: "/sys/bus/pci/devices/BDF current and maximum link speed and width.",
    },
    CheckDoc {
        id: "gpuN.ecc_uncorrected",
        area: Area::Gpu,
        reads: "NVML's uncorrected ECC error count.",
    },
    CheckDoc {
        id: "gpuN.persistence_mode",
        area: Area::Gpu,
        reads: "NVML's persistence mode.",
    },
    CheckDoc {
        id: "gpuN.nvlink",
        area: Area::Gpu,
        reads: "NVML's NVLink state per link.",
    },
    CheckDoc {
        id: "gpuN.xid",
        area: Area::Gpu,
        reads: "NVIDIA Xid events of GPU N in the kernel log (/dev/kmsg, else journalctl -k; under --root only a regular file ROOT/dev/kmsg), since boot or --since.",
    },
    CheckDoc {
        id: "gpu.xid",
        area: Area::Gpu,
        reads: "The kernel log's Xid events, when there is no log to read or no GPU to judge them by.",
    },
    CheckDoc {
        id: "gpu.xid.BDF",
        area: Area::Gpu,
        reads: "Xid events of a GPU at PCI address BDF that the node no longer lists.",
    },
    CheckDoc {
        id: "gpuN.row_remap",
        area: Area::Gpu,
        reads: "NVML's remapped rows of GPU N (pending or failed remapping).",
    },
    CheckDoc {
        id: "gpuN.retired_pages",
        area: Area::Gpu,
        reads: "NVML's retired pages of GPU N (a retirement pending).",
    },
    CheckDoc {
        id: "torch.cuda",
        area: Area::Gpu,
        reads: "The installed PyTorch's version.py (CUDA it was built for), against the driver.",
    },
    CheckDoc {
        id: "AREA.inventory",
        area: Area::Gpu,
        reads: "The hardware inventory (/sys/bus/pci, /sys/class/net, /sys/devices/system/node) an area needs; an error when it cannot be read.",
    },
    CheckDoc {
        id: "numa.nodes",
        area: Area::Numa,
        reads: "/sys/devices/system/node.",
    },
    CheckDoc {
        id: "numa.gpuN.node",
        area: Area::Numa,
        reads: "numa_node of GPU N's PCI device.",
    },
    CheckDoc {
        id: "numa.gpuN.nic",
        area: Area::Numa,
        reads: "Whether a fabric NIC shares GPU N's NUMA node.",
    },
    CheckDoc {
        id: "nic.count",
        area: Area::Nic,
        reads: "/sys/class/net: the physical interfaces that are up.",
    },
    CheckDoc {
        id: "nic.NIC.up",
        area: Area::Nic,
        reads: "/sys/class/net/NIC/operstate.",
    },
    CheckDoc {
        id: "nic.NIC.role",
        area: Area::Nic,
        reads: "Interfaces that are up but not the training fabric (listed, never failed).",
    },
    CheckDoc {
        id: "nic.NIC.numa",
        area: Area::Nic,
        reads: "/sys/class/net/NIC/device/numa_node.",
    },
    CheckDoc {
        id: "nic.peer_route",
        area: Area::Nic,
        reads: "The route to --peer (netlink).",
    },
    CheckDoc {
        id: "rdma.HCA.PORT.state",
        area: Area::Nic,
        reads: "/sys/class/infiniband/HCA/ports/PORT/state and phys_state.",
    },
    CheckDoc {
        id: "rdma.HCA.PORT.gid",
        area: Area::Nic,
        reads: "The port's GID table (RoCE v2 at NCCL_IB_GID_INDEX).",
    },
    CheckDoc {
        id: "rdma.HCA.ports",
        area: Area::Nic,
        reads: "/sys/class/infiniband/HCA/ports.",
    },
    CheckDoc {
        id: "rdma.HCA.relaxed_ordering",
        area: Area::Nic,
        reads: "PCIe Device Control of the HCA and its root port (config space).",
    },
    CheckDoc {
        id: "nccl.net.ibverbs",
        area: Area::Nic,
        reads: "Whether libibverbs.so.1 can be found.",
    },
    CheckDoc {
        id: "nccl.net.plugin",
        area: Area::Nic,
        reads: "NCCL's net plugins (libnccl-net*.so) found.",
    },
    CheckDoc {
        id: "nccl.net.plugin_named",
        area: Area::Nic,
        reads: "NCCL_NET_PLUGIN, and the library it names.",
    },
    CheckDoc {
        id: "nccl.NCCL_SOCKET_IFNAME",
        area: Area::Nic,
        reads: "/etc/nccl.conf's NCCL_SOCKET_IFNAME against the judged NIC.",
    },
    CheckDoc {
        id: "nccl.env",
        area: Area::Nic,
        reads: "NCCL's configuration as NCCL reads it: the environment, NCCL_CONF_FILE or ~/.nccl.conf, /etc/nccl.conf.",
    },
    CheckDoc {
        id: "nccl.env.NAME",
        area: Area::Nic,
        reads: "One NCCL variable against NCCL's documented name, type and range, and against the node (NAME.present: what it names exists).",
    },
    CheckDoc {
        id: "peer.connect",
        area: Area::Nic,
        reads: "A TCP connection to --peer's rendezvous port.",
    },
    CheckDoc {
        id: "platform.acs",
        area: Area::Platform,
        reads: "PCIe ACS of the bridges above the GPUs and NICs (config space).",
    },
    CheckDoc {
        id: "platform.acs.BDF",
        area: Area::Platform,
        reads: "ACS control of bridge BDF.",
    },
    CheckDoc {
        id: "firewall.rendezvous_ports",
        area: Area::Firewall,
        reads: "The nftables ruleset (nft -j list ruleset) or iptables-save, against [job] rendezvous_ports.",
    },
    CheckDoc {
        id: "firewall.nccl_ports",
        area: Area::Firewall,
        reads: "The same, against [job] nccl_ports.",
    },
    CheckDoc {
        id: "tuned.profile",
        area: Area::Network,
        reads: "tuned's active profile (/etc/tuned/active_profile) and whether tuned is enabled.",
    },
    CheckDoc {
        id: "tuned.KEY",
        area: Area::Network,
        reads: "The [sysctl] value tuned's profile sets for KEY, applied after systemd-sysctl, against the gputune profile.",
    },
];

/// Every documented id pattern with its area and what it reads: the profile keys' checks
/// first, then [`CHECKS`].
pub fn documented() -> Vec<(String, Area, String)> {
    let mut out = Vec::new();
    for &area in Area::ALL {
        for key in crate::checks::keys(area) {
            let (forms, reads) = key_check(area, key.key);
            for form in forms {
                out.push((form, area, reads.clone()));
            }
        }
    }
    out.extend(
        CHECKS
            .iter()
            .map(|c| (c.id.to_string(), c.area, c.reads.to_string())),
    );
    out
}

/// The id forms of the check a key names, and what it reads.
fn key_check(area: Area, key: &str) -> (Vec<String>, String) {
    if area_is_sysctl(area, key) {
        let sysctl = crate::host::sysctl::sysctl_of(key);
        let path = crate::host::sysctl::host_path(sysctl);
        let part = if sysctl == key {
            String::new()
        } else {
            format!(" (the part {key} names)")
        };
        return (
            vec![key.to_string()],
            format!(
                "{path}{part} (live); what sysctl.d files set at boot, in systemd-sysctl's order (--persisted, images). Read-only here (a read-only /proc/sys, another network namespace) is a skip."
            ),
        );
    }
    let entry = KEY_CHECKS
        .iter()
        .find(|(k, _, _)| *k == key || (k.ends_with('.') && key.starts_with(k)));
    match entry {
        Some((_, forms, reads)) => (
            forms.iter().map(|f| f.replace("KEY", key)).collect(),
            reads.to_string(),
        ),
        None => (vec![key.to_string()], String::new()),
    }
}

/// Whether check id `id` is one `pattern` documents: UPPER-CASE words of the pattern (and
/// `N` after `gpu`) stand for any non-empty name, `*` for any suffix.
pub fn matches(pattern: &str, id: &str) -> bool {
    let pattern = pattern.replace("gpuN", "gpu#").replace(".*", ".#");
    let tokens = tokenize(&pattern);
    match_tokens(&tokens, id)
}

/// A pattern as literal text and `#` placeholders.
fn tokenize(pattern: &str) -> Vec<Option<String>> {
    let mut tokens = Vec::new();
    let mut lit = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '#' {
            tokens.push(Some(std::mem::take(&mut lit)));
            tokens.push(None);
        } else if c.is_ascii_uppercase()
            && !lit.ends_with(|p: char| p.is_ascii_alphanumeric() || p == '_')
        {
            // An upper-case word starting after a separator is a placeholder.
            let mut word = String::from(c);
            while let Some(&n) = chars.peek() {
                if n.is_ascii_uppercase() || n.is_ascii_digit() || n == '_' {
                    word.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            let placeholder = chars.peek().is_none_or(|n| matches!(n, '.' | '@')) && word.len() > 1
                || word == "N";
            if placeholder && !word.starts_with("NCCL") && word != "RemoveIPC" {
                tokens.push(Some(std::mem::take(&mut lit)));
                tokens.push(None);
            } else {
                lit.push_str(&word);
            }
        } else {
            lit.push(c);
        }
    }
    tokens.push(Some(lit));
    tokens
}

fn match_tokens(tokens: &[Option<String>], id: &str) -> bool {
    match tokens.split_first() {
        None => id.is_empty(),
        Some((Some(lit), rest)) => id
            .strip_prefix(lit.as_str())
            .is_some_and(|r| match_tokens(rest, r)),
        Some((None, rest)) => (1..=id.len())
            .filter(|i| id.is_char_boundary(*i))
            .any(|i| match_tokens(rest, &id[i..])),
    }
}

pub(super) fn page() -> String {
    let mut out = String::new();
    header(
        &mut out,
        "gputune-checks",
        7,
        "every check gputune audit runs",
    );
    out.push_str(".SH DESCRIPTION\n");
    para(
        &mut out,
        "Each finding of gputune audit has an id, an area and a status (pass, warn, fail, skip, error). A check whose id is a profile key runs when the profile sets that key (see gputune-profile(5)); the others run whenever their area does. Upper-case words in an id stand for names: NIC an interface, HCA and PORT an RDMA device and port, N a GPU index, BDF a PCI address, DRIVER a kernel module, SLICE a systemd slice, KEY a sysctl, NAME an NCCL variable.",
    );
    para(
        &mut out,
        "In an image (--root without a running kernel) and with --persisted, checks read what applies at boot; facts only a running node has are skipped with \"image: no running kernel\".",
    );
    let all = documented();
    for &area in Area::ALL {
        let rows: Vec<&(String, Area, String)> =
            all.iter().filter(|(_, a, _)| *a == area).collect();
        if rows.is_empty() {
            continue;
        }
        out.push_str(&format!(".SH \"{}\"\n", area.name().to_uppercase()));
        for (id, _, reads) in rows {
            let reads = if reads.is_empty() { "-" } else { reads };
            term(&mut out, id, &[format!("Reads: {reads}")]);
        }
    }
    out.push_str(".SH \"SEE ALSO\"\n");
    para(
        &mut out,
        "gputune(1), gputune-audit(1), gputune-profile(5).",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_documented() {
        for &area in Area::ALL {
            for key in crate::checks::keys(area) {
                let (_, reads) = key_check(area, key.key);
                assert!(!reads.is_empty(), "{}: what does its check read?", key.key);
            }
        }
    }

    #[test]
    fn patterns() {
        let cases = [
            ("gpuN.pcie_link", "gpu0.pcie_link", true),
            ("gpuN.pcie_link", "gpu.pcie_link", false),
            ("link.speed_mbps.NIC", "link.speed_mbps.eth0", true),
            ("link.speed_mbps.NIC", "link.speed_mbps", false),
            ("rdma.rate_mbps.HCA.PORT", "rdma.rate_mbps.mlx4_0.1", true),
            ("rdma.HCA.PORT.state", "rdma.mlx4_0.2.state", true),
            ("tuned.KEY", "tuned.net.core.rmem_max", true),
            ("memory.max@SLICE", "memory.max@training.slice", true),
            ("memory.max", "memory.max@training.slice", false),
            ("nccl.NCCL_SOCKET_IFNAME", "nccl.NCCL_SOCKET_IFNAME", true),
            ("nccl.env.NAME", "nccl.env.NCCL_IB_HCA.present", true),
            ("logind.RemoveIPC", "logind.RemoveIPC", true),
            ("ulimit.nofile.login", "ulimit.nofile.login", true),
            ("firmware.DRIVER", "firmware.mlx5_core", true),
            ("net.core.rmem_max", "net.core.rmem_max", true),
            ("net.core.rmem_max", "net.core.wmem_max", false),
        ];
        for (pattern, id, want) in cases {
            assert_eq!(matches(pattern, id), want, "{pattern} ~ {id}");
        }
    }
}
