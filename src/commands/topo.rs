//! `gputune topo`: GPUs, NICs, NUMA nodes and how they reach each other, in the spirit of
//! `nvidia-smi topo -m` but with NICs, CPU lists and PCIe link training, and working
//! without the NVIDIA driver.

use clap::Args;
use comfy_table::{Table, presets::NOTHING};
use serde::Serialize;

use crate::checks::nic::select;
use crate::error::{ExitCode, Result};
use crate::host::Root;
use crate::inventory::{Inventory, Matrix, gpu_label};
use crate::probe::Probes;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopoFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct TopoArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: TopoFormat,
}

pub(crate) fn run(args: &TopoArgs, root: &Root) -> Result<ExitCode> {
    let probes = Probes::for_root(root);
    let inventory = Inventory::read(root, &probes)?;
    // The NIC columns are the training fabric the nic and numa areas judge, never every
    // interface: a management port is not where a GPU's traffic goes.
    let (fabric, _) = select::fabric(root, &inventory, &probes, None);
    let matrix = inventory.matrix_with(&fabric.devices(), Some(&fabric.why));
    let text = match args.format {
        // Interface names may hold escape characters (the kernel allows them).
        TopoFormat::Table => crate::report::table::clean(&table(&inventory, &matrix)),
        TopoFormat::Json => json(&inventory, matrix),
    };
    super::emit(&text, None)?;
    Ok(ExitCode::Ok)
}

/// The stable JSON document (DESIGN.md "topo json").
#[derive(Serialize)]
struct TopoJson<'a> {
    schema_version: u32,
    numa_nodes: &'a [crate::inventory::numa::NumaNode],
    gpus: &'a [crate::inventory::gpu::Gpu],
    nics: &'a [crate::inventory::nic::Nic],
    skipped_nics: &'a [crate::inventory::nic::SkippedNic],
    rdma_devices: &'a [crate::inventory::rdma::RdmaDevice],
    affinity: Matrix,
    /// Why NVML facts (names, NVLink) are missing, when they are.
    nvml_skipped: Option<String>,
}

pub(crate) fn json(inv: &Inventory, affinity: Matrix) -> String {
    let doc = TopoJson {
        schema_version: 1,
        numa_nodes: &inv.numa_nodes,
        gpus: &inv.gpus,
        nics: &inv.nics,
        skipped_nics: &inv.skipped_nics,
        rdma_devices: &inv.rdma,
        affinity,
        nvml_skipped: inv.nvml.as_ref().err().map(ToString::to_string),
    };
    // Serialising plain data with string keys cannot fail.
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// A cell that may be empty: `-` then, as `opt` shows `None`.
fn or_dash(s: String) -> String {
    if s.is_empty() { "-".into() } else { s }
}

fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(NOTHING).set_header(header.to_vec());
    t
}

/// Bytes as GiB with one decimal.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

pub(crate) fn table(inv: &Inventory, m: &Matrix) -> String {
    let mut out = String::new();
    let mut nodes = new_table(&["NODE", "CPUS", "OFFLINE CPUS", "MEMORY", "GPU MEMORY OF"]);
    for n in &inv.numa_nodes {
        nodes.add_row(vec![
            n.id.to_string(),
            n.cpus.to_string(),
            or_dash(n.offline_cpus.to_string()),
            opt(n.memory.map(gib)),
            opt(n.gpu_memory_of.clone()),
        ]);
    }
    out += &format!("NUMA nodes: {}\n{nodes}\n\n", inv.numa_nodes.len());

    out += &format!("GPUs: {}\n", inv.gpus.len());
    if !inv.gpus.is_empty() {
        let mut t = new_table(&[
            "GPU", "PCI", "DEVICE", "NAME", "DRIVER", "NUMA", "CPUS", "PCIE NOW", "PCIE MAX",
        ]);
        for g in &inv.gpus {
            t.add_row(vec![
                gpu_label(g),
                g.pci_address.clone(),
                g.device_id.clone(),
                opt(g.nvml.as_ref().map(|n| n.name.clone()).or(g.model.clone())),
                opt(g.driver.clone()),
                opt(g.numa_node),
                opt(g.local_cpus.as_ref()),
                g.link.current(),
                g.link.max(),
            ]);
        }
        out += &format!("{t}\n");
    }
    if let Err(reason) = &inv.nvml {
        out += &format!("NVML: skipped ({reason})\n");
    }
    out += "\n";

    out += &format!("NICs: {}\n", inv.nics.len());
    if !inv.nics.is_empty() {
        let mut t = new_table(&[
            "NIC", "PCI", "DRIVER", "NUMA", "SPEED", "MTU", "STATE", "FIRMWARE", "PCIE NOW",
            "PCIE MAX", "RDMA",
        ]);
        for n in &inv.nics {
            t.add_row(vec![
                n.name.clone(),
                opt(n.pci_address.clone()),
                opt(n.driver.clone()),
                opt(n.numa_node),
                opt(n.speed_mbps.map(|s| format!("{s} Mb/s"))),
                opt(n.mtu),
                n.operstate.clone(),
                opt(n.firmware.clone()),
                opt(n.link.as_ref().map(|l| l.current())),
                opt(n.link.as_ref().map(|l| l.max())),
                or_dash(n.rdma.join(",")),
            ]);
        }
        out += &format!("{t}\n");
    }
    for s in &inv.skipped_nics {
        out += &format!("  skipped {}: {}\n", s.name, s.reason);
    }
    if !inv.rdma.is_empty() {
        out += &format!("\nRDMA devices: {}\n", inv.rdma.len());
        let mut t = new_table(&[
            "HCA",
            "PORT",
            "STATE",
            "PHYS",
            "RATE",
            "WIDTH",
            "LINK",
            "MTU",
            "FIRMWARE",
            "DRIVER",
            "PCI",
            "NUMA",
            "NETDEV",
            "RELAXED ORD",
        ]);
        for r in &inv.rdma {
            for p in &r.ports {
                t.add_row(vec![
                    r.name.clone(),
                    p.port.to_string(),
                    p.state.clone(),
                    opt(p.phys_state.clone()),
                    or_dash(p.rate.clone()),
                    opt(p.width.map(|w| format!("{w}X"))),
                    opt(p.link_layer.clone()),
                    opt(p.active_mtu),
                    opt(r.firmware.clone()),
                    opt(r.driver.clone()),
                    opt(r.pci_address.clone()),
                    opt(r.numa_node),
                    or_dash(r.netdevs.join(",")),
                    opt(r.relaxed_ordering.map(|e| if e { "on" } else { "off" })),
                ]);
            }
        }
        out += &format!("{t}\n");
        for r in &inv.rdma {
            for p in r.ports.iter().filter(|p| p.is_roce()) {
                out += &format!("  {} port {} GIDs:\n", r.name, p.port);
                if p.gids.is_empty() {
                    out += "    (none set)\n";
                }
                for g in &p.gids {
                    out += &format!(
                        "    {:>3}  {:<10}  {}  {}\n",
                        g.index,
                        g.kind,
                        g.gid,
                        g.netdev.as_deref().unwrap_or("-")
                    );
                }
            }
        }
    }

    if !inv.gpus.is_empty() {
        let mut header = vec![String::new()];
        header.extend(m.columns.iter().cloned());
        header.push("CPU AFFINITY".into());
        header.push("NUMA".into());
        let mut t = Table::new();
        t.load_style(NOTHING).set_header(header);
        for r in &m.rows {
            let mut row = vec![r.name.clone()];
            row.extend(r.links.iter().cloned());
            row.push(opt(r.cpus.clone()));
            row.push(opt(r.numa_node));
            t.add_row(row);
        }
        out += &format!("\nAffinity\n{t}\n");
        if let Some(why) = &m.fabric {
            let nics = &m.columns[inv.gpus.len()..];
            out += &match nics {
                [] => "NIC columns: none (no training fabric)\n".to_string(),
                _ => format!(
                    "NIC columns: the training fabric ({}), because {why}\n",
                    nics.join(", ")
                ),
            };
        }
        out += &format!("\n{LEGEND}\n");
    }
    out
}

const LEGEND: &str = "Legend:
  X    = self
  NV#  = NVLink (# links, from NVML)
  PIX  = through at most a single PCIe switch
  PXB  = through several PCIe switches, not the host bridge
  PHB  = through one PCIe host bridge (root complex)
  NODE = through several host bridges of one NUMA node
  SYS  = across NUMA nodes (the socket interconnect)
  ?    = NUMA node not reported by the firmware";
