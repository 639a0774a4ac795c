//! Kernel parameters under `/proc/sys`, named the way `sysctl(8)` names them.

use super::{HostError, Root};

/// The host path of a sysctl key: `net.core.rmem_max` → `/proc/sys/net/core/rmem_max`.
pub fn host_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

/// The value of a sysctl with runs of white space folded to one space, as `sysctl -n`
/// users write it; `None` when this kernel has no such key.
pub(crate) fn read(root: &Root, key: &str) -> Result<Option<String>, HostError> {
    Ok(root
        .read_optional(&host_path(key))?
        .map(|raw| normalize(&raw)))
}

/// Folds tabs, newlines and repeated spaces: `"4096\t131072\t6291456\n"` → `"4096 131072 6291456"`.
pub(crate) fn normalize(raw: &str) -> String {
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A sysctl made of several numbers whose parts a profile may judge one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vector {
    pub key: &'static str,
    pub parts: &'static [&'static str],
}

/// The multi-part sysctls gputune judges part by part.
pub(crate) const VECTORS: &[Vector] = &[
    Vector {
        key: "net.ipv4.tcp_rmem",
        parts: &["min", "default", "max"],
    },
    Vector {
        key: "net.ipv4.tcp_wmem",
        parts: &["min", "default", "max"],
    },
    Vector {
        key: "net.ipv4.ip_local_port_range",
        parts: &["low", "high"],
    },
];

/// Splits a profile key such as `net.ipv4.tcp_rmem.max` into the sysctl and part index.
pub(crate) fn split_part(profile_key: &str) -> Option<(&'static Vector, usize)> {
    let (base, part) = profile_key.rsplit_once('.')?;
    let vector = VECTORS.iter().find(|v| v.key == base)?;
    let index = vector.parts.iter().position(|p| *p == part)?;
    Some((vector, index))
}

/// What the kernel sets when no configuration file does, for the keys whose default has not
/// depended on the machine or the kernel version for a decade (64-bit Linux). Keys missing
/// here (`tcp_rmem`, raised to 32 MiB in 6.x; `somaxconn`, 128 before 5.4; `file-max` and
/// `numa_balancing`, which depend on the machine) have no known default.
pub(crate) fn kernel_default(name: &str) -> Option<&'static str> {
    Some(match name {
        "net.core.rmem_default"
        | "net.core.wmem_default"
        | "net.core.rmem_max"
        | "net.core.wmem_max" => "212992",
        "net.core.netdev_max_backlog" => "1000",
        // The maxima are the kernel's caps (the boot-time value is min(cap, a share of RAM)),
        // so a profile minimum above them fails on every machine.
        "net.ipv4.tcp_rmem" => "4096 131072 6291456",
        "net.ipv4.tcp_wmem" => "4096 16384 4194304",
        "net.ipv4.tcp_window_scaling" | "net.ipv4.tcp_timestamps" | "net.ipv4.tcp_sack" => "1",
        "net.ipv4.tcp_slow_start_after_idle" => "1",
        "net.ipv4.tcp_fin_timeout" => "60",
        "net.ipv4.tcp_mtu_probing" => "0",
        "net.ipv4.ip_local_port_range" => "32768 60999",
        "vm.swappiness" => "60",
        "vm.zone_reclaim_mode" => "0",
        _ => return None,
    })
}

/// The sysctl a profile key reads: the key itself, or the vector it names a part of
/// (`net.ipv4.tcp_rmem.max` → `net.ipv4.tcp_rmem`).
pub fn sysctl_of(profile_key: &str) -> &str {
    split_part(profile_key).map_or(profile_key, |(v, _)| v.key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn keys_map_to_proc_sys() {
        assert_eq!(
            host_path("net.core.rmem_max"),
            "/proc/sys/net/core/rmem_max"
        );
        assert_eq!(host_path("fs.file-max"), "/proc/sys/fs/file-max");
    }

    #[test]
    fn values_are_normalized() {
        assert_eq!(normalize("4096\t131072\t6291456\n"), "4096 131072 6291456");
        assert_eq!(normalize("10\n"), "10");
        assert_eq!(normalize(""), "");
    }

    #[test]
    fn parts_are_found_by_suffix() {
        let (v, i) = split_part("net.ipv4.tcp_rmem.max").unwrap();
        assert_eq!((v.key, i), ("net.ipv4.tcp_rmem", 2));
        let (v, i) = split_part("net.ipv4.ip_local_port_range.low").unwrap();
        assert_eq!((v.key, i), ("net.ipv4.ip_local_port_range", 0));
        assert!(split_part("net.core.rmem_max").is_none());
        assert!(split_part("net.ipv4.tcp_rmem.middle").is_none());
        assert_eq!(sysctl_of("net.ipv4.tcp_rmem.max"), "net.ipv4.tcp_rmem");
        assert_eq!(sysctl_of("vm.swappiness"), "vm.swappiness");
    }

    #[test]
    fn reading_a_missing_key_is_none() {
        let tree = Tree::new();
        tree.file("/proc/sys/vm/swappiness", "60\n");
        let root = tree.root();
        assert_eq!(read(&root, "vm.swappiness").unwrap().as_deref(), Some("60"));
        assert_eq!(read(&root, "vm.nothing").unwrap(), None);
    }
}
