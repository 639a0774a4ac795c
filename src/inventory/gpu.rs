//! NVIDIA GPUs as the PCI bus sees them, whether or not the driver is loaded: the facts
//! that decide placement (NUMA node, local CPUs) and bandwidth (PCIe link).

use serde::Serialize;

use super::nvml::NvmlGpu;
use super::pci::{PciDevice, PciLink};
use crate::host::cpulist::CpuList;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u32 = 0x10de;

/// One GPU. `index` follows CUDA's `PCI_BUS_ID` order (sorted by PCI address), which is the
/// order torchrun's `LOCAL_RANK` maps onto with `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
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
    /// What NVML adds when the driver is loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml: Option<NvmlGpu>,
}

/// PCI class 0x03 (display): VGA (0x0300) and 3D controllers (0x0302, data-centre GPUs).
pub fn is_nvidia_gpu(dev: &PciDevice) -> bool {
    dev.vendor == Some(NVIDIA_VENDOR) && dev.class.is_some_and(|c| c >> 16 == 0x03)
}

/// GPUs among the node's PCI devices (already sorted by address), numbered in that order.
pub fn gpus(devices: &[PciDevice]) -> Vec<Gpu> {
    devices
        .iter()
        .filter(|d| is_nvidia_gpu(d))
        .enumerate()
        .map(|(index, d)| Gpu {
            index,
            pci_address: d.address.clone(),
            device_id: format!(
                "{:04x}:{:04x}",
                d.vendor.unwrap_or(0),
                d.device.unwrap_or(0)
            ),
            driver: d.driver.clone(),
            numa_node: d.numa_node,
            local_cpus: d.local_cpus.clone(),
            link: d.link.clone(),
            bridges: d.bridges.clone(),
            host_bridge: d.host_bridge.clone(),
            nvml: None,
        })
        .collect()
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
            numa_node: None,
            local_cpus: None,
            link: PciLink {
                current_gts: None,
                max_gts: None,
                current_width: None,
                max_width: None,
            },
            bridges: vec![],
            host_bridge: None,
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
        let found = gpus(&devices);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].pci_address, "0000:05:00.0");
        assert_eq!(found[1].index, 1);
        assert_eq!(found[0].device_id, "10de:15f8");
    }
}
