//! How each GPU reaches each other GPU and each NIC, in `nvidia-smi topo -m` terms, worked
//! out from the PCI tree in sysfs (and NVLink from NVML when the driver is loaded).

use serde::Serialize;

/// The path between two devices, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Path {
    /// The device itself.
    #[serde(rename = "X")]
    Same,
    /// Direct NVLink connections (count of links).
    #[serde(rename = "NV")]
    NvLink(u32),
    /// Through at most a single PCIe switch (sibling ports of one switch included).
    #[serde(rename = "PIX")]
    Pix,
    /// Through several PCIe switches, but not through the host bridge.
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
    pub(crate) fn label(self) -> String {
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
    #[cfg(test)]
    pub(crate) fn is_local(self) -> bool {
        !matches!(self, Path::Sys | Path::Unknown)
    }
}

/// Where a device sits, enough to compare two of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    pub address: Option<&'a str>,
    pub bridges: &'a [String],
    pub host_bridge: Option<&'a str>,
    pub numa_node: Option<u32>,
}

/// The PCIe switch a bridge belongs to, by its place in the chain below the host bridge:
/// the first bridge is the root port (part of the root complex), then switches come as an
/// upstream port followed by one of its downstream ports. Both ports of a switch map to the
/// upstream port, so sibling downstream ports are one switch, as NVML counts them.
fn switch_of(chain: &[String], index: usize) -> &str {
    let upstream = if index == 0 {
        0
    } else {
        index - (1 - index % 2)
    };
    &chain[upstream]
}

/// How many PCIe switches (the root port counting as one) traffic between two devices
/// crosses, given their bridge chains and the length of the common prefix (`common > 0`):
/// the lowest common bridge and every bridge below it on either side.
fn switches_crossed(a: &[String], b: &[String], common: usize) -> usize {
    let mut switches: Vec<&str> = (common - 1..a.len())
        .map(|i| switch_of(a, i))
        .chain((common..b.len()).map(|i| switch_of(b, i)))
        .collect();
    switches.sort_unstable();
    switches.dedup();
    switches.len()
}

/// The path between two devices by NVML's definitions (`nvidia-smi topo -m`): X the device
/// itself; NV# bonded NVLinks; PIX at most a single PCIe switch; PXB several switches
/// without the host bridge; PHB through the host bridge (root complex); NODE between host
/// bridges of one NUMA node; SYS across the socket interconnect. `single_node` says the
/// host has one NUMA node, so an unreported `numa_node` cannot mean another socket.
pub(crate) fn path_between(a: &Place, b: &Place, nvlinks: u32, single_node: bool) -> Path {
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
        return if switches_crossed(a.bridges, b.bridges, common) <= 1 {
            Path::Pix
        } else {
            Path::Pxb
        };
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

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// One case per NVML level, on bridge chains as sysfs paths give them (root port,
    /// then upstream/downstream port pairs of each switch).
    /// (bridges, host bridge, node) of two devices and the path between them.
    type Case<'a> = (
        &'a [&'a str],
        &'a str,
        u32,
        &'a [&'a str],
        &'a str,
        u32,
        Path,
    );

    #[test]
    fn nvml_levels() {
        let hb0 = "pci0000:00";
        let cases: &[Case] = &[
            // Sibling downstream ports of one switch (HGX GPU and its NIC): PIX.
            (
                &["rp", "up", "d0"],
                hb0,
                0,
                &["rp", "up", "d1"],
                hb0,
                0,
                Path::Pix,
            ),
            // The same downstream port (a dual-port NIC's functions behind it): PIX.
            (
                &["rp", "up", "d0"],
                hb0,
                0,
                &["rp", "up", "d0"],
                hb0,
                0,
                Path::Pix,
            ),
            // Functions of one device right under a root port: PIX.
            (&["rp"], hb0, 0, &["rp"], hb0, 0, Path::Pix),
            // Nested switches, both below the inner one: PIX.
            (
                &["rp", "u1", "d1", "u2", "e0"],
                hb0,
                0,
                &["rp", "u1", "d1", "u2", "e1"],
                hb0,
                0,
                Path::Pix,
            ),
            // Nested switches, one below the inner and one below the outer: PXB.
            (
                &["rp", "u1", "d1", "u2", "e0"],
                hb0,
                0,
                &["rp", "u1", "d2"],
                hb0,
                0,
                Path::Pxb,
            ),
            // Two inner switches under one outer switch (DGX A100 GPU pairs): PXB.
            (
                &["rp", "u1", "d1", "u2", "e0"],
                hb0,
                0,
                &["rp", "u1", "d2", "u3", "f0"],
                hb0,
                0,
                Path::Pxb,
            ),
            // Different root ports of one root complex: PHB.
            (&["rp0", "up", "d0"], hb0, 0, &["rp1"], hb0, 0, Path::Phb),
            // Devices on the root bus with no bridge (VMs): PHB.
            (&[], hb0, 0, &[], hb0, 0, Path::Phb),
            // Different root complexes of one socket: NODE.
            (&["rp0"], hb0, 0, &["rp1"], "pci0000:80", 0, Path::Node),
            // Across sockets: SYS.
            (&["rp0"], hb0, 0, &["rp1"], "pci0000:80", 1, Path::Sys),
        ];
        for (i, (ab, ahb, an, bb, bhb, bn, want)) in cases.iter().enumerate() {
            let (ab, bb) = (s(ab), s(bb));
            let a = place("a", &ab, ahb, *an);
            let b = place("b", &bb, bhb, *bn);
            assert_eq!(path_between(&a, &b, 0, false), *want, "case {i}");
            assert_eq!(path_between(&b, &a, 0, false), *want, "case {i} reversed");
        }
    }

    #[test]
    fn self_nvlink_and_unknown() {
        let g0 = s(&["r0", "u0", "d0"]);
        let other_root = s(&["r1"]);
        let gpu = place("a", &g0, "pci0000:00", 0);
        assert_eq!(path_between(&gpu, &gpu, 0, false), Path::Same);
        assert_eq!(
            path_between(&gpu, &place("b", &g0, "pci0000:00", 0), 12, false),
            Path::NvLink(12)
        );
        let unknown = Place {
            numa_node: None,
            ..place("b", &other_root, "pci0000:80", 0)
        };
        assert_eq!(path_between(&gpu, &unknown, 0, false), Path::Unknown);
        assert_eq!(path_between(&gpu, &unknown, 0, true), Path::Node);
        assert!(Path::Pix < Path::Pxb && Path::Pxb < Path::Sys);
        assert!(!Path::Sys.is_local());
    }
}
