//! cgroup limits of the cgroup a job runs in: which hierarchy the node uses (v2, v1, hybrid),
//! the effective memory, CPU, pids and cpuset limits (the tightest between the cgroup and
//! the root), and whether the cpuset keeps the CPUs and memory local to the GPUs. The cgroup is
//! `--cgroup PATH`, else this process's; a `[job] slice` in the profile is judged as well.

pub mod hierarchy;
mod image;
pub mod limits;
pub mod units;

use std::collections::BTreeSet;

use crate::finding::{Area, Change, Finding, Status};
use crate::host::cpulist::CpuList;
use crate::host::mounts;
use crate::inventory::gpu::Gpu;
use crate::profile::amount::Amount;
use crate::profile::setting::{KeySpec, Setting, ValueKind::Number, ValueKind::Text};

use super::Context;
use hierarchy::{Layout, Membership};

/// Keys a profile may set in `[cgroup]`.
pub const KEYS: &[KeySpec] = &[
    KeySpec {
        key: "cgroup.hierarchy",
        kind: Text,
        why: "cgroup v1 and hybrid layouts are deprecated by systemd and Kubernetes; limits and device isolation of container runtimes differ between them.",
    },
    KeySpec {
        key: "memory.max",
        kind: Number,
        why: "A hard memory limit OOM-kills a rank, and with it the whole synchronous job; /dev/shm pages NCCL uses are charged to it too.",
    },
    KeySpec {
        key: "memory.high",
        kind: Number,
        why: "Above memory.high the kernel throttles the cgroup and reclaims hard (cgroup-v2 docs), stalling data loaders and every rank waiting on them.",
    },
    KeySpec {
        key: "cpu.max",
        kind: Number,
        why: "A CPU quota (in thousandths of a CPU) throttles data-loader workers and NCCL's proxy threads for the rest of each period, adding latency to every collective.",
    },
    KeySpec {
        key: "pids.max",
        kind: Number,
        why: "Every rank, data-loader worker and their threads (OpenMP, CUDA, NCCL) count as tasks; hitting pids.max fails fork/clone at start-up.",
    },
    KeySpec {
        key: "cpuset.gpus_without_local_cpus",
        kind: Number,
        why: "A cpuset that excludes every CPU local to a GPU forces its rank's host work and DMA staging across the socket interconnect.",
    },
    KeySpec {
        key: "cpuset.gpus_without_local_memory",
        kind: Number,
        why: "A cpuset whose memory nodes exclude a GPU's NUMA node puts that rank's pinned host buffers on the far socket, halving host-device copy bandwidth.",
    },
];

/// Judges the cgroup of this process (or `--cgroup`) and the profile's slice.
pub fn audit(ctx: &Context) -> Vec<Finding> {
    let keys: Vec<(&String, &Setting)> = ctx.profile.area(Area::Cgroup).collect();
    if keys.is_empty() {
        return Vec::new();
    }
    if ctx.options.image() {
        return image::audit(ctx, &keys);
    }
    let all_skip = |reason: String| -> Vec<Finding> {
        keys.iter()
            .map(|(k, s)| {
                Finding::skip(k.as_str(), Area::Cgroup, s.rule.describe(), reason.clone())
            })
            .collect()
    };
    let all_error = |problem: String| -> Vec<Finding> {
        keys.iter()
            .map(|(k, s)| {
                Finding::error(k.as_str(), Area::Cgroup, s.rule.describe(), problem.clone())
            })
            .collect()
    };
    let layout = match mounts::read(ctx.root) {
        Ok(Some(Ok(list))) => match hierarchy::detect(&list) {
            Some(layout) => layout,
            None => return all_skip("no cgroup file system is mounted (/proc/mounts)".into()),
        },
        Ok(Some(Err(e))) => return all_error(e),
        Ok(None) => return all_skip("/proc/mounts is absent under the root".into()),
        Err(e) => return all_error(e.to_string()),
    };

    let mut targets = Vec::new();
    match &ctx.options.cgroup {
        Some(given) => targets.push(Target {
            suffix: String::new(),
            label: format!("--cgroup {given}"),
            kind: TargetKind::Path(hierarchy::normalize(&layout, given)),
            optional: false,
        }),
        None => match ctx.root.read_optional("/proc/self/cgroup") {
            Ok(Some(text)) => match hierarchy::parse_membership(&text) {
                Ok(lines) => targets.push(Target {
                    suffix: String::new(),
                    label: "this process's cgroup".into(),
                    kind: TargetKind::Process(lines),
                    optional: false,
                }),
                Err(e) => return all_error(format!("/proc/self/cgroup: {e}")),
            },
            Ok(None) => {
                return all_skip(
                    "/proc/self/cgroup is absent under the root; name the cgroup with --cgroup PATH".into(),
                );
            }
            Err(e) => return all_error(e.to_string()),
        },
    }
    if let Some(slice) = &ctx.profile.job.slice {
        match hierarchy::slice_path(slice) {
            Ok(path) => targets.push(Target {
                suffix: format!("@{slice}"),
                label: format!("slice {slice}"),
                kind: TargetKind::Path(path),
                optional: true,
            }),
            Err(e) => return all_error(format!("profile [job] slice: {e}")),
        }
    }

    let mut findings = Vec::new();
    if let Some(setting) = ctx.profile.get(Area::Cgroup, "cgroup.hierarchy") {
        findings.push(hierarchy_finding(ctx, &layout, setting));
    }
    for target in &targets {
        for (key, setting) in &keys {
            let finding = match key.as_str() {
                "memory.max" | "memory.high" | "pids.max" | "cpu.max" => {
                    limit_finding(ctx, &layout, target, key, setting)
                }
                "cpuset.gpus_without_local_cpus" | "cpuset.gpus_without_local_memory" => {
                    cpuset_finding(ctx, &layout, target, key, setting)
                }
                _ => continue,
            };
            findings.push(finding);
        }
    }
    findings
}

/// The cgroup being judged.
struct Target {
    /// Appended to finding ids (`@training.slice`) so several targets stay apart.
    suffix: String,
    label: String,
    kind: TargetKind,
    /// A profile's slice may not exist until a job starts: absent is a skip, not an error.
    optional: bool,
}

enum TargetKind {
    /// One cgroup path for every controller.
    Path(String),
    /// A process's membership, per hierarchy.
    Process(Vec<Membership>),
}

impl Target {
    fn path(&self, layout: &Layout, controller: &str) -> Option<String> {
        match &self.kind {
            TargetKind::Path(p) => Some(p.clone()),
            TargetKind::Process(lines) => {
                hierarchy::path_of(layout, lines, controller).map(str::to_string)
            }
        }
    }
}

fn hierarchy_finding(ctx: &Context, layout: &Layout, setting: &Setting) -> Finding {
    let id = "cgroup.hierarchy";
    let (status, problem) = setting.status_for(layout.name());
    let actual = match layout {
        Layout::V2 { mount } => format!("v2 at {mount}"),
        Layout::V1 { controllers } => format!(
            "v1 ({})",
            controllers.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        Layout::Hybrid { unified, .. } => format!("hybrid (v1 controllers, unified at {unified})"),
    };
    Finding {
        id: id.into(),
        area: Area::Cgroup,
        status,
        expected: setting.rule.describe(),
        actual,
        message: problem.unwrap_or_else(|| super::why(ctx, Area::Cgroup, id)),
        fix: if status == Status::Pass {
            String::new()
        } else {
            "boot with systemd.unified_cgroup_hierarchy=1 (and without systemd.legacy_systemd_cgroup_controller) on the kernel command line".into()
        },
        change: None,
    }
}

/// A limit's tightest value between a cgroup and the root, and the cgroup that sets it.
struct Effective {
    amount: Amount,
    set_by: Option<String>,
    /// The CPU period of the cgroup setting a `cpu.max` (for the fix).
    period_us: u64,
}

/// Why a cgroup limit could not be read; the audit decides skip or error on the variant.
#[derive(Debug, thiserror::Error)]
enum LimitError {
    /// The cgroup's directory does not exist (the unit or slice is not active).
    #[error("no such cgroup: {path} ({dir} is absent)")]
    NoCgroup { path: String, dir: String },
    /// The key has no cgroup v1 counterpart.
    #[error("cgroup v1 has no {key}")]
    NotInV1 { key: String },
    /// A limit file could not be read or parsed; the message names it.
    #[error("{0}")]
    Unreadable(String),
}

impl From<String> for LimitError {
    fn from(problem: String) -> Self {
        LimitError::Unreadable(problem)
    }
}

fn controller_of(key: &str) -> &str {
    key.split('.').next().unwrap_or(key)
}

fn read_limit(
    ctx: &Context,
    layout: &Layout,
    mount: &str,
    path: &str,
    key: &str,
) -> Result<Effective, LimitError> {
    let v1 = !matches!(layout, Layout::V2 { .. });
    let dir = |cg: &str| format!("{mount}{}", if cg == "/" { "" } else { cg });
    if !ctx.root.exists(&dir(path)) {
        return Err(LimitError::NoCgroup {
            path: path.to_string(),
            dir: dir(path),
        });
    }
    let mut best = Effective {
        amount: Amount::Unlimited,
        set_by: None,
        period_us: 100_000,
    };
    for cg in hierarchy::ancestors(path) {
        let read = |file: &str| -> Result<Option<String>, String> {
            ctx.root
                .read_optional(&format!("{}/{file}", dir(&cg)))
                .map_err(|e| e.to_string())
        };
        let parsed: Option<(Amount, u64)> = match (key, v1) {
            ("memory.high", true) => {
                return Err(LimitError::NotInV1 { key: key.into() });
            }
            ("memory.max", true) => read("memory.limit_in_bytes")?
                .map(|t| limits::parse_v1_memory(&t).map(|a| (a, 0)))
                .transpose()?,
            ("cpu.max", true) => match (read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?) {
                (Some(q), Some(p)) => {
                    let quota = limits::parse_v1_cpu(&q, &p)?;
                    Some((quota.millicpus, quota.period_us))
                }
                _ => None,
            },
            ("cpu.max", false) => read("cpu.max")?
                .map(|t| limits::parse_cpu_max(&t).map(|q| (q.millicpus, q.period_us)))
                .transpose()?,
            _ => read(key)?
                .map(|t| limits::parse_max(&t).map(|a| (a, 0)))
                .transpose()?,
        };
        if let Some((amount, period)) = parsed
            && amount < best.amount
        {
            best = Effective {
                amount,
                set_by: Some(cg.clone()),
                period_us: if period == 0 { best.period_us } else { period },
            };
        }
    }
    Ok(best)
}

fn show(key: &str, amount: Amount) -> String {
    match (key, amount) {
        (_, Amount::Unlimited) => "max".into(),
        ("memory.max" | "memory.high", a) => super::limits::human(a),
        ("cpu.max", Amount::Finite(m)) => format!("{m} (= {:.2} CPUs)", m as f64 / 1000.0),
        (_, a) => a.to_string(),
    }
}

/// The systemd unit a cgroup path ends in, if any (`/system.slice/x.service` → `x.service`).
fn unit_of(path: &str) -> Option<&str> {
    let last = path.rsplit('/').next()?;
    [".slice", ".service", ".scope"]
        .iter()
        .any(|s| last.ends_with(s))
        .then_some(last)
}

/// The systemd property and value that set a cgroup file to `value` (cgroup syntax).
fn systemd_property(key: &str, value: &str) -> String {
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
fn cgroupfs_file<'a>(layout: &Layout, key: &'a str, value: &str) -> (&'a str, String) {
    if matches!(layout, Layout::V2 { .. }) {
        return (key, value.to_string());
    }
    let quota = value.split_whitespace().next().unwrap_or(value);
    match key {
        "memory.max" => (
            "memory.limit_in_bytes",
            if value == "max" {
                "-1".into()
            } else {
                value.into()
            },
        ),
        "cpu.max" => (
            "cpu.cfs_quota_us",
            if quota == "max" {
                "-1".into()
            } else {
                quota.into()
            },
        ),
        _ => (key, value.to_string()),
    }
}

/// Fix text and change for setting `key` of the cgroup `path` to `value`.
fn cgroup_fix(
    layout: &Layout,
    mount: &str,
    path: &str,
    key: &str,
    value: &str,
) -> (String, Option<Change>) {
    match unit_of(path) {
        // A scope is made by whoever started the job and goes with it: nothing persists it.
        Some(unit) if unit.ends_with(".scope") => (
            format!(
                "systemctl set-property --runtime {unit} {} (a scope lives only as long as its job and cannot be persisted: set the limit on its slice or in the job's launcher)",
                systemd_property(key, value)
            ),
            None,
        ),
        Some(unit) => (
            format!(
                "systemctl set-property {unit} {}",
                systemd_property(key, value)
            ),
            Some(Change::Cgroup {
                slice: unit.into(),
                key: key.into(),
                value: value.into(),
            }),
        ),
        None => {
            let (file, value) = cgroupfs_file(layout, key, value);
            (
                format!(
                    "echo '{value}' > {mount}{path}/{file} (not persistent; container runtimes set it at start: docker --memory/--cpus/--pids-limit, Kubernetes resource limits)"
                ),
                None,
            )
        }
    }
}

fn limit_finding(
    ctx: &Context,
    layout: &Layout,
    target: &Target,
    key: &str,
    setting: &Setting,
) -> Finding {
    let id = format!("{key}{}", target.suffix);
    let expected = setting.rule.describe();
    let controller = controller_of(key);
    let Some(mount) = layout.mount_of(controller) else {
        return Finding::skip(
            id,
            Area::Cgroup,
            expected,
            format!(
                "the {controller} controller is not mounted ({} layout)",
                layout.name()
            ),
        );
    };
    let Some(path) = target.path(layout, controller) else {
        return Finding::skip(
            id,
            Area::Cgroup,
            expected,
            format!("{} lists no {controller} hierarchy", target.label),
        );
    };
    let effective = match read_limit(ctx, layout, mount, &path, key) {
        Ok(e) => e,
        Err(e @ LimitError::NotInV1 { .. }) => {
            return Finding::skip(id, Area::Cgroup, expected, e.to_string());
        }
        Err(e @ LimitError::NoCgroup { .. }) if target.optional => {
            return Finding::skip(
                id,
                Area::Cgroup,
                expected,
                format!("{e}: {} is not active", target.label),
            );
        }
        Err(e) => return Finding::error(id, Area::Cgroup, expected, e.to_string()),
    };
    let judged = effective.amount.to_string();
    let (status, problem) = setting.status_for(&judged);
    let actual = match &effective.set_by {
        Some(by) if *by == path => format!("{} (set on {path})", show(key, effective.amount)),
        Some(by) => format!(
            "{} (set on ancestor {by} of {path})",
            show(key, effective.amount)
        ),
        None if path == "/" => "max (root cgroup: no limit)".into(),
        None => format!("max (no limit between {path} and the root)"),
    };
    let mut finding = Finding {
        id,
        area: Area::Cgroup,
        status,
        expected,
        actual: format!("{actual}, {}", target.label),
        message: problem.unwrap_or_else(|| super::why(ctx, Area::Cgroup, key)),
        fix: String::new(),
        change: None,
    };
    if matches!(status, Status::Fail | Status::Warn)
        && let Some(target_value) = setting.rule.target(&judged)
        && let Ok(amount) = Amount::parse(&target_value)
    {
        let value = match (key, amount) {
            ("cpu.max", Amount::Unlimited) => format!("max {}", effective.period_us),
            ("cpu.max", Amount::Finite(m)) => {
                format!(
                    "{} {}",
                    m * i128::from(effective.period_us) / 1000,
                    effective.period_us
                )
            }
            (_, Amount::Unlimited) => "max".into(),
            (_, Amount::Finite(n)) => n.to_string(),
        };
        let at = effective.set_by.clone().unwrap_or(path.clone());
        let (fix, change) = cgroup_fix(layout, mount, &at, key, &value);
        finding.fix = fix;
        finding.change = change;
    }
    finding
}

/// The two halves of a cpuset a GPU's rank needs: its local CPUs and its local memory.
#[derive(Clone, Copy)]
enum CpusetPart {
    Cpus,
    Mems,
}

impl CpusetPart {
    fn of_key(key: &str) -> Self {
        if key == "cpuset.gpus_without_local_memory" {
            CpusetPart::Mems
        } else {
            CpusetPart::Cpus
        }
    }

    /// The cgroup file a fix writes.
    fn file(self) -> &'static str {
        match self {
            CpusetPart::Cpus => "cpuset.cpus",
            CpusetPart::Mems => "cpuset.mems",
        }
    }

    /// The files that hold the effective set: v2's `.effective`, v1's `effective_*` (or the
    /// plain file on kernels without it).
    fn files(self, layout: &Layout) -> &'static [&'static str] {
        match (self, layout) {
            (CpusetPart::Cpus, Layout::V2 { .. }) => &["cpuset.cpus.effective"],
            (CpusetPart::Mems, Layout::V2 { .. }) => &["cpuset.mems.effective"],
            (CpusetPart::Cpus, _) => &["cpuset.effective_cpus", "cpuset.cpus"],
            (CpusetPart::Mems, _) => &["cpuset.effective_mems", "cpuset.mems"],
        }
    }

    fn noun(self) -> &'static str {
        match self {
            CpusetPart::Cpus => "CPUs",
            CpusetPart::Mems => "NUMA memory nodes",
        }
    }

    /// What is local to a GPU; empty when the kernel does not say.
    fn local(self, gpu: &Gpu) -> BTreeSet<u32> {
        match self {
            CpusetPart::Cpus => gpu
                .local_cpus
                .as_ref()
                .map(|c| c.0.clone())
                .unwrap_or_default(),
            CpusetPart::Mems => gpu.numa_node.into_iter().collect(),
        }
    }
}

/// The CPUs or memory nodes a cgroup may use: the nearest file holding the effective set;
/// `None` when no cpuset applies.
fn read_cpuset(
    ctx: &Context,
    layout: &Layout,
    part: CpusetPart,
    mount: &str,
    path: &str,
) -> Result<Option<(BTreeSet<u32>, String)>, String> {
    for cg in hierarchy::ancestors(path) {
        let dir = format!("{mount}{}", if cg == "/" { "" } else { cg.as_str() });
        for file in part.files(layout) {
            let host = format!("{dir}/{file}");
            if let Some(text) = ctx.root.read_optional(&host).map_err(|e| e.to_string())? {
                let set = CpuList::parse(&text).map_err(|e| format!("{host}: {e}"))?.0;
                return Ok(Some((set, cg)));
            }
        }
    }
    Ok(None)
}

fn cpuset_finding(
    ctx: &Context,
    layout: &Layout,
    target: &Target,
    key: &str,
    setting: &Setting,
) -> Finding {
    let part = CpusetPart::of_key(key);
    let noun = part.noun();
    let id = format!("{key}{}", target.suffix);
    let expected = setting.rule.describe();
    let gpus = match ctx.inventory() {
        Ok(inventory) => &inventory.gpus,
        Err(e) => return Finding::error(id, Area::Cgroup, expected, e.to_string()),
    };
    if gpus.is_empty() {
        return Finding::skip(
            id,
            Area::Cgroup,
            expected,
            "no NVIDIA GPU under /sys/bus/pci/devices",
        );
    }
    let (Some(mount), Some(path)) = (layout.mount_of("cpuset"), target.path(layout, "cpuset"))
    else {
        let mut f = Finding::skip(
            id,
            Area::Cgroup,
            expected,
            format!("no cpuset controller applies, so all {noun} are allowed"),
        );
        f.status = Status::Pass;
        f.actual = "0 (no cpuset)".into();
        return f;
    };
    if !ctx.root.exists(&format!(
        "{mount}{}",
        if path == "/" { "" } else { path.as_str() }
    )) {
        let e = format!("no such cgroup: {path}");
        return if target.optional {
            Finding::skip(
                id,
                Area::Cgroup,
                expected,
                format!("{e}: {} is not active", target.label),
            )
        } else {
            Finding::error(id, Area::Cgroup, expected, e)
        };
    }
    let (allowed, from) = match read_cpuset(ctx, layout, part, mount, &path) {
        Ok(Some(found)) => found,
        Ok(None) => {
            return Finding::skip(
                id,
                Area::Cgroup,
                expected,
                format!("no cpuset file between {path} and the root"),
            );
        }
        Err(e) => return Finding::error(id, Area::Cgroup, expected, e),
    };
    let without: Vec<(&Gpu, BTreeSet<u32>)> = gpus
        .iter()
        .map(|g| (g, part.local(g)))
        .filter(|(_, local)| !local.is_empty() && local.is_disjoint(&allowed))
        .collect();
    let judged = without.len().to_string();
    let (status, problem) = setting.status_for(&judged);
    let detail = if without.is_empty() {
        format!(
            "every GPU has local {noun} in cpuset {}",
            cpu_list(&allowed)
        )
    } else {
        let names: Vec<String> = without
            .iter()
            .map(|(g, local)| format!("{} (local {noun} {})", g.pci_address, cpu_list(local)))
            .collect();
        format!(
            "cpuset {} excludes the local {noun} of {}",
            cpu_list(&allowed),
            names.join(", ")
        )
    };
    let mut finding = Finding {
        id,
        area: Area::Cgroup,
        status,
        expected,
        actual: format!("{judged}: {detail} (cpuset of {from}), {}", target.label),
        message: problem.unwrap_or_else(|| super::why(ctx, Area::Cgroup, key)),
        fix: String::new(),
        change: None,
    };
    if matches!(status, Status::Fail | Status::Warn) {
        let mut wanted = allowed.clone();
        for (_, local) in &without {
            wanted.extend(local.iter().copied());
        }
        let (fix, change) = cgroup_fix(layout, mount, &from, part.file(), &cpu_list(&wanted));
        finding.fix = fix;
        finding.change = change;
    }
    finding
}

/// A set in the kernel's list form: {0,1,2,3,8} → `0-3,8`.
fn cpu_list(set: &BTreeSet<u32>) -> String {
    CpuList(set.clone()).to_string()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn units_and_properties() {
        assert_eq!(
            unit_of("/system.slice/slurmd.service"),
            Some("slurmd.service")
        );
        assert_eq!(unit_of("/training.slice"), Some("training.slice"));
        assert_eq!(unit_of("/kubepods/burstable/pod1"), None);
        assert_eq!(systemd_property("pids.max", "8192"), "TasksMax=8192");
        assert_eq!(
            systemd_property("memory.high", "max"),
            "MemoryHigh=infinity"
        );
        assert_eq!(
            systemd_property("cpu.max", "400000 100000"),
            "CPUQuota=400%"
        );
        assert_eq!(systemd_property("cpu.max", "max 100000"), "CPUQuota=");
        assert_eq!(systemd_property("cpuset.cpus", "0-11"), "AllowedCPUs=0-11");
        assert_eq!(
            systemd_property("cpuset.mems", "0-1"),
            "AllowedMemoryNodes=0-1"
        );
    }
}
