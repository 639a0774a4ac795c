//! The NIC as `ethtool` and NVIDIA's `mlnx_tune` see it: descriptor rings against their
//! maxima, offloads, interrupt coalescing, pause frames and queue counts against the NIC's
//! NUMA-local CPUs, read from the kernel's ethtool netlink family. Each failure carries the
//! `ethtool -G/-K/-C/-A/-L` command and the [`Change::Ethtool`] apply makes. These are live
//! values: under `--root`, in an image or with `--persisted` they are skipped with the reason.

use crate::finding::{Area, Change, Check, Finding, Remedy};
use crate::host::ethtool::{Ethtool, EthtoolError, Knob};
use crate::inventory::nic::{LinkKind, Nic};
use crate::probe_error::{Probe, ProbeError};
use crate::profile::setting::Setting;

use super::super::Context;
use super::super::judged::judge_of;

/// The words a ring key takes besides a number: the NIC's own maximum.
pub const RING_MAX: &str = "max";
/// The word `channels.combined` takes besides a number: one queue per NIC-local CPU.
pub const LOCAL_CPUS: &str = "local_cpus";

/// The findings of every ethtool key the profile sets, for one NIC.
pub fn audit(ctx: &Context, nic: &Nic) -> Vec<Finding> {
    let mut out = Vec::new();
    for (key, setting) in ctx.profile.area(Area::Nic) {
        let Some(super::Judge::Ethtool(knob)) = judge_of(super::JUDGED, key) else {
            continue;
        };
        let check = super::nic_check(ctx, nic, key, setting);
        let e = ctx.probes.nic_settings.as_ref();
        if nic.kind == LinkKind::Infiniband {
            out.push(check.skip(format!(
                "{} is IPoIB: NCCL's InfiniBand transport does not pass through its rings, offloads or queues",
                nic.name
            )));
            continue;
        }
        if ctx.options.persisted {
            out.push(check.skip(format!(
                "{key} is a live NIC setting: the driver starts from its defaults at boot, and only a systemd .link file (see `gputune apply`) sets it then"
            )));
            continue;
        }
        out.push(match knob {
            Knob::RxRing | Knob::TxRing => ring(e, nic, knob, check, setting),
            Knob::CombinedChannels => channels(e, nic, check, setting),
            _ => switch_or_number(e, nic, knob, check, setting),
        });
    }
    out
}

/// A read that failed: the driver lacks the group (a skip, not a fault), the node is not
/// live (a skip), or the kernel could not answer (an error); [`ProbeError::verdict`] decides.
fn unread(check: &Check, nic: &Nic, err: EthtoolError) -> Finding {
    let reason = match (&err, nic.driver.as_deref()) {
        (EthtoolError::Unsupported { .. }, Some(driver)) => {
            format!("{err} (driver {driver}): nothing to judge")
        }
        (EthtoolError::Unsupported { .. }, None) => format!("{err}: nothing to judge"),
        _ => err.to_string(),
    };
    ProbeError::from(&err).finding(Probe::NicSettings, check, reason)
}

fn change(nic: &Nic, knob: Knob, value: u32) -> Change {
    Change::Ethtool {
        iface: nic.name.clone(),
        knob: knob.key().into(),
        value,
    }
}

fn remedy(nic: &Nic, knob: Knob, value: u32) -> Remedy {
    Remedy::applied(knob.command(&nic.name, value), change(nic, knob, value))
}

/// The number or word a text key asks for (`equals`, else the first of `one_of`).
fn wanted(setting: &Setting) -> Option<&str> {
    setting
        .rule
        .equals
        .as_deref()
        .or_else(|| setting.rule.one_of.as_ref()?.first().map(String::as_str))
}

/// `ring.rx` / `ring.tx`: `max` or a number of descriptors, capped by the NIC's maximum.
fn ring(e: &dyn Ethtool, nic: &Nic, knob: Knob, check: Check, setting: &Setting) -> Finding {
    let rings = match e.rings(&nic.name) {
        Ok(r) => r,
        Err(err) => return unread(&check, nic, err),
    };
    let (current, max) = match knob {
        Knob::RxRing => (rings.rx, rings.rx_max),
        _ => (rings.tx, rings.tx_max),
    };
    let (Some(current), Some(max)) = (current, max) else {
        return check.skip(format!(
            "{} reports no {} ring size or maximum",
            nic.name,
            knob.key()
        ));
    };
    let Some(spec) = wanted(setting) else {
        return check.error(format!("{}: no ring size to compare with", setting.origin));
    };
    let (want, expected) = if spec == RING_MAX {
        (max, format!("the NIC's maximum ({max})"))
    } else {
        let Ok(n) = spec.parse::<u32>() else {
            return check.error(format!(
                "{}: `{spec}` is not {RING_MAX} or a number of descriptors",
                setting.origin
            ));
        };
        if n > max {
            (max, format!("{n}, capped at the NIC's maximum {max}"))
        } else {
            (n, n.to_string())
        }
    };
    let status = if current == want {
        crate::finding::Status::Pass
    } else {
        setting.severity.status()
    };
    check
        .expected(expected)
        .found(
            format!("{} has {current} of at most {max} descriptors", nic.name),
            "; ",
        )
        .judge(status, format!("{current} (max {max})"), || {
            Some(remedy(nic, knob, want))
        })
}

/// `channels.combined`: `local_cpus` (one queue per CPU of the NIC's NUMA node) or a number,
/// capped by the driver's maximum. A driver without combined queues (veth, some virtual
/// functions) has its rx and tx queue counts judged together.
fn channels(e: &dyn Ethtool, nic: &Nic, check: Check, setting: &Setting) -> Finding {
    let ch = match e.channels(&nic.name) {
        Ok(c) => c,
        Err(err) => return unread(&check, nic, err),
    };
    let Some(spec) = wanted(setting) else {
        return check.error(format!(
            "{}: no channel count to compare with",
            setting.origin
        ));
    };
    let (asked, source) = if spec == LOCAL_CPUS {
        let Some(cpus) = nic.local_cpus.as_ref().filter(|c| !c.is_empty()) else {
            return check.skip(format!(
                "{} has no device/local_cpulist: its NUMA-local CPUs are unknown",
                nic.name
            ));
        };
        (
            cpus.len() as u32,
            format!("its {} NUMA-local CPUs ({cpus})", cpus.len()),
        )
    } else {
        match spec.parse::<u32>() {
            Ok(n) => (n, n.to_string()),
            Err(_) => {
                return check.error(format!(
                    "{}: `{spec}` is not {LOCAL_CPUS} or a number of channels",
                    setting.origin
                ));
            }
        }
    };
    let combined = ch.has_combined();
    let (current, max) = if combined {
        (ch.combined.unwrap_or(0), ch.combined_max.unwrap_or(0))
    } else {
        (
            ch.rx.unwrap_or(0).min(ch.tx.unwrap_or(0)),
            ch.rx_max.unwrap_or(0).min(ch.tx_max.unwrap_or(0)),
        )
    };
    if max == 0 {
        return check.skip(format!(
            "{} reports no queue counts it can change",
            nic.name
        ));
    }
    let want = asked.min(max);
    let expected = if want < asked {
        format!("{source}, capped at the driver's maximum {max}")
    } else {
        source
    };
    let kind = if combined { "combined" } else { "rx/tx" };
    let status = if current == want {
        crate::finding::Status::Pass
    } else {
        setting.severity.status()
    };
    let name = nic.name.clone();
    check
        .expected(expected)
        .found(format!("{name} runs {current} {kind} queues"), "; ")
        .judge(status, format!("{current} {kind} (max {max})"), || {
            Some(if combined {
                remedy(nic, Knob::CombinedChannels, want)
            } else {
                // apply sets the tx queues with the rx ones (see apply::nic).
                Remedy::applied(
                    format!("ethtool -L {name} rx {want} tx {want}"),
                    change(nic, Knob::RxChannels, want),
                )
            })
        })
}

/// Offloads, adaptive coalescing and pause (0 or 1), and `coalesce.rx_usecs` (a number),
/// judged by the setting's rule.
fn switch_or_number(
    e: &dyn Ethtool,
    nic: &Nic,
    knob: Knob,
    check: Check,
    setting: &Setting,
) -> Finding {
    let current = match knob.read(e, &nic.name) {
        Ok(Some(v)) => v,
        Ok(None) => {
            return check.skip(format!("{} reports no {}", nic.name, knob.key()));
        }
        Err(err) => return unread(&check, nic, err),
    };
    let shown = if knob.is_bool() {
        if current == 0 { "off" } else { "on" }.to_string()
    } else {
        current.to_string()
    };
    let fixed = match knob.features().first() {
        Some(main) => match e.features(&nic.name) {
            Ok(f) => !f.changeable.contains(*main),
            Err(err) => return unread(&check, nic, err),
        },
        None => false,
    };
    let iface = nic.name.clone();
    let target = setting
        .rule
        .target(&current.to_string())
        .and_then(|t| t.parse::<u32>().ok());
    let mut check = check;
    if knob.is_bool() {
        match setting.rule.equals.as_deref() {
            Some("1") => check = check.expected("on"),
            Some("0") => check = check.expected("off"),
            _ => {}
        }
    }
    if knob == Knob::RxUsecs {
        // Adaptive moderation picks rx-usecs itself: a fixed value only holds with it off.
        if let Ok(c) = e.coalesce(&nic.name)
            && c.adaptive_rx == Some(true)
        {
            check = check.noted("adaptive-rx is on, so the driver moves rx-usecs by itself");
        }
    }
    super::super::by_rule(&check, setting, &current.to_string(), shown, || {
        let want = target?;
        if fixed {
            return Some(Remedy::by_hand(format!(
                "{} is fixed by the {} driver (`ethtool -k {iface}` shows [fixed]): a driver or firmware setting decides it",
                knob.features()[0],
                nic.driver.as_deref().unwrap_or("NIC's")
            )));
        }
        Some(remedy(nic, knob, want))
    })
}

#[cfg(test)]
mod tests;
