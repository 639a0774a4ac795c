//! NUMA nodes from `/sys/devices/system/node`: which CPUs and how much memory each has, so
//! GPUs and NICs can be matched to the CPUs next to them.

use serde::Serialize;

use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root};

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NumaNode {
    pub id: u32,
    /// The node's online CPUs: only these are local to anything.
    #[serde(serialize_with = "super::serialize_display")]
    pub cpus: CpuList,
    /// CPUs of the node that are offline (`/sys/devices/system/cpu/online` lacks them):
    /// shown, never bound to.
    #[serde(serialize_with = "super::serialize_display")]
    pub offline_cpus: CpuList,
    /// `MemTotal` of the node in bytes; `None` when its `meminfo` is absent.
    pub memory: Option<u64>,
    /// The GPU (PCI address) whose own memory this node is (POWER9, Grace Hopper), from
    /// the driver's `numa_status`.
    pub gpu_memory_of: Option<String>,
}

/// Parses a node's `meminfo` (`Node 0 MemTotal:  47925628 kB`) into bytes.
pub(crate) fn parse_node_memtotal(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.split_once("MemTotal:")?.1;
        let mut words = rest.split_whitespace();
        let value: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => value.checked_mul(1024),
            None => Some(value),
            _ => None,
        }
    })
}

/// The NUMA nodes; a kernel without NUMA support (no `node` directory) is one node holding
/// every online CPU. A node's CPUs come from `cpulist`, else from `cpumap` (kernels before
/// 2.6.24 have only the mask).
pub(crate) fn nodes(root: &Root) -> Result<Vec<NumaNode>, HostError> {
    let base = "/sys/devices/system/node";
    let mut out = Vec::new();
    for name in root.list_dir(base)?.unwrap_or_default() {
        // Node numbers past the kernel's MAX_NUMNODES are not a kernel's: left out.
        let Some(id) = name
            .strip_prefix("node")
            .and_then(|n| n.parse().ok())
            .filter(|id| *id <= crate::host::cpulist::MAX_NODE_ID)
        else {
            continue;
        };
        let dir = format!("{base}/{name}");
        let cpus = match root.read_optional(&format!("{dir}/cpulist"))? {
            Some(list) => CpuList::parse(&list).ok(),
            None => root
                .read_optional(&format!("{dir}/cpumap"))?
                .and_then(|mask| CpuList::parse_mask(&mask)),
        }
        .unwrap_or_default();
        let memory = root
            .read_optional(&format!("{dir}/meminfo"))?
            .as_deref()
            .and_then(parse_node_memtotal);
        out.push(NumaNode {
            id,
            cpus,
            offline_cpus: CpuList::default(),
            memory,
            gpu_memory_of: None,
        });
    }
    out.sort_by_key(|n| n.id);
    let online = online_cpus(root)?;
    if out.is_empty() {
        if let Some(cpus) = online {
            out.push(NumaNode {
                id: 0,
                cpus,
                offline_cpus: CpuList::default(),
                memory: None,
                gpu_memory_of: None,
            });
        }
    } else if let Some(online) = &online {
        for node in &mut out {
            let (on, off) = split_online(&node.cpus, online);
            node.cpus = on;
            node.offline_cpus = off;
        }
    }
    Ok(out)
}

/// The online CPUs: `/sys/devices/system/cpu/online`, else each `cpuN/online` flag (kernels
/// before 2.6.26 have only the flags; a CPU without one, such as the boot CPU, cannot go
/// offline). `None` when neither says (then every listed CPU is taken as online, as
/// before hot-plug existed).
pub(crate) fn online_cpus(root: &Root) -> Result<Option<CpuList>, HostError> {
    let base = "/sys/devices/system/cpu";
    // An empty list is no kernel's (one CPU at least is always online): the flags decide.
    if let Some(list) = root
        .read_optional(&format!("{base}/online"))?
        .filter(|l| !l.trim().is_empty())
    {
        return Ok(CpuList::parse(&list).ok());
    }
    let mut online = std::collections::BTreeSet::new();
    let mut flags = 0usize;
    for name in root.list_dir(base)?.unwrap_or_default() {
        let Some(id) = name
            .strip_prefix("cpu")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|id| *id <= crate::host::cpulist::MAX_CPU_ID)
        else {
            continue;
        };
        match root.read_optional(&format!("{base}/{name}/online"))? {
            Some(flag) => {
                flags += 1;
                if flag.trim() == "1" {
                    online.insert(id);
                }
            }
            None => {
                online.insert(id);
            }
        }
    }
    // Directories without a single flag say nothing about hot-plug: no answer.
    Ok((flags > 0).then_some(CpuList(online)))
}

/// The node a device sits on when its firmware did not say (`numa_node` absent or -1) but
/// its local CPUs (online ones) all belong to exactly one node with CPUs: the kernel derives
/// `local_cpus` from the device's node, so they name it. `None` when they span nodes.
pub(crate) fn node_of_cpus(nodes: &[NumaNode], local: &CpuList) -> Option<u32> {
    if local.is_empty() {
        return None;
    }
    let mut holding = nodes
        .iter()
        .filter(|n| !n.cpus.is_empty() && local.0.iter().all(|c| n.cpus.0.contains(c)));
    match (holding.next(), holding.next()) {
        (Some(n), None) => Some(n.id),
        _ => None,
    }
}

/// `cpus` split into its online and offline members.
pub(crate) fn split_online(cpus: &CpuList, online: &CpuList) -> (CpuList, CpuList) {
    let (on, off) = cpus.0.iter().partition(|c| online.0.contains(c));
    (CpuList(on), CpuList(off))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn memtotal() {
        let text = "Node 0 MemTotal:       47925628 kB\nNode 0 MemFree:        24465948 kB\n";
        assert_eq!(parse_node_memtotal(text), Some(47925628 * 1024));
        assert_eq!(parse_node_memtotal("Node 0 MemFree: 1 kB\n"), None);
        assert_eq!(parse_node_memtotal("Node 0 MemTotal: lots kB"), None);
        assert_eq!(parse_node_memtotal(""), None);
    }

    #[test]
    fn nodes_from_local_cpus() {
        let node = |id, cpus: &str| NumaNode {
            id,
            cpus: CpuList::parse(cpus).unwrap(),
            offline_cpus: CpuList::default(),
            memory: None,
            gpu_memory_of: None,
        };
        let nodes = [node(0, "0-15"), node(8, "88-103"), node(255, "")];
        let of = |cpus: &str| node_of_cpus(&nodes, &CpuList::parse(cpus).unwrap());
        assert_eq!(of("0-15"), Some(0));
        assert_eq!(of("88-91"), Some(8));
        assert_eq!(of("0-103"), None, "spans nodes");
        assert_eq!(of(""), None);
        assert_eq!(of("200"), None);
    }

    #[test]
    fn nodes_from_a_tree_and_without_numa() {
        let tree = Tree::new();
        tree.file("/sys/devices/system/node/node1/cpulist", "8-15\n")
            .dir("/sys/devices/system/node/node0");
        let nodes = nodes(&tree.root()).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].cpus.to_string(), "8-15");
        assert!(nodes[0].cpus.is_empty());

        let flat = Tree::new();
        flat.file("/sys/devices/system/cpu/online", "0-3\n");
        let nodes = super::nodes(&flat.root()).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].cpus.to_string(), "0-3");
    }

    /// A kernel before 2.6.26: no `cpulist` (only the `cpumap` mask) and no `cpu/online`,
    /// only per-CPU `online` flags (none on the boot CPU).
    #[test]
    fn old_layouts_with_cpumap_and_per_cpu_flags() {
        let tree = Tree::new();
        tree.file(
            "/sys/devices/system/node/node0/cpumap",
            "00000000,0000000f\n",
        )
        .file("/sys/devices/system/node/node1/cpumap", "000000f0\n")
        .dir("/sys/devices/system/cpu/cpu0");
        for (cpu, flag) in [
            (1, "1"),
            (2, "0"),
            (3, "1"),
            (4, "1"),
            (5, "0"),
            (6, "1"),
            (7, "1"),
        ] {
            tree.file(&format!("/sys/devices/system/cpu/cpu{cpu}/online"), flag);
        }
        let nodes = nodes(&tree.root()).unwrap();
        assert_eq!(nodes[0].cpus.to_string(), "0-1,3");
        assert_eq!(nodes[0].offline_cpus.to_string(), "2");
        assert_eq!(nodes[1].cpus.to_string(), "4,6-7");
        assert_eq!(nodes[1].offline_cpus.to_string(), "5");

        // `cpulist` present, `cpu/online` absent: the flags still rule.
        tree.file("/sys/devices/system/node/node0/cpulist", "0-3\n");
        let nodes = super::nodes(&tree.root()).unwrap();
        assert_eq!(nodes[0].cpus.to_string(), "0-1,3");

        // Directories without a flag say nothing: every CPU counts.
        let bare = Tree::new();
        bare.file("/sys/devices/system/node/node0/cpulist", "0-1\n")
            .dir("/sys/devices/system/cpu/cpu0")
            .dir("/sys/devices/system/cpu/cpu1");
        assert_eq!(online_cpus(&bare.root()).unwrap(), None);
        assert_eq!(
            super::nodes(&bare.root()).unwrap()[0].cpus.to_string(),
            "0-1"
        );
        bare.file("/sys/devices/system/cpu/online", "\n");
        assert_eq!(
            online_cpus(&bare.root()).unwrap(),
            None,
            "an empty list says nothing"
        );
    }

    #[test]
    fn offline_cpus_are_never_local() {
        let tree = Tree::new();
        tree.file("/sys/devices/system/node/node0/cpulist", "0-23\n")
            .file("/sys/devices/system/cpu/online", "0,2,4-20,22\n");
        let nodes = nodes(&tree.root()).unwrap();
        assert_eq!(nodes[0].cpus.to_string(), "0,2,4-20,22");
        assert_eq!(nodes[0].offline_cpus.to_string(), "1,3,21,23");
    }
}
