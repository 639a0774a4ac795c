//! The profile `gputune audit` uses when none is named, chosen from the node:
//!
//! 1. an RDMA device in `/sys/class/infiniband` → `ddp-infiniband`;
//! 2. otherwise the fastest physical interface that is up: 100 Gb/s or more → `ddp-100gbe`,
//!    25 Gb/s or more → `ddp-25gbe`, 10 Gb/s or more → `ddp-10gbe`;
//! 3. an up physical interface whose driver reports no speed (virtio and most cloud NICs)
//!    → `ddp-10gbe`, since cloud GPU nodes train across such links;
//! 4. anything else (no physical link up, or only links under 10 Gb/s) → `single-node`.

use crate::host::net::{self, Link};
use crate::host::{HostError, Root};

/// The chosen profile name and the reason, shown to the user.
pub fn choose(root: &Root) -> Result<(&'static str, String), HostError> {
    let rdma = net::rdma_devices(root)?;
    let links = net::links(root)?;
    Ok(choose_from(&rdma, &links))
}

/// The rule above over facts already read.
pub fn choose_from(rdma: &[String], links: &[Link]) -> (&'static str, String) {
    if let Some(first) = rdma.first() {
        return ("ddp-infiniband", format!("RDMA device {first} present"));
    }
    let up: Vec<&Link> = links.iter().filter(|l| l.physical && l.up).collect();
    if let Some(fastest) = up
        .iter()
        .filter(|l| l.speed_mbps.is_some())
        .max_by_key(|l| l.speed_mbps)
    {
        let speed = fastest.speed_mbps.unwrap_or(0);
        let reason = format!("fastest link {} at {} Mb/s", fastest.name, speed);
        let name = match speed {
            s if s >= 100_000 => "ddp-100gbe",
            s if s >= 25_000 => "ddp-25gbe",
            s if s >= 10_000 => "ddp-10gbe",
            _ if up.iter().any(|l| l.speed_mbps.is_none()) => {
                return unreported(&up);
            }
            _ => "single-node",
        };
        return (name, reason);
    }
    if !up.is_empty() {
        return unreported(&up);
    }
    ("single-node", "no physical network link is up".into())
}

fn unreported(up: &[&Link]) -> (&'static str, String) {
    let name = up
        .iter()
        .find(|l| l.speed_mbps.is_none())
        .map_or("?", |l| l.name.as_str());
    (
        "ddp-10gbe",
        format!(
            "link {name} is up but reports no speed (virtual NIC); assuming a 10 Gb/s or faster fabric"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, physical: bool, up: bool, speed: Option<u64>) -> Link {
        Link {
            name: name.into(),
            physical,
            up,
            speed_mbps: speed,
        }
    }

    /// A physical link that is up.
    fn up(name: &str, speed: Option<u64>) -> Link {
        link(name, true, true, speed)
    }

    /// A physical link that is down.
    fn down(name: &str, speed: Option<u64>) -> Link {
        link(name, true, false, speed)
    }

    /// A virtual interface (lo, docker0) that is up.
    fn virtual_up(name: &str, speed: Option<u64>) -> Link {
        link(name, false, true, speed)
    }

    #[test]
    fn rule() {
        let cases: &[(&[&str], Vec<Link>, &str)] = &[
            (&["mlx5_0"], vec![], "ddp-infiniband"),
            (&[], vec![up("eth0", Some(100_000))], "ddp-100gbe"),
            (
                &[],
                vec![up("eth0", Some(10_000)), up("eth1", Some(25_000))],
                "ddp-25gbe",
            ),
            (&[], vec![up("eth0", Some(10_000))], "ddp-10gbe"),
            (
                &[],
                vec![down("eth0", Some(100_000)), up("eth1", Some(1_000))],
                "single-node",
            ),
            (&[], vec![up("eth0", None)], "ddp-10gbe"),
            (
                &[],
                vec![virtual_up("lo", None), virtual_up("docker0", Some(100_000))],
                "single-node",
            ),
            (&[], vec![], "single-node"),
        ];
        for (rdma, links, want) in cases {
            let rdma: Vec<String> = rdma.iter().map(|s| s.to_string()).collect();
            assert_eq!(choose_from(&rdma, links).0, *want, "{links:?}");
        }
    }
}
