//! RDMA devices (InfiniBand HCAs, RoCE and iWARP NICs) from `/sys/class/infiniband`, with
//! each port's state, physical state, rate, width, link layer and, on RoCE, its GID table:
//! what NCCL's IB transport runs over, so what an IB or RoCE node is judged on.

use serde::Serialize;

use super::attribute;
use super::pci::{self, pci_function};
use crate::host::{HostError, Root};

/// An RDMA device and its ports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RdmaDevice {
    pub name: String,
    pub pci_address: Option<String>,
    pub numa_node: Option<u32>,
    /// The PCI function's kernel driver (`mlx5_core`), which `firmware.<driver>` rules name.
    pub driver: Option<String>,
    /// `fw_ver` (`28.39.1002`); absent on devices whose driver does not expose it (qib).
    pub firmware: Option<String>,
    /// `hca_type` / board, for people (`MT4099`).
    pub hca_type: Option<String>,
    /// Network interfaces on the same PCI function (the RoCE netdev, or IPoIB `ib0`).
    pub netdevs: Vec<String>,
    pub ports: Vec<RdmaPort>,
    /// Relaxed ordering in the PCIe Device Control register (`None`: config unreadable).
    pub relaxed_ordering: Option<bool>,
    #[serde(skip)]
    pub bridges: Vec<String>,
    #[serde(skip)]
    pub host_bridge: Option<String>,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RdmaPort {
    pub port: u32,
    /// `ACTIVE`, `INIT`, `ARMED`, `DOWN` (the logical state, from `4: ACTIVE`).
    pub state: String,
    /// `LinkUp`, `Polling`, `Disabled`, ... (the physical state, from `5: LinkUp`);
    /// `None` when the file is missing (trimmed captures, some soft-RoCE drivers).
    pub phys_state: Option<String>,
    /// The kernel's `rate` text (`100 Gb/sec (4X EDR)`); empty when the file is missing.
    pub rate: String,
    /// The rate in Mb/s (`2.5 Gb/sec` → 2500), `None` when unparsable.
    pub rate_mbps: Option<u64>,
    /// Lanes (`4X` → 4).
    pub width: Option<u32>,
    /// `FDR`, `EDR`, `HDR`, `NDR`... when the kernel names it.
    pub signalling: Option<String>,
    /// `InfiniBand`, `Ethernet` (RoCE) or `Unknown` (EFA) as the kernel writes it; `None`
    /// when the file is missing: never guessed, EFA is not InfiniBand.
    pub link_layer: Option<String>,
    /// The IB MTU in use: for RoCE, the largest IB MTU the netdev's MTU carries; for
    /// InfiniBand, the subnet's, which sysfs does not show (`None`).
    pub active_mtu: Option<u32>,
    /// RoCE GID table entries that are set (index, type, netdev).
    pub gids: Vec<Gid>,
}

impl RdmaPort {
    /// ACTIVE and LinkUp: the port carries traffic. A snapshot without `phys_state`
    /// is judged on `state` alone.
    pub(crate) fn is_active(&self) -> bool {
        self.state == "ACTIVE" && matches!(self.phys_state.as_deref(), Some("LinkUp") | None)
    }

    pub(crate) fn is_roce(&self) -> bool {
        self.link_layer.as_deref() == Some("Ethernet")
    }
}

/// One populated GID table entry of a RoCE port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Gid {
    pub index: u32,
    pub gid: String,
    /// `RoCE v2` or `IB/RoCE v1`.
    pub kind: String,
    pub netdev: Option<String>,
}

impl Gid {
    pub(crate) fn is_roce_v2(&self) -> bool {
        self.kind.eq_ignore_ascii_case("RoCE v2")
    }

    /// IPv4-mapped (`::ffff:a.b.c.d`): the entry NCCL picks by default.
    pub(crate) fn is_ipv4(&self) -> bool {
        self.gid.starts_with("0000:0000:0000:0000:0000:ffff:")
    }
}

/// Parses a port `rate`: `56 Gb/sec (4X FDR)`, `2.5 Gb/sec (1X SDR)`, `10 Gb/sec (4X)`.
/// Returns (Mb/s, width, signalling).
pub(crate) fn parse_rate(text: &str) -> (Option<u64>, Option<u32>, Option<String>) {
    let text = text.trim();
    let mbps = text
        .split_once("Gb/sec")
        .and_then(|(n, _)| n.trim().parse::<f64>().ok())
        .filter(|g| g.is_finite() && *g > 0.0 && *g < 1e6)
        .map(|g| (g * 1000.0).round() as u64);
    let inside = text
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(i, _)| i.trim());
    let mut words = inside.unwrap_or_default().split_whitespace();
    let width = words
        .next()
        .and_then(|w| w.strip_suffix('X').or_else(|| w.strip_suffix('x')))
        .and_then(|n| n.parse().ok());
    let signalling = words.next().map(str::to_string);
    (mbps, width, signalling)
}

/// `4: ACTIVE` → `ACTIVE`, `5: LinkUp` → `LinkUp`.
pub(crate) fn state_name(text: &str) -> String {
    let t = text.trim();
    t.split_once(": ").map_or(t, |(_, s)| s.trim()).to_string()
}

/// The largest IB MTU (256..4096) a RoCE netdev MTU carries: RoCE v2 adds about 58 bytes
/// of headers, so 1500 gives 1024 and 9000 gives 4096 (as `ibv_devinfo` shows).
pub(crate) fn roce_active_mtu(netdev_mtu: u32) -> Option<u32> {
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| m + 58 <= netdev_mtu)
}

/// Parses a GID (`fe80:0000:...`); the all-zero GID is an unused entry.
fn gid_set(text: &str) -> Option<String> {
    let t = text.trim();
    let empty = t.chars().all(|c| c == '0' || c == ':');
    (!t.is_empty() && !empty).then(|| t.to_string())
}

/// Every RDMA device with its ports; files that are missing are `None`/empty, never errors.
pub(crate) fn devices(root: &Root) -> Result<Vec<RdmaDevice>, HostError> {
    let mut out = Vec::new();
    for name in crate::host::net::rdma_devices(root)? {
        out.push(device(root, &name)?);
    }
    Ok(out)
}

fn device(root: &Root, name: &str) -> Result<RdmaDevice, HostError> {
    let dir = format!("/sys/class/infiniband/{name}");
    let text = |f: &str| attribute(root, &format!("{dir}/{f}")).filter(|s| !s.is_empty());
    let real = root.canonicalize(&format!("{dir}/device"));
    let pci_dev = match real.as_deref().and_then(pci_function) {
        Some(p) => Some(pci::read_device(
            root,
            &pci::host_path(root, p).to_string_lossy(),
        )?),
        None => None,
    };
    let netdevs = match &pci_dev {
        Some(p) => {
            let host = format!("/sys/bus/pci/devices/{}/net", p.address);
            root.list_dir(&host)?.unwrap_or_default()
        }
        None => vec![],
    };
    let mut ports = Vec::new();
    let mut port_names = root
        .list_dir(&format!("{dir}/ports"))?
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.parse::<u32>().ok())
        .collect::<Vec<_>>();
    port_names.sort_unstable();
    for port in port_names {
        let pdir = format!("{dir}/ports/{port}");
        let read = |f: &str| attribute(root, &format!("{pdir}/{f}"));
        let rate = read("rate").unwrap_or_default();
        let (rate_mbps, width, signalling) = parse_rate(&rate);
        let link_layer = read("link_layer").filter(|l| !l.is_empty());
        let roce = link_layer.as_deref() == Some("Ethernet");
        let gids = if roce { gids(root, &pdir)? } else { vec![] };
        let netdev_mtu = netdevs
            .iter()
            .find_map(|n| attribute(root, &format!("/sys/class/net/{n}/mtu")))
            .and_then(|m| m.parse().ok());
        ports.push(RdmaPort {
            port,
            state: state_name(&read("state").unwrap_or_default()),
            phys_state: read("phys_state")
                .map(|p| state_name(&p))
                .filter(|p| !p.is_empty()),
            rate,
            rate_mbps,
            width,
            signalling,
            active_mtu: if roce {
                netdev_mtu.and_then(roce_active_mtu)
            } else {
                None
            },
            link_layer,
            gids,
        });
    }
    let relaxed_ordering = pci_dev.as_ref().and_then(|p| {
        root.read_optional_bytes(&format!("/sys/bus/pci/devices/{}/config", p.address))
            .ok()
            .flatten()
            .and_then(|c| super::pcie_cap::relaxed_ordering(&c))
    });
    Ok(RdmaDevice {
        name: name.to_string(),
        pci_address: pci_dev.as_ref().map(|p| p.address.clone()),
        numa_node: pci_dev.as_ref().and_then(|p| p.numa_node),
        driver: pci_dev.as_ref().and_then(|p| p.driver.clone()),
        firmware: text("fw_ver"),
        hca_type: text("hca_type").or_else(|| text("board_id")),
        netdevs,
        ports,
        relaxed_ordering,
        bridges: pci_dev.as_ref().map_or(vec![], |p| p.bridges.clone()),
        host_bridge: pci_dev.as_ref().and_then(|p| p.host_bridge.clone()),
    })
}

/// The populated GID entries of a RoCE port (`gids/N`, `gid_attrs/types/N`,
/// `gid_attrs/ndevs/N`). Unused entries read as zeros or fail with EINVAL.
fn gids(root: &Root, pdir: &str) -> Result<Vec<Gid>, HostError> {
    let mut out = Vec::new();
    let mut indexes: Vec<u32> = root
        .list_dir(&format!("{pdir}/gids"))?
        .unwrap_or_default()
        .into_iter()
        .filter_map(|i| i.parse().ok())
        .collect();
    indexes.sort_unstable();
    for index in indexes.into_iter().take(1024) {
        let read = |f: &str| attribute(root, &format!("{pdir}/{f}"));
        let Some(gid) = read(&format!("gids/{index}")).as_deref().and_then(gid_set) else {
            continue;
        };
        out.push(Gid {
            index,
            gid,
            kind: read(&format!("gid_attrs/types/{index}")).unwrap_or_default(),
            netdev: read(&format!("gid_attrs/ndevs/{index}")).filter(|t| !t.is_empty()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Case<'a> = (&'a str, Option<u64>, Option<u32>, Option<&'a str>);

    #[test]
    fn rates() {
        let cases: &[Case] = &[
            ("56 Gb/sec (4X FDR)\n", Some(56_000), Some(4), Some("FDR")),
            ("10 Gb/sec (4X SDR)", Some(10_000), Some(4), Some("SDR")),
            ("2.5 Gb/sec (1X SDR)", Some(2_500), Some(1), Some("SDR")),
            ("400 Gb/sec (4X NDR)", Some(400_000), Some(4), Some("NDR")),
            ("10 Gb/sec (4X)", Some(10_000), Some(4), None),
            ("25 Gb/sec (1X EDR)", Some(25_000), Some(1), Some("EDR")),
            ("", None, None, None),
            ("fast", None, None, None),
            ("-5 Gb/sec (4X)", None, Some(4), None),
        ];
        for (text, mbps, width, sig) in cases {
            let (m, w, s) = parse_rate(text);
            assert_eq!((m, w, s.as_deref()), (*mbps, *width, *sig), "{text:?}");
        }
    }

    #[test]
    fn states_mtus_and_gids() {
        assert_eq!(state_name("4: ACTIVE\n"), "ACTIVE");
        assert_eq!(state_name("3: Disabled"), "Disabled");
        assert_eq!(state_name("DOWN"), "DOWN");
        assert_eq!(roce_active_mtu(9000), Some(4096));
        assert_eq!(roce_active_mtu(1500), Some(1024));
        assert_eq!(roce_active_mtu(4200), Some(4096));
        assert_eq!(roce_active_mtu(200), None);
        assert_eq!(gid_set("0000:0000:0000:0000:0000:0000:0000:0000\n"), None);
        assert!(gid_set("fe80:0000:0000:0000:0e42:a1ff:fe01:0203").is_some());
        let g = Gid {
            index: 3,
            gid: "0000:0000:0000:0000:0000:ffff:0a00:0001".into(),
            kind: "RoCE v2".into(),
            netdev: None,
        };
        assert!(g.is_roce_v2() && g.is_ipv4());
    }
}
