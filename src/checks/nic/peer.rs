//! `audit --peer HOST[:PORT]`: can this node reach the peer's rendezvous port, how long does a
//! TCP handshake take (the round trip every rendezvous and NCCL bootstrap message pays), and
//! what MTU does the path carry. Unreachable peers are the most common rendezvous failure:
//! a firewall that drops SYNs makes `torch.distributed` hang until its timeout.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::finding::{Area, Check, Finding};

use super::super::{Context, by_rule, setting_check, value_by_rule};
use super::select::{resolve, split_peer};

/// How long one connection attempt may take; a peer that drops SYNs shows as unreachable.
const CONNECT_LIMIT: Duration = Duration::from_secs(3);

/// Handshakes measured; the smallest is the round trip (the others add scheduling noise).
const ATTEMPTS: usize = 3;

/// PyTorch's default MASTER_PORT, when neither `--peer` nor the profile names one.
const DEFAULT_PORT: u16 = 29500;

/// What one TCP connection attempt found.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// Connected; the handshake time and the path MTU the connection sees.
    Open { rtt: Duration, mtu: Option<u32> },
    /// The peer answered with a reset: reachable, nothing listens on the port yet.
    Refused { rtt: Duration },
    /// No answer within the limit, or an ICMP error (no route, host unreachable).
    Unreachable(String),
}

/// One TCP handshake to `addr`.
pub fn attempt(addr: SocketAddr) -> Attempt {
    let start = Instant::now();
    match TcpStream::connect_timeout(&addr, CONNECT_LIMIT) {
        Ok(stream) => Attempt::Open {
            rtt: start.elapsed(),
            mtu: path_mtu(&stream, addr.is_ipv4()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Attempt::Refused {
            rtt: start.elapsed(),
        },
        Err(e) => Attempt::Unreachable(e.to_string()),
    }
}

/// The path MTU of a connected socket: the kernel's path MTU for the destination
/// (`tcpi_pmtu`, lowered by ICMP "fragmentation needed") capped by the segment size the
/// peer accepts (its MSS, which reflects its own interface MTU) plus the headers.
fn path_mtu(stream: &TcpStream, ipv4: bool) -> Option<u32> {
    let info = crate::ffi::linux::tcp_info(stream.as_fd()).ok()?;
    if info.tcpi_pmtu == 0 {
        return None;
    }
    let ip_header = if ipv4 { 20 } else { 40 };
    let timestamps = if info.tcpi_options & 1 != 0 { 12 } else { 0 };
    let by_mss = info.tcpi_snd_mss + ip_header + 20 + timestamps;
    Some(info.tcpi_pmtu.min(by_mss))
}

/// The peer checks, when `--peer` was given.
pub fn audit(ctx: &Context) -> Vec<Finding> {
    let Some(peer) = &ctx.options.peer else {
        return vec![];
    };
    let (host, port) = split_peer(peer);
    let port = port
        .or_else(|| {
            ctx.profile
                .job
                .rendezvous_ports
                .as_ref()
                .and_then(|r| r.first())
                .map(|(lo, _)| *lo)
        })
        .unwrap_or(DEFAULT_PORT);
    let target = format!("{host}:{port}");
    let connect = connect_check(&target);
    if !ctx.root.is_live() {
        return vec![connect.skip(format!(
            "{} {}",
            crate::probe::NOT_LIVE,
            ctx.root.dir().display()
        ))];
    }
    let ip = match resolve(&host) {
        Ok(ip) => ip,
        Err(reason) => {
            return vec![connect.why(reason.to_string()).fail(
                "unresolved",
                "check the peer's name in DNS or /etc/hosts (MASTER_ADDR must resolve on every node)",
            )];
        }
    };
    let addr = SocketAddr::new(ip, port);
    // An unreachable peer is not retried: each try would wait out the limit again.
    let mut attempts: Vec<Attempt> = Vec::new();
    for _ in 0..ATTEMPTS {
        let a = attempt(addr);
        let unreachable = matches!(a, Attempt::Unreachable(_));
        attempts.push(a);
        if unreachable {
            break;
        }
    }
    judge(ctx, &target, &attempts)
}

/// `peer.connect`: whether `target` (`host:port`) takes a TCP connection.
fn connect_check(target: &str) -> Check {
    Check::new("peer.connect", Area::Nic).expected(format!("a TCP connection to {target}"))
}

/// Findings from the attempts: reachability, the round trip and the path MTU.
pub fn judge(ctx: &Context, target: &str, attempts: &[Attempt]) -> Vec<Finding> {
    let mut out = Vec::new();
    let rtts: Vec<Duration> = attempts
        .iter()
        .filter_map(|a| match a {
            Attempt::Open { rtt, .. } | Attempt::Refused { rtt } => Some(*rtt),
            Attempt::Unreachable(_) => None,
        })
        .collect();
    let open = attempts.iter().any(|a| matches!(a, Attempt::Open { .. }));
    let connect = connect_check(target);
    if rtts.is_empty() {
        let reason = attempts
            .iter()
            .find_map(|a| match a {
                Attempt::Unreachable(r) => Some(r.clone()),
                _ => None,
            })
            .unwrap_or_default();
        out.push(
            connect
                .why(format!(
                    "{target} did not answer within {} s ({reason}): a firewall dropping the port, or no route; rendezvous would hang until its timeout",
                    CONNECT_LIMIT.as_secs()
                ))
                .fail(
                    "unreachable",
                    format!(
                        "open the rendezvous ports between the nodes (see `gputune audit --only firewall` on {target}'s node) and check the route (`ip route get {}`)",
                        target.rsplit_once(':').map_or(target, |(h, _)| h)
                    ),
                ),
        );
        return out;
    }
    out.push(if open {
        connect
            .why(format!("{target} accepts connections"))
            .pass("open")
    } else {
        connect
            .why(format!(
                "{target} is reachable but nothing listens there (it answered with a reset): fine before the job starts, a failure once rank 0 should be listening"
            ))
            .warn(
                "refused",
                "start the job's rank 0 (MASTER_ADDR:MASTER_PORT) or check that the port is the one it binds",
            )
    });
    let best = rtts.iter().min().copied().unwrap_or_default();
    let ms = best.as_secs_f64() * 1000.0;
    let shown = format!("{ms:.2}");
    let rtt = "peer.rtt_ms";
    let handshake = format!("TCP handshake to {target}, best of {}", rtts.len());
    out.push(match ctx.profile.get(Area::Nic, rtt) {
        Some(setting) => {
            let check = setting_check(ctx, Area::Nic, rtt, setting).found(handshake, "; ");
            // Judged in whole milliseconds, rounded up, so 10.4 ms fails "max 10".
            by_rule(
                &check,
                setting,
                &(ms.ceil() as u64).to_string(),
                shown,
                "find the added latency: a congested or distant path, a shaper (`tc qdisc show`), or the peer in another site; training nodes belong on one low-latency fabric",
            )
        }
        None => Check::new(rtt, Area::Nic)
            .expected("measured (the profile sets no limit)")
            .why(handshake)
            .pass(shown),
    });
    let mtu = attempts.iter().find_map(|a| match a {
        Attempt::Open { mtu, .. } => *mtu,
        _ => None,
    });
    let path_mtu = "peer.path_mtu";
    out.push(match (mtu, ctx.profile.get(Area::Nic, path_mtu)) {
        (Some(mtu), Some(setting)) => {
            let check = setting_check(ctx, Area::Nic, path_mtu, setting).found(format!(
                "the path to {target} carries {mtu}-byte packets (this node's path MTU capped by the peer's MSS)"
            ), "; ");
            value_by_rule(
                &check,
                setting,
                mtu,
                "set the same (jumbo) MTU on both nodes' interfaces and every switch port between them",
            )
        }
        (Some(mtu), None) => Check::new(path_mtu, Area::Nic)
            .expected("measured (the profile sets no minimum)")
            .why(format!("the path to {target} carries {mtu}-byte packets"))
            .pass(mtu.to_string()),
        (None, _) => Check::new(path_mtu, Area::Nic)
            .expected("the path MTU")
            .skip(format!(
            "no connection to {target} was accepted, so the path MTU is not known"
        )),
    });
    out
}
