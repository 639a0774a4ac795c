//! What hardware the node has and where it sits: GPUs, NICs, RDMA devices and NUMA nodes,
//! read from sysfs under the [`Root`], enriched by live-only sources (NVML, ethtool,
//! netlink) when the root is the running node. `topo`, `pin` and the gpu, nic, numa and
//! platform checks all read this one inventory.

pub(crate) mod affinity;
pub(crate) mod gpu;
pub(crate) mod nic;
pub(crate) mod numa;
pub(crate) mod pci;
pub(crate) mod pcie_cap;
pub(crate) mod rdma;

use std::fmt::Display;

use serde::{Serialize, Serializer};

use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root};
use crate::probe::nvml::NvmlFacts;
use affinity::{Path, Place};
use gpu::Gpu;
use nic::{Nic, SkippedNic};
use numa::NumaNode;
use rdma::RdmaDevice;

/// The node's hardware.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Inventory {
    pub numa_nodes: Vec<NumaNode>,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub skipped_nics: Vec<SkippedNic>,
    pub rdma: Vec<RdmaDevice>,
    /// NVML facts, or why there are none.
    #[serde(skip)]
    pub nvml: Result<NvmlFacts, crate::probe_error::ProbeError>,
}

impl Inventory {
    /// Reads everything; only unreadable (not missing) files are errors.
    pub(crate) fn read(root: &Root, probes: &crate::probe::Probes) -> Result<Inventory, HostError> {
        let numa_nodes = numa::nodes(root)?;
        let devices = pci::devices(root)?;
        let mut gpus = gpu::gpus(&devices, &gpu::proc_gpus(root)?);
        let mut numa_nodes = numa_nodes;
        for g in &gpus {
            if let Some(n) = g
                .memory_numa_node
                .and_then(|id| numa_nodes.iter_mut().find(|n| n.id == id))
            {
                n.gpu_memory_of = Some(g.pci_address.clone());
            }
        }
        let mut rdma = rdma::devices(root)?;
        let (mut nics, skipped_nics) = nic::nics(root, probes.ethtool.as_ref(), &rdma)?;
        // Only online CPUs are local: a GPU's `local_cpulist` lists offline ones too.
        if let Some(online) = numa::online_cpus(root)? {
            let keep = |cpus: &mut Option<CpuList>| {
                if let Some(c) = cpus {
                    *c = numa::split_online(c, &online).0;
                }
            };
            gpus.iter_mut().for_each(|g| keep(&mut g.local_cpus));
            nics.iter_mut().for_each(|n| keep(&mut n.local_cpus));
        }
        // Firmware (or a trimmed capture) without `numa_node`: the local CPUs name the node.
        for g in gpus.iter_mut().filter(|g| g.numa_node.is_none()) {
            g.numa_node = g
                .local_cpus
                .as_ref()
                .and_then(|c| numa::node_of_cpus(&numa_nodes, c));
        }
        for n in nics.iter_mut().filter(|n| n.numa_node.is_none()) {
            n.numa_node = n
                .local_cpus
                .as_ref()
                .and_then(|c| numa::node_of_cpus(&numa_nodes, c));
        }
        // An HCA shares its PCI function with its netdev, whose node may be known from its
        // local CPUs.
        for r in rdma.iter_mut().filter(|r| r.numa_node.is_none()) {
            r.numa_node = nics
                .iter()
                .find(|n| n.pci_address.is_some() && n.pci_address == r.pci_address)
                .and_then(|n| n.numa_node);
        }
        // A one-node host leaves `numa_node` at -1: every device is on that node.
        if let [only] = numa_nodes.as_slice() {
            for g in gpus.iter_mut().filter(|g| g.numa_node.is_none()) {
                g.numa_node = Some(only.id);
            }
            for n in nics.iter_mut().filter(|n| n.numa_node.is_none()) {
                n.numa_node = Some(only.id);
            }
            for r in rdma.iter_mut().filter(|r| r.numa_node.is_none()) {
                r.numa_node = Some(only.id);
            }
        }
        let nvml = if gpus.is_empty() {
            Err(crate::probe_error::ProbeError::Absent(
                "no NVIDIA GPU on the PCI bus".to_string(),
            ))
        } else {
            probes.nvml.probe()
        };
        if let Ok(facts) = &nvml {
            for g in &mut gpus {
                g.nvml = facts
                    .gpus
                    .iter()
                    .find(|n| n.pci_address == g.pci_address)
                    .cloned();
            }
        }
        Ok(Inventory {
            numa_nodes,
            gpus,
            nics,
            skipped_nics,
            rdma,
            nvml,
        })
    }

    pub(crate) fn single_numa_node(&self) -> bool {
        self.numa_nodes.len() <= 1
    }

    pub(crate) fn node(&self, id: u32) -> Option<&NumaNode> {
        self.numa_nodes.iter().find(|n| n.id == id)
    }

    /// How GPU `a` reaches GPU `b`.
    pub(crate) fn gpu_to_gpu(&self, a: &Gpu, b: &Gpu) -> Path {
        let nvlinks = a.nvml.as_ref().map_or(0, |n| {
            n.nvlink_peers
                .iter()
                .filter(|p| **p == b.pci_address)
                .count() as u32
        });
        affinity::path_between(
            &gpu_place(a),
            &gpu_place(b),
            nvlinks,
            self.single_numa_node(),
        )
    }

    /// How a GPU reaches a device of the training fabric.
    pub(crate) fn gpu_to_fabric(&self, g: &Gpu, d: FabricDevice) -> Path {
        affinity::path_between(&gpu_place(g), &d.place(), 0, self.single_numa_node())
    }

    /// The GPU ↔ GPU matrix alone, without NIC columns.
    #[cfg(test)]
    pub(crate) fn matrix(&self) -> Matrix {
        self.matrix_with(&[], None)
    }

    /// The affinity matrix: a row per GPU, a column per GPU then per device of the
    /// training fabric (`fabric`, chosen by `checks::nic::select`, `why` says how).
    pub(crate) fn matrix_with(&self, fabric: &[FabricDevice], why: Option<&str>) -> Matrix {
        let mut columns: Vec<String> = self.gpus.iter().map(gpu_label).collect();
        columns.extend(fabric.iter().map(|d| d.name().to_string()));
        let rows = self
            .gpus
            .iter()
            .map(|g| MatrixRow {
                name: gpu_label(g),
                numa_node: g.numa_node,
                cpus: g.local_cpus.as_ref().map(ToString::to_string).or_else(|| {
                    g.numa_node
                        .and_then(|id| self.node(id))
                        .map(|n| n.cpus.to_string())
                }),
                links: self
                    .gpus
                    .iter()
                    .map(|o| self.gpu_to_gpu(g, o).label())
                    .chain(fabric.iter().map(|d| self.gpu_to_fabric(g, *d).label()))
                    .collect(),
            })
            .collect();
        Matrix {
            columns,
            rows,
            fabric: why.map(str::to_string),
        }
    }
}

/// A device of the training fabric as a GPU reaches it: an RDMA device (InfiniBand or
/// RoCE HCA, EFA; with or without a netdev) or, where the fabric is plain Ethernet, a NIC.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FabricDevice<'a> {
    Hca(&'a RdmaDevice),
    Nic(&'a Nic),
}

impl<'a> FabricDevice<'a> {
    /// `mlx5_0`, `efa_0` (as NCCL's `NCCL_IB_HCA` and `nvidia-smi topo -m` name them) or
    /// `eth1`.
    pub(crate) fn name(&self) -> &'a str {
        match self {
            FabricDevice::Hca(h) => &h.name,
            FabricDevice::Nic(n) => &n.name,
        }
    }

    /// The name with an HCA's netdevs (`mlx5_0 (ens1np0)`), for messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            FabricDevice::Hca(h) if !h.netdevs.is_empty() => {
                format!("{} ({})", h.name, h.netdevs.join(", "))
            }
            FabricDevice::Hca(h) => format!("{} (no netdev)", h.name),
            FabricDevice::Nic(n) => n.name.clone(),
        }
    }

    fn place(&self) -> Place<'a> {
        match self {
            FabricDevice::Hca(h) => Place {
                address: h.pci_address.as_deref(),
                bridges: &h.bridges,
                host_bridge: h.host_bridge.as_deref(),
                numa_node: h.numa_node,
            },
            FabricDevice::Nic(n) => Place {
                address: n.pci_address.as_deref(),
                bridges: &n.bridges,
                host_bridge: n.host_bridge.as_deref(),
                numa_node: n.numa_node,
            },
        }
    }
}

fn gpu_place(g: &Gpu) -> Place<'_> {
    Place {
        address: Some(&g.pci_address),
        bridges: &g.bridges,
        host_bridge: g.host_bridge.as_deref(),
        numa_node: g.numa_node,
    }
}

/// A kernel attribute file (sysfs, `/proc/driver`) as trimmed text; `None` when missing or
/// unreadable. Drivers leave attributes out, or fail them (EINVAL) on devices without the
/// feature: the inventory records those as unknown, not as errors.
fn attribute(root: &Root, host_path: &str) -> Option<String> {
    let text = root.read_optional(host_path).ok().flatten()?;
    Some(text.trim().to_string())
}

/// `GPU0`, as nvidia-smi names them.
pub(crate) fn gpu_label(g: &Gpu) -> String {
    format!("GPU{}", g.index)
}

/// The GPU ↔ GPU/NIC matrix of `gputune topo`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Matrix {
    pub columns: Vec<String>,
    pub rows: Vec<MatrixRow>,
    /// Why the NIC columns are the devices they are (the training fabric).
    pub fabric: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct MatrixRow {
    pub name: String,
    pub numa_node: Option<u32>,
    /// CPUs local to the GPU (its `local_cpulist`, else its node's CPUs).
    pub cpus: Option<String>,
    /// One label per column: `X`, `NV12`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`, `?`.
    pub links: Vec<String>,
}

/// Serialises a value in its Display form (CPU lists as the kernel writes them).
pub(crate) fn serialize_display<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Serialises an optional value in its Display form.
pub(crate) fn serialize_opt_display<T: Display, S: Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}
