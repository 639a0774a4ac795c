//! cgroup limits of the cgroup a job runs in: which hierarchy the node uses (v2, v1, hybrid),
//! the effective memory, CPU, pids and cpuset limits (the tightest between the cgroup and
//! the root), and whether the cpuset keeps the CPUs and memory local to the GPUs. The cgroup is
//! `--cgroup PATH`, else this process's; a `[job] slice` in the profile is judged as well.

mod cpuset;
mod effective;
mod fix;
pub(crate) mod hierarchy;
mod image;
pub(crate) mod limits;
mod target;
pub(crate) mod units;

use std::collections::BTreeSet;

use crate::finding::{Area, Change, Check, Finding, Remedy};
use crate::host::cpulist::CpuList;
use crate::host::mounts;
use crate::inventory::gpu::Gpu;
use crate::profile::amount::Amount;
use crate::profile::setting::{KeySpec, Setting, ValueKind::Number, ValueKind::Text};

use super::Context;
use super::judged::{Judged, judge_of, specs};
use effective::*;
use fix::*;
use hierarchy::{Layout, Membership};
use target::*;

/// Keys a profile may set in `[cgroup]`.
const JUDGED: &[Judged<Judge>] = &[
    Judged {
        judge: Judge::Hierarchy,
        spec: KeySpec {
            key: "cgroup.hierarchy",
            kind: Text,
            why: "cgroup v1 and hybrid layouts are deprecated by systemd and Kubernetes; limits and device isolation of container runtimes differ between them.",
        },
    },
    Judged {
        judge: Judge::Limit,
        spec: KeySpec {
            key: "memory.max",
            kind: Number,
            why: "A hard memory limit OOM-kills a rank, and with it the whole synchronous job; /dev/shm pages NCCL uses are charged to it too.",
        },
    },
    Judged {
        judge: Judge::Limit,
        spec: KeySpec {
            key: "memory.high",
            kind: Number,
            why: "Above memory.high the kernel throttles the cgroup and reclaims hard (cgroup-v2 docs), stalling data loaders and every rank waiting on them.",
        },
    },
    Judged {
        judge: Judge::Limit,
        spec: KeySpec {
            key: "cpu.max",
            kind: Number,
            why: "A CPU quota (in thousandths of a CPU) throttles data-loader workers and NCCL's proxy threads for the rest of each period, adding latency to every collective.",
        },
    },
    Judged {
        judge: Judge::Limit,
        spec: KeySpec {
            key: "pids.max",
            kind: Number,
            why: "Every rank, data-loader worker and their threads (OpenMP, CUDA, NCCL) count as tasks; hitting pids.max fails fork/clone at start-up.",
        },
    },
    Judged {
        judge: Judge::Cpuset,
        spec: KeySpec {
            key: "cpuset.gpus_without_local_cpus",
            kind: Number,
            why: "A cpuset that excludes every CPU local to a GPU forces its rank's host work and DMA staging across the socket interconnect.",
        },
    },
    Judged {
        judge: Judge::Cpuset,
        spec: KeySpec {
            key: "cpuset.gpus_without_local_memory",
            kind: Number,
            why: "A cpuset whose memory nodes exclude a GPU's NUMA node puts that rank's pinned host buffers on the far socket, halving host-device copy bandwidth.",
        },
    },
];

pub(crate) const KEYS: &[KeySpec] = &specs::<_, { JUDGED.len() }>(JUDGED);

/// What reads a cgroup key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    /// Judged once for the node, before the targets.
    Hierarchy,
    /// A controller limit of each target.
    Limit,
    /// The GPU/CPU placement of each target.
    Cpuset,
}

/// Judges the cgroup of this process (or `--cgroup`) and the profile's slice.
pub(crate) fn audit(ctx: &Context) -> Vec<Finding> {
    let keys: Vec<(&String, &Setting)> = ctx.profile.area(Area::Cgroup).collect();
    if keys.is_empty() {
        return Vec::new();
    }
    if ctx.options.image() {
        return image::audit(ctx, &keys);
    }
    let checks = || {
        keys.iter()
            .map(|(k, s)| super::setting_check(ctx, Area::Cgroup, k, s))
    };
    let all_skip =
        |reason: String| -> Vec<Finding> { checks().map(|c| c.skip(reason.clone())).collect() };
    let all_error =
        |problem: String| -> Vec<Finding> { checks().map(|c| c.error(problem.clone())).collect() };
    let layout = match mounts::read(ctx.root) {
        Ok(Some(Ok(list))) => match hierarchy::detect(&list) {
            Some(layout) => layout,
            None => return all_skip("no cgroup file system is mounted (/proc/mounts)".into()),
        },
        Ok(Some(Err(e))) => return all_error(e.to_string()),
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
        targets.push(Target {
            suffix: format!("@{slice}"),
            label: format!("slice {slice}"),
            kind: TargetKind::Path(hierarchy::slice_path(slice)),
            optional: true,
        });
    }

    let mut findings = Vec::new();
    if let Some(setting) = ctx.profile.get(Area::Cgroup, "cgroup.hierarchy") {
        findings.push(hierarchy_finding(ctx, &layout, setting));
    }
    for target in &targets {
        let scope = Scope {
            ctx,
            layout: &layout,
            target,
        };
        for (key, setting) in &keys {
            let finding = match judge_of(JUDGED, key) {
                Some(Judge::Limit) => scope.limit_finding(key, setting),
                Some(Judge::Cpuset) => scope.cpuset_finding(key, setting),
                Some(Judge::Hierarchy) | None => continue,
            };
            findings.push(finding);
        }
    }
    findings
}

fn hierarchy_finding(ctx: &Context, layout: &Layout, setting: &Setting) -> Finding {
    let check = super::setting_check(ctx, Area::Cgroup, "cgroup.hierarchy", setting);
    let actual = match layout {
        Layout::V2 { mount } => format!("v2 at {mount}"),
        Layout::V1 { controllers } => format!(
            "v1 ({})",
            controllers.keys().cloned().collect::<Vec<_>>().join(", ")
        ),
        Layout::Hybrid { unified, .. } => format!("hybrid (v1 controllers, unified at {unified})"),
    };
    super::by_rule(
        &check,
        setting,
        layout.name(),
        actual,
        "boot with systemd.unified_cgroup_hierarchy=1 (and without systemd.legacy_systemd_cgroup_controller) on the kernel command line",
    )
}

impl Scope<'_> {
    /// A memory, CPU or pids limit of the target: the tightest between it and the root.
    fn limit_finding(&self, key: &str, setting: &Setting) -> Finding {
        let check = self.target.check(self.ctx, key, setting);
        let controller = controller_of(key);
        let Some(mount) = self.layout.mount_of(controller) else {
            return check.skip(format!(
                "the {controller} controller is not mounted ({} layout)",
                self.layout.name()
            ));
        };
        let Some(path) = self.target.path(self.layout, controller) else {
            return check.skip(format!(
                "{} lists no {controller} hierarchy",
                self.target.label
            ));
        };
        let effective = match read_limit(self.ctx, self.layout, mount, &path, key) {
            Ok(e) => e,
            Err(e @ LimitError::NotInV1 { .. }) => return check.skip(e.to_string()),
            Err(e @ LimitError::NoCgroup { .. }) => return self.target.absent(&check, e),
            Err(e) => return check.error(e.to_string()),
        };
        let judged = effective.amount.to_string();
        let actual = match &effective.set_by {
            Some(by) if *by == path => format!("{} (set on {path})", show(key, effective.amount)),
            Some(by) => format!(
                "{} (set on ancestor {by} of {path})",
                show(key, effective.amount)
            ),
            None if path == "/" => "max (root cgroup: no limit)".into(),
            None => format!("max (no limit between {path} and the root)"),
        };
        super::by_rule(
            &check,
            setting,
            &judged,
            format!("{actual}, {}", self.target.label),
            || {
                let Ok(amount) = Amount::parse(&setting.rule.target(&judged)?) else {
                    return None;
                };
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
                let at = effective.set_by.as_deref().unwrap_or(&path);
                Some(cgroup_fix(self.layout, mount, at, key, &value))
            },
        )
    }
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
