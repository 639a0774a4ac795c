//! NUMA placement: the nodes with their CPUs and memory, that each GPU has a known node (so
//! `gputune pin` can place its rank), and that each GPU has a NIC of the training fabric
//! on its own socket.

use crate::checks::nic::select;
use crate::finding::{Area, Check, Finding, Status};
use crate::inventory::affinity::Path;
use crate::inventory::{FabricDevice, Inventory, gpu_label};
use crate::profile::setting::KeySpec;

use super::Context;

/// NUMA checks follow from the hardware; profiles have nothing to set here.
pub(crate) const KEYS: &[KeySpec] = &[];

/// NUMA facts are all in the inventory; the training fabric is the nic area's choice.
pub(crate) fn audit(ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let mut out = vec![nodes(inv)];
    // A `--peer` without a route is the nic area's finding; here the rule's choice stands.
    let (fabric, _) = select::fabric(ctx.root, inv, &ctx.probes, ctx.options.peer.as_deref());
    let devices = fabric.devices();
    for g in &inv.gpus {
        out.push(gpu_node(inv, g));
        if let Some(f) = gpu_nic(inv, g, &devices, &fabric.why) {
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

/// The GPU's nearest device of the training fabric (HCAs with or without a netdev, never
/// a management port) should be on its socket: GPUDirect RDMA and staged copies across the
/// socket interconnect run at a fraction of PCIe bandwidth.
fn gpu_nic(
    inv: &Inventory,
    g: &crate::inventory::gpu::Gpu,
    fabric: &[FabricDevice],
    why: &str,
) -> Option<Finding> {
    let (path, device) = fabric
        .iter()
        .map(|d| (inv.gpu_to_fabric(g, *d), d))
        .min_by_key(|(p, _)| *p)?;
    let status = match path {
        Path::Sys => Status::Warn,
        Path::Unknown => Status::Skip,
        _ => Status::Pass,
    };
    Some(
        Check::new(format!("numa.gpu{}.nic", g.index), Area::Numa)
            .expected("a training-fabric NIC on the GPU's NUMA node")
            .why(format!(
                "nearest training-fabric NIC of {} ({}) is {}, a {} path (see `gputune topo`); the fabric ({}) is chosen because {why}",
                gpu_label(g),
                g.pci_address,
                device.describe(),
                path.label(),
                fabric.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "),
            ))
            .judge(
                status,
                format!("{} via {}", device.name(), path.label()),
                "put a NIC of the training fabric in a slot on the GPU's socket, ideally behind the same PCIe switch",
            ),
    )
}
