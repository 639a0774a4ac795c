//! How NCCL connected the GPUs of one node, read from its INFO lines: the path type of the
//! graphs it searched (`Pattern 4, ..., type NVL/PIX`: NVLink between GPUs, PCIe to the
//! NIC), channels through host memory (`via SHM`), and whether the topology it detected has
//! NVLink at all (`+ NVL[240.0] - NVS/0`, `GPU/1 (1/48.0/NVL)`). Together they show GPUs
//! that talk over PCIe or host memory although they have NVLink.

use serde::Serialize;

use super::Evidence;
use super::facts::Bounded;

/// NCCL's path types that cross PCIe (same switch, several switches, the host bridge, the
/// CPU interconnect): between GPUs, each is slower than NVLink by an order of magnitude.
const PCIE_PATHS: [&str; 4] = ["PIX", "PXB", "PHB", "SYS"];

/// What the log says about GPU-to-GPU paths within a node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuPaths {
    /// The path types between a node's GPUs in the graphs NCCL searched (`NVL`, `PHB`).
    pub between_gpus: Bounded,
    /// The first graph whose GPUs are joined over PCIe.
    #[serde(skip)]
    pub pcie: Option<Evidence>,
    /// The first channel through host memory (`via SHM`): two GPUs of one node not using
    /// peer-to-peer.
    #[serde(skip)]
    pub shm: Option<Evidence>,
    /// The first line of NCCL's topology that shows an NVLink.
    #[serde(skip)]
    pub nvlink: Option<Evidence>,
}

impl GpuPaths {
    /// Takes in one line; `body` is what follows `NCCL INFO`, `None` for other lines.
    pub fn observe(&mut self, line: u64, text: &str, body: Option<&str>) {
        let Some(body) = body else {
            return;
        };
        let first = |slot: &mut Option<Evidence>| {
            if slot.is_none() {
                *slot = Some(Evidence {
                    line,
                    text: text.to_string(),
                });
            }
        };
        if body.trim_start().starts_with("Pattern ")
            && let Some(at) = body.find(", type ")
            && let Some(intra) = body[at + ", type ".len()..]
                .split(['/', ',', ' '])
                .next()
                .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric()))
        {
            self.between_gpus.insert(intra);
            if PCIE_PATHS.contains(&intra) {
                first(&mut self.pcie);
            }
        }
        if body.contains(" via SHM") {
            first(&mut self.shm);
        }
        if body.contains("+ NVL[") || body.contains("/NVL)") {
            first(&mut self.nvlink);
        }
    }

    /// The first line showing a node's GPUs joined other than by NVLink: a graph over
    /// PCIe, or a channel through host memory.
    pub fn not_nvlink(&self) -> Option<&Evidence> {
        match (&self.pcie, &self.shm) {
            (Some(a), Some(b)) => Some(if a.line <= b.line { a } else { b }),
            (a, b) => a.as_ref().or(b.as_ref()),
        }
    }

    /// What to say when those GPUs have NVLink (`where`: how it is known).
    pub fn slowdown_text(&self, evidence: &Evidence, r#where: &str) -> String {
        let how = if self.pcie.as_ref() == Some(evidence) {
            "over PCIe"
        } else {
            "through host memory (SHM)"
        };
        format!("GPUs of a node exchange data {how} although {where} has NVLink between them")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(lines: &[&str]) -> GpuPaths {
        let mut p = GpuPaths::default();
        for (i, text) in lines.iter().enumerate() {
            let body = text
                .find("NCCL INFO")
                .map(|at| &text[at + "NCCL INFO".len()..]);
            p.observe(i as u64 + 1, text, body);
        }
        p
    }

    #[test]
    fn graph_types_and_host_memory_channels() {
        let p = read(&[
            "h:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1",
            "h:1:1 [0] NCCL INFO Pattern 1, crossNic 0, nChannels 1, bw 6.000000/6.000000, type PHB/PIX, sameChannels 1",
            "h:1:1 [0] NCCL INFO Channel 01 : 0[0] -> 1[1] via SHM/direct/direct",
        ]);
        let types: Vec<&str> = p.between_gpus.values.iter().map(String::as_str).collect();
        assert_eq!(types, ["NVL", "PHB"]);
        assert_eq!(p.pcie.as_ref().map(|e| e.line), Some(2));
        assert_eq!(p.shm.as_ref().map(|e| e.line), Some(3));
        assert_eq!(p.not_nvlink().map(|e| e.line), Some(2));
        assert!(p.nvlink.is_none());
    }

    #[test]
    fn one_gpu_per_node_and_nvlink_graphs_are_not_pcie() {
        let p = read(&[
            "h:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type LOC/PIX, sameChannels 1",
            "h:1:1 [0] NCCL INFO Pattern 3, crossNic 0, nChannels 12, bw 20.0/20.0, type NVL/PIX, sameChannels 1",
            "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            // Not NCCL's: a script's own text is no graph.
            "Pattern 1, type PHB/PIX",
            // Cut or garbled types are not path types.
            "h:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 1.0/1.0, type /PIX",
            "h:1:1 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, bw 1.0/1.0, type P-HB/PIX",
        ]);
        assert!(p.not_nvlink().is_none());
        let types: Vec<&str> = p.between_gpus.values.iter().map(String::as_str).collect();
        assert_eq!(types, ["LOC", "NVL"]);
    }

    #[test]
    fn nvlink_in_the_detected_topology() {
        let p = read(&[
            "h:1:1 [0] NCCL INFO                                           + NVL[240.0] - NVS/0",
            "h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        ]);
        assert_eq!(p.nvlink.as_ref().map(|e| e.line), Some(1));
        let shm = p.not_nvlink().cloned();
        let text = shm.map(|e| p.slowdown_text(&e, "the topology NCCL detected"));
        assert_eq!(
            text.as_deref(),
            Some(
                "GPUs of a node exchange data through host memory (SHM) although the topology NCCL detected has NVLink between them"
            )
        );
    }
}
