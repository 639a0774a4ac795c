//! `gputune pin`: exec a command on the CPUs and memory local to its GPU, so each DDP rank
//! runs next to the GPU it drives (what `numactl --cpunodebind --membind` does, with the
//! node found from the GPU).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, ExitCode, Result};
use crate::host::Root;
use crate::host::bind::{self, MemPolicy};
use crate::host::cpulist::CpuList;
use crate::inventory::{gpu, numa, pci};

#[derive(Debug, Args)]
pub struct PinArgs {
    /// The GPU index to bind to [default: $LOCAL_RANK, as torchrun, Slurm and Open MPI set it].
    #[arg(long, value_name = "N")]
    pub local_rank: Option<u32>,
    /// Say which CPUs and memory nodes the command was bound to.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Why pin could not bind or start the command (exit 3).
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("no NVIDIA GPU found in {}; nothing to pin to", .0.display())]
    NoGpu(PathBuf),
    #[error(
        "GPU{rank} ({pci}) has no NUMA node in sysfs (numa_node = -1) on a host with {nodes} nodes; \
         enable ACPI SRAT/proximity domains in the firmware, or bind by hand with numactl"
    )]
    NoNode {
        rank: u32,
        pci: String,
        nodes: usize,
    },
    #[error("GPU{rank} ({pci}) reports NUMA node {node}, which {} does not list", listing.display())]
    UnlistedNode {
        rank: u32,
        pci: String,
        node: u32,
        listing: PathBuf,
    },
    #[error("NUMA node {node} of GPU{rank} has no CPUs and the GPU lists no local CPUs")]
    NoCpus { rank: u32, node: u32 },
    #[error("cannot bind to CPUs {cpus} of NUMA node {node}: {source}")]
    BindCpus {
        cpus: CpuList,
        node: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind memory to NUMA node {nodes}: {source}")]
    BindMemory {
        nodes: CpuList,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run {program}: {source}")]
    Exec {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// Environment variables launchers set to the rank's index on its node, in the order read.
pub(crate) const RANK_VARS: [&str; 3] =
    ["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"];

/// The local rank: the flag, else the first launcher variable that is set.
pub(crate) fn local_rank(flag: Option<u32>, env: &dyn Fn(&str) -> Option<String>) -> Result<u32> {
    if let Some(rank) = flag {
        return Ok(rank);
    }
    for var in RANK_VARS {
        if let Some(value) = env(var) {
            return value.trim().parse().map_err(|_| {
                Error::Usage(format!(
                    "${var}={value:?} is not a local rank (a GPU index such as 0)"
                ))
            });
        }
    }
    Err(Error::Usage(format!(
        "no --local-rank given and none of ${} is set",
        RANK_VARS.join(", $")
    )))
}

/// Where a rank goes: its GPU, that GPU's NUMA node, the CPUs and the memory policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Binding {
    pub gpu_index: u32,
    pub pci_address: String,
    pub node: u32,
    pub cpus: CpuList,
    /// The memory nodes to bind to; `None` when the node has no memory of its own.
    pub memory: Option<CpuList>,
}

/// Works out the binding of GPU `rank` from the root's topology.
pub(crate) fn plan(root: &Root, rank: u32) -> Result<Binding> {
    let gpus = gpu::gpus(&pci::devices(root)?, &gpu::proc_gpus(root)?);
    if gpus.is_empty() {
        return Err(PinError::NoGpu(root.path("/sys/bus/pci/devices")).into());
    }
    let Some(g) = gpus.get(rank as usize) else {
        return Err(Error::Usage(format!(
            "local rank {rank} has no GPU: this node has {} (0-{}, in PCI bus order)",
            gpus.len(),
            gpus.len() - 1
        )));
    };
    let nodes = numa::nodes(root)?;
    // Only online CPUs count, and they name the node when the firmware did not.
    let local = match (&g.local_cpus, numa::online_cpus(root)?) {
        (Some(l), Some(online)) => Some(numa::split_online(l, &online).0),
        (l, _) => l.clone(),
    };
    let inferred = local.as_ref().and_then(|l| numa::node_of_cpus(&nodes, l));
    let node_id = match (g.numa_node.or(inferred), nodes.as_slice()) {
        (Some(id), _) => id,
        (None, [only]) => only.id,
        (None, _) => {
            return Err(PinError::NoNode {
                rank,
                pci: g.pci_address.clone(),
                nodes: nodes.len(),
            }
            .into());
        }
    };
    let Some(node) = nodes.iter().find(|n| n.id == node_id) else {
        return Err(PinError::UnlistedNode {
            rank,
            pci: g.pci_address.clone(),
            node: node_id,
            listing: root.path("/sys/devices/system/node"),
        }
        .into());
    };
    let cpus = if node.cpus.is_empty() {
        local.unwrap_or_default()
    } else {
        node.cpus.clone()
    };
    if cpus.is_empty() {
        return Err(PinError::NoCpus {
            rank,
            node: node_id,
        }
        .into());
    }
    // A node without memory of its own (or that does not say) cannot be bound to.
    let memory = match node.memory {
        Some(bytes) if bytes > 0 => Some(CpuList(std::iter::once(node_id).collect())),
        _ => None,
    };
    Ok(Binding {
        gpu_index: rank,
        pci_address: g.pci_address.clone(),
        node: node_id,
        cpus,
        memory,
    })
}

pub(crate) fn run(args: &PinArgs, root: &Root) -> Result<ExitCode> {
    let rank = local_rank(args.local_rank, &|v| std::env::var(v).ok())?;
    let binding = plan(root, rank)?;
    bind::set_cpu_affinity(&binding.cpus).map_err(|source| PinError::BindCpus {
        cpus: binding.cpus.clone(),
        node: binding.node,
        source,
    })?;
    if let Some(nodes) = &binding.memory {
        bind::set_memory_policy(MemPolicy::Bind, nodes).map_err(|source| PinError::BindMemory {
            nodes: nodes.clone(),
            source,
        })?;
    }
    if args.verbose {
        eprintln!(
            "gputune pin: local rank {rank} -> GPU{} ({}) on NUMA node {}: CPUs {}, memory {}",
            binding.gpu_index,
            binding.pci_address,
            binding.node,
            binding.cpus,
            binding.memory.as_ref().map_or(
                "not bound (the node lists no memory of its own)".into(),
                |m| format!("bound to node {m}")
            )
        );
    }
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::Usage("pin needs a command after --".into()))?;
    let err = std::process::Command::new(program).args(rest).exec();
    Err(PinError::Exec {
        program: program.clone(),
        source: err,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_from_flag_then_launcher_variables() {
        let none = |_: &str| None;
        assert_eq!(local_rank(Some(3), &none).unwrap(), 3);
        let slurm = |v: &str| (v == "SLURM_LOCALID").then(|| "2".to_string());
        assert_eq!(local_rank(None, &slurm).unwrap(), 2);
        let both = |v: &str| match v {
            "LOCAL_RANK" => Some("1".to_string()),
            "OMPI_COMM_WORLD_LOCAL_RANK" => Some("5".to_string()),
            _ => None,
        };
        assert_eq!(local_rank(None, &both).unwrap(), 1);
        let bad = |v: &str| (v == "LOCAL_RANK").then(|| "one".to_string());
        let err = local_rank(None, &bad).unwrap_err();
        assert!(err.to_string().contains("$LOCAL_RANK"), "{err}");
        assert_eq!(err.exit_code(), ExitCode::Usage);
        let err = local_rank(None, &none).unwrap_err();
        assert!(err.to_string().contains("SLURM_LOCALID"), "{err}");
    }
}
