//! Sysctls this node will not let gputune change: in a container or a network namespace
//! writing them fails with "Permission denied" whoever asks, so audit reports them as
//! `skip` with the reason and apply leaves them out of its plan instead of failing on them.
//!
//! Three things make a sysctl read-only here, each read through the root:
//! - `/proc/sys` (or the part holding the key) is mounted read-only (Docker, Kubernetes and
//!   systemd-nspawn containers; a read-only bind mount), from the mount table;
//! - the key is global to the init network namespace (`net.core.rmem_max` and the other
//!   buffer limits, `netdev_max_backlog`) and this process runs in another one;
//! - the file has no write permission at all (the kernel shows the init-namespace-only
//!   `net.core` limits as mode 0444 in other network namespaces).

use std::os::fd::AsFd;

use crate::host::{Root, confine, mounts, sysctl};

/// Keys the kernel registers for the init network namespace only (net/core/
/// sysctl_net_core.c `net_core_table`; `somaxconn` and the `net.ipv4` keys gputune judges
/// are per namespace).
pub(crate) const INIT_NETNS_ONLY: &[&str] = &[
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
    "net.core.netdev_max_backlog",
];

/// Why the sysctl `name` cannot be written here; `None` when nothing says so.
pub(crate) fn read_only(root: &Root, name: &str) -> Option<String> {
    let path = sysctl::host_path(name);
    if let Some(mount) = read_only_mount(root, &path) {
        return Some(format!(
            "{mount} is mounted read-only here (a container, or a read-only bind mount): the kernel refuses every write to {path}; set {name} on the host or in the container's runtime (`docker run --sysctl`, a pod's securityContext.sysctls)"
        ));
    }
    let global = INIT_NETNS_ONLY.contains(&name);
    if global && other_netns(root) {
        return Some(format!(
            "{name} is global to the init network namespace and this process runs in another one: set it on the host"
        ));
    }
    if !writable_mode(root, &path)? {
        let extra = if global {
            format!(
                "; {name} belongs to the init network namespace and other namespaces only see it: set it on the host"
            )
        } else {
            String::new()
        };
        return Some(format!("{path} has no write permission{extra}"));
    }
    None
}

/// The mount point covering `path` when that mount is read-only.
fn read_only_mount(root: &Root, path: &str) -> Option<String> {
    let mounts = mounts::read(root).ok()??.ok()?;
    covering(&mounts, path)
        .filter(|m| m.has_option("ro"))
        .map(|m| m.target.clone())
}

/// The mount `path` lives on: the longest mount point above it, the last mounted on a tie
/// (it hides the earlier ones).
pub(crate) fn covering<'a>(mounts: &'a [mounts::Mount], path: &str) -> Option<&'a mounts::Mount> {
    let under = |target: &str| {
        target == "/"
            || path == target
            || path
                .strip_prefix(target)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    mounts
        .iter()
        .filter(|m| under(&m.target))
        .max_by_key(|m| m.target.len())
        .and_then(|longest| mounts.iter().rev().find(|m| m.target == longest.target))
}

/// True when this process's network namespace is not PID 1's (as read under the root).
/// Unknown (a container whose PID 1 shares its namespace, or `/proc/1` not readable) is
/// false: the file's mode then decides.
fn other_netns(root: &Root) -> bool {
    let link = |p: &str| root.read_link(p).ok().flatten();
    match (link("/proc/self/ns/net"), link("/proc/1/ns/net")) {
        (Some(own), Some(init)) => own != init,
        _ => false,
    }
}

/// Whether anyone may write the file; `None` when it does not exist (the caller reports the
/// key as absent).
fn writable_mode(root: &Root, path: &str) -> Option<bool> {
    let fd = root.open(path, libc::O_PATH).ok()?;
    let st = confine::fstat(fd.as_fd()).ok()?;
    Some(st.st_mode & 0o222 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_mount_covering_a_path() {
        let table = "proc /proc proc rw 0 0\nproc /proc/sys proc ro,nosuid 0 0\nproc /proc/sysrq-trigger proc ro 0 0\n";
        let mounts = mounts::parse(table).unwrap();
        let at = |p: &str| covering(&mounts, p).map(|m| m.target.as_str());
        assert_eq!(at("/proc/sys/net/core/rmem_max"), Some("/proc/sys"));
        assert_eq!(at("/proc/sysrq-trigger"), Some("/proc/sysrq-trigger"));
        assert_eq!(at("/proc/meminfo"), Some("/proc"));
        assert_eq!(at("/etc/x"), None);
        // Remounted read-write on top: the last mount wins.
        let mounts = mounts::parse(&format!("{table}proc /proc/sys proc rw 0 0\n")).unwrap();
        assert!(
            !covering(&mounts, "/proc/sys/vm/swappiness")
                .unwrap()
                .has_option("ro")
        );
    }

    #[test]
    fn reasons() {
        let tree = Tree::with(&[
            ("/proc/sys/net/core/rmem_max", "212992\n"),
            ("/proc/sys/net/core/somaxconn", "4096\n"),
            ("/proc/sys/vm/swappiness", "60\n"),
            ("/proc/mounts", "proc /proc proc rw 0 0\n"),
        ]);
        let root = tree.root();
        assert_eq!(read_only(&root, "vm.swappiness"), None);
        assert_eq!(read_only(&root, "net.core.rmem_max"), None);
        assert_eq!(read_only(&root, "net.ipv4.tcp_sack"), None, "absent");

        let knob = tree.path("/proc/sys/net/core/rmem_max");
        std::fs::set_permissions(&knob, std::fs::Permissions::from_mode(0o444)).unwrap();
        let why = read_only(&root, "net.core.rmem_max").unwrap();
        assert!(why.contains("no write permission"), "{why}");
        assert!(why.contains("init network namespace"), "{why}");

        tree.file(
            "/proc/mounts",
            "proc /proc proc rw 0 0\nproc /proc/sys proc ro,nosuid,nodev 0 0\n",
        );
        let why = read_only(&root, "vm.swappiness").unwrap();
        assert!(why.starts_with("/proc/sys is mounted read-only"), "{why}");
    }

    #[test]
    fn a_global_key_is_read_only_from_another_network_namespace() {
        let node = |own: &str| {
            let tree = Tree::with(&[
                ("/proc/sys/net/core/rmem_max", "212992\n"),
                ("/proc/sys/net/core/somaxconn", "4096\n"),
                ("/proc/mounts", "proc /proc proc rw 0 0\n"),
            ]);
            tree.link("/proc/1/ns/net", "net:[4026531840]");
            tree.link("/proc/self/ns/net", own);
            tree
        };
        let host = node("net:[4026531840]");
        assert_eq!(read_only(&host.root(), "net.core.rmem_max"), None);

        let container = node("net:[4026532281]");
        let why = read_only(&container.root(), "net.core.rmem_max").unwrap();
        assert!(
            why.contains("global to the init network namespace"),
            "{why}"
        );
        // somaxconn is per namespace: the container sets its own.
        assert_eq!(read_only(&container.root(), "net.core.somaxconn"), None);
    }
}
