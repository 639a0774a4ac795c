//! irqbalance against hand-pinned NIC interrupts (`irq.numa_local = 1`): irqbalance moves
//! every interrupt it has not been told to leave alone every 10 seconds, so steering a
//! NIC's queues to its NUMA node (the `irq.numa_local` fix, `mlnx_tune`, `set_irq_affinity`)
//! only lasts while irqbalance is stopped or bans those IRQs (`--banirq=N`, or
//! `IRQBALANCE_BANNED_CPULIST` covering the CPUs they are pinned to).

use crate::finding::{Area, Check, Finding};
use crate::host::cpulist::CpuList;
use crate::inventory::nic::Nic;
use crate::profile::setting::Setting;

use super::super::Context;

/// The unit that starts irqbalance at boot, when enabled.
const ENABLED: &str = "/etc/systemd/system/multi-user.target.wants/irqbalance.service";

/// What a running irqbalance was told to leave alone.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Bans {
    pub pid: String,
    pub irqs: Vec<u32>,
    pub cpus: Option<CpuList>,
}

/// The `--banirq=N` / `-i N` arguments of a NUL-separated command line.
pub fn banned_irqs(cmdline: &str) -> Vec<u32> {
    let args: Vec<&str> = cmdline.split('\0').filter(|a| !a.is_empty()).collect();
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let value = if let Some(v) = a.strip_prefix("--banirq=") {
            Some(v)
        } else if *a == "--banirq" || *a == "-i" {
            args.get(i + 1).copied()
        } else {
            a.strip_prefix("-i").filter(|v| !v.is_empty())
        };
        if let Some(n) = value.and_then(|v| v.parse().ok()) {
            out.push(n);
        }
    }
    out
}

/// The running irqbalance's bans, `None` when none runs.
fn running(ctx: &Context) -> Option<Bans> {
    let pids = ctx
        .root
        .list_dir("/proc")
        .ok()
        .flatten()
        .unwrap_or_default();
    let pid = pids
        .iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .find(|pid| {
            ctx.root
                .read_optional(&format!("/proc/{pid}/comm"))
                .ok()
                .flatten()
                .is_some_and(|c| c.trim() == "irqbalance")
        })?;
    let read = |f: &str| {
        ctx.root
            .read_optional_bytes(&format!("/proc/{pid}/{f}"))
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let cpus = read("environ")
        .split('\0')
        .find_map(|kv| kv.strip_prefix("IRQBALANCE_BANNED_CPULIST="))
        .and_then(|v| CpuList::parse(v).ok());
    Some(Bans {
        pid: pid.clone(),
        irqs: banned_irqs(&read("cmdline")),
        cpus,
    })
}

/// `irq.numa_local.NIC.irqbalance`: irqbalance must not undo the pinning the profile asks for.
pub fn audit(ctx: &Context, nic: &Nic, setting: &Setting) -> Vec<Finding> {
    if !matches!(setting.rule.equals.as_deref(), Some("1")) {
        return vec![];
    }
    let check = Check::new(format!("irq.numa_local.{}.irqbalance", nic.name), Area::Nic).expected(
        format!("irqbalance stopped, or banning {}'s IRQs", nic.name),
    );
    let fix = "systemctl disable --now irqbalance, or ban the NIC's IRQs: IRQBALANCE_ARGS=\"--banirq=N ...\" (or IRQBALANCE_BANNED_CPULIST) in /etc/default/irqbalance (/etc/sysconfig/irqbalance on RHEL), then systemctl restart irqbalance";
    if ctx.options.persisted {
        let enabled = ctx.root.exists(ENABLED);
        let check = check.why("irqbalance enabled at boot spreads every interrupt it is not told to leave alone, undoing hand-pinned NIC queues");
        return vec![if enabled {
            check.judge(setting.severity.status(), "enabled at boot", fix)
        } else {
            check.pass("not enabled at boot")
        }];
    }
    let Some(bans) = running(ctx) else {
        return vec![
            check
                .why("no irqbalance process runs, so hand-pinned interrupts stay where they are")
                .pass("not running"),
        ];
    };
    let dir = format!("/sys/class/net/{}/device/msi_irqs", nic.name);
    let irqs: Vec<u32> = ctx
        .root
        .list_dir(&dir)
        .ok()
        .flatten()
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    // An IRQ irqbalance leaves alone: banned by number, or pinned only to banned CPUs.
    let left_alone = |irq: &u32| {
        bans.irqs.contains(irq)
            || bans.cpus.as_ref().is_some_and(|banned| {
                ctx.root
                    .read_optional(&format!("/proc/irq/{irq}/smp_affinity_list"))
                    .ok()
                    .flatten()
                    .and_then(|t| CpuList::parse(&t).ok())
                    .is_some_and(|c| !c.is_empty() && banned.contains_all(&c))
            })
    };
    let moved: Vec<u32> = irqs.iter().copied().filter(|i| !left_alone(i)).collect();
    let check = check.why(format!(
        "irqbalance (pid {}) rebalances every 10 s each interrupt it is not told to leave alone, so the NUMA-local pinning irq.numa_local asks for does not last",
        bans.pid
    ));
    if irqs.is_empty() {
        return vec![check.skip(format!(
            "{dir} is absent: {} has no MSI vectors to pin",
            nic.name
        ))];
    }
    if moved.is_empty() {
        return vec![check.pass(format!(
            "running, banning all {} IRQs of {}",
            irqs.len(),
            nic.name
        ))];
    }
    let shown: Vec<String> = moved.iter().take(8).map(u32::to_string).collect();
    let more = if moved.len() > 8 { " ..." } else { "" };
    vec![check.judge(
        setting.severity.status(),
        format!(
            "running, free to move {} of {} IRQs ({}{more})",
            moved.len(),
            irqs.len(),
            shown.join(",")
        ),
        fix,
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banned_irqs_in_every_spelling() {
        let cmd =
            "/usr/sbin/irqbalance\0--foreground\0--banirq=98\0-i\x0099\0--banirq\x00100\0-i101\0";
        assert_eq!(banned_irqs(cmd), vec![98, 99, 100, 101]);
        assert_eq!(banned_irqs(""), Vec::<u32>::new());
        assert_eq!(banned_irqs("irqbalance\0--banirq=x\0-i"), Vec::<u32>::new());
    }
}
