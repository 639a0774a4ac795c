//! How each GPU reaches each other GPU and each NIC, in `nvidia-smi topo -m` terms, worked
//! out from the PCI tree in sysfs (and NVLink from NVML when the driver is loaded).

use serde::Serialize;

/// The path between two devices, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Path {
    /// The device itself.
    #[serde(rename = "X")]
    Same,
    /// Direct NVLink connections (count of links).
    #[serde(rename = "NV")]
    NvLink(u32),
    /// Behind the same PCIe switch port: at most one bridge between them.
    #[serde(rename = "PIX")]
    Pix,
    /// Several bridges, but not through the host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through one PCIe host bridge (root complex).
    #[serde(rename = "PHB")]
    Phb,
    /// Through several host bridges of one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across NUMA nodes (the socket interconnect: QPI/UPI/Infinity Fabric).
    #[serde(rename = "SYS")]
    Sys,
    /// Not enough facts (NUMA node unknown on a multi-node host).
    #[serde(rename = "?")]
    Unknown,
}

impl Path {
    pub fn label(self) -> String {
        match self {
            Path::Same => "X".into(),
            Path::NvLink(n) => format!("NV{n}"),
            Path::Pix => "PIX".into(),
            Path::Pxb => "PXB".into(),
            Path::Phb => "PHB".into(),
            Path::Node => "NODE".into(),
            Path::Sys => "SYS".into(),
            Path::Unknown => "?".into(),
        }
    }

    /// True when traffic stays on one socket.
    pub fn is_local(self) -> bool {
        !matches!(self, Path::Sys | Path::Unknown)
    }
}

/// Where a device sits, enough to compare two of them.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub address: Option<&'a str>,
    pub bridges: &'a [String],
    pub host_bridge: Option<&'a str>,
    pub numa_node: Option<u32>,
}

/// The path between two devices; `single_node` says the host has one NUMA node, so an
/// unreported `numa_node` cannot mean another socket.
pub fn path_between(a: &Place, b: &Place, nvlinks: u32, single_node: bool) -> Path {
    if a.address.is_some() && a.address == b.address {
        return Path::Same;
    }
    if nvlinks > 0 {
        return Path::NvLink(nvlinks);
    }
    let common = a
        .bridges
        .iter()
        .zip(b.bridges)
        .take_while(|(x, y)| x == y)
        .count();
    if common > 0 && a.host_bridge == b.host_bridge {
        let same_parent = a.bridges.len() == common && b.bridges.len() == common;
        return if same_parent { Path::Pix } else { Path::Pxb };
    }
    if a.host_bridge.is_some() && a.host_bridge == b.host_bridge {
        return Path::Phb;
    }
    match (a.numa_node, b.numa_node) {
        (Some(x), Some(y)) if x == y => Path::Node,
        (Some(_), Some(_)) => Path::Sys,
        _ if single_node => Path::Node,
        _ => Path::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place<'a>(addr: &'a str, bridges: &'a [String], hb: &'a str, node: u32) -> Place<'a> {
        Place {
            address: Some(addr),
            bridges,
            host_bridge: Some(hb),
            numa_node: Some(node),
        }
    }

    #[test]
    fn paths() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let (g0, n0) = (s(&["r0", "u0", "d0"]), s(&["r0", "u0", "d1"]));
        let (pix_a, pix_b) = (s(&["r0", "u0"]), s(&["r0", "u0"]));
        let other_root = s(&["r1"]);
        let gpu = place("a", &g0, "pci0000:00", 0);
        assert_eq!(path_between(&gpu, &gpu, 0, false), Path::Same);
        assert_eq!(
            path_between(&gpu, &place("b", &n0, "pci0000:00", 0), 0, false),
            Path::Pxb
        );
        assert_eq!(
            path_between(
                &place("a", &pix_a, "pci0000:00", 0),
                &place("b", &pix_b, "pci0000:00", 0),
                0,
                false
            ),
            Path::Pix
        );
        assert_eq!(
            path_between(&gpu, &place("b", &other_root, "pci0000:00", 0), 0, false),
            Path::Phb
        );
        assert_eq!(
            path_between(&gpu, &place("b", &other_root, "pci0000:80", 0), 0, false),
            Path::Node
        );
        assert_eq!(
            path_between(&gpu, &place("b", &other_root, "pci0000:80", 1), 0, false),
            Path::Sys
        );
        assert_eq!(
            path_between(&gpu, &place("b", &n0, "pci0000:00", 0), 12, false),
            Path::NvLink(12)
        );
        let unknown = Place {
            numa_node: None,
            ..place("b", &other_root, "pci0000:80", 0)
        };
        assert_eq!(path_between(&gpu, &unknown, 0, false), Path::Unknown);
        assert_eq!(path_between(&gpu, &unknown, 0, true), Path::Node);
        assert!(Path::Pxb < Path::Sys);
        assert!(!Path::Sys.is_local());
    }
}
