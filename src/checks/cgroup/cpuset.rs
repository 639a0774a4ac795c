//! The cpuset check: whether the CPUs and memory nodes a cgroup allows are local to the GPUs.

use super::*;
use crate::host::HostError;
use crate::host::cpulist::CpuListError;

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

/// Why a cgroup's cpuset is not known: its file is unreadable, or not a CPU list.
#[derive(Debug, thiserror::Error)]
enum CpusetError {
    #[error(transparent)]
    Unreadable(#[from] HostError),
    #[error("{file}: {source}")]
    Malformed {
        file: String,
        #[source]
        source: CpuListError,
    },
}

/// The CPUs or memory nodes a cgroup may use: the nearest file holding the effective set;
/// `None` when no cpuset applies.
fn read_cpuset(
    ctx: &Context,
    layout: &Layout,
    part: CpusetPart,
    mount: &str,
    path: &str,
) -> Result<Option<(BTreeSet<u32>, String)>, CpusetError> {
    for cg in hierarchy::ancestors(path) {
        let dir = format!("{mount}{}", if cg == "/" { "" } else { cg.as_str() });
        for file in part.files(layout) {
            let host = format!("{dir}/{file}");
            if let Some(text) = ctx.root.read_optional(&host)? {
                let parsed = match part {
                    CpusetPart::Cpus => CpuList::parse(&text),
                    CpusetPart::Mems => CpuList::parse_nodes(&text),
                };
                let set = parsed
                    .map_err(|source| CpusetError::Malformed { file: host, source })?
                    .0;
                return Ok(Some((set, cg)));
            }
        }
    }
    Ok(None)
}

impl Scope<'_> {
    /// Whether the target's cpuset keeps every GPU's local CPUs (or memory node) `key` names.
    pub(super) fn cpuset_finding(&self, key: &str, setting: &Setting) -> Finding {
        let part = CpusetPart::of_key(key);
        let noun = part.noun();
        let check = self.target.check(self.ctx, key, setting);
        let gpus = match self.ctx.inventory() {
            Ok(inventory) => &inventory.gpus,
            Err(e) => return check.error(e.to_string()),
        };
        if gpus.is_empty() {
            return check.skip("no NVIDIA GPU under /sys/bus/pci/devices");
        }
        let (Some(mount), Some(path)) = (
            self.layout.mount_of("cpuset"),
            self.target.path(self.layout, "cpuset"),
        ) else {
            return check
                .clone()
                .why(format!(
                    "no cpuset controller applies, so all {noun} are allowed"
                ))
                .pass("0 (no cpuset)");
        };
        if !self.ctx.root.exists(&format!(
            "{mount}{}",
            if path == "/" { "" } else { path.as_str() }
        )) {
            return self
                .target
                .absent(&check, format!("no such cgroup: {path}"));
        }
        let (allowed, from) = match read_cpuset(self.ctx, self.layout, part, mount, &path) {
            Ok(Some(found)) => found,
            Ok(None) => return check.skip(format!("no cpuset file between {path} and the root")),
            Err(e) => return check.error(e.to_string()),
        };
        let without: Vec<(&Gpu, BTreeSet<u32>)> = gpus
            .iter()
            .map(|g| (g, part.local(g)))
            .filter(|(_, local)| !local.is_empty() && local.is_disjoint(&allowed))
            .collect();
        let judged = without.len().to_string();
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
        let actual = format!(
            "{judged}: {detail} (cpuset of {from}), {}",
            self.target.label
        );
        crate::checks::by_rule(&check, setting, &judged, actual, || {
            let mut wanted = allowed.clone();
            for (_, local) in &without {
                wanted.extend(local.iter().copied());
            }
            Some(cgroup_fix(
                self.layout,
                mount,
                &from,
                part.file(),
                &cpu_list(&wanted),
            ))
        })
    }
}

/// A set in the kernel's list form: {0,1,2,3,8} → `0-3,8`.
fn cpu_list(set: &BTreeSet<u32>) -> String {
    CpuList(set.clone()).to_string()
}
