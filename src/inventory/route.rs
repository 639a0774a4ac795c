//! Which interface carries traffic: the default route's, and the one the kernel would use
//! to reach a peer (`--peer ADDR`), asked over rtnetlink exactly as `ip route get` does.
//! A route lookup sends no packet.

use std::net::IpAddr;

/// A source of routing answers: the kernel over netlink, or fixed answers in tests.
pub trait RouteProbe {
    /// Interface index of the default route with the lowest metric.
    fn default_route(&self) -> Result<Option<u32>, String>;
    /// Interface index the kernel would send to `peer` from.
    fn route_to(&self, peer: IpAddr) -> Result<u32, String>;
}

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_PRIORITY: u16 = 6;
const RTA_TABLE: u16 = 15;
const RT_TABLE_MAIN: u32 = 254;
const RTN_UNICAST: u8 = 1;
const NLMSG_HDR: usize = 16;
const RTMSG_LEN: usize = 12;

/// One route from a netlink answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst_len: u8,
    pub table: u32,
    pub kind: u8,
    pub oif: Option<u32>,
    pub priority: u32,
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The outcome of parsing one datagram of a netlink answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    pub routes: Vec<Route>,
    /// `NLMSG_DONE` seen: the dump is complete.
    pub done: bool,
}

/// Parses `RTM_NEWROUTE` messages out of one netlink datagram; an `NLMSG_ERROR` with a
/// non-zero code is the kernel's refusal (e.g. "Network is unreachable").
pub fn parse_routes(buf: &[u8]) -> Result<Parsed, String> {
    let mut out = Parsed::default();
    let mut at = 0;
    while at + NLMSG_HDR <= buf.len() {
        let len = u32_at(buf, at).ok_or("short netlink header")? as usize;
        let kind = u16_at(buf, at + 4).ok_or("short netlink header")?;
        if len < NLMSG_HDR || at + len > buf.len() {
            return Err(format!("netlink message length {len} out of bounds"));
        }
        let body = &buf[at + NLMSG_HDR..at + len];
        match kind {
            NLMSG_DONE => out.done = true,
            NLMSG_ERROR => {
                let code = u32_at(body, 0).ok_or("short netlink error")? as i32;
                if code != 0 {
                    return Err(std::io::Error::from_raw_os_error(-code).to_string());
                }
            }
            RTM_NEWROUTE => out.routes.push(parse_route(body)?),
            _ => {}
        }
        at += align4(len);
    }
    Ok(out)
}

fn parse_route(body: &[u8]) -> Result<Route, String> {
    if body.len() < RTMSG_LEN {
        return Err("short rtmsg".into());
    }
    let mut route = Route {
        dst_len: body[1],
        table: u32::from(body[4]),
        kind: body[7],
        oif: None,
        priority: 0,
    };
    let mut at = RTMSG_LEN;
    while at + 4 <= body.len() {
        let len = usize::from(u16_at(body, at).unwrap_or(0));
        let kind = u16_at(body, at + 2).unwrap_or(0);
        if len < 4 || at + len > body.len() {
            return Err(format!("route attribute length {len} out of bounds"));
        }
        let value = &body[at + 4..at + len];
        match kind {
            RTA_OIF => route.oif = u32_at(value, 0),
            RTA_PRIORITY => route.priority = u32_at(value, 0).unwrap_or(0),
            RTA_TABLE => route.table = u32_at(value, 0).unwrap_or(route.table),
            _ => {}
        }
        at += align4(len);
    }
    Ok(route)
}

/// The default route of the main table with the lowest metric.
pub fn pick_default(routes: &[Route]) -> Option<u32> {
    routes
        .iter()
        .filter(|r| r.dst_len == 0 && r.table == RT_TABLE_MAIN && r.kind == RTN_UNICAST)
        .filter(|r| r.oif.is_some())
        .min_by_key(|r| r.priority)
        .and_then(|r| r.oif)
}

/// Builds an `RTM_GETROUTE` request: a dump of `family`'s routes, or a lookup of `dst`.
pub fn request(family: u8, dst: Option<IpAddr>, seq: u32) -> Vec<u8> {
    let mut attrs = Vec::new();
    let mut dst_len = 0u8;
    if let Some(addr) = dst {
        let bytes: Vec<u8> = match addr {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        dst_len = (bytes.len() * 8) as u8;
        attrs.extend_from_slice(&((4 + bytes.len()) as u16).to_ne_bytes());
        attrs.extend_from_slice(&RTA_DST.to_ne_bytes());
        attrs.extend_from_slice(&bytes);
        attrs.resize(align4(attrs.len()), 0);
    }
    let len = NLMSG_HDR + RTMSG_LEN + attrs.len();
    let flags = NLM_F_REQUEST | if dst.is_none() { NLM_F_DUMP } else { 0 };
    let mut msg = Vec::with_capacity(len);
    msg.extend_from_slice(&(len as u32).to_ne_bytes());
    msg.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&[family, dst_len, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    msg.extend_from_slice(&attrs);
    msg
}

/// The kernel's routing tables over an `AF_NETLINK`/`NETLINK_ROUTE` socket.
pub struct Netlink;

impl Netlink {
    fn ask(&self, family: u8, dst: Option<IpAddr>) -> Result<Vec<Route>, String> {
        // SAFETY: plain socket(2); closed by `Fd`'s drop.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(format!(
                "netlink socket: {}",
                std::io::Error::last_os_error()
            ));
        }
        let fd = Fd(fd);
        let msg = request(family, dst, 1);
        // SAFETY: `msg` is valid for its length; a NULL address sends to the kernel.
        let sent = unsafe { libc::send(fd.0, msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(format!("netlink send: {}", std::io::Error::last_os_error()));
        }
        let mut routes = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(format!("netlink recv: {}", std::io::Error::last_os_error()));
            }
            let parsed = parse_routes(&buf[..n as usize])?;
            routes.extend(parsed.routes);
            // A lookup answers with one message; a dump ends with NLMSG_DONE.
            if parsed.done || dst.is_some() || n == 0 {
                return Ok(routes);
            }
        }
    }
}

struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once.
        unsafe { libc::close(self.0) };
    }
}

impl RouteProbe for Netlink {
    fn default_route(&self) -> Result<Option<u32>, String> {
        let v4 = self.ask(libc::AF_INET as u8, None)?;
        if let Some(oif) = pick_default(&v4) {
            return Ok(Some(oif));
        }
        let v6 = self.ask(libc::AF_INET6 as u8, None)?;
        Ok(pick_default(&v6))
    }

    fn route_to(&self, peer: IpAddr) -> Result<u32, String> {
        let family = match peer {
            IpAddr::V4(_) => libc::AF_INET,
            IpAddr::V6(_) => libc::AF_INET6,
        } as u8;
        self.ask(family, Some(peer))
            .map_err(|e| format!("no route to {peer}: {e}"))?
            .into_iter()
            .find_map(|r| r.oif)
            .ok_or_else(|| format!("the kernel's route to {peer} names no interface"))
    }
}

/// No routing answers (not the live node), with the reason.
pub struct NoRoutes(pub String);

impl RouteProbe for NoRoutes {
    fn default_route(&self) -> Result<Option<u32>, String> {
        Err(self.0.clone())
    }
    fn route_to(&self, _peer: IpAddr) -> Result<u32, String> {
        Err(self.0.clone())
    }
}

/// Parses `/proc/net/route` for the IPv4 default route's interface name, for roots that are
/// not the live node (a snapshot still says which interface had the default route).
pub fn default_from_proc(text: &str) -> Option<String> {
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
pub struct FixedRoutes {
    pub default: Option<u32>,
    /// `(peer, interface index)` pairs; other peers have no route.
    pub peers: Vec<(IpAddr, u32)>,
}

impl RouteProbe for FixedRoutes {
    fn default_route(&self) -> Result<Option<u32>, String> {
        Ok(self.default)
    }
    fn route_to(&self, peer: IpAddr) -> Result<u32, String> {
        self.peers
            .iter()
            .find(|(p, _)| *p == peer)
            .map(|(_, i)| *i)
            .ok_or_else(|| format!("no route to {peer}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_msg(dst_len: u8, table: u8, oif: u32, prio: u32) -> Vec<u8> {
        let mut body = vec![2, dst_len, 0, 0, table, 3, 0, RTN_UNICAST, 0, 0, 0, 0];
        for (kind, value) in [(RTA_OIF, oif), (RTA_PRIORITY, prio)] {
            body.extend_from_slice(&8u16.to_ne_bytes());
            body.extend_from_slice(&kind.to_ne_bytes());
            body.extend_from_slice(&value.to_ne_bytes());
        }
        let mut msg = ((NLMSG_HDR + body.len()) as u32).to_ne_bytes().to_vec();
        msg.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&body);
        msg
    }

    #[test]
    fn parses_routes_and_picks_the_default() {
        let mut buf = route_msg(24, 254, 3, 0);
        buf.extend(route_msg(0, 254, 2, 100));
        buf.extend(route_msg(0, 254, 5, 50));
        let mut done = (NLMSG_HDR as u32 + 4).to_ne_bytes().to_vec();
        done.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        done.extend_from_slice(&[0; 14]);
        buf.extend(done);
        let parsed = parse_routes(&buf).unwrap();
        assert!(parsed.done);
        assert_eq!(parsed.routes.len(), 3);
        assert_eq!(pick_default(&parsed.routes), Some(5));
        assert_eq!(pick_default(&parsed.routes[..1]), None);
    }

    #[test]
    fn malformed_and_refused_answers() {
        let mut msg = route_msg(0, 254, 2, 0);
        msg[0] = 200; // length beyond the datagram
        assert!(parse_routes(&msg).is_err());
        let mut err = (NLMSG_HDR as u32 + 4).to_ne_bytes().to_vec();
        err.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err.extend_from_slice(&[0; 10]);
        err.extend_from_slice(&(-101i32).to_ne_bytes());
        let e = parse_routes(&err).unwrap_err();
        assert!(e.contains("unreachable"), "{e}");
        assert_eq!(parse_routes(&[]).unwrap(), Parsed::default());
    }

    #[test]
    fn requests_are_well_formed() {
        let dump = request(2, None, 7);
        assert_eq!(dump.len(), NLMSG_HDR + RTMSG_LEN);
        let get = request(2, Some("127.0.0.1".parse().unwrap()), 7);
        assert_eq!(get.len(), NLMSG_HDR + RTMSG_LEN + 8);
        assert_eq!(u32_at(&get, 0), Some(get.len() as u32));
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
