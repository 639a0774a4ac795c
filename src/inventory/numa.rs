//! NUMA nodes from `/sys/devices/system/node`: which CPUs and how much memory each has, so
//! GPUs and NICs can be matched to the CPUs next to them.

use serde::Serialize;

use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root};

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NumaNode {
    pub id: u32,
    #[serde(serialize_with = "super::serialize_display")]
    pub cpus: CpuList,
    /// `MemTotal` of the node in bytes; `None` when its `meminfo` is absent.
    pub memory: Option<u64>,
}

/// Parses a node's `meminfo` (`Node 0 MemTotal:  47925628 kB`) into bytes.
pub fn parse_node_memtotal(text: &str) -> Option<u64> {
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
/// every online CPU.
pub fn nodes(root: &Root) -> Result<Vec<NumaNode>, HostError> {
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
        let cpus = root
            .read_optional(&format!("{dir}/cpulist"))?
            .and_then(|t| CpuList::parse(&t).ok())
            .unwrap_or_default();
        let memory = root
            .read_optional(&format!("{dir}/meminfo"))?
            .as_deref()
            .and_then(parse_node_memtotal);
        out.push(NumaNode { id, cpus, memory });
    }
    out.sort_by_key(|n| n.id);
    if out.is_empty() {
        let online = root
            .read_optional("/sys/devices/system/cpu/online")?
            .and_then(|t| CpuList::parse(&t).ok());
        if let Some(cpus) = online {
            out.push(NumaNode {
                id: 0,
                cpus,
                memory: None,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memtotal() {
        let text = "Node 0 MemTotal:       47925628 kB\nNode 0 MemFree:        24465948 kB\n";
        assert_eq!(parse_node_memtotal(text), Some(47925628 * 1024));
        assert_eq!(parse_node_memtotal("Node 0 MemFree: 1 kB\n"), None);
        assert_eq!(parse_node_memtotal("Node 0 MemTotal: lots kB"), None);
        assert_eq!(parse_node_memtotal(""), None);
    }

    #[test]
    fn nodes_from_a_tree_and_without_numa() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path());
        let node1 = dir.path().join("sys/devices/system/node/node1");
        std::fs::create_dir_all(&node1).unwrap();
        std::fs::write(node1.join("cpulist"), "8-15\n").unwrap();
        std::fs::create_dir_all(dir.path().join("sys/devices/system/node/node0")).unwrap();
        let nodes = nodes(&root).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].cpus.to_string(), "8-15");
        assert!(nodes[0].cpus.is_empty());

        let flat = tempfile::tempdir().unwrap();
        let cpu = flat.path().join("sys/devices/system/cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("online"), "0-3\n").unwrap();
        let nodes = super::nodes(&Root::new(flat.path())).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].cpus.to_string(), "0-3");
    }
}
