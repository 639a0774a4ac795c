//! GPUs: that the node has the ones the profile expects, that each PCIe link trained at
//! full width and speed, what NVML and the kernel log (Xid) say of their health, and which
//! driver, CUDA and NCCL versions they would train with.

pub(crate) mod expected;
pub(crate) mod memerr;
pub(crate) mod stack;
pub(crate) mod versions;
pub(crate) mod xid;

use crate::finding::{Area, Check, Finding, Status};
use crate::host::libsearch::SearchEnv;
use crate::inventory::Inventory;
use crate::inventory::gpu::Gpu;
use crate::probe::nvml::NvmlGpu;
use crate::probe_error::Probe;
use crate::profile::setting::{
    KeySpec,
    ValueKind::{Number, Text, Version},
};

use super::Context;
use super::judged::{Judged, judge_of, specs};

const JUDGED: &[Judged<Judge>] = &[
    Judged {
        judge: Judge::Count,
        spec: KeySpec {
            key: "gpu.count",
            kind: Number,
            why: "A node with fewer GPUs than its kind (one fell off the bus or was not enumerated at boot) fails every job that asks for all of them, or runs it slower on the rest (NHC's check_hw_gpu).",
        },
    },
    Judged {
        judge: Judge::Model,
        spec: KeySpec {
            key: "gpu.model",
            kind: Text,
            why: "Jobs and their bandwidth baselines are sized for one GPU model; a node with another is a different node (matched as a case-insensitive substring: \"H100\" matches \"NVIDIA H100 80GB HBM3\").",
        },
    },
    Judged {
        judge: Judge::Memory,
        spec: KeySpec {
            key: "gpu.memory_mib",
            kind: Number,
            why: "A GPU showing less memory than its model (another SKU, MIG left on, memory disabled) makes jobs sized for the fleet run out of memory on this node.",
        },
    },
    Judged {
        judge: Judge::NvlinkCount,
        spec: KeySpec {
            key: "gpu.nvlink_count",
            kind: Number,
            why: "Each NVLink down takes its share of the GPU's NVLink bandwidth; NCCL's rings and NVLS over that GPU slow down or fall back to PCIe.",
        },
    },
    Judged {
        judge: Judge::Driver,
        spec: KeySpec {
            key: "driver.version",
            kind: Version,
            why: "The kernel driver caps the CUDA version the node can run; an older driver fails at CUDA initialisation.",
        },
    },
    Judged {
        judge: Judge::Cuda,
        spec: KeySpec {
            key: "cuda.version",
            kind: Version,
            why: "PyTorch wheels are built for a CUDA version; the driver must support at least that version or CUDA fails to initialise.",
        },
    },
    Judged {
        judge: Judge::Nccl,
        spec: KeySpec {
            key: "nccl.version",
            kind: Version,
            why: "Older NCCL lacks fixes and algorithms distributed PyTorch relies on (e.g. NVLS, robust socket bootstrap).",
        },
    },
    Judged {
        judge: Judge::Cudnn,
        spec: KeySpec {
            key: "cudnn.version",
            kind: Version,
            why: "cuDNN runs PyTorch's convolutions and attention kernels; releases before 8.9 lack the fused attention (SDPA) and FP8 paths current models use.",
        },
    },
];

pub(crate) const KEYS: &[KeySpec] = &specs::<_, { JUDGED.len() }>(JUDGED);

/// What reads a GPU key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    /// Judged by [`expected::count`] before the keys, with what the last audit remembered.
    Count,
    Model,
    Memory,
    NvlinkCount,
    Driver,
    Cuda,
    Nccl,
    Cudnn,
}

pub(crate) fn audit(ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let probes = &ctx.probes;
    let mut findings = vec![expected::count(ctx, inv)];
    findings.extend(inv.gpus.iter().map(pcie_link));
    findings.extend(nvml(inv));
    findings.extend(xid::audit(ctx, inv));
    for (key, setting) in ctx.profile.area(Area::Gpu) {
        let Some(judge) = judge_of(JUDGED, key) else {
            findings.push(Check::new(key, Area::Gpu).error("no check for this key"));
            continue;
        };
        findings.extend(match judge {
            // Judged by `expected::count` above, with what the last audit remembered.
            Judge::Count => vec![],
            Judge::Model => expected::model(ctx, inv, setting),
            Judge::Memory => expected::memory(ctx, inv, setting),
            Judge::NvlinkCount => expected::nvlink_count(ctx, inv, setting),
            Judge::Driver => vec![versions::driver(ctx, inv, setting)],
            Judge::Cuda => vec![versions::cuda(ctx, inv, probes, setting)],
            Judge::Nccl => vec![versions::nccl(ctx, inv, setting)],
            Judge::Cudnn => vec![stack::cudnn(ctx, inv, setting, &SearchEnv::from_process())],
        });
    }
    if !inv.gpus.is_empty() {
        findings.push(stack::torch_cuda(
            ctx,
            inv,
            probes,
            &SearchEnv::from_process(),
        ));
    }
    findings
}

/// A GPU whose link trained narrower or slower than it can: the commonest silent cause of
/// slow training (a badly seated card, a riser, a BIOS lane setting).
pub(crate) fn pcie_link(g: &Gpu) -> Finding {
    let id = format!("gpu{}.pcie_link", g.index);
    let expected = g.link.max();
    let actual = g.link.current();
    let fix = format!(
        "reseat GPU {} or its riser/cable, check the slot's lane setting (bifurcation) in the BIOS, then confirm with `lspci -vv -s {}` (LnkSta vs LnkCap)",
        g.pci_address, g.pci_address
    );
    let (status, message) = if g.link.max_width.is_none() && g.link.max_gts.is_none() {
        return Check::new(id, Area::Gpu).skip(format!(
            "{} reports no PCIe link (no max_link_speed/max_link_width in sysfs)",
            g.pci_address
        ));
    } else if g.link.width_downtrained() {
        (
            Status::Fail,
            format!(
                "{} trained at {actual}, below its {expected}: fewer lanes cut host<->GPU and GPU<->NIC bandwidth proportionally",
                g.pci_address
            ),
        )
    } else if g.link.speed_downtrained() && g.link.current_gts == Some(2.5) {
        (
            Status::Warn,
            format!(
                "{} runs at {actual} of {expected}; idle GPUs drop to Gen1 to save power, so re-check under load (`nvidia-smi -q -d PCIE`)",
                g.pci_address
            ),
        )
    } else if g.link.speed_downtrained() {
        (
            Status::Fail,
            format!(
                "{} trained at {actual}, below its {expected}: each lane carries less, cutting PCIe bandwidth",
                g.pci_address
            ),
        )
    } else {
        (
            Status::Pass,
            format!("{} at full width and speed", g.pci_address),
        )
    };
    Check::new(id, Area::Gpu)
        .expected(expected)
        .why(message)
        .judge(status, actual, fix)
}

/// NVML health: persistence mode and uncorrected ECC errors per GPU, or one skip saying why
/// NVML could not be asked.
fn nvml(inv: &Inventory) -> Vec<Finding> {
    if inv.gpus.is_empty() {
        return vec![];
    }
    if let Err(reason) = &inv.nvml {
        let check = Check::new("gpu.nvml", Area::Gpu).expected("NVML available");
        return vec![reason.finding(
            Probe::Nvml,
            &check,
            format!("skipped: {reason}; sysfs facts are still shown"),
        )];
    }
    let mut out = Vec::new();
    for g in &inv.gpus {
        let Some(n) = &g.nvml else {
            out.push(
                Check::new(format!("gpu{}.nvml", g.index), Area::Gpu)
                    .expected("NVML sees the GPU")
                    .skip(format!(
                        "NVML does not list {} (driver not bound to it?)",
                        g.pci_address
                    )),
            );
            continue;
        };
        out.extend(persistence_mode(g, n));
        out.extend(nvlink(g, n));
        out.extend(ecc_uncorrected(g, n));
        out.extend(memerr::row_remap(g, n));
        out.extend(memerr::retired_pages(g, n));
    }
    out
}

fn persistence_mode(g: &Gpu, n: &NvmlGpu) -> Option<Finding> {
    let check = Check::new(format!("gpu{}.persistence_mode", g.index), Area::Gpu)
        .expected("enabled")
        .why(format!(
            "{} ({}): without persistence the driver tears the GPU down between jobs and every job start pays the init cost",
            n.name, g.pci_address
        ));
    Some(if n.persistence_mode? {
        check.pass("enabled")
    } else {
        check.warn("disabled", "systemctl enable --now nvidia-persistenced")
    })
}

fn nvlink(g: &Gpu, n: &NvmlGpu) -> Option<Finding> {
    if n.nvlinks.is_empty() {
        return None;
    }
    let down: Vec<String> = n
        .nvlinks
        .iter()
        .filter(|l| !l.active)
        .map(|l| l.link.to_string())
        .collect();
    let total = n.nvlinks.len();
    let check = Check::new(format!("gpu{}.nvlink", g.index), Area::Gpu)
        .expected(format!("{total} of {total} NVLinks active"));
    let actual = format!("{} of {total} active", total - down.len());
    if down.is_empty() {
        return Some(
            check
                .why(format!(
                    "{} ({}): every NVLink is up",
                    n.name, g.pci_address
                ))
                .pass(actual),
        );
    }
    Some(
        check
            .why(format!(
                "{} ({}): NVLink(s) {} down; NCCL's rings and NVLS over this GPU lose that bandwidth or fall back to PCIe",
                n.name,
                g.pci_address,
                down.join(",")
            ))
            .fail(
                actual,
                "check `nvidia-smi nvlink -s` and the fabric manager (`systemctl status nvidia-fabricmanager` on NVSwitch systems); a link that stays down after a GPU reset needs service",
            ),
    )
}

fn ecc_uncorrected(g: &Gpu, n: &NvmlGpu) -> Option<Finding> {
    let errors = n.ecc_uncorrected?;
    let check = Check::new(format!("gpu{}.ecc_uncorrected", g.index), Area::Gpu)
        .expected("0")
        .why(format!(
            "{} ({}): uncorrected ECC errors corrupt results or crash jobs",
            n.name, g.pci_address
        ));
    Some(if errors == 0 {
        check.pass("0")
    } else {
        check.fail(
            errors.to_string(),
            "drain the node; reset the GPU (nvidia-smi -r) and, if errors return, replace it",
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn each_key_reaches_its_judge() {
        crate::checks::judged::assert_each_key_reaches_its_judge(JUDGED);
    }
    use crate::inventory::pci::PciLink;
    use crate::testing::Tree;

    fn gpu(current: (f64, u32), max: (f64, u32)) -> Gpu {
        Gpu {
            index: 0,
            pci_address: "0000:1b:00.0".into(),
            device_id: "10de:2330".into(),
            driver: Some("nvidia".into()),
            numa_node: Some(0),
            local_cpus: None,
            link: PciLink {
                current_gts: Some(current.0),
                max_gts: Some(max.0),
                current_width: Some(current.1),
                max_width: Some(max.1),
            },
            bridges: vec![],
            host_bridge: None,
            model: None,
            memory_numa_node: None,
            nvml: None,
        }
    }

    #[test]
    fn link_training_verdicts() {
        let cases = [
            ((32.0, 16), (32.0, 16), Status::Pass),
            ((32.0, 8), (32.0, 16), Status::Fail),
            ((8.0, 16), (32.0, 16), Status::Fail),
            ((2.5, 16), (32.0, 16), Status::Warn),
            ((2.5, 8), (32.0, 16), Status::Fail),
        ];
        for (current, max, want) in cases {
            let f = pcie_link(&gpu(current, max));
            assert_eq!(f.status, want, "{current:?} of {max:?}: {}", f.message);
            assert_eq!(f.fix.is_empty(), want == Status::Pass);
        }
        let f = pcie_link(&gpu((32.0, 8), (32.0, 16)));
        assert_eq!(
            (f.actual.as_str(), f.expected.as_str()),
            ("Gen5 x8", "Gen5 x16")
        );
    }

    /// Two GPUs as plain sysfs directories, for what NVML adds to them.
    fn two_gpu_root() -> Tree {
        let tree = Tree::new();
        for bdf in ["0000:18:00.0", "0000:2a:00.0"] {
            for (f, v) in [
                ("vendor", "0x10de"),
                ("device", "0x20b0"),
                ("class", "0x030200"),
                ("numa_node", "0"),
            ] {
                tree.file(
                    &format!("/sys/bus/pci/devices/{bdf}/{f}"),
                    &format!("{v}\n"),
                );
            }
        }
        tree
    }

    fn nvml_gpu(
        addr: &str,
        peer: &str,
        persistence: bool,
        ecc: u64,
    ) -> crate::probe::nvml::NvmlGpu {
        crate::probe::nvml::NvmlGpu {
            pci_address: addr.into(),
            name: "NVIDIA A100-SXM4-80GB".into(),
            memory_bytes: Some(80 << 30),
            persistence_mode: Some(persistence),
            ecc_uncorrected: Some(ecc),
            nvlink_peers: vec![peer.into(); 12],
            nvlinks: (0..12)
                .map(|link| crate::probe::nvml::NvLink { link, active: true })
                .collect(),
            remapped_rows: None,
            retired_pages: None,
        }
    }

    /// A full audit (every area, the numa area reading the inventory before gpu does) of the
    /// base profile on `tree` with NVML answering `facts`: the findings by id, and the
    /// inventory those facts give.
    fn audit_base(
        tree: &Tree,
        facts: crate::probe::nvml::NvmlFacts,
    ) -> (BTreeMap<String, Finding>, Inventory) {
        use crate::checks::AuditOptions;
        let root = tree.root();
        let mut probes = crate::probe::Probes::absent("in a test");
        probes.nvml = Box::new(crate::probe::nvml::FixedNvml(facts));
        let inv = Inventory::read(&root, &probes).unwrap();
        let options = AuditOptions::default();
        let f = crate::testing::audit_areas(&root, "base", &options, probes, &[]);
        (f, inv)
    }

    #[test]
    fn nvml_facts_enrich_the_inventory_and_drive_health_checks() {
        use crate::probe::nvml::NvmlFacts;
        let tree = two_gpu_root();
        let (f, inv) = audit_base(
            &tree,
            NvmlFacts {
                driver_version: Some("535.104.05".into()),
                cuda_version: Some("12.2".into()),
                gpus: vec![
                    nvml_gpu("0000:18:00.0", "0000:2a:00.0", true, 0),
                    nvml_gpu("0000:2a:00.0", "0000:18:00.0", false, 3),
                ],
            },
        );
        assert_eq!(inv.matrix().rows[0].links, ["X", "NV12"]);
        assert_eq!(
            inv.gpus[1].nvml.as_ref().unwrap().name,
            "NVIDIA A100-SXM4-80GB"
        );
        let get = |id: &str| f.get(id).unwrap_or_else(|| panic!("{id}: {f:#?}"));
        assert_eq!(get("gpu0.persistence_mode").status, Status::Pass);
        assert_eq!(get("gpu1.persistence_mode").status, Status::Warn);
        assert_eq!(get("gpu1.ecc_uncorrected").status, Status::Fail);
        assert_eq!(get("gpu1.ecc_uncorrected").actual, "3");
        // No driver files in the tree: the driver version comes from NVML, CUDA too.
        assert_eq!(get("driver.version").actual, "535.104.05");
        assert!(get("driver.version").message.starts_with("from NVML"));
        assert_eq!(get("cuda.version").actual, "12.2");
        assert_eq!(get("cuda.version").status, Status::Pass);
        assert_eq!(get("gpu0.nvlink").status, Status::Pass);
        assert_eq!(get("gpu0.nvlink").actual, "12 of 12 active");
    }

    #[test]
    fn an_nvlink_that_is_down_fails() {
        use crate::probe::nvml::{NvLink, NvmlFacts};
        let tree = two_gpu_root();
        let mut broken = nvml_gpu("0000:18:00.0", "0000:2a:00.0", true, 0);
        broken.nvlinks[3] = NvLink {
            link: 3,
            active: false,
        };
        broken.nvlinks[7].active = false;
        broken.nvlink_peers.truncate(10);
        let (f, inv) = audit_base(
            &tree,
            NvmlFacts {
                gpus: vec![broken, nvml_gpu("0000:2a:00.0", "0000:18:00.0", true, 0)],
                ..Default::default()
            },
        );
        let link = &f["gpu0.nvlink"];
        assert_eq!(link.status, Status::Fail);
        assert_eq!(link.actual, "10 of 12 active");
        assert!(
            link.message.contains("NVLink(s) 3,7 down"),
            "{}",
            link.message
        );
        assert_eq!(inv.matrix().rows[0].links[1], "NV10");
        // A GPU without NVLink (PCIe card: NVML answers for no link) has no such check.
        let mut pcie = nvml_gpu("0000:18:00.0", "", true, 0);
        pcie.nvlinks.clear();
        pcie.nvlink_peers.clear();
        let (f, _) = audit_base(
            &tree,
            NvmlFacts {
                gpus: vec![pcie],
                ..Default::default()
            },
        );
        assert!(!f.contains_key("gpu0.nvlink"));
    }

    #[test]
    fn nvml_memory_nvlinks_and_memory_repairs_are_judged_per_gpu() {
        use crate::ffi::nvml::RemappedRows;
        use crate::probe::nvml::{NvmlFacts, RetiredPages};
        let tree = two_gpu_root();
        tree.file(
            "/etc/gputune/profiles/site.toml",
            "[gpu]\n\"gpu.memory_mib\" = { min = 80000 }\n\"gpu.nvlink_count\" = { min = 12 }\n\"gpu.model\" = { equals = \"a100\" }\n\"gpu.count\" = { equals = 2 }\n",
        );
        let mut small = nvml_gpu("0000:18:00.0", "0000:2a:00.0", true, 0);
        small.memory_bytes = Some(40 << 30);
        small.nvlinks[5].active = false;
        small.remapped_rows = Some(RemappedRows {
            correctable: 1,
            uncorrectable: 2,
            pending: true,
            failed: false,
        });
        small.retired_pages = Some(RetiredPages {
            single_bit: 0,
            double_bit: 0,
            pending: false,
        });
        let mut worn = nvml_gpu("0000:2a:00.0", "0000:18:00.0", true, 0);
        worn.remapped_rows = Some(RemappedRows {
            correctable: 0,
            uncorrectable: 8,
            pending: false,
            failed: true,
        });
        worn.retired_pages = Some(RetiredPages {
            single_bit: 1,
            double_bit: 2,
            pending: true,
        });
        let root = tree.root();
        let mut probes = crate::probe::Probes::absent("in a test");
        probes.nvml = Box::new(crate::probe::nvml::FixedNvml(NvmlFacts {
            gpus: vec![small, worn],
            ..Default::default()
        }));
        let options = crate::checks::AuditOptions::default();
        let f = crate::testing::audit(&root, "site", &options, probes, Area::Gpu);
        let get = |id: &str| f.get(id).unwrap_or_else(|| panic!("{id}: {f:#?}"));
        assert_eq!(get("gpu.count").status, Status::Pass);
        assert_eq!(get("gpu.memory_mib.gpu0").status, Status::Fail);
        assert_eq!(get("gpu.memory_mib.gpu0").actual, "40960");
        assert_eq!(get("gpu.memory_mib.gpu1").status, Status::Pass);
        assert_eq!(get("gpu.nvlink_count.gpu0").status, Status::Fail);
        assert_eq!(get("gpu.nvlink_count.gpu0").actual, "11");
        assert_eq!(get("gpu.nvlink_count.gpu1").status, Status::Pass);
        // NVML's name is the model when the driver's /proc listing is absent.
        assert_eq!(get("gpu.model.gpu1").status, Status::Pass);
        assert_eq!(get("gpu0.row_remap").status, Status::Fail);
        assert_eq!(get("gpu0.row_remap").actual, "remapping pending");
        assert!(
            get("gpu0.row_remap")
                .fix
                .contains("nvidia-smi -r -i 0000:18:00.0")
        );
        assert_eq!(get("gpu1.row_remap").actual, "remapping failed");
        assert!(get("gpu1.row_remap").fix.contains("RMA"));
        assert_eq!(get("gpu0.retired_pages").status, Status::Pass);
        assert_eq!(get("gpu1.retired_pages").status, Status::Fail);
        assert!(
            get("gpu1.retired_pages")
                .message
                .contains("2 page(s) retired after a double-bit error")
        );
    }

    #[test]
    fn an_old_cuda_fails_the_profile() {
        use crate::probe::nvml::NvmlFacts;
        let tree = two_gpu_root();
        tree.file("/sys/module/nvidia/version", "470.57.02\n");
        let (f, _) = audit_base(
            &tree,
            NvmlFacts {
                cuda_version: Some("11.4".into()),
                ..Default::default()
            },
        );
        let get = |id: &str| &f[id];
        assert_eq!(get("cuda.version").status, Status::Fail);
        assert_eq!(get("driver.version").status, Status::Fail);
        assert_eq!(get("driver.version").actual, "470.57.02");
        assert!(
            get("driver.version")
                .message
                .contains("/sys/module/nvidia/version")
        );
        assert!(!get("driver.version").fix.is_empty());
    }
}
