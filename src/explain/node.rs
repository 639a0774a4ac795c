//! `explain --check`: what NCCL did, against what this node (or `--root`) has. A choice
//! that looks harmless in a log is a silent slowdown on a node that offers better: TCP
//! sockets beside active RDMA ports, GPUDirect RDMA off with `nvidia_peermem` loaded, GPUs
//! joined over PCIe or host memory although they have NVLink.

use super::facts::{Facts, Slowdown};
use crate::checks::platform::peermem_loaded;
use crate::host::Root;
use crate::inventory::rdma;
use crate::probe::nvml::NvmlFacts;

/// What this node offers NCCL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// Active RDMA ports (`mlx5_0 port 1 (InfiniBand)`).
    pub rdma_ports: Vec<String>,
    /// `nvidia_peermem` (or `nv_peer_mem`) is loaded.
    pub peermem: bool,
    /// GPUs with at least one active NVLink, as NVML reports them.
    pub nvlink_gpus: usize,
}

impl Node {
    /// Reads the node; what cannot be read (no RDMA devices, no NVML under `--root` or
    /// without a GPU) offers nothing, so raises no flag.
    pub(crate) fn read(root: &Root) -> Node {
        let rdma_ports = rdma::devices(root)
            .unwrap_or_default()
            .iter()
            .flat_map(|d| {
                d.ports.iter().filter(|p| p.is_active()).map(|p| {
                    format!(
                        "{} port {} ({})",
                        d.name,
                        p.port,
                        p.link_layer.as_deref().unwrap_or("link layer unknown")
                    )
                })
            })
            .collect();
        let nvml = crate::probe::Probes::for_root(root).nvml.probe().ok();
        Node {
            rdma_ports,
            peermem: peermem_loaded(root),
            nvlink_gpus: nvml.as_ref().map_or(0, nvlinked),
        }
    }

    /// The slowdowns the log shows on a node like this one.
    pub fn slowdowns(&self, facts: &Facts) -> Vec<Slowdown> {
        let mut out = Vec::new();
        if let Some(socket) = facts.socket_lines.first()
            && let Some(first) = self.rdma_ports.first()
        {
            let more = match self.rdma_ports.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            };
            out.push(Slowdown {
                what: format!(
                    "NCCL uses TCP sockets (NET/Socket) although this node has active RDMA ports: {first}{more}"
                ),
                line: socket.line,
            });
        }
        if self.peermem
            && let Some(line) = gdr_off(facts)
        {
            out.push(Slowdown {
                what: "GPUDirect RDMA is off although nvidia_peermem is loaded on this node (NCCL_NET_GDR_LEVEL, or the GPU and NIC too far apart on PCIe: nvidia-smi topo -m)".into(),
                line,
            });
        }
        if self.nvlink_gpus >= 2
            && let Some(path) = facts.gpu_paths.not_nvlink()
        {
            out.push(Slowdown {
                what: facts.gpu_paths.slowdown_text(path, "this node"),
                line: path.line,
            });
        }
        out
    }
}

/// GPUs with an active NVLink.
fn nvlinked(nvml: &NvmlFacts) -> usize {
    nvml.gpus
        .iter()
        .filter(|g| g.nvlinks.iter().any(|l| l.active))
        .count()
}

/// The first line showing NCCL's network transport without GPUDirect RDMA: NCCL said it is
/// disabled, or every NIC channel goes through host memory.
fn gdr_off(facts: &Facts) -> Option<u64> {
    if facts.gdr_disabled_lines > 0 {
        return Some(facts.first_gdr_disabled);
    }
    if facts.net_channels_gdr == 0 {
        return facts.no_gdr_lines.first().map(|e| e.line);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nvml::{NvLink, NvmlGpu};
    use crate::testing::Tree;

    fn facts(lines: &[&str]) -> Facts {
        let mut f = Facts::default();
        for (i, l) in lines.iter().enumerate() {
            f.observe(i as u64 + 1, l);
        }
        f.conclude();
        f
    }

    fn whats(node: &Node, f: &Facts) -> Vec<(String, u64)> {
        node.slowdowns(f)
            .into_iter()
            .map(|s| (s.what, s.line))
            .collect()
    }

    const SOCKET_NO_GDR_SHM: [&str; 4] = [
        "a:1:1 [0] NCCL INFO Using network Socket",
        "a:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for HCA 0 'mlx5_0'",
        "a:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        "a:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 24.0/24.0, type PHB/PIX, sameChannels 1",
    ];

    #[test]
    fn a_node_that_offers_better_flags_each_choice() {
        let node = Node {
            rdma_ports: vec![
                "mlx5_0 port 1 (InfiniBand)".into(),
                "mlx5_1 port 1 (Ethernet)".into(),
            ],
            peermem: true,
            nvlink_gpus: 8,
        };
        let got = whats(&node, &facts(&SOCKET_NO_GDR_SHM));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(
            got[0],
            (
                "NCCL uses TCP sockets (NET/Socket) although this node has active RDMA ports: mlx5_0 port 1 (InfiniBand) and 1 more".into(),
                1
            )
        );
        assert!(
            got[1]
                .0
                .starts_with("GPUDirect RDMA is off although nvidia_peermem is loaded")
        );
        assert_eq!(got[1].1, 2);
        assert_eq!(
            got[2],
            (
                "GPUs of a node exchange data through host memory (SHM) although this node has NVLink between them".into(),
                3
            )
        );
    }

    #[test]
    fn a_node_that_offers_nothing_more_flags_nothing() {
        let plain = Node::default();
        assert!(whats(&plain, &facts(&SOCKET_NO_GDR_SHM)).is_empty());
        // One GPU with NVLink joins nothing; GPUDirect RDMA on some channels is not off.
        let node = Node {
            rdma_ports: vec![],
            peermem: true,
            nvlink_gpus: 1,
        };
        let f = facts(&[
            "a:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
            "a:1:1 [0] NCCL INFO Channel 00 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
            "a:1:1 [0] NCCL INFO Channel 01 : 1[1] -> 0[0] [receive] via NET/IB/0",
        ]);
        assert!(whats(&node, &f).is_empty());
    }

    #[test]
    fn every_nic_channel_without_gdr_is_gdr_off() {
        let node = Node {
            peermem: true,
            ..Node::default()
        };
        let f = facts(&["a:1:1 [0] NCCL INFO Channel 01 : 1[1] -> 0[0] [receive] via NET/IB/0"]);
        assert_eq!(whats(&node, &f).first().map(|w| w.1), Some(1));
    }

    #[test]
    fn reads_active_ports_and_the_peer_memory_module() {
        let tree = Tree::new();
        let port = |dev: &str, n: u32, state: &str, layer: &str| {
            let dir = format!("/sys/class/infiniband/{dev}/ports/{n}");
            tree.file(&format!("{dir}/state"), state);
            tree.file(&format!("{dir}/phys_state"), "5: LinkUp");
            tree.file(&format!("{dir}/link_layer"), layer);
            tree.file(&format!("{dir}/rate"), "100 Gb/sec (4X EDR)");
        };
        port("mlx5_0", 1, "4: ACTIVE", "InfiniBand");
        port("mlx5_1", 1, "1: DOWN", "Ethernet");
        tree.dir("/sys/module/nvidia_peermem");
        let node = Node::read(&tree.root());
        assert_eq!(node.rdma_ports, ["mlx5_0 port 1 (InfiniBand)"]);
        assert!(node.peermem);
        assert_eq!(node.nvlink_gpus, 0, "no NVML under --root");
        assert_eq!(Node::read(&Tree::new().root()), Node::default());
    }

    #[test]
    fn counts_gpus_with_an_active_nvlink() {
        let gpu = |active: &[bool]| NvmlGpu {
            nvlinks: active
                .iter()
                .enumerate()
                .map(|(i, a)| NvLink {
                    link: i as u32,
                    active: *a,
                })
                .collect(),
            pci_address: String::new(),
            name: "H100".into(),
            memory_bytes: None,
            persistence_mode: None,
            ecc_uncorrected: None,
            nvlink_peers: Vec::new(),
            remapped_rows: None,
            retired_pages: None,
        };
        let nvml = NvmlFacts {
            driver_version: None,
            cuda_version: None,
            gpus: vec![gpu(&[true, false]), gpu(&[false]), gpu(&[]), gpu(&[true])],
        };
        assert_eq!(nvlinked(&nvml), 2);
    }
}
