//! Which interface carries traffic: the default route's, and the one the kernel would use
//! to reach a peer (`--peer ADDR`), asked over rtnetlink exactly as `ip route get` does,
//! with `netlink-packet-route` messages on a blocking `netlink-sys` socket (no async
//! runtime). ECMP routes (`RTA_MULTIPATH`) give every next hop's interface. A route lookup
//! sends no packet.

use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::probe_error::ProbeError;

/// A source of routing answers: the kernel over netlink, or fixed answers in tests.
pub trait RouteProbe {
    /// Interface indexes of the default route with the lowest metric (several for ECMP).
    fn default_route(&self) -> Result<Vec<u32>, ProbeError>;
    /// Interface index the kernel would send to `peer` from.
    fn route_to(&self, peer: IpAddr) -> Result<u32, ProbeError>;
}

/// One route from a netlink answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub dst_len: u8,
    pub table: u32,
    pub unicast: bool,
    /// The output interfaces: `RTA_OIF`, or every next hop of an ECMP (`RTA_MULTIPATH`) route.
    pub oifs: Vec<u32>,
    pub priority: u32,
}

/// Reads a route out of a parsed `RTM_NEWROUTE` message.
pub(crate) fn route_of(msg: &RouteMessage) -> Route {
    let mut route = Route {
        dst_len: msg.header.destination_prefix_length,
        table: u32::from(msg.header.table),
        unicast: msg.header.kind == RouteType::Unicast,
        oifs: Vec::new(),
        priority: 0,
    };
    for attr in &msg.attributes {
        match attr {
            RouteAttribute::Oif(i) => route.oifs.push(*i),
            RouteAttribute::MultiPath(hops) => {
                route.oifs.extend(hops.iter().map(|h| h.interface_index));
            }
            RouteAttribute::Priority(p) => route.priority = *p,
            RouteAttribute::Table(t) => route.table = *t,
            _ => {}
        }
    }
    route
}

/// The outcome of parsing one datagram of a netlink answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Parsed {
    pub routes: Vec<Route>,
    /// `NLMSG_DONE` seen: the dump is complete.
    pub done: bool,
}

/// Parses the messages of one netlink datagram; an error message with a code is the
/// kernel's refusal (e.g. "Network is unreachable").
pub(crate) fn parse_routes(buf: &[u8]) -> Result<Parsed, ProbeError> {
    let mut out = Parsed::default();
    let mut at = 0;
    while at < buf.len() {
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[at..])
            .map_err(|e| ProbeError::Failed(format!("malformed netlink answer: {e}")))?;
        let len = msg.header.length as usize;
        match msg.payload {
            NetlinkPayload::Done(_) => out.done = true,
            NetlinkPayload::Error(e) => {
                if let Some(code) = e.code {
                    let refusal = std::io::Error::from_raw_os_error(-code.get());
                    return Err(ProbeError::of_io(refusal.to_string(), &refusal));
                }
            }
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(r)) => {
                out.routes.push(route_of(&r));
            }
            _ => {}
        }
        if len == 0 {
            break;
        }
        at += len;
    }
    Ok(out)
}

/// The interfaces of the main table's unicast default route with the lowest metric (all
/// next hops of an ECMP default).
pub(crate) fn pick_default(routes: &[Route]) -> Vec<u32> {
    routes
        .iter()
        .filter(|r| {
            r.dst_len == 0
                && r.table == u32::from(RouteHeader::RT_TABLE_MAIN)
                && r.unicast
                && !r.oifs.is_empty()
        })
        .min_by_key(|r| r.priority)
        .map(|r| r.oifs.clone())
        .unwrap_or_default()
}

/// An `RTM_GETROUTE` request: a dump of one family's routes, or (with `dst`) the route the
/// kernel would take to one address, as `ip route get` asks.
pub(crate) fn request(family: AddressFamily, dst: Option<IpAddr>, seq: u32) -> Vec<u8> {
    let mut route = RouteMessage::default();
    route.header.address_family = family;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = seq;
    if let Some(ip) = dst {
        route.header.destination_prefix_length = if ip.is_ipv4() { 32 } else { 128 };
        route
            .attributes
            .push(RouteAttribute::Destination(RouteAddress::from(ip)));
    } else {
        header.flags |= NLM_F_DUMP;
    }
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetRoute(route)),
    );
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// The kernel's routing tables over a blocking `NETLINK_ROUTE` socket.
pub(crate) struct Netlink;

/// The longest a route answer may take before the lookup gives up.
const ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Netlink {
    fn ask(&self, family: AddressFamily, dst: Option<IpAddr>) -> Result<Vec<Route>, ProbeError> {
        let mut socket = Socket::new(NETLINK_ROUTE)
            .map_err(|e| ProbeError::of_io(format!("netlink socket: {e}"), &e))?;
        socket
            .bind_auto()
            .map_err(|e| ProbeError::of_io(format!("netlink bind: {e}"), &e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| ProbeError::of_io(format!("netlink connect: {e}"), &e))?;
        set_receive_timeout(&socket, ANSWER_LIMIT)?;
        socket
            .send(&request(family, dst, 1), 0)
            .map_err(|e| ProbeError::of_io(format!("netlink send: {e}"), &e))?;
        let mut routes = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = socket
                .recv(&mut &mut buf[..], 0)
                .map_err(|e| ProbeError::of_io(format!("netlink recv: {e}"), &e))?;
            let parsed = parse_routes(&buf[..n.min(buf.len())])?;
            routes.extend(parsed.routes);
            // A lookup answers with one message; a dump ends with NLMSG_DONE.
            if parsed.done || dst.is_some() || n == 0 {
                return Ok(routes);
            }
        }
    }
}

/// `SO_RCVTIMEO`, so a kernel that never answers cannot hang the audit.
fn set_receive_timeout(socket: &Socket, limit: std::time::Duration) -> Result<(), ProbeError> {
    let tv = TimeVal::new(limit.as_secs() as libc::time_t, 0);
    setsockopt(socket, sockopt::ReceiveTimeout, &tv).map_err(|e| {
        ProbeError::Failed(format!(
            "netlink socket timeout: {}",
            std::io::Error::from(e)
        ))
    })
}

impl RouteProbe for Netlink {
    fn default_route(&self) -> Result<Vec<u32>, ProbeError> {
        let v4 = self.ask(AddressFamily::Inet, None)?;
        let picked = pick_default(&v4);
        if !picked.is_empty() {
            return Ok(picked);
        }
        let v6 = self.ask(AddressFamily::Inet6, None)?;
        Ok(pick_default(&v6))
    }

    fn route_to(&self, peer: IpAddr) -> Result<u32, ProbeError> {
        let family = match peer {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        self.ask(family, Some(peer))
            .map_err(|e| e.reworded(|e| format!("no route to {peer}: {e}")))?
            .into_iter()
            .find_map(|r| r.oifs.first().copied())
            .ok_or_else(|| {
                ProbeError::Failed(format!("the kernel's route to {peer} names no interface"))
            })
    }
}

/// No routing answers (not the live node), with the reason.
pub(crate) struct NoRoutes(pub String);

impl RouteProbe for NoRoutes {
    fn default_route(&self) -> Result<Vec<u32>, ProbeError> {
        Err(ProbeError::NotLive(self.0.clone()))
    }
    fn route_to(&self, _peer: IpAddr) -> Result<u32, ProbeError> {
        Err(ProbeError::NotLive(self.0.clone()))
    }
}

/// Parses `/proc/net/route` for the IPv4 default route's interface name, for roots that are
/// not the live node (a snapshot still says which interface had the default route).
pub(crate) fn default_from_proc(text: &str) -> Option<String> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
            let metric: u32 = f.get(6)?.parse().ok()?;
            (f.get(1) == Some(&"00000000") && f.get(7) == Some(&"00000000"))
                .then(|| (metric, f[0].to_string()))
        })
        .min()
        .map(|(_, name)| name)
}

/// Fixed routing answers, for tests of which NIC gputune judges.
#[cfg(test)]
pub(crate) struct FixedRoutes {
    /// The default route's interfaces.
    pub default: Vec<u32>,
    /// `(peer, interface index)` pairs; other peers have no route.
    pub peers: Vec<(IpAddr, u32)>,
}

#[cfg(test)]
impl RouteProbe for FixedRoutes {
    fn default_route(&self) -> Result<Vec<u32>, ProbeError> {
        Ok(self.default.clone())
    }
    fn route_to(&self, peer: IpAddr) -> Result<u32, ProbeError> {
        self.peers
            .iter()
            .find(|(p, _)| *p == peer)
            .map(|(_, i)| *i)
            .ok_or_else(|| ProbeError::Absent(format!("no route to {peer}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::route::RouteNextHop;

    /// A serialised `RTM_NEWROUTE` as the kernel sends it.
    fn answer(dst_len: u8, table: u8, attrs: Vec<RouteAttribute>) -> Vec<u8> {
        let mut route = RouteMessage::default();
        route.header.address_family = AddressFamily::Inet;
        route.header.destination_prefix_length = dst_len;
        route.header.table = table;
        route.header.kind = RouteType::Unicast;
        route.attributes = attrs;
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::from(RouteNetlinkMessage::NewRoute(route)),
        );
        msg.finalize();
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut buf);
        buf
    }

    fn hop(index: u32) -> RouteNextHop {
        let mut h = RouteNextHop::default();
        h.interface_index = index;
        h
    }

    #[test]
    fn parses_routes_and_picks_the_default() {
        let mut buf = answer(24, 254, vec![RouteAttribute::Oif(3)]);
        buf.extend(answer(
            0,
            254,
            vec![RouteAttribute::Oif(2), RouteAttribute::Priority(100)],
        ));
        buf.extend(answer(
            0,
            254,
            vec![RouteAttribute::Oif(5), RouteAttribute::Priority(50)],
        ));
        let parsed = parse_routes(&buf).unwrap();
        assert_eq!(parsed.routes.len(), 3);
        assert_eq!(pick_default(&parsed.routes), [5]);
        assert!(pick_default(&parsed.routes[..1]).is_empty());
    }

    #[test]
    fn ecmp_default_routes_give_every_next_hop() {
        let buf = answer(
            0,
            254,
            vec![RouteAttribute::MultiPath(vec![hop(4), hop(7)])],
        );
        let parsed = parse_routes(&buf).unwrap();
        assert_eq!(parsed.routes[0].oifs, [4, 7]);
        assert_eq!(pick_default(&parsed.routes), [4, 7]);
    }

    #[test]
    fn malformed_and_refused_answers() {
        let mut msg = answer(0, 254, vec![RouteAttribute::Oif(2)]);
        msg[0] = 200; // length beyond the datagram
        assert!(parse_routes(&msg).is_err());
        let mut err = NetlinkMessage::<RouteNetlinkMessage>::new(
            NetlinkHeader::default(),
            NetlinkPayload::Error(netlink_packet_core::ErrorMessage::default()),
        );
        if let NetlinkPayload::Error(e) = &mut err.payload {
            e.code = std::num::NonZeroI32::new(-101);
        }
        err.finalize();
        let mut buf = vec![0u8; err.buffer_len()];
        err.serialize(&mut buf);
        let e = parse_routes(&buf).unwrap_err();
        assert!(e.to_string().contains("unreachable"), "{e}");
        // The kernel refused (ENETUNREACH): the call failed, nothing is merely absent.
        assert!(matches!(e, ProbeError::Failed(_)), "{e:?}");
        assert_eq!(parse_routes(&[]).unwrap(), Parsed::default());
    }

    #[test]
    fn requests_are_well_formed() {
        let dump = request(AddressFamily::Inet, None, 7);
        let get = request(AddressFamily::Inet, Some("127.0.0.1".parse().unwrap()), 7);
        assert_eq!(get.len(), dump.len() + 8, "RTA_DST of 4 bytes");
        assert_eq!(
            u32::from_ne_bytes(get[..4].try_into().unwrap()) as usize,
            get.len()
        );
    }

    #[test]
    fn the_kernel_routes_loopback_through_lo() {
        // Real netlink on this machine: 127.0.0.1 goes through `lo`.
        let oif = Netlink.route_to("127.0.0.1".parse().unwrap()).unwrap();
        let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/ifindex")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(oif, lo);
    }

    /// A real ECMP default route in a fresh network namespace (this thread's own, made with
    /// unshare(CLONE_NEWNET); `ip` children inherit it): both next hops come back.
    #[test]
    fn the_kernels_ecmp_default_route_gives_both_interfaces() {
        let handle = std::thread::spawn(|| {
            // unshare(2) moves this thread only; it never returns to the test pool.
            if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
                panic!("unshare(CLONE_NEWNET) needs root: {e}");
            }
            let ip = |args: &str| {
                let out = std::process::Command::new("ip")
                    .args(args.split_whitespace())
                    .output()
                    .expect("ip (iproute2) runs; scripts/test installs it");
                assert!(
                    out.status.success(),
                    "ip {args}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            };
            for (dev, net) in [("d0", "10.9.0"), ("d1", "10.9.1")] {
                ip(&format!("link add {dev} type veth peer name {dev}p"));
                ip(&format!("link set {dev}p up"));
                ip(&format!("link set {dev} up"));
                ip(&format!("addr add {net}.1/24 dev {dev}"));
            }
            ip("route add default nexthop via 10.9.0.2 dev d0 nexthop via 10.9.1.2 dev d1");
            // `ip -o link show d0` → `5: d0@d0p: <...`: the index in this namespace.
            let index = |dev: &str| -> u32 {
                let out = std::process::Command::new("ip")
                    .args(["-o", "link", "show", dev])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .split(':')
                    .next()
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
            };
            (Netlink.default_route().unwrap(), [index("d0"), index("d1")])
        });
        let (got, want) = handle.join().unwrap();
        assert!(want.iter().all(|i| *i > 0), "{want:?}");
        assert_eq!(got, want);
    }

    #[test]
    fn proc_net_route_default() {
        let text = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
eth1\t00000000\t0101A8C0\t0003\t0\t0\t50\t00000000\t0\t0\t0\n\
eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_from_proc(text).as_deref(), Some("eth1"));
        assert_eq!(default_from_proc("Iface\n"), None);
    }
}
