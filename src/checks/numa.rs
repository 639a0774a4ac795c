//! NUMA placement: the nodes with their CPUs and memory, that each GPU has a known node (so
//! `gputune pin` can place its rank), and that each GPU has a NIC on its own socket.

use crate::finding::{Area, Check, Finding, Status};
use crate::inventory::affinity::Path;
use crate::inventory::{Inventory, gpu_label};
use crate::profile::setting::KeySpec;

use super::Context;

/// NUMA checks follow from the hardware; profiles have nothing to set here.
pub const KEYS: &[KeySpec] = &[];

/// NUMA facts are all in the inventory: nothing else of the node is read.
pub fn audit(_ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let mut out = vec![nodes(inv)];
    for g in &inv.gpus {
        out.push(gpu_node(inv, g));
        if let Some(f) = gpu_nic(inv, g) {
            out.push(f);
        }
    }
    out
}

fn nodes(inv: &Inventory) -> Finding {
    if inv.numa_nodes.is_empty() {
        return Check::new("numa.nodes", Area::Numa).expected(">= 1").skip(
            "neither /sys/devices/system/node nor /sys/devices/system/cpu/online is present",
        );
    }
    let described: Vec<String> = inv
        .numa_nodes
        .iter()
        .map(|n| {
            let mem = n
                .memory
                .map_or("memory unknown".into(), |m| format!("{} MiB", m >> 20));
            let gpu = n
                .gpu_memory_of
                .as_ref()
                .map_or(String::new(), |g| format!(", memory of GPU {g}"));
            format!("node {}: CPUs {} ({mem}{gpu})", n.id, n.cpus)
        })
        .collect();
    let gpu_nodes: Vec<u32> = inv.gpus.iter().filter_map(|g| g.numa_node).collect();
    let starved: Vec<String> = inv
        .numa_nodes
        .iter()
        .filter(|n| gpu_nodes.contains(&n.id))
        .filter(|n| n.cpus.is_empty() || n.memory == Some(0))
        .map(|n| n.id.to_string())
        .collect();
    let (status, extra) = if starved.is_empty() {
        (Status::Pass, String::new())
    } else {
        (
            Status::Warn,
            format!(
                "; node(s) {} have GPUs but no CPUs or memory of their own, so their ranks always run remote",
                starved.join(",")
            ),
        )
    };
    Check::new("numa.nodes", Area::Numa)
        .expected("CPUs and memory on every node with GPUs")
        .why(format!("{}{extra}", described.join("; ")))
        .judge(
            status,
            inv.numa_nodes.len().to_string(),
            "check the BIOS memory population and sub-NUMA clustering settings",
        )
}

fn gpu_node(inv: &Inventory, g: &crate::inventory::gpu::Gpu) -> Finding {
    let id = format!("numa.gpu{}.node", g.index);
    match g.numa_node.and_then(|n| inv.node(n)) {
        Some(node) => Check::new(id, Area::Numa).expected("a known NUMA node").why(format!(
                "{} ({}) is local to CPUs {}; `gputune pin --local-rank {}` binds its rank there",
                gpu_label(g),
                g.pci_address,
                node.cpus,
                g.index
            )).pass(node.id.to_string()),
        None => Check::new(id, Area::Numa).expected("a known NUMA node").why(format!(
                "{} ({}) has numa_node = -1 on a host with {} NUMA nodes: ranks cannot be placed next to it",
                gpu_label(g),
                g.pci_address,
                inv.numa_nodes.len()
            )).warn("unknown", "enable ACPI SRAT / NUMA proximity reporting in the BIOS (often under 'Sub-NUMA clustering' or 'NUMA nodes per socket')"),
    }
}

/// The GPU's nearest NIC should be on its socket: GPUDirect RDMA and staged copies across
/// the socket interconnect run at a fraction of PCIe bandwidth.
fn gpu_nic(inv: &Inventory, g: &crate::inventory::gpu::Gpu) -> Option<Finding> {
    let best = inv
        .nics
        .iter()
        .map(|n| (inv.gpu_to_nic(g, n), n))
        .min_by_key(|(p, _)| *p)?;
    let (path, nic) = best;
    let status = match path {
        Path::Sys => Status::Warn,
        Path::Unknown => Status::Skip,
        _ => Status::Pass,
    };
    Some(
        Check::new(format!("numa.gpu{}.nic", g.index), Area::Numa)
            .expected("a NIC on the GPU's NUMA node")
            .why(format!(
                "nearest NIC of {} ({}) is {} ({} path; see `gputune topo`)",
                gpu_label(g),
                g.pci_address,
                nic.name,
                path.label()
            ))
            .judge(
                status,
                format!("{} via {}", nic.name, path.label()),
                "put a NIC in a slot on the GPU's socket, ideally behind the same PCIe switch",
            ),
    )
}
