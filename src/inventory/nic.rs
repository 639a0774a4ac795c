//! Network interfaces from `/sys/class/net` that can carry training traffic, and the RDMA
//! devices of `/sys/class/infiniband`. Software interfaces (loopback, bridges, bonds,
//! VLANs, veth, docker) are listed apart with the reason.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::pci::{self, PciLink, pci_function};
use super::rdma::RdmaDevice;
use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root};
use crate::probe::ethtool::EthtoolProbe;

/// One physical (device-backed) interface.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Nic {
    pub name: String,
    pub pci_address: Option<String>,
    pub driver: Option<String>,
    pub numa_node: Option<u32>,
    #[serde(serialize_with = "super::serialize_opt_display")]
    pub local_cpus: Option<CpuList>,
    /// Mb/s; `None` when the link is down or the driver reports none (virtio).
    pub speed_mbps: Option<u64>,
    pub mtu: Option<u32>,
    pub operstate: String,
    /// From `ETHTOOL_GDRVINFO`; live node only.
    pub firmware: Option<String>,
    /// The driver's version from `ETHTOOL_GDRVINFO` (`ethtool -i`); live node only.
    pub driver_version: Option<String>,
    /// Ethernet or InfiniBand (IPoIB), from the ARP hardware `type`.
    pub kind: LinkKind,
    pub link: Option<PciLink>,
    /// RDMA devices on the same PCI function (`mlx5_0`).
    pub rdma: Vec<String>,
    #[serde(skip)]
    pub bridges: Vec<String>,
    #[serde(skip)]
    pub host_bridge: Option<String>,
    #[serde(skip)]
    pub ifindex: Option<u32>,
}

impl Nic {
    pub(crate) fn is_up(&self) -> bool {
        self.operstate == "up"
    }
}

/// An interface left out of the inventory, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct SkippedNic {
    pub name: String,
    pub reason: String,
}

/// The device behind an interface: its `device` link, else the directory its
/// `/sys/class/net` link points into (`.../0000:3b:00.0/net/eth0` → the PCI function),
/// for trimmed snapshots and drivers that leave `device` out.
pub(crate) fn device_path(root: &Root, name: &str) -> Option<PathBuf> {
    let dir = format!("/sys/class/net/{name}");
    if let Some(real) = root.canonicalize(&format!("{dir}/device")) {
        return Some(real);
    }
    let real = root.canonicalize(&dir)?;
    let parent = real.parent().filter(|p| p.ends_with("net"))?.parent()?;
    pci_function(parent).map(Path::to_path_buf)
}

/// Why an interface is software-only, or `None` when a device backs it.
pub(crate) fn virtual_reason(root: &Root, name: &str) -> Option<String> {
    let dir = format!("/sys/class/net/{name}");
    let real = root.canonicalize(&dir).unwrap_or_default();
    let is_virtual =
        real.components().any(|c| c.as_os_str() == "virtual") || device_path(root, name).is_none();
    if !is_virtual {
        return None;
    }
    let kind = if name == "lo" {
        "loopback"
    } else if name.starts_with("docker") || name.starts_with("br-") {
        "container bridge"
    } else if root.exists(&format!("{dir}/bridge")) {
        "bridge"
    } else if root.exists(&format!("{dir}/bonding")) {
        "bond (its member ports are listed)"
    } else if name.starts_with("veth") {
        "veth pair end"
    } else {
        "software interface"
    };
    Some(format!("virtual: {kind}, no device behind it"))
}

/// What a NIC's link carries; serialised as the words reports have always used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LinkKind {
    Ethernet,
    /// IPoIB: checks that tune Ethernet settings do not apply.
    Infiniband,
}

/// Maps ARP hardware type to a link kind (`type` file: 1 Ethernet, 32 InfiniBand).
pub(crate) fn link_kind(arp_type: Option<&str>) -> LinkKind {
    match arp_type.map(str::trim) {
        Some("32") => LinkKind::Infiniband,
        _ => LinkKind::Ethernet,
    }
}

/// Reads every interface; physical ones fully, virtual ones only named with the reason.
pub(crate) fn nics(
    root: &Root,
    ethtool: &dyn EthtoolProbe,
    rdma: &[RdmaDevice],
) -> Result<(Vec<Nic>, Vec<SkippedNic>), HostError> {
    let mut nics = Vec::new();
    let mut skipped = Vec::new();
    for name in root.list_dir("/sys/class/net")?.unwrap_or_default() {
        if let Some(reason) = virtual_reason(root, &name) {
            skipped.push(SkippedNic { name, reason });
            continue;
        }
        let dir = format!("/sys/class/net/{name}");
        let file = |f: &str| super::attribute(root, &format!("{dir}/{f}"));
        let real_device = device_path(root, &name);
        let pci_dev = match real_device.as_deref().and_then(pci_function) {
            Some(p) => {
                let host = pci::host_path(root, p);
                Some(pci::read_device(root, &host.to_string_lossy())?)
            }
            None => None,
        };
        let driver = pci::link_name_in(root, &format!("{dir}/device/driver"))
            .or_else(|| pci_dev.as_ref().and_then(|p| p.driver.clone()));
        let pci_address = pci_dev.as_ref().map(|p| p.address.clone());
        let info = ethtool.driver_info(&name).ok();
        let firmware = info
            .as_ref()
            .map(|i| i.firmware.clone())
            .filter(|f| !f.is_empty() && f != "N/A");
        let driver_version = info
            .as_ref()
            .map(|i| i.version.clone())
            .filter(|v| !v.is_empty());
        nics.push(Nic {
            rdma: rdma
                .iter()
                .filter(|r| r.pci_address.is_some() && r.pci_address == pci_address)
                .map(|r| r.name.clone())
                .collect(),
            speed_mbps: file("speed")
                .as_deref()
                .and_then(crate::host::net::parse_speed),
            mtu: file("mtu").and_then(|m| m.parse().ok()),
            operstate: file("operstate").unwrap_or_else(|| "unknown".into()),
            kind: link_kind(file("type").as_deref()),
            ifindex: file("ifindex").and_then(|i| i.parse().ok()),
            numa_node: pci_dev.as_ref().and_then(|p| p.numa_node),
            local_cpus: pci_dev.as_ref().and_then(|p| p.local_cpus.clone()),
            link: pci_dev.as_ref().map(|p| p.link.clone()),
            bridges: pci_dev.as_ref().map_or(vec![], |p| p.bridges.clone()),
            host_bridge: pci_dev.as_ref().and_then(|p| p.host_bridge.clone()),
            pci_address,
            driver,
            driver_version,
            firmware,
            name,
        });
    }
    Ok((nics, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_pci_functions() {
        assert_eq!(link_kind(Some("32\n")), LinkKind::Infiniband);
        assert_eq!(link_kind(Some("1")), LinkKind::Ethernet);
        assert_eq!(link_kind(None), LinkKind::Ethernet);
        // Reports keep their words.
        assert_eq!(
            serde_json::to_string(&LinkKind::Infiniband).unwrap(),
            "\"infiniband\""
        );
        assert_eq!(
            serde_json::to_string(&LinkKind::Ethernet).unwrap(),
            "\"ethernet\""
        );
        let virtio = Path::new("/sys/devices/pci0000:00/0000:00:03.0/virtio2");
        assert_eq!(
            pci_function(virtio),
            Some(Path::new("/sys/devices/pci0000:00/0000:00:03.0"))
        );
        let pci = Path::new("/sys/devices/pci0000:00/0000:00:03.0");
        assert_eq!(pci_function(pci), Some(pci));
        assert_eq!(pci_function(Path::new("/sys/devices/platform/x")), None);
    }
}
