//! NIC interrupts on the NIC's own NUMA node (`irq.numa_local = 1`): each MSI vector of
//! the NIC (`/sys/class/net/X/device/msi_irqs`) whose `smp_affinity_list` reaches outside
//! that node's CPUs gets a `Change::IrqAffinity`. irqbalance, when running, moves them back.

use crate::finding::{Area, Change, Check, Finding, Remedy};
use crate::host::cpulist::CpuList;
use crate::inventory::Inventory;
use crate::inventory::nic::Nic;
use crate::profile::setting::Setting;

use super::super::Context;
use std::collections::BTreeMap;

/// Parses `/proc/interrupts` into IRQ number → the name in its last column
/// (`mlx5_comp0@pci:0000:1b:00.0`); non-numeric rows (NMI, LOC) are left out.
pub fn parse_interrupts(text: &str) -> BTreeMap<u32, String> {
    let mut cpus = 0;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 {
            cpus = line
                .split_whitespace()
                .filter(|w| w.starts_with("CPU"))
                .count();
            continue;
        }
        let Some((irq, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let Ok(irq) = irq.parse::<u32>() else {
            continue;
        };
        // counts per CPU, then the chip, the hwirq and the name (which may contain spaces).
        let words: Vec<&str> = rest.split_whitespace().skip(cpus).collect();
        let name = words.get(2..).map_or(String::new(), |w| w.join(" "));
        out.insert(irq, name);
    }
    out
}

/// True when a process named irqbalance runs (it rewrites IRQ affinities every 10 s).
pub fn irqbalance_running(ctx: &Context) -> bool {
    ctx.root
        .list_dir("/proc")
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .any(|pid| {
            ctx.root
                .read_optional(&format!("/proc/{pid}/comm"))
                .ok()
                .flatten()
                .is_some_and(|c| c.trim() == "irqbalance")
        })
}

pub fn audit(ctx: &Context, inv: &Inventory, nic: &Nic, setting: &Setting) -> Vec<Finding> {
    if !matches!(setting.rule.equals.as_deref(), Some("1")) {
        return vec![];
    }
    let check = super::nic_check(ctx, nic, "irq.numa_local", setting);
    if inv.single_numa_node() {
        return vec![check.skip("one NUMA node: every CPU is local to the NIC")];
    }
    let Some(node) = nic.numa_node.and_then(|n| inv.node(n)) else {
        return vec![check.skip(format!("{} reports no NUMA node", nic.name))];
    };
    let dir = format!("/sys/class/net/{}/device/msi_irqs", nic.name);
    let irqs: Vec<u32> = match ctx.root.list_dir(&dir) {
        Ok(Some(names)) => names.iter().filter_map(|n| n.parse().ok()).collect(),
        Ok(None) => return vec![check.skip(format!("{dir} is absent (no MSI vectors)"))],
        Err(e) => return vec![check.error(e.to_string())],
    };
    let names = ctx
        .root
        .read_optional("/proc/interrupts")
        .ok()
        .flatten()
        .map(|t| parse_interrupts(&t))
        .unwrap_or_default();
    let balancer = if irqbalance_running(ctx) {
        " irqbalance is running and will move it back: stop it (systemctl disable --now irqbalance) or ban these IRQs (IRQBALANCE_BANNED_CPULIST, or --banirq={irq})".to_string()
    } else {
        String::new()
    };
    let mut out = Vec::new();
    let mut remote = 0;
    for irq in &irqs {
        let path = format!("/proc/irq/{irq}/smp_affinity_list");
        let Some(current) = ctx
            .root
            .read_optional(&path)
            .ok()
            .flatten()
            .and_then(|t| CpuList::parse(&t).ok())
        else {
            continue;
        };
        if node.cpus.contains_all(&current) {
            continue;
        }
        remote += 1;
        let label = names.get(irq).map_or(String::new(), |n| format!(" ({n})"));
        let f = Check::new(format!("irq.numa_local.{}.{irq}", nic.name), Area::Nic)
            .expected(format!("CPUs of node {} ({})", node.id, node.cpus))
            .why(format!(
                "IRQ {irq}{label} of {} may run outside NUMA node {}.{}",
                nic.name,
                node.id,
                balancer.replace("{irq}", &irq.to_string())
            ))
            .judge(
                setting.severity.status(),
                current.to_string(),
                Remedy::applied(
                    format!("echo {} > /proc/irq/{irq}/smp_affinity_list", node.cpus),
                    Change::IrqAffinity {
                        irq: *irq,
                        cpus: node.cpus.to_string(),
                    },
                ),
            );
        out.push(f);
    }
    if remote == 0 {
        out.push(
            check
                .why(format!(
                    "all {} interrupts of {} stay on NUMA node {}",
                    irqs.len(),
                    nic.name,
                    node.id
                ))
                .pass("1"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts() {
        let text = "           CPU0       CPU1       \n  0:         22          0   IO-APIC   2-edge      timer\n 98:        100          3  PCI-MSI 51380224-edge      mlx5_comp0@pci:0000:1b:00.0\nNMI:          0          0   Non-maskable interrupts\n";
        let map = parse_interrupts(text);
        assert_eq!(
            map.get(&98).map(String::as_str),
            Some("mlx5_comp0@pci:0000:1b:00.0")
        );
        assert_eq!(map.get(&0).map(String::as_str), Some("timer"));
        assert_eq!(map.len(), 2);
        assert!(parse_interrupts("").is_empty());
    }
}
