//! Platform settings that break GPU-to-GPU and GPU-to-NIC traffic: PCIe ACS redirecting
//! peer-to-peer through the root complex, IOMMU translation in the DMA path, and the
//! `nvidia-peermem` module GPUDirect RDMA needs.

use std::collections::BTreeSet;

use crate::finding::{Area, Check, Finding};
use crate::host::Root;
use crate::inventory::Inventory;
use crate::profile::setting::{KeySpec, Setting, ValueKind::Number, ValueKind::Text};

use super::judged::{Judged, judge_of, specs};
use super::{Context, setting_check, value_by_rule};

/// Why a check of the path to GPUs is skipped on a node without any.
const NO_GPU: &str = "no NVIDIA GPU on the PCI bus";

const JUDGED: &[Judged<Judge>] = &[
    Judged {
        judge: Judge::Iommu,
        spec: KeySpec {
            key: "iommu.mode",
            kind: Text,
            why: "With DMA translation on, every GPUDirect RDMA and peer-to-peer transfer goes through the IOMMU; NVIDIA asks for it off or in pass-through (iommu=pt).",
        },
    },
    Judged {
        judge: Judge::Peermem,
        spec: KeySpec {
            key: "nvidia_peermem.loaded",
            kind: Number,
            why: "GPUDirect RDMA needs nvidia-peermem so the NIC can read and write GPU memory; without it NCCL stages every transfer through host memory.",
        },
    },
];

pub(crate) const KEYS: &[KeySpec] = &specs::<_, { JUDGED.len() }>(JUDGED);

/// What reads a platform key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    Iommu,
    Peermem,
}

pub(crate) fn audit(ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let mut out = acs(ctx, inv);
    for (key, setting) in ctx.profile.area(Area::Platform) {
        match judge_of(JUDGED, key) {
            Some(Judge::Iommu) => out.push(iommu(ctx, setting)),
            Some(Judge::Peermem) => out.push(peermem(ctx, inv, setting)),
            None => {}
        }
    }
    out
}

/// Why a bridge's ACS control is not known from its config space.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AcsError {
    /// The extended space (past 256 bytes) is readable by root only.
    #[error("only {0} bytes of config space readable (extended capabilities need root)")]
    Short(usize),
    #[error("ACS capability cut short")]
    CutShort,
}

/// `ACS Control` of a PCI function from its config space (`/sys/bus/pci/devices/X/config`):
/// `Ok(None)` when it has no ACS capability.
pub(crate) fn acs_control(config: &[u8]) -> Result<Option<u16>, AcsError> {
    if config.len() < 0x104 {
        return Err(AcsError::Short(config.len()));
    }
    let mut at = 0x100usize;
    for _ in 0..64 {
        let Some(h) = config.get(at..at + 4) else {
            break;
        };
        let header = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        if header == 0 || header == u32::MAX {
            break;
        }
        if header & 0xffff == 0x000d {
            let c = config.get(at + 6..at + 8).ok_or(AcsError::CutShort)?;
            return Ok(Some(u16::from_le_bytes([c[0], c[1]])));
        }
        let next = (header >> 20) as usize & 0xffc;
        if next < 0x100 {
            break;
        }
        at = next;
    }
    Ok(None)
}

/// `ACSCtl` flags as lspci shows the enabled ones.
pub(crate) fn acs_flags(control: u16) -> String {
    let names = [
        "SrcValid",
        "TransBlk",
        "ReqRedir",
        "CmpltRedir",
        "UpstreamFwd",
        "EgressCtrl",
        "DirectTrans",
    ];
    let on: Vec<&str> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| control & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if on.is_empty() {
        "all off".into()
    } else {
        on.join("+ ") + "+"
    }
}

/// True when `/proc/cpuinfo` carries the `hypervisor` flag (a VM).
pub(crate) fn is_virtual_machine(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|w| w == "hypervisor"))
}

fn acs(ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let check = Check::new("platform.acs", Area::Platform)
        .expected("ACS off on bridges above GPUs (bare metal)");
    if inv.gpus.is_empty() {
        return vec![check.skip(NO_GPU)];
    }
    if let Ok(Some(cpuinfo)) = ctx.root.read_optional("/proc/cpuinfo")
        && is_virtual_machine(&cpuinfo)
    {
        return vec![check.skip(
            "virtual machine (hypervisor CPU flag): passthrough needs ACS; enable ATS on the host instead",
        )];
    }
    let bridges: BTreeSet<&String> = inv.gpus.iter().flat_map(|g| &g.bridges).collect();
    if bridges.is_empty() {
        return vec![check.skip(
            "no PCI bridge above any GPU (they sit on the root bus): there is no ACS to read",
        )];
    }
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    let mut checked = 0;
    for bdf in &bridges {
        let path = format!("/sys/bus/pci/devices/{bdf}/config");
        let config = match ctx.root.read_optional_bytes(&path) {
            Ok(Some(c)) => c,
            Ok(None) => {
                unreadable.push(format!("{path} is missing"));
                continue;
            }
            Err(e) => {
                unreadable.push(e.to_string());
                continue;
            }
        };
        match acs_control(&config) {
            Err(e) => unreadable.push(format!("{bdf}: {e}")),
            Ok(None) => checked += 1,
            Ok(Some(control)) => {
                checked += 1;
                if control & 0x7f != 0 {
                    out.push(
                        Check::new(format!("platform.acs.{bdf}"), Area::Platform)
                            .expected("ACSCtl all off")
                            .why(format!(
                                "bridge {bdf} above a GPU redirects peer-to-peer traffic through the root complex: GPU<->GPU and GPU<->NIC (GPUDirect) bandwidth drops or hangs"
                            ))
                            .warn(
                                acs_flags(control),
                                format!(
                                    "setpci -s {bdf} ECAP_ACS+0x6.w=0000 (not persistent: repeat at boot, or disable ACS in the BIOS)"
                                ),
                            ),
                    );
                }
            }
        }
    }
    if checked == 0 {
        // Not one bridge could be read: nothing was judged, whatever the count says.
        return vec![check.skip(format!(
            "cannot read ACS of any of the {} bridge(s) above GPUs: {}",
            bridges.len(),
            unreadable.join("; ")
        ))];
    }
    if out.is_empty() {
        let why = if unreadable.is_empty() {
            "no bridge above a GPU redirects peer-to-peer traffic".to_string()
        } else {
            format!(
                "no readable bridge above a GPU redirects peer-to-peer traffic; not judged: {}",
                unreadable.join("; ")
            )
        };
        let actual = if unreadable.is_empty() {
            format!("{checked} bridge(s) checked")
        } else {
            format!("{checked} of {} bridge(s) checked", bridges.len())
        };
        out.push(check.why(why).pass(actual));
    }
    out
}

/// The IOMMU's mode from the kernel command line and the IOMMU groups: `off`,
/// `passthrough` or `translated`.
pub(crate) fn iommu_mode(cmdline: &str, groups: usize, group_types: &[String]) -> &'static str {
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    let has = |w: &str| words.contains(&w);
    if has("intel_iommu=off") || has("amd_iommu=off") || groups == 0 {
        return "off";
    }
    if has("iommu=pt")
        || has("iommu.passthrough=1")
        || group_types.iter().any(|t| t.trim() == "identity")
    {
        return "passthrough";
    }
    "translated"
}

fn iommu(ctx: &Context, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Platform, "iommu.mode", setting);
    let cmdline = match ctx.root.read_optional("/proc/cmdline") {
        Ok(Some(c)) => c,
        Ok(None) => return check.skip("/proc/cmdline is absent"),
        Err(e) => return check.error(e.to_string()),
    };
    let groups = ctx
        .root
        .list_dir("/sys/kernel/iommu_groups")
        .ok()
        .flatten()
        .unwrap_or_default();
    let types: Vec<String> = groups
        .iter()
        .take(8)
        .filter_map(|g| {
            ctx.root
                .read_optional(&format!("/sys/kernel/iommu_groups/{g}/type"))
                .ok()
                .flatten()
        })
        .collect();
    let mode = iommu_mode(&cmdline, groups.len(), &types);
    value_by_rule(
        &check.found(format!("{} IOMMU group(s)", groups.len()), "; "),
        setting,
        mode,
        "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub), run update-grub (or grub2-mkconfig) and reboot",
    )
}

/// Whether the module that lets a NIC reach GPU memory is loaded (`nv_peer_mem` is its
/// name before driver 470).
pub(crate) fn peermem_loaded(root: &Root) -> bool {
    ["/sys/module/nvidia_peermem", "/sys/module/nv_peer_mem"]
        .iter()
        .any(|m| root.exists(m))
}

fn peermem(ctx: &Context, inv: &Inventory, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Platform, "nvidia_peermem.loaded", setting);
    if inv.gpus.is_empty() {
        return check.skip(NO_GPU);
    }
    let loaded = peermem_loaded(ctx.root);
    value_by_rule(
        &check,
        setting,
        u8::from(loaded),
        "modprobe nvidia-peermem, and list it in /etc/modules-load.d/nvidia-peermem.conf so it loads at boot",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_reaches_its_judge() {
        crate::checks::judged::assert_each_key_reaches_its_judge(JUDGED);
    }

    fn config_with_acs(control: u16) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        // AER at 0x100 pointing to ACS at 0x148.
        c[0x100..0x104].copy_from_slice(&(0x0001u32 | (1 << 16) | (0x148 << 20)).to_le_bytes());
        c[0x148..0x14c].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        c[0x14e..0x150].copy_from_slice(&control.to_le_bytes());
        c
    }

    #[test]
    fn acs_from_config_space() {
        assert_eq!(acs_control(&config_with_acs(0x1d)).unwrap(), Some(0x1d));
        assert_eq!(acs_control(&config_with_acs(0)).unwrap(), Some(0));
        assert_eq!(acs_control(&vec![0u8; 4096]).unwrap(), None);
        assert_eq!(acs_control(&[0u8; 64]), Err(AcsError::Short(64)));
        assert_eq!(
            AcsError::Short(64).to_string(),
            "only 64 bytes of config space readable (extended capabilities need root)"
        );
        // The ACS header is the last four bytes read: its control word lies past the end.
        let mut cut = vec![0u8; 0x104];
        cut[0x100..].copy_from_slice(&0x000du32.to_le_bytes());
        assert_eq!(acs_control(&cut), Err(AcsError::CutShort));
        assert_eq!(
            acs_flags(0x1d),
            "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
        );
        assert_eq!(acs_flags(0), "all off");
    }

    #[test]
    fn iommu_modes() {
        assert_eq!(iommu_mode("root=/dev/sda1", 0, &[]), "off");
        assert_eq!(
            iommu_mode("intel_iommu=on iommu=pt", 40, &[]),
            "passthrough"
        );
        assert_eq!(
            iommu_mode("intel_iommu=on", 40, &["identity\n".into()]),
            "passthrough"
        );
        assert_eq!(
            iommu_mode("intel_iommu=on", 40, &["DMA-FQ\n".into()]),
            "translated"
        );
        assert_eq!(iommu_mode("intel_iommu=off", 40, &[]), "off");
    }

    #[test]
    fn hypervisor_flag() {
        assert!(is_virtual_machine(
            "processor: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"
        ));
        assert!(!is_virtual_machine("flags\t\t: fpu vme lahf_lm\n"));
        assert!(!is_virtual_machine(""));
    }
}
