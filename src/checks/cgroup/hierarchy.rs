//! Which cgroup hierarchy a node runs (v2, v1 or hybrid), where each controller's files are,
//! and which cgroup a process is in. Pure functions over `/proc/mounts` and
//! `/proc/<pid>/cgroup` text.

use std::collections::BTreeMap;

use crate::host::mounts::Mount;

/// Controllers the checks read, and the others a v1 mount may carry.
const CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "pids",
    "blkio",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "perf_event",
    "hugetlb",
    "rdma",
    "misc",
];

/// How the node mounts cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Unified hierarchy only, mounted at the path.
    V2 { mount: String },
    /// Legacy per-controller hierarchies (controller → mount point).
    V1 {
        controllers: BTreeMap<String, String>,
    },
    /// Legacy controllers plus an (empty of controllers) unified hierarchy for systemd.
    Hybrid {
        controllers: BTreeMap<String, String>,
        unified: String,
    },
}

impl Layout {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Layout::V2 { .. } => "v2",
            Layout::V1 { .. } => "v1",
            Layout::Hybrid { .. } => "hybrid",
        }
    }

    /// Where a controller's files are: the unified mount on v2, the controller's own mount on
    /// v1 and hybrid (`None` when that controller is not mounted).
    pub(crate) fn mount_of(&self, controller: &str) -> Option<&str> {
        match self {
            Layout::V2 { mount } => Some(mount),
            Layout::V1 { controllers } | Layout::Hybrid { controllers, .. } => {
                controllers.get(controller).map(String::as_str)
            }
        }
    }

    /// Every mount point, longest first, for turning a file system path into a cgroup path.
    pub(crate) fn mounts(&self) -> Vec<&str> {
        let mut all: Vec<&str> = match self {
            Layout::V2 { mount } => vec![mount],
            Layout::V1 { controllers } => controllers.values().map(String::as_str).collect(),
            Layout::Hybrid {
                controllers,
                unified,
            } => controllers
                .values()
                .map(String::as_str)
                .chain([unified.as_str()])
                .collect(),
        };
        all.sort_by_key(|m| std::cmp::Reverse(m.len()));
        all
    }
}

/// Detects the layout from the mounts; `None` when no cgroup file system is mounted.
pub(crate) fn detect(mounts: &[Mount]) -> Option<Layout> {
    let mut controllers = BTreeMap::new();
    let mut unified = None;
    for m in mounts {
        match m.fstype.as_str() {
            "cgroup2" => {
                unified.get_or_insert_with(|| m.target.clone());
            }
            "cgroup" => {
                for c in CONTROLLERS.iter().filter(|c| m.has_option(c)) {
                    controllers
                        .entry(c.to_string())
                        .or_insert_with(|| m.target.clone());
                }
            }
            _ => {}
        }
    }
    match (controllers.is_empty(), unified) {
        (true, Some(mount)) => Some(Layout::V2 { mount }),
        (true, None) => None,
        (false, None) => Some(Layout::V1 { controllers }),
        (false, Some(unified)) => Some(Layout::Hybrid {
            controllers,
            unified,
        }),
    }
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Membership {
    pub id: u32,
    /// Empty for the unified hierarchy (`0::/path`).
    pub controllers: Vec<String>,
    pub path: String,
}

/// A line of `/proc/<pid>/cgroup` that is not what the kernel writes there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadMembership {
    #[error("`{0}` is not `hierarchy-id:controllers:path`")]
    NotThreeFields(String),
    #[error("`{line}`: hierarchy id `{id}` is not a number")]
    NotAnId { line: String, id: String },
}

/// Parses `/proc/<pid>/cgroup`.
pub(crate) fn parse_membership(text: &str) -> Result<Vec<Membership>, BadMembership> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(BadMembership::NotThreeFields(line.into()));
            };
            let id = id.parse().map_err(|_| BadMembership::NotAnId {
                line: line.into(),
                id: id.into(),
            })?;
            Ok(Membership {
                id,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// The cgroup path of `controller` for a process: its v1 line on v1/hybrid, the `0::` line on
/// v2.
pub(crate) fn path_of<'a>(
    layout: &Layout,
    lines: &'a [Membership],
    controller: &str,
) -> Option<&'a str> {
    let line = match layout {
        Layout::V2 { .. } => lines.iter().find(|l| l.id == 0 && l.controllers.is_empty()),
        _ => lines
            .iter()
            .find(|l| l.controllers.iter().any(|c| c == controller)),
    };
    line.map(|l| l.path.as_str())
}

/// The slices `slice` runs inside, outermost first, ending with itself (`a-b.slice` →
/// `a.slice`, `a-b.slice`; systemd.slice(5): dashes nest). `slice` is a name the profile
/// has checked (`profile::job`), so it has no empty part.
pub(crate) fn lineage(slice: &str) -> Vec<String> {
    // One suffix only: `a.slice.slice` is the slice `a.slice` plus its suffix.
    let stem = slice.strip_suffix(".slice").unwrap_or(slice);
    let parts: Vec<&str> = stem.split('-').collect();
    (1..=parts.len())
        .map(|n| format!("{}.slice", parts[..n].join("-")))
        .collect()
}

/// The cgroup path systemd gives a slice: `a-b.slice` → `/a.slice/a-b.slice`.
pub(crate) fn slice_path(slice: &str) -> String {
    lineage(slice)
        .iter()
        .map(|unit| format!("/{unit}"))
        .collect()
}

/// A user's `--cgroup`: a cgroup path (`/system.slice/x.service`) or a file system path under
/// one of the mounts (`/sys/fs/cgroup/memory/x`), as a cgroup path.
pub(crate) fn normalize(layout: &Layout, given: &str) -> String {
    let given = given.trim_end_matches('/');
    for mount in layout.mounts() {
        if let Some(rest) = given.strip_prefix(mount)
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return if rest.is_empty() {
                "/".into()
            } else {
                rest.into()
            };
        }
    }
    if given.is_empty() {
        "/".into()
    } else if given.starts_with('/') {
        given.into()
    } else {
        format!("/{given}")
    }
}

/// `/a/b/c` → [`/a/b/c`, `/a/b`, `/a`, `/`]: where an effective limit may be set.
pub(crate) fn ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = path.trim_end_matches('/').to_string();
    while !current.is_empty() {
        out.push(current.clone());
        match current.rfind('/') {
            Some(i) => current.truncate(i),
            None => break,
        }
    }
    out.push("/".into());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::mounts;
    use crate::testing::assert_cases;

    const V2: &str =
        "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n";
    const V1: &str = "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
        cgroup /sys/fs/cgroup/systemd cgroup rw,xattr,name=systemd 0 0\n\
        cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n\
        cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n\
        cgroup /sys/fs/cgroup/pids cgroup rw,pids 0 0\n";

    fn layout(text: &str) -> Option<Layout> {
        detect(&mounts::parse(text).unwrap())
    }

    #[test]
    fn detection() {
        assert_eq!(layout(V2).map(|l| l.name()), Some("v2"));
        assert_eq!(layout(V1).map(|l| l.name()), Some("v1"));
        let hybrid = format!("{V1}cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n");
        let hybrid = layout(&hybrid).unwrap();
        assert_eq!(hybrid.name(), "hybrid");
        assert_eq!(hybrid.mount_of("cpu"), Some("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(hybrid.mount_of("cpuset"), None);
        assert_eq!(layout("proc /proc proc rw 0 0\n"), None);
        assert_eq!(layout(""), None);
    }

    #[test]
    fn membership() {
        let lines = parse_membership("12:pids:/user.slice\n4:cpu,cpuacct:/job\n1:name=systemd:/x\n0::/user.slice/session-1.scope\n").unwrap();
        let v1 = layout(V1).unwrap();
        let v2 = layout(V2).unwrap();
        assert_eq!(path_of(&v1, &lines, "cpu"), Some("/job"));
        assert_eq!(path_of(&v1, &lines, "pids"), Some("/user.slice"));
        assert_eq!(path_of(&v1, &lines, "memory"), None);
        assert_eq!(
            path_of(&v2, &lines, "memory"),
            Some("/user.slice/session-1.scope")
        );
        assert_eq!(
            parse_membership("garbage\n"),
            Err(BadMembership::NotThreeFields("garbage".into()))
        );
        let bad_id = parse_membership("0::/\nx:cpu:/\n").unwrap_err();
        assert_eq!(
            bad_id,
            BadMembership::NotAnId {
                line: "x:cpu:/".into(),
                id: "x".into()
            }
        );
        assert_eq!(
            bad_id.to_string(),
            "`x:cpu:/`: hierarchy id `x` is not a number"
        );
        assert_eq!(parse_membership("").unwrap(), vec![]);
        // A path may itself contain colons.
        assert_eq!(parse_membership("0::/a:b\n").unwrap()[0].path, "/a:b");
    }

    #[test]
    fn slices() {
        let cases = [
            ("training.slice", "/training.slice"),
            ("gpu-jobs.slice", "/gpu.slice/gpu-jobs.slice"),
            ("a-b-c.slice", "/a.slice/a-b.slice/a-b-c.slice"),
            ("a.slice.slice", "/a.slice.slice"),
        ];
        assert_cases(cases, slice_path);
        assert_eq!(lineage("a-b.slice"), ["a.slice", "a-b.slice"]);
    }

    #[test]
    fn paths() {
        let v1 = layout(V1).unwrap();
        assert_eq!(normalize(&v1, "/sys/fs/cgroup/memory/job/"), "/job");
        assert_eq!(normalize(&v1, "/sys/fs/cgroup/memory"), "/");
        assert_eq!(normalize(&v1, "system.slice"), "/system.slice");
        let v2 = layout(V2).unwrap();
        assert_eq!(
            normalize(&v2, "/sys/fs/cgroup/system.slice/x.service"),
            "/system.slice/x.service"
        );
        assert_eq!(ancestors("/a/b"), ["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/"), ["/"]);
    }
}
