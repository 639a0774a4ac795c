//! NVIDIA GPUs as the PCI bus sees them, whether or not the driver is loaded: the facts
//! that decide placement (NUMA node, local CPUs) and bandwidth (PCIe link).

use serde::{Deserialize, Serialize};

use super::pci::{PciDevice, PciLink};
use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root};
use crate::probe::nvml::NvmlGpu;

/// NVIDIA's PCI vendor id.
pub(crate) const NVIDIA_VENDOR: u32 = 0x10de;

/// One GPU. `index` follows CUDA's `PCI_BUS_ID` order (sorted by PCI address), which is the
/// order torchrun's `LOCAL_RANK` maps onto with `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Gpu {
    pub index: usize,
    pub pci_address: String,
    /// `10de:2330` style id.
    pub device_id: String,
    pub driver: Option<String>,
    /// The NUMA node the firmware reports; on a one-node host, that node.
    pub numa_node: Option<u32>,
    #[serde(serialize_with = "super::serialize_opt_display")]
    pub local_cpus: Option<CpuList>,
    pub link: PciLink,
    /// PCI addresses of the bridges and switch ports above the GPU, nearest last.
    pub bridges: Vec<String>,
    #[serde(skip)]
    pub host_bridge: Option<String>,
    /// The model the driver reports (`/proc/driver/nvidia/gpus/*/information`).
    pub model: Option<String>,
    /// The NUMA node holding this GPU's own memory where the CPU can address it (POWER9
    /// NVLink 2, Grace Hopper), from the driver's `numa_status`.
    pub memory_numa_node: Option<u32>,
    /// What NVML adds when the driver is loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlGpu>,
}

/// PCI class 0x03 (display): VGA (0x0300) and 3D controllers (0x0302, data-centre GPUs).
pub(crate) fn is_nvidia_gpu(dev: &PciDevice) -> bool {
    dev.vendor == Some(NVIDIA_VENDOR) && dev.class.is_some_and(|c| c >> 16 == 0x03)
}

/// A GPU as the loaded driver lists it in `/proc/driver/nvidia/gpus/<bus id>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcGpu {
    pub address: String,
    pub model: Option<String>,
    pub memory_numa_node: Option<u32>,
}

/// Parses `information`: `Model: \t Tesla V100-SXM2-16GB` lines.
pub(crate) fn parse_information(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("Model:"))
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
}

/// Parses `numa_status`: `Node: 255` on its first line; negative means none.
pub(crate) fn parse_numa_status(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("Node:"))
        .and_then(|n| n.trim().parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok())
}

/// The GPUs the loaded driver lists: evidence that holds when sysfs is trimmed (no
/// `vendor` or `class`) or the PCI tree is incomplete.
pub(crate) fn proc_gpus(root: &Root) -> Result<Vec<ProcGpu>, HostError> {
    let base = "/proc/driver/nvidia/gpus";
    let mut out = Vec::new();
    for name in root.list_dir(base)?.unwrap_or_default() {
        let address = name.to_ascii_lowercase();
        if !super::pci::is_pci_address(&address) {
            continue;
        }
        let read = |f: &str| super::attribute(root, &format!("{base}/{name}/{f}"));
        out.push(ProcGpu {
            model: read("information").as_deref().and_then(parse_information),
            memory_numa_node: read("numa_status").as_deref().and_then(parse_numa_status),
            address,
        });
    }
    Ok(out)
}

fn gpu_from(d: &PciDevice) -> Gpu {
    Gpu {
        index: 0,
        pci_address: d.address.clone(),
        device_id: format!(
            "{:04x}:{}",
            d.vendor.unwrap_or(NVIDIA_VENDOR),
            d.device.map_or("????".into(), |id| format!("{id:04x}"))
        ),
        driver: d.driver.clone(),
        numa_node: d.numa_node,
        local_cpus: d.local_cpus.clone(),
        link: d.link.clone(),
        bridges: d.bridges.clone(),
        host_bridge: d.host_bridge.clone(),
        model: None,
        memory_numa_node: None,
        nvml: None,
    }
}

/// GPUs among the node's PCI devices (already sorted by address) and those the driver
/// lists, numbered in address order.
pub(crate) fn gpus(devices: &[PciDevice], listed: &[ProcGpu]) -> Vec<Gpu> {
    let mut out: Vec<Gpu> = devices
        .iter()
        .filter(|d| is_nvidia_gpu(d) || listed.iter().any(|p| p.address == d.address))
        .map(gpu_from)
        .collect();
    for p in listed {
        match out.iter_mut().find(|g| g.pci_address == p.address) {
            Some(g) => {
                g.model = p.model.clone();
                g.memory_numa_node = p.memory_numa_node;
                // The driver listing it means it is bound, whatever sysfs lacks.
                g.driver.get_or_insert_with(|| "nvidia".into());
            }
            None => out.push(Gpu {
                model: p.model.clone(),
                memory_numa_node: p.memory_numa_node,
                driver: Some("nvidia".into()),
                ..gpu_from(&PciDevice {
                    address: p.address.clone(),
                    vendor: Some(NVIDIA_VENDOR),
                    ..PciDevice::default()
                })
            }),
        }
    }
    out.sort_by(|a, b| a.pci_address.cmp(&b.pci_address));
    for (i, g) in out.iter_mut().enumerate() {
        g.index = i;
    }
    out
}

/// Where a live audit run as root remembers the node's GPUs, so that a later audit can name
/// the one that went missing (fell off the bus, was not enumerated at boot) by its address.
pub(crate) const REMEMBERED: &str = "/var/lib/gputune/gpus.json";

/// The largest remembered inventory read (a few hundred bytes per GPU).
const REMEMBERED_CAP: u64 = 1 << 20;

/// The GPUs a healthy audit saw (`/var/lib/gputune/gpus.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Remembered {
    pub schema_version: u32,
    /// Seconds since the epoch when it was written.
    pub written_at: u64,
    pub gpus: Vec<RememberedGpu>,
}

/// One GPU of [`Remembered`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RememberedGpu {
    pub pci_address: String,
    pub device_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Remembered {
    pub(crate) const SCHEMA: u32 = 1;

    pub(crate) fn of(gpus: &[Gpu], written_at: u64) -> Remembered {
        Remembered {
            schema_version: Self::SCHEMA,
            written_at,
            gpus: gpus
                .iter()
                .map(|g| RememberedGpu {
                    pci_address: g.pci_address.clone(),
                    device_id: g.device_id.clone(),
                    model: g.model.clone(),
                })
                .collect(),
        }
    }

    /// Parses the file, refusing what gputune would not have written (it may have been
    /// edited by hand): another schema, an address that is no PCI address.
    pub(crate) fn parse(text: &str) -> Result<Remembered, Refused> {
        let r: Remembered = serde_json::from_str(text).map_err(Refused::Json)?;
        if r.schema_version != Self::SCHEMA {
            return Err(Refused::Schema(r.schema_version));
        }
        if let Some(bad) = r
            .gpus
            .iter()
            .find(|g| !super::pci::is_pci_address(&g.pci_address))
        {
            return Err(Refused::NotPci(crate::say::clean_line(&bad.pci_address)));
        }
        Ok(r)
    }
}

/// Why a remembered inventory is not one gputune would have written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    #[error("schema_version {0} (this gputune writes {schema})", schema = Remembered::SCHEMA)]
    Schema(u32),
    #[error("`{0}` is not a PCI address")]
    NotPci(String),
}

/// Why the remembered inventory cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RememberedError {
    #[error(transparent)]
    Unreadable(#[from] HostError),
    #[error("{}: {why}", path.display())]
    Refused {
        path: std::path::PathBuf,
        #[source]
        why: Refused,
    },
}

/// The remembered GPUs under `root`, `None` when no audit wrote them; an unreadable or
/// malformed file is the error, with its path.
pub(crate) fn read_remembered(root: &Root) -> Result<Option<Remembered>, RememberedError> {
    match root.read_capped(REMEMBERED, REMEMBERED_CAP)? {
        None => Ok(None),
        Some(bytes) => Remembered::parse(&String::from_utf8_lossy(&bytes))
            .map(Some)
            .map_err(|why| RememberedError::Refused {
                path: root.path(REMEMBERED),
                why,
            }),
    }
}

/// The GPUs on the bus now (the part of [`super::Inventory::read`] that finds them), for
/// what the audit remembers.
pub(crate) fn present(root: &Root) -> Result<Vec<Gpu>, HostError> {
    Ok(gpus(&super::pci::devices(root)?, &proc_gpus(root)?))
}

/// Writes [`REMEMBERED`] atomically (temporary file, fsync, rename; never through a link).
pub(crate) fn remember(root: &Root, gpus: &[Gpu], written_at: u64) -> Result<(), HostError> {
    let doc = Remembered::of(gpus, written_at);
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    root.write_file(REMEMBERED, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(address: &str, vendor: u32, class: u32) -> PciDevice {
        PciDevice {
            address: address.into(),
            vendor: Some(vendor),
            device: Some(0x15f8),
            class: Some(class),
            driver: Some("nvidia".into()),
            ..PciDevice::default()
        }
    }

    #[test]
    fn only_nvidia_display_functions_are_gpus() {
        let devices = [
            dev("0000:05:00.0", NVIDIA_VENDOR, 0x030200),
            dev("0000:05:00.1", NVIDIA_VENDOR, 0x040300), // HDMI audio
            dev("0000:06:00.0", NVIDIA_VENDOR, 0x068000), // NVSwitch
            dev("0000:07:00.0", 0x15b3, 0x020000),        // ConnectX
            dev("0000:08:00.0", NVIDIA_VENDOR, 0x030000), // VGA
        ];
        let found = gpus(&devices, &[]);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].pci_address, "0000:05:00.0");
        assert_eq!(found[1].index, 1);
        assert_eq!(found[0].device_id, "10de:15f8");
    }

    #[test]
    fn the_drivers_listing_fills_in_what_sysfs_lacks() {
        let mut trimmed = dev("0000:04:00.0", 0, 0);
        trimmed.vendor = None;
        trimmed.class = None;
        trimmed.driver = None;
        let listed = [
            ProcGpu {
                address: "0000:04:00.0".into(),
                model: Some("Tesla V100-SXM2-16GB".into()),
                memory_numa_node: Some(255),
            },
            ProcGpu {
                address: "0004:04:00.0".into(),
                model: None,
                memory_numa_node: None,
            },
        ];
        let found = gpus(&[trimmed], &listed);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].driver.as_deref(), Some("nvidia"));
        assert_eq!(found[0].model.as_deref(), Some("Tesla V100-SXM2-16GB"));
        assert_eq!(found[0].memory_numa_node, Some(255));
        assert_eq!(found[1].pci_address, "0004:04:00.0");
        assert_eq!(found[1].device_id, "10de:????");
        assert_eq!(found[1].index, 1);
    }

    #[test]
    fn remembered_inventories_round_trip_and_hand_edits_are_refused() {
        let tree = crate::testing::Tree::new();
        let root = tree.root();
        assert!(matches!(read_remembered(&root), Ok(None)));
        let found = gpus(&[dev("0000:05:00.0", NVIDIA_VENDOR, 0x030200)], &[]);
        remember(&root, &found, 1_700_000_000).unwrap();
        let back = read_remembered(&root).unwrap().unwrap();
        assert_eq!(back.gpus[0].pci_address, "0000:05:00.0");
        assert_eq!(back.gpus[0].device_id, "10de:15f8");
        assert_eq!(back.written_at, 1_700_000_000);
        for (text, want) in [
            ("{", "EOF"),
            (
                r#"{"schema_version":2,"written_at":0,"gpus":[]}"#,
                "schema_version 2",
            ),
            (
                r#"{"schema_version":1,"written_at":0,"gpus":[{"pci_address":"gpu\u001b0","device_id":"x"}]}"#,
                "`gpu0` is not a PCI address",
            ),
            (
                r#"{"schema_version":1,"written_at":0,"gpus":[],"x":1}"#,
                "unknown field",
            ),
        ] {
            tree.file(REMEMBERED, text);
            let err = read_remembered(&root).unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("gpus.json"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn information_and_numa_status() {
        let info =
            "Model: \t\t Tesla V100-SXM2-16GB\nIRQ:   \t\t 83\nBus Location: \t 0004:04:00.0\n";
        assert_eq!(
            parse_information(info).as_deref(),
            Some("Tesla V100-SXM2-16GB")
        );
        assert_eq!(parse_information("IRQ: 5\n"), None);
        assert_eq!(
            parse_numa_status("Node: 255\nStatus: online_movable\n"),
            Some(255)
        );
        assert_eq!(parse_numa_status("Node: -1\n"), None);
        assert_eq!(parse_numa_status(""), None);
    }
}
