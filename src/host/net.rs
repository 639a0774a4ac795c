//! The few facts about network links that choosing a default profile needs. The full NIC
//! inventory lives with the `nic` checks.

use super::{HostError, Root};

/// One interface from `/sys/class/net`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub name: String,
    /// Backed by a device (PCI, virtio, ...) rather than a software interface.
    pub physical: bool,
    pub up: bool,
    /// Mbit/s; `None` when the driver does not report it (virtio) or the link is down.
    pub speed_mbps: Option<u64>,
}

/// Every interface in `/sys/class/net`, sorted by name.
pub(crate) fn links(root: &Root) -> Result<Vec<Link>, HostError> {
    let mut links = Vec::new();
    for name in root.list_dir("/sys/class/net")?.unwrap_or_default() {
        let dir = format!("/sys/class/net/{name}");
        let operstate = root.read_optional(&format!("{dir}/operstate"))?;
        // Reading `speed` of a down link fails with EINVAL: treat any failure as unknown.
        let speed = root.read_optional(&format!("{dir}/speed")).ok().flatten();
        links.push(Link {
            physical: root.exists(&format!("{dir}/device")),
            up: operstate.as_deref().map(str::trim) == Some("up"),
            speed_mbps: speed.and_then(|s| parse_speed(&s)),
            name,
        });
    }
    Ok(links)
}

/// `"10000\n"` → 10000; the kernel's `-1` and empty files mean unknown.
pub(crate) fn parse_speed(raw: &str) -> Option<u64> {
    raw.trim()
        .parse::<i64>()
        .ok()
        .filter(|s| *s > 0)
        .map(|s| s as u64)
}

/// RDMA devices (InfiniBand HCAs, RoCE NICs) from `/sys/class/infiniband`.
pub(crate) fn rdma_devices(root: &Root) -> Result<Vec<String>, HostError> {
    Ok(root.list_dir("/sys/class/infiniband")?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds() {
        assert_eq!(parse_speed("10000\n"), Some(10000));
        assert_eq!(parse_speed("-1\n"), None);
        assert_eq!(parse_speed(""), None);
        assert_eq!(parse_speed("fast"), None);
    }
}
