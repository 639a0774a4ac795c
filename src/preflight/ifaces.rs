//! The interface NCCL's socket transport would pick on this node, worked out the way NCCL
//! does it (`ncclFindInterfaces` in NCCL's `src/misc/socket.cc`, the list matching of
//! `matchIfList` in `src/misc/utils.cc`): so a node where NCCL would bootstrap over
//! `docker0` or `lo` is named before the job starts, not after its timeout.
//!
//! NCCL walks `getifaddrs()` in the kernel's order (IPv4 addresses by interface, then
//! IPv6), keeps only AF_INET/AF_INET6 addresses (one family with `NCCL_SOCKET_FAMILY`),
//! skips the IPv6 loopback, keeps the first address of each interface, and does not look at
//! whether an interface is up. The address list here comes from the same netlink dump
//! glibc's `getifaddrs` reads.

use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use serde::{Deserialize, Serialize};

use crate::host::Root;

/// One address of one interface, in the kernel's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IfAddr {
    pub name: String,
    pub index: u32,
    pub addr: IpAddr,
}

/// NCCL's choice and the rule that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pick {
    /// The interface and address NCCL bootstraps over; `None` when nothing matches (NCCL
    /// then fails with "no socket interface found").
    pub chosen: Option<IfAddr>,
    /// In words: `NCCL_SOCKET_IFNAME=^docker,lo selects eth0` or the default rule.
    pub rule: String,
}

/// `NCCL_SOCKET_FAMILY`: only `AF_INET` and `AF_INET6` force a family.
fn family_of(value: Option<&str>) -> Option<bool> {
    match value {
        Some("AF_INET") => Some(true),
        Some("AF_INET6") => Some(false),
        _ => None,
    }
}

/// NCCL's `matchIfList`: an empty list matches everything; otherwise a name matches an entry
/// exactly (`=`) or by prefix. Entries are `name[:port]`; the port is ignored here (NCCL
/// passes port -1 when it looks for interfaces).
fn match_if_list(name: &str, entries: &[&str], exact: bool) -> bool {
    if entries.is_empty() {
        return true;
    }
    entries.iter().any(|e| {
        if exact {
            name == *e
        } else {
            name.starts_with(e)
        }
    })
}

/// NCCL's `findInterfaces(prefixList, ...)`: the interfaces (first address of each) that the
/// list selects, in the kernel's order. `^` excludes, `=` asks for exact names.
pub(crate) fn find<'a>(addrs: &'a [IfAddr], list: &str, v4_only: Option<bool>) -> Vec<&'a IfAddr> {
    let (not, list) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let (exact, list) = match list.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let entries: Vec<&str> = list
        .split(',')
        .map(|e| e.split(':').next().unwrap_or(e))
        .filter(|e| !e.is_empty())
        .collect();
    let mut out: Vec<&IfAddr> = Vec::new();
    for a in addrs {
        if let Some(v4) = v4_only
            && a.addr.is_ipv4() != v4
        {
            continue;
        }
        if let IpAddr::V6(v6) = a.addr
            && v6.is_loopback()
        {
            continue;
        }
        if match_if_list(&a.name, &entries, exact) == not {
            continue;
        }
        if out.iter().any(|o| o.name == a.name) {
            continue;
        }
        out.push(a);
    }
    out
}

/// `ncclFindInterfaces` for the first interface (the one bootstrap uses): the user's
/// `NCCL_SOCKET_IFNAME` (find or fail), else `ib*`, else anything but `docker*`, `lo*` and
/// `virbr*`, else `docker*`, then `lo*`, then `virbr*`.
pub(crate) fn nccl_pick(addrs: &[IfAddr], ifname: Option<&str>, family: Option<&str>) -> Pick {
    let v4 = family_of(family);
    if let Some(list) = ifname.filter(|v| v.len() > 1) {
        let chosen = find(addrs, list, v4).first().map(|a| (*a).clone());
        let rule = match &chosen {
            Some(c) => format!("NCCL_SOCKET_IFNAME={list} selects {}", c.name),
            None => format!("NCCL_SOCKET_IFNAME={list} selects no interface with an address"),
        };
        return Pick { chosen, rule };
    }
    for (list, why) in [
        ("ib", "the default rule prefers ib*"),
        (
            "^docker,lo,virbr",
            "the default rule: the first interface other than docker*, lo* and virbr*",
        ),
        ("docker", "the default rule's fallback: nothing but docker*"),
        ("lo", "the default rule's fallback: nothing but lo*"),
        ("virbr", "the default rule's last fallback: virbr*"),
    ] {
        if let Some(a) = find(addrs, list, v4).first() {
            return Pick {
                chosen: Some((*a).clone()),
                rule: format!("{why} ({})", a.name),
            };
        }
    }
    Pick {
        chosen: None,
        rule: "no interface has an address".into(),
    }
}

/// True for the interfaces NCCL only falls back to: bootstrapping over them reaches no
/// other node.
pub(crate) fn is_fallback(name: &str) -> bool {
    name.starts_with("lo") || name.starts_with("docker") || name.starts_with("virbr")
}

/// The longest a netlink answer may take.
const ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the kernel's address dump could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AddrError {
    /// `what`: the socket call that failed (socket, bind, connect, send, recv).
    #[error("netlink {what}: {source}")]
    Socket {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("netlink socket timeout: {0}")]
    Timeout(#[source] nix::errno::Errno),
    #[error("malformed netlink answer: {0}")]
    Malformed(String),
    /// The kernel answered the dump with an error.
    #[error("{0}")]
    Kernel(#[source] std::io::Error),
}

/// Every address of every interface, in the kernel's dump order (what `getifaddrs` sees);
/// interface names from `/sys/class/net/*/ifindex` under `root`.
pub(crate) fn addresses(root: &Root) -> Result<Vec<IfAddr>, AddrError> {
    let names = names_by_index(root);
    let failed = |what| move |source| AddrError::Socket { what, source };
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(failed("socket"))?;
    socket.bind_auto().map_err(failed("bind"))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(failed("connect"))?;
    let tv = nix::sys::time::TimeVal::new(ANSWER_LIMIT.as_secs() as libc::time_t, 0);
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &tv)
        .map_err(AddrError::Timeout)?;
    let mut message = AddressMessage::default();
    message.header.family = AddressFamily::Unspec;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = 1;
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetAddress(message)),
    );
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    socket.send(&buf, 0).map_err(failed("send"))?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = socket.recv(&mut &mut buf[..], 0).map_err(failed("recv"))?;
        if n == 0 {
            return Ok(out);
        }
        let mut at = 0;
        let data = &buf[..n.min(buf.len())];
        while at < data.len() {
            let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..])
                .map_err(|e| AddrError::Malformed(e.to_string()))?;
            let len = msg.header.length as usize;
            match msg.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => {
                    if let Some(code) = e.code {
                        return Err(AddrError::Kernel(std::io::Error::from_raw_os_error(
                            -code.get(),
                        )));
                    }
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
                    let index = a.header.index;
                    let addr = a.attributes.iter().find_map(|attr| match attr {
                        AddressAttribute::Local(ip) => Some(*ip),
                        _ => None,
                    });
                    let addr = addr.or_else(|| {
                        a.attributes.iter().find_map(|attr| match attr {
                            AddressAttribute::Address(ip) => Some(*ip),
                            _ => None,
                        })
                    });
                    if let Some(addr) = addr {
                        let name = names
                            .iter()
                            .find(|(i, _)| *i == index)
                            .map_or_else(|| format!("if{index}"), |(_, n)| n.clone());
                        out.push(IfAddr { name, index, addr });
                    }
                }
                _ => {}
            }
            if len == 0 {
                break;
            }
            at += len;
        }
    }
}

fn names_by_index(root: &Root) -> Vec<(u32, String)> {
    let Ok(Some(names)) = root.list_dir("/sys/class/net") else {
        return Vec::new();
    };
    names
        .into_iter()
        .filter_map(|n| {
            let text = root
                .read_optional(&format!("/sys/class/net/{n}/ifindex"))
                .ok()??;
            Some((text.trim().parse().ok()?, n))
        })
        .collect()
}

/// An interface's MTU from sysfs.
pub(crate) fn mtu(root: &Root, name: &str) -> Option<u32> {
    root.read_optional(&format!("/sys/class/net/{name}/mtu"))
        .ok()??
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, index: u32, addr: &str) -> IfAddr {
        IfAddr {
            name: name.into(),
            index,
            addr: addr.parse().unwrap(),
        }
    }

    fn node() -> Vec<IfAddr> {
        vec![
            a("lo", 1, "127.0.0.1"),
            a("docker0", 2, "172.17.0.1"),
            a("eth0", 3, "10.0.0.5"),
            a("eth1", 4, "10.1.0.5"),
            a("eth10", 5, "10.2.0.5"),
            a("lo", 1, "::1"),
            a("eth0", 3, "fe80::1"),
        ]
    }

    fn picked(addrs: &[IfAddr], ifname: Option<&str>, family: Option<&str>) -> Option<String> {
        nccl_pick(addrs, ifname, family).chosen.map(|c| c.name)
    }

    #[test]
    fn default_order_skips_docker_and_lo_and_prefers_ib() {
        let n = node();
        assert_eq!(picked(&n, None, None).as_deref(), Some("eth0"));
        let mut with_ib = n.clone();
        with_ib.push(a("ib0", 9, "192.168.0.5"));
        assert_eq!(picked(&with_ib, None, None).as_deref(), Some("ib0"));
        let only_docker = vec![a("lo", 1, "127.0.0.1"), a("docker0", 2, "172.17.0.1")];
        assert_eq!(picked(&only_docker, None, None).as_deref(), Some("docker0"));
        let only_lo = vec![a("lo", 1, "127.0.0.1"), a("lo", 1, "::1")];
        assert_eq!(picked(&only_lo, None, None).as_deref(), Some("lo"));
        assert_eq!(picked(&[], None, None), None);
    }

    #[test]
    fn socket_ifname_prefix_exact_and_exclusion() {
        let n = node();
        // A prefix: eth matches eth0 first (kernel order).
        assert_eq!(picked(&n, Some("eth"), None).as_deref(), Some("eth0"));
        assert_eq!(picked(&n, Some("eth1"), None).as_deref(), Some("eth1"));
        // `=eth1` is exact, so it never takes eth10; `=eth` matches nothing.
        assert_eq!(picked(&n, Some("=eth1"), None).as_deref(), Some("eth1"));
        assert_eq!(picked(&n, Some("=eth"), None), None);
        // `^` excludes: ^lo,docker leaves eth0; ^eth0 leaves lo (it is first).
        assert_eq!(
            picked(&n, Some("^lo,docker"), None).as_deref(),
            Some("eth0")
        );
        assert_eq!(picked(&n, Some("^eth0"), None).as_deref(), Some("lo"));
        assert_eq!(picked(&n, Some("^=eth"), None).as_deref(), Some("lo"));
        // Ports in entries are ignored; a one-character value is NCCL's "unset".
        assert_eq!(picked(&n, Some("eth1:1234"), None).as_deref(), Some("eth1"));
        assert_eq!(picked(&n, Some("x"), None).as_deref(), Some("eth0"));
        assert_eq!(picked(&n, Some("ib"), None), None);
        assert!(
            nccl_pick(&n, Some("ib"), None)
                .rule
                .contains("selects no interface")
        );
    }

    #[test]
    fn family_and_ipv6_loopback() {
        let n = node();
        let v6 = find(&n, "", Some(false));
        // IPv6 loopback skipped; the first IPv6 address left is eth0's link-local one.
        assert_eq!(
            v6.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
            ["eth0"]
        );
        assert_eq!(picked(&n, Some("lo"), Some("AF_INET6")), None);
        assert_eq!(
            picked(&n, Some("eth"), Some("AF_INET6")).as_deref(),
            Some("eth0")
        );
        // One address per interface: the first.
        let all = find(&n, "", None);
        assert_eq!(all.len(), 5);
        assert_eq!(all[2].addr.to_string(), "10.0.0.5");
    }
}
