//! Which NICs and HCAs are the training fabric, so only they are judged: the one routing to
//! `--peer`; else, on an InfiniBand or RoCE node, the RDMA devices (NCCL's IB transport
//! uses them) and their network interfaces; else the fastest physical interface that is up
//! (the rule that chose the default profile); else the default route's. Every other
//! interface is listed, never failed for speed: a 1 GbE management port is not a fault.
//! The numa area (each GPU's nearest NIC) and `gputune topo` (the affinity matrix's NIC
//! columns) take the same devices from [`fabric`], so all three agree on what the fabric is.

use crate::probe_error::{Probe, ProbeError};
use std::net::{IpAddr, ToSocketAddrs};

use crate::finding::{Area, Check, Finding};
use crate::host::Root;
use crate::inventory::nic::Nic;
use crate::inventory::rdma::RdmaDevice;
use crate::inventory::{FabricDevice, Inventory};
use crate::probe::Probes;
use crate::probe::route;

use super::super::Context;
use super::fastest_up;

/// The training fabric of this node.
pub struct Chosen<'a> {
    pub nics: Vec<&'a Nic>,
    pub hcas: Vec<&'a RdmaDevice>,
    /// Why these, for messages.
    pub why: String,
}

impl<'a> Chosen<'a> {
    /// The judged NICs the kernel driver `driver` drives.
    pub fn nics_of<'s>(&'s self, driver: &'s str) -> impl Iterator<Item = &'a Nic> + 's {
        let driven = move |n: &&Nic| n.driver.as_deref() == Some(driver);
        self.nics.iter().copied().filter(driven)
    }

    /// The judged HCAs the kernel driver `driver` drives.
    pub fn hcas_of<'s>(&'s self, driver: &'s str) -> impl Iterator<Item = &'a RdmaDevice> + 's {
        let driven = move |h: &&RdmaDevice| h.driver.as_deref() == Some(driver);
        self.hcas.iter().copied().filter(driven)
    }

    /// The fabric as GPUs reach it: every chosen HCA (EFA and IPoIB-less HCAs have no
    /// netdev), then every chosen NIC that is not one of those HCAs' netdev.
    pub fn devices(&self) -> Vec<FabricDevice<'a>> {
        let is_hca = |name: &String| self.hcas.iter().any(|h| &h.name == name);
        let hcas = self.hcas.iter().map(|h| FabricDevice::Hca(h));
        let nics = self
            .nics
            .iter()
            .filter(|n| !n.rdma.iter().any(is_hca))
            .map(|n| FabricDevice::Nic(n));
        hcas.chain(nics).collect()
    }
}

/// Picks the training NICs and HCAs; a `--peer` that cannot be routed adds a skip.
pub fn training<'a>(
    ctx: &Context,
    inv: &'a Inventory,
    probes: &Probes,
    findings: &mut Vec<Finding>,
) -> Chosen<'a> {
    let peer = ctx.options.peer.as_deref();
    let (chosen, unrouted) = fabric(ctx.root, inv, probes, peer);
    if let (Some(peer), Some(reason)) = (peer, unrouted) {
        let check = Check::new("nic.peer_route", Area::Nic)
            .expected(format!("an interface routes to {peer}"));
        findings.push(reason.finding(Probe::Routes, &check, reason.to_string()));
    }
    chosen
}

/// The training fabric of the node under `root`: the NIC routing to `peer` (`--peer`), else
/// the RDMA devices, else the fastest interface that is up, else the default route's. The
/// second value says why `peer` picked no interface.
pub fn fabric<'a>(
    root: &Root,
    inv: &'a Inventory,
    probes: &Probes,
    peer: Option<&str>,
) -> (Chosen<'a>, Option<ProbeError>) {
    let mut unrouted = None;
    if let Some(peer) = peer {
        match peer_nic(inv, probes, peer) {
            Ok(nic) => {
                let chosen = Chosen {
                    hcas: inv
                        .rdma
                        .iter()
                        .filter(|r| nic.rdma.contains(&r.name))
                        .collect(),
                    nics: vec![nic],
                    why: format!("it routes to --peer {peer}"),
                };
                return (chosen, None);
            }
            Err(reason) => unrouted = Some(reason),
        }
    }
    (by_rule(root, inv, probes), unrouted)
}

/// The fabric when no peer picks it.
fn by_rule<'a>(root: &Root, inv: &'a Inventory, probes: &Probes) -> Chosen<'a> {
    if !inv.rdma.is_empty() {
        let names: Vec<&str> = inv.rdma.iter().map(|r| r.name.as_str()).collect();
        let efa_only = inv.rdma.iter().all(|r| r.driver.as_deref() == Some("efa"));
        let transport = if efa_only {
            "NCCL reaches EFA through the aws-ofi-nccl plugin over this node's EFA devices"
        } else {
            "NCCL's IB transport uses this node's RDMA devices"
        };
        return Chosen {
            nics: inv.nics.iter().filter(|n| !n.rdma.is_empty()).collect(),
            hcas: inv.rdma.iter().collect(),
            why: format!("{transport} ({})", names.join(", ")),
        };
    }
    if let Some(nic) = fastest_up(&inv.nics) {
        return Chosen {
            nics: vec![nic],
            hcas: vec![],
            why: "it is the fastest physical interface that is up (the rule that picks the default profile)".into(),
        };
    }
    if let Some(nic) = default_route_nic(root, inv, probes) {
        return Chosen {
            nics: vec![nic],
            hcas: vec![],
            why: "it carries the default route".into(),
        };
    }
    Chosen {
        nics: inv.nics.iter().collect(),
        hcas: vec![],
        why: "no interface is up, so every physical one is judged".into(),
    }
}

fn default_route_nic<'a>(root: &Root, inv: &'a Inventory, probes: &Probes) -> Option<&'a Nic> {
    if root.is_live() {
        // Every next hop of an ECMP default route: the first that is a physical NIC.
        probes
            .routes
            .default_route()
            .ok()?
            .into_iter()
            .find_map(|i| inv.nics.iter().find(|n| n.ifindex == Some(i)))
    } else {
        root.read_optional("/proc/net/route")
            .ok()
            .flatten()
            .and_then(|t| route::default_from_proc(&t))
            .and_then(|name| inv.nics.iter().find(|n| n.name == name))
    }
}

/// Splits `HOST[:PORT]` (`[v6]:PORT` for IPv6); a bare IPv6 address has no port.
pub fn split_peer(text: &str) -> (String, Option<u16>) {
    if let Some(rest) = text.strip_prefix('[')
        && let Some((host, tail)) = rest.split_once(']')
    {
        return (
            host.to_string(),
            tail.strip_prefix(':').and_then(|p| p.parse().ok()),
        );
    }
    if text.parse::<IpAddr>().is_ok() {
        return (text.to_string(), None);
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(p) => (host.to_string(), Some(p)),
            Err(_) => (text.to_string(), None),
        },
        _ => (text.to_string(), None),
    }
}

fn peer_nic<'a>(inv: &'a Inventory, probes: &Probes, peer: &str) -> Result<&'a Nic, ProbeError> {
    let (host, _) = split_peer(peer);
    let addr = resolve(&host)?;
    let ifindex = probes.routes.route_to(addr)?;
    inv.nics
        .iter()
        .find(|n| n.ifindex == Some(ifindex))
        .ok_or_else(|| {
            ProbeError::Absent(format!("the route to {peer} leaves through interface index {ifindex}, a virtual interface (bond, VLAN, bridge or loopback) whose ports are judged instead"))
        })
}

/// The address of `--peer` (`HOST` or `HOST:PORT` already split off by the caller).
pub fn resolve(peer: &str) -> Result<IpAddr, ProbeError> {
    match peer.parse() {
        Ok(a) => Ok(a),
        Err(_) => (peer, 0)
            .to_socket_addrs()
            .map_err(|e| {
                ProbeError::Failed(format!(
                    "--peer {peer}: not an address and cannot be resolved: {e}"
                ))
            })?
            .next()
            .map(|s| s.ip())
            .ok_or_else(|| ProbeError::Absent(format!("--peer {peer}: resolves to no address"))),
    }
}

/// Interfaces that are up but not the training fabric: listed as skips saying so, so a
/// management port shows in the report without failing it.
pub fn unjudged(inv: &Inventory, chosen: &Chosen) -> Vec<Finding> {
    let fabric: Vec<String> = chosen
        .hcas
        .iter()
        .map(|h| h.name.clone())
        .chain(chosen.nics.iter().map(|n| n.name.clone()))
        .collect();
    inv.nics
        .iter()
        .filter(|n| n.is_up() && !chosen.nics.iter().any(|c| c.name == n.name))
        .map(|n| {
            Check::new(format!("nic.{}.role", n.name), Area::Nic)
                .expected("the training fabric")
                .skip(format!(
                    "{} ({}) is not the training fabric ({}): listed, not judged for speed or MTU",
                    n.name,
                    n.speed_mbps
                        .map_or("speed unreported".into(), |s| format!("{s} Mb/s")),
                    fabric.join(", ")
                ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    /// A PCI function at `bdf` on host bridge `pci0000:00`, and its RDMA device `hca`
    /// (driver `driver`) when given.
    fn function(tree: &Tree, bdf: &str, hca: Option<&str>) {
        let dir = format!("/sys/devices/pci0000:00/{bdf}");
        tree.file(&format!("{dir}/numa_node"), "0\n").link(
            &format!("/sys/bus/pci/devices/{bdf}"),
            &format!("../../../devices/pci0000:00/{bdf}"),
        );
        if let Some(hca) = hca {
            tree.link(
                &format!("/sys/class/infiniband/{hca}"),
                &format!("../../devices/pci0000:00/{bdf}/infiniband/{hca}"),
            )
            .link(&format!("{dir}/infiniband/{hca}/device"), "../..");
        }
    }

    /// A netdev `name` of the function `bdf`, up at `speed` Mb/s.
    fn netdev(tree: &Tree, bdf: &str, name: &str, speed: u32) {
        let net = format!("/sys/devices/pci0000:00/{bdf}/net/{name}");
        tree.file(&format!("{net}/speed"), &format!("{speed}\n"))
            .file(&format!("{net}/operstate"), "up\n")
            .link(&format!("{net}/device"), "../..")
            .link(
                &format!("/sys/class/net/{name}"),
                &format!("../../devices/pci0000:00/{bdf}/net/{name}"),
            );
    }

    fn names(tree: &Tree) -> Vec<String> {
        let root = tree.root();
        let probes = Probes::absent("in a test");
        let inv = Inventory::read(&root, &probes).unwrap();
        let (chosen, unrouted) = fabric(&root, &inv, &probes, None);
        assert_eq!(unrouted, None);
        chosen.devices().iter().map(|d| d.describe()).collect()
    }

    #[test]
    fn the_fabric_is_the_rdma_devices_netdev_or_not_never_the_management_port() {
        let tree = Tree::new();
        function(&tree, "0000:00:01.0", None);
        netdev(&tree, "0000:00:01.0", "eno1", 1000);
        function(&tree, "0000:00:02.0", Some("mlx5_0"));
        netdev(&tree, "0000:00:02.0", "ens2np0", 200_000);
        function(&tree, "0000:00:03.0", Some("efa_0"));
        // The RoCE HCA once (its netdev is not a second column), EFA without a netdev.
        assert_eq!(names(&tree), ["efa_0 (no netdev)", "mlx5_0 (ens2np0)"]);

        // Without RDMA devices the fabric is the fastest interface that is up.
        let plain = Tree::new();
        function(&plain, "0000:00:01.0", None);
        netdev(&plain, "0000:00:01.0", "eno1", 1000);
        function(&plain, "0000:00:02.0", None);
        netdev(&plain, "0000:00:02.0", "ens2", 100_000);
        assert_eq!(names(&plain), ["ens2"]);
    }

    #[test]
    fn peers_and_ports() {
        let cases: &[(&str, &str, Option<u16>)] = &[
            ("10.0.0.2", "10.0.0.2", None),
            ("10.0.0.2:29501", "10.0.0.2", Some(29501)),
            ("node-07:29500", "node-07", Some(29500)),
            ("node-07", "node-07", None),
            ("fe80::1", "fe80::1", None),
            ("[fe80::1]:29500", "fe80::1", Some(29500)),
            ("[fe80::1]", "fe80::1", None),
            ("node:port", "node:port", None),
        ];
        for (text, host, port) in cases {
            assert_eq!(split_peer(text), (host.to_string(), *port), "{text}");
        }
    }
}
