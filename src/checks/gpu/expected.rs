//! The hardware a node must have, as NHC's `check_hw_gpu` and Azure's health checks state
//! it: how many GPUs (`gpu.count`), which model (`gpu.model`), how much memory each has
//! (`gpu.memory_mib`) and how many active NVLinks (`gpu.nvlink_count`). A GPU that went
//! missing is named by the address the last healthy audit remembered it at.

use crate::finding::{Area, Check, Finding, Status};
use crate::inventory::Inventory;
use crate::inventory::gpu::{self, Gpu};
use crate::profile::setting::Setting;

use super::super::{Context, by_rule, setting_check, value_by_rule};

/// `gpu.count`: the GPUs the node has against the profile's rule (else at least one), and
/// against the GPUs the last healthy live audit remembered (`/var/lib/gputune/gpus.json`).
pub(crate) fn count(ctx: &Context, inv: &Inventory) -> Finding {
    let setting = ctx.profile.get(Area::Gpu, "gpu.count");
    let check = match setting {
        Some(s) => setting_check(ctx, Area::Gpu, "gpu.count", s),
        None => Check::new("gpu.count", Area::Gpu).expected(">= 1"),
    };
    let remembered = if ctx.options.image() {
        Ok(None)
    } else {
        gpu::read_remembered(ctx.root)
    };
    let listed: Vec<String> = inv
        .gpus
        .iter()
        .map(|g| format!("{} {}", g.pci_address, g.device_id))
        .collect();
    let missing: Vec<String> = match &remembered {
        Ok(Some(r)) => r
            .gpus
            .iter()
            .filter(|m| !inv.gpus.iter().any(|g| g.pci_address == m.pci_address))
            .map(|m| {
                let model = m
                    .model
                    .as_deref()
                    .map_or(String::new(), |m| format!(", {m}"));
                format!(
                    "{} ({}{model})",
                    crate::say::clean_line(&m.pci_address),
                    crate::say::clean_line(&m.device_id)
                )
            })
            .collect(),
        _ => vec![],
    };
    let note = match &remembered {
        Err(e) => format!(" The remembered inventory was not used: {e}."),
        _ => String::new(),
    };
    let found = inv.gpus.len().to_string();
    if !missing.is_empty() {
        let when = match &remembered {
            Ok(Some(r)) => r.written_at,
            _ => 0,
        };
        let status = setting.map_or(Status::Fail, |s| match s.severity.status() {
            Status::Skip => Status::Fail,
            other => other,
        });
        return check
            .why(format!(
                "missing: {} — the audit of {} ({}) found {} GPU(s) there; now {}.{note}",
                missing.join(", "),
                crate::host::kmsg::utc(when),
                gpu::REMEMBERED,
                missing.len() + listed.len(),
                if listed.is_empty() { "none".to_string() } else { listed.join(", ") }
            ))
            .judge(
                status,
                found,
                format!(
                    "drain the node; check `dmesg` for Xid 79 or PCIe (AER) errors at the missing address, reseat or replace the GPU, and reboot; if the GPU was removed on purpose, delete {} (the next healthy audit rewrites it)",
                    gpu::REMEMBERED
                ),
            );
    }
    match setting {
        Some(s) => {
            let why = if listed.is_empty() {
                format!("no NVIDIA GPU on the PCI bus.{note}")
            } else {
                format!("{}.{note}", listed.join(", "))
            };
            by_rule(
                &check.why(why),
                s,
                &found,
                found.clone(),
                "drain the node; check `lspci -d 10de:` and `dmesg` (Xid 79, AER) for the GPU the node lacks, reseat or replace it, and reboot",
            )
        }
        None if inv.gpus.is_empty() => check.skip(
            "no NVIDIA GPU on the PCI bus (vendor 0x10de, display class): GPU checks do not apply",
        ),
        None => check
            .why(format!("{}.{note}", listed.join(", ")))
            .pass(found),
    }
}

/// The GPU's model, as the driver (`/proc/driver/nvidia/gpus/*/information`) or NVML says.
fn model_of(g: &Gpu) -> Option<String> {
    g.nvml
        .as_ref()
        .map(|n| n.name.clone())
        .filter(|n| !n.is_empty())
        .or_else(|| g.model.clone())
}

/// `gpu.model`: each GPU's model holds one of the rule's words (`equals` or `one_of`) as a
/// case-insensitive substring, so `"H100"` matches `NVIDIA H100 80GB HBM3`.
pub(crate) fn model(ctx: &Context, inv: &Inventory, setting: &Setting) -> Vec<Finding> {
    let words: Vec<&String> = setting
        .rule
        .equals
        .iter()
        .chain(setting.rule.one_of.iter().flatten())
        .collect();
    let shown = words
        .iter()
        .map(|w| format!("`{w}`"))
        .collect::<Vec<_>>()
        .join(" or ");
    inv.gpus
        .iter()
        .map(|g| {
            let check = setting_check(ctx, Area::Gpu, "gpu.model", setting)
                .suffixed(&format!(".gpu{}", g.index))
                .expected(format!("contains {shown}"));
            let Some(model) = model_of(g) else {
                return check.skip(format!(
                    "{} ({}): the model is unknown without the NVIDIA driver (/proc/driver/nvidia/gpus) or NVML",
                    g.pci_address, g.device_id
                ));
            };
            let model = crate::say::clean_line(&model);
            let lower = model.to_lowercase();
            let met = words.iter().any(|w| lower.contains(&w.to_lowercase()));
            let status = if met {
                Status::Pass
            } else {
                setting.severity.status()
            };
            check.found(format!("{} is a {model}", g.pci_address), "; ").judge(
                status,
                model,
                "this node has other GPUs than the profile's: schedule it in a partition for its model, or use the profile for this hardware",
            )
        })
        .collect()
}

/// `gpu.memory_mib`: each GPU's memory (NVML's total) in MiB against the rule; a GPU showing
/// less than its model has runs with memory disabled or the wrong SKU.
pub(crate) fn memory(ctx: &Context, inv: &Inventory, setting: &Setting) -> Vec<Finding> {
    inv.gpus
        .iter()
        .map(|g| {
            let check = setting_check(ctx, Area::Gpu, "gpu.memory_mib", setting)
                .suffixed(&format!(".gpu{}", g.index));
            let Some(bytes) = g.nvml.as_ref().and_then(|n| n.memory_bytes) else {
                return check.skip(format!(
                    "{}: the GPU's memory is known only to NVML ({})",
                    g.pci_address,
                    nvml_reason(inv)
                ));
            };
            value_by_rule(
                &check.found(format!("{} has {} MiB", g.pci_address, bytes >> 20), "; "),
                setting,
                bytes >> 20,
                "a GPU with less memory than its model (MIG or a retired-memory state, or a different SKU): check `nvidia-smi -q -d MEMORY`, disable MIG (`nvidia-smi -mig 0`) or replace the GPU",
            )
        })
        .collect()
}

/// `gpu.nvlink_count`: each GPU's active NVLinks (NVML) against the rule; a link down halves
/// that GPU's NVLink bandwidth or sends NCCL over PCIe.
pub(crate) fn nvlink_count(ctx: &Context, inv: &Inventory, setting: &Setting) -> Vec<Finding> {
    inv.gpus
        .iter()
        .map(|g| {
            let check = setting_check(ctx, Area::Gpu, "gpu.nvlink_count", setting)
                .suffixed(&format!(".gpu{}", g.index));
            let Some(n) = &g.nvml else {
                return check.skip(format!(
                    "{}: NVLinks are known only to NVML ({})",
                    g.pci_address,
                    nvml_reason(inv)
                ));
            };
            let active = n.nvlinks.iter().filter(|l| l.active).count();
            value_by_rule(
                &check.found(
                    format!(
                        "{} has {active} active NVLink(s) of {}",
                        g.pci_address,
                        n.nvlinks.len()
                    ),
                    "; ",
                ),
                setting,
                active,
                "check `nvidia-smi nvlink -s` and the fabric manager (`systemctl status nvidia-fabricmanager`); reset the GPU, and have a link that stays down serviced",
            )
        })
        .collect()
}

fn nvml_reason(inv: &Inventory) -> String {
    match &inv.nvml {
        Err(reason) => reason.to_string(),
        Ok(_) => "NVML does not list this GPU".into(),
    }
}
