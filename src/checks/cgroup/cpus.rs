//! CPU lists (`0-3,8-11`) and the CPUs local to the node's NVIDIA GPUs. Private to the cgroup
//! checks until the GPU inventory (another area) offers the same facts.

use std::collections::BTreeSet;

use crate::host::{HostError, Root};

const PCI_DEVICES: &str = "/sys/bus/pci/devices";
const NVIDIA: &str = "0x10de";

/// Parses the kernel's CPU list format: `0-3,8,10-11`; empty (or blank) is the empty set.
pub fn parse_list(text: &str) -> Result<BTreeSet<u32>, String> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("`{}` is not a CPU list such as 0-3,8", text.trim());
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (
                lo.parse::<u32>().map_err(|_| bad())?,
                hi.parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let n = part.parse::<u32>().map_err(|_| bad())?;
                (n, n)
            }
        };
        if lo > hi || hi - lo > 65536 {
            return Err(bad());
        }
        cpus.extend(lo..=hi);
    }
    Ok(cpus)
}

/// Writes a set back in the kernel's format, folding runs: {0,1,2,3,8} → `0-3,8`.
pub fn format_list(cpus: &BTreeSet<u32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// A GPU and the CPUs its PCIe root is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuCpus {
    pub address: String,
    pub cpus: BTreeSet<u32>,
    /// Its `numa_node`; `None` when the kernel says -1 (no NUMA information).
    pub numa_node: Option<u32>,
}

/// NVIDIA display/3D controllers (vendor 0x10de, class 0x03xxxx), their `local_cpulist` and
/// `numa_node`.
pub fn gpu_local_cpus(root: &Root) -> Result<Vec<GpuCpus>, HostError> {
    let mut gpus = Vec::new();
    for address in root.list_dir(PCI_DEVICES)?.unwrap_or_default() {
        let dir = format!("{PCI_DEVICES}/{address}");
        let vendor = root.read_optional(&format!("{dir}/vendor"))?;
        let class = root.read_optional(&format!("{dir}/class"))?;
        let is_gpu = vendor.as_deref().map(str::trim) == Some(NVIDIA)
            && class
                .as_deref()
                .is_some_and(|c| c.trim().starts_with("0x03"));
        if !is_gpu {
            continue;
        }
        let list = root
            .read_optional(&format!("{dir}/local_cpulist"))?
            .unwrap_or_default();
        let cpus = parse_list(&list).map_err(|e| {
            HostError::new(
                root.path(&format!("{dir}/local_cpulist")),
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })?;
        let numa_node = root
            .read_optional(&format!("{dir}/numa_node"))?
            .and_then(|n| n.trim().parse::<u32>().ok());
        gpus.push(GpuCpus {
            address,
            cpus,
            numa_node,
        });
    }
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        let set = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
        let cases: &[(&str, Result<BTreeSet<u32>, ()>)] = &[
            ("0-3,8\n", Ok(set(&[0, 1, 2, 3, 8]))),
            ("5", Ok(set(&[5]))),
            ("", Ok(set(&[]))),
            ("\n", Ok(set(&[]))),
            ("0-1,4-5", Ok(set(&[0, 1, 4, 5]))),
            ("3-1", Err(())),
            ("a-b", Err(())),
            ("0,,1", Ok(set(&[0, 1]))),
            ("0-99999999", Err(())),
        ];
        for (text, want) in cases {
            assert_eq!(parse_list(text).map_err(|_| ()), *want, "{text:?}");
        }
        assert_eq!(format_list(&set(&[0, 1, 2, 3, 8, 10, 11])), "0-3,8,10-11");
        assert_eq!(format_list(&set(&[])), "");
    }

    #[test]
    fn nvidia_gpus_only() {
        let dir = tempfile::tempdir().unwrap();
        let dev = |addr: &str, vendor: &str, class: &str, cpus: &str| {
            let d = dir.path().join("sys/bus/pci/devices").join(addr);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("vendor"), vendor).unwrap();
            std::fs::write(d.join("class"), class).unwrap();
            std::fs::write(d.join("local_cpulist"), cpus).unwrap();
            std::fs::write(d.join("numa_node"), "-1\n").unwrap();
        };
        dev("0000:3b:00.0", "0x10de\n", "0x030200\n", "0-11\n");
        dev("0000:3c:00.0", "0x10de\n", "0x040300\n", "0-11\n"); // its audio function
        dev("0000:5e:00.0", "0x15b3\n", "0x020700\n", "12-23\n"); // a Mellanox NIC
        let gpus = gpu_local_cpus(&Root::new(dir.path())).unwrap();
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].address, "0000:3b:00.0");
        assert_eq!(format_list(&gpus[0].cpus), "0-11");
        assert_eq!(gpus[0].numa_node, None);
    }
}
