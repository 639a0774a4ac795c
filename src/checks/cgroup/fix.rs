//! The fix for a cgroup limit: a systemd property on the unit when systemd manages the
//! cgroup, else the cgroupfs file to write.

use super::*;

pub(super) fn show(key: &str, amount: Amount) -> String {
    match (key, amount) {
        (_, Amount::Unlimited) => "max".into(),
        ("memory.max" | "memory.high", a) => crate::checks::limits::human(a),
        ("cpu.max", Amount::Finite(m)) => format!("{m} (= {:.2} CPUs)", m as f64 / 1000.0),
        (_, a) => a.to_string(),
    }
}

/// The systemd unit a cgroup path ends in, if any (`/system.slice/x.service` → `x.service`).
pub(super) fn unit_of(path: &str) -> Option<&str> {
    let last = path.rsplit('/').next()?;
    [".slice", ".service", ".scope"]
        .iter()
        .any(|s| last.ends_with(s))
        .then_some(last)
}

/// The systemd property and value that set a cgroup file to `value` (cgroup syntax).
pub(super) fn systemd_property(key: &str, value: &str) -> String {
    let infinite = value == "max" || value.starts_with("max ");
    match key {
        "memory.max" => format!("MemoryMax={}", if infinite { "infinity" } else { value }),
        "memory.high" => format!("MemoryHigh={}", if infinite { "infinity" } else { value }),
        "pids.max" => format!("TasksMax={}", if infinite { "infinity" } else { value }),
        "cpu.max" => {
            let mut f = value.split_whitespace();
            match (
                f.next().and_then(|q| q.parse::<u64>().ok()),
                f.next().and_then(|p| p.parse::<u64>().ok()),
            ) {
                (Some(q), Some(p)) if p > 0 => format!("CPUQuota={}%", q * 100 / p),
                _ => "CPUQuota=".into(),
            }
        }
        "cpuset.cpus" => format!("AllowedCPUs={value}"),
        "cpuset.mems" => format!("AllowedMemoryNodes={value}"),
        _ => format!("{key}={value}"),
    }
}

/// The cgroupfs file and value that hold `key` = `value` (cgroup v2 syntax) on this layout.
pub(super) fn cgroupfs_file<'a>(layout: &Layout, key: &'a str, value: &str) -> (&'a str, String) {
    if matches!(layout, Layout::V2 { .. }) {
        return (key, value.to_string());
    }
    // v1 writes "no limit" as -1 where v2 writes `max`.
    let v1 = |v: &str| if v == "max" { "-1".into() } else { v.into() };
    match key {
        "memory.max" => ("memory.limit_in_bytes", v1(value)),
        // v2's `QUOTA PERIOD`: v1 keeps the period in a file of its own.
        "cpu.max" => (
            "cpu.cfs_quota_us",
            v1(value.split_whitespace().next().unwrap_or(value)),
        ),
        _ => (key, value.to_string()),
    }
}

/// The fix (and, where `apply` can make it, the change) that sets `key` of the cgroup `path`
/// to `value`.
pub(super) fn cgroup_fix(
    layout: &Layout,
    mount: &str,
    path: &str,
    key: &str,
    value: &str,
) -> Remedy {
    match unit_of(path) {
        // A scope is made by whoever started the job and goes with it: nothing persists it.
        Some(unit) if unit.ends_with(".scope") => Remedy::by_hand(format!(
            "systemctl set-property --runtime {unit} {} (a scope lives only as long as its job and cannot be persisted: set the limit on its slice or in the job's launcher)",
            systemd_property(key, value)
        )),
        Some(unit) => Remedy::applied(
            format!(
                "systemctl set-property {unit} {}",
                systemd_property(key, value)
            ),
            Change::Cgroup {
                slice: unit.into(),
                key: key.into(),
                value: value.into(),
            },
        ),
        None => {
            let (file, value) = cgroupfs_file(layout, key, value);
            Remedy::by_hand(format!(
                "echo '{value}' > {mount}{path}/{file} (not persistent; container runtimes set it at start: docker --memory/--cpus/--pids-limit, Kubernetes resource limits)"
            ))
        }
    }
}
