//! The rendezvous: rank 0 listens at `MASTER_ADDR:MASTER_PORT` until every rank has joined,
//! then tells each one who the members are and where their data ports are.
//!
//! Nothing from the network is trusted: each new connection is read on its own thread with
//! a short deadline (and only [`MAX_PENDING`] at once), every frame is bounded
//! ([`frame::MAX_FRAME`]), and peers without the job's token are dropped, so garbage or a
//! silent connection never holds the job up.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::{Duration, Instant};

use super::control::Group;
use super::frame::{self, FrameError, Message};
use super::output::Member;
use super::{BenchError, Settings};

/// How long a new connection has to present its whole Hello (one deadline, not per read).
const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// What this rank knows of the job when the rendezvous is done.
pub struct Joined {
    pub group: Group,
    /// Where this rank accepts its left neighbour's data connections.
    pub data_listener: TcpListener,
    /// Every rank's data address, in rank order.
    pub data_addrs: Vec<SocketAddr>,
    pub nccl_id: Option<Vec<u8>>,
}

/// What this rank tells rank 0 about itself.
pub struct Identity {
    pub rank: usize,
    pub world: usize,
    pub token: String,
    pub member: Member,
    pub backend: String,
    pub settings: Settings,
}

/// Rank 0's side of the rendezvous: waits until every other rank has joined with the job's
/// token, or `timeout` has passed (naming the ranks still missing).
pub fn serve(
    listener: TcpListener,
    me: Identity,
    nccl_id: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Joined, BenchError> {
    let deadline = Instant::now() + timeout;
    let world = me.world;
    let data_listener = bind_data(unspecified_like(&listener))?;
    let data_port = local_port(&data_listener)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| runtime(format!("rendezvous: {e}")))?;
    let (tx, rx) = mpsc::channel::<(TcpStream, SocketAddr, Message)>();
    let pending = Arc::new(AtomicUsize::new(0));
    let mut joined: BTreeMap<usize, (TcpStream, Member, u16)> = BTreeMap::new();
    while joined.len() + 1 < world {
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (1..world).filter(|r| !joined.contains_key(r)).collect();
            return Err(runtime(format!(
                "rank{} {} did not join the rendezvous at port {} within {}s: check that they \
                 were started, that MASTER_ADDR points at this host and that the port is open",
                if missing.len() == 1 { "" } else { "s" },
                rank_ranges(&missing),
                local_port(&listener).unwrap_or(0),
                timeout.as_secs()
            )));
        }
        match listener.accept() {
            Ok((stream, addr)) => {
                if pending.load(Ordering::SeqCst) >= MAX_PENDING {
                    eprintln!("# rendezvous: refused {addr}: too many connections at once");
                } else {
                    spawn_hello_reader(stream, addr, me.token.clone(), tx.clone(), pending.clone());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => eprintln!("# rendezvous: accept failed: {e}"),
        }
        while let Ok((mut stream, addr, hello)) = rx.try_recv() {
            let Message::Hello {
                rank,
                world: their_world,
                member,
                data_port,
                backend,
                settings,
                ..
            } = hello
            else {
                continue;
            };
            let refusal = if their_world != world {
                Some(format!("WORLD_SIZE={their_world} but rank 0 has {world}"))
            } else if rank == 0 || rank >= world {
                Some(format!("rank {rank} is not in 1..{world}"))
            } else if joined.contains_key(&rank) {
                Some(format!("rank {rank} has already joined"))
            } else {
                None
            };
            if let Some(reason) = refusal {
                eprintln!("# rendezvous: refused {addr}: {reason}");
                let _ = frame::write(&mut stream, &Message::Reject { reason });
                continue;
            }
            if backend != me.backend || settings != me.settings {
                let reason = if backend != me.backend {
                    format!(
                        "rank {rank} on {} uses backend {backend}, rank 0 uses {}",
                        member.host, me.backend
                    )
                } else {
                    format!(
                        "rank {rank} on {} was started with different settings than rank 0 ({settings:?} vs {:?})",
                        member.host, me.settings
                    )
                };
                let _ = frame::write(
                    &mut stream,
                    &Message::Reject {
                        reason: reason.clone(),
                    },
                );
                for (_, (mut s, _, _)) in joined {
                    let _ = frame::write(
                        &mut s,
                        &Message::Abort {
                            reason: reason.clone(),
                        },
                    );
                }
                return Err(runtime(reason));
            }
            joined.insert(rank, (stream, member, data_port));
        }
        thread::sleep(Duration::from_millis(2));
    }
    drop(listener);

    let mut members = vec![me.member.clone()];
    let mut peer_addrs = Vec::new();
    for (stream, member, port) in joined.values() {
        members.push(member.clone());
        let ip = stream
            .peer_addr()
            .map(|a| a.ip())
            .map_err(|e| runtime(format!("rendezvous: {e}")))?;
        peer_addrs.push(SocketAddr::new(ip, *port));
    }
    let mut writers = Vec::new();
    for (rank, (mut stream, _, _)) in joined {
        // Rank 0 is reached on whichever of its addresses this peer used.
        let own_ip = stream
            .local_addr()
            .map(|a| a.ip())
            .map_err(|e| runtime(format!("rendezvous: {e}")))?;
        let mut addrs = vec![SocketAddr::new(own_ip, data_port).to_string()];
        addrs.extend(peer_addrs.iter().map(|a| a.to_string()));
        let welcome = Message::Welcome {
            members: members.clone(),
            data_addrs: addrs,
            nccl_id: nccl_id.clone(),
        };
        frame::write(&mut stream, &welcome)
            .map_err(|e| runtime(format!("rendezvous: cannot answer rank {rank}: {e}")))?;
        let _ = stream.set_read_timeout(None);
        writers.push((rank, stream));
    }
    let own_ip = writers
        .last()
        .and_then(|(_, s)| s.local_addr().ok())
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| a.ip());
    let mut data_addrs = vec![SocketAddr::new(own_ip, data_port)];
    data_addrs.extend(peer_addrs);
    let group = Group::root(me.world, members, writers, timeout)?;
    Ok(Joined {
        group,
        data_listener,
        data_addrs,
        nccl_id,
    })
}

/// Reads a new connection's Hello on its own thread, so a slow or hostile peer delays no one.
fn spawn_hello_reader(
    mut stream: TcpStream,
    addr: SocketAddr,
    token: String,
    tx: Sender<(TcpStream, SocketAddr, Message)>,
    pending: Arc<AtomicUsize>,
) {
    pending.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + HELLO_DEADLINE;
    thread::spawn(move || {
        let _done = Decrement(pending);
        let _ = stream.set_nonblocking(false);
        match frame::read_by(&stream, deadline) {
            Ok(hello @ Message::Hello { .. }) => {
                let Message::Hello { token: theirs, .. } = &hello else {
                    return;
                };
                if !same_token(theirs, &token) {
                    eprintln!("# rendezvous: refused {addr}: wrong job token");
                    let _ = frame::write(
                        &mut stream,
                        &Message::Reject {
                            reason: "wrong job token".into(),
                        },
                    );
                    return;
                }
                let _ = tx.send((stream, addr, hello));
            }
            Ok(_) => eprintln!("# rendezvous: refused {addr}: expected a Hello"),
            Err(e) => eprintln!("# rendezvous: refused {addr}: {e}"),
        }
    });
}

/// Connections whose Hello is still being read; more are refused at once.
const MAX_PENDING: usize = 64;

/// Counts a reader out when its thread ends, however it ends.
struct Decrement(Arc<AtomicUsize>);

impl Drop for Decrement {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Compares without stopping at the first difference.
pub fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Another rank's side: connects to rank 0 (retrying until `timeout`), says who it is, and
/// waits for the list of members.
pub fn join(master: &(String, u16), me: Identity, timeout: Duration) -> Result<Joined, BenchError> {
    let deadline = Instant::now() + timeout;
    let mut data_listener: Option<TcpListener> = None;
    // Rank 0 drops a connection it cannot read yet (too many at once): that shows here as a
    // reset or a close without an answer, and is retried while this rank's timeout lasts.
    let (stream, members, data_addrs, nccl_id) = loop {
        let mut stream = connect_retrying(master, deadline, || "rank 0's rendezvous".to_string())?;
        let data_port = match &data_listener {
            Some(l) => local_port(l)?,
            None => {
                let local_ip = stream
                    .local_addr()
                    .map(|a| a.ip())
                    .map_err(|e| runtime(format!("rendezvous: {e}")))?;
                let l = bind_data(SocketAddr::new(local_ip, 0))?;
                let port = local_port(&l)?;
                data_listener = Some(l);
                port
            }
        };
        let hello = Message::Hello {
            token: me.token.clone(),
            rank: me.rank,
            world: me.world,
            member: me.member.clone(),
            data_port,
            backend: me.backend.clone(),
            settings: me.settings.clone(),
        };
        let answer = match frame::write(&mut stream, &hello) {
            Ok(()) => {
                let remaining = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(100));
                let _ = stream.set_read_timeout(Some(remaining));
                frame::read(&mut stream)
            }
            Err(e) => Err(FrameError::Io(e)),
        };
        match answer {
            Ok(Message::Welcome {
                members,
                data_addrs,
                nccl_id,
            }) => break (stream, members, data_addrs, nccl_id),
            Ok(Message::Reject { reason }) | Ok(Message::Abort { reason }) => {
                return Err(runtime(format!(
                    "rank 0 at {}:{} refused rank {}: {reason}",
                    master.0, master.1, me.rank
                )));
            }
            Ok(other) => {
                return Err(runtime(format!(
                    "rendezvous: unexpected {other:?} from rank 0"
                )));
            }
            Err(e) if e.is_timeout() => {
                return Err(runtime(format!(
                    "the other ranks did not all join within {}s (rank 0 at {}:{} is still waiting for them)",
                    timeout.as_secs(),
                    master.0,
                    master.1
                )));
            }
            Err(e) if dropped_unanswered(&e) && Instant::now() < deadline => {
                eprintln!(
                    "# rendezvous: rank 0 at {}:{} dropped the connection ({e}); retrying",
                    master.0, master.1
                );
                thread::sleep(
                    Duration::from_millis(200)
                        .min(deadline.saturating_duration_since(Instant::now())),
                );
            }
            Err(e) => {
                return Err(runtime(format!(
                    "rendezvous with rank 0 at {}:{}: {e}",
                    master.0, master.1
                )));
            }
        }
    };
    let data_listener =
        data_listener.ok_or_else(|| runtime("rendezvous: no data port was opened".to_string()))?;
    if members.len() != me.world || data_addrs.len() != me.world {
        return Err(runtime(format!(
            "rank 0 answered with {} members for a world of {}",
            members.len(),
            me.world
        )));
    }
    let data_addrs = data_addrs
        .iter()
        .map(|a| {
            a.parse::<SocketAddr>()
                .map_err(|_| runtime(format!("rank 0 sent a bad address `{a}`")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let _ = stream.set_read_timeout(None);
    let group = Group::member(me.rank, me.world, members, stream, timeout)?;
    Ok(Joined {
        group,
        data_listener,
        data_addrs,
        nccl_id,
    })
}

/// Rank 0 closed or reset the connection without answering: it was busy, not refusing.
fn dropped_unanswered(e: &FrameError) -> bool {
    match e {
        FrameError::Closed => true,
        FrameError::Io(e) => matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// Connects to `target`, retrying refused or unreachable attempts until `deadline`.
pub fn connect_retrying(
    target: &(String, u16),
    deadline: Instant,
    what: impl Fn() -> String,
) -> Result<TcpStream, BenchError> {
    let mut last = String::from("no attempt");
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(runtime(format!(
                "cannot reach {} at {}:{}: {last}",
                what(),
                target.0,
                target.1
            )));
        }
        match (target.0.as_str(), target.1).to_socket_addrs() {
            Ok(addrs) => {
                for addr in addrs {
                    match TcpStream::connect_timeout(&addr, remaining.min(Duration::from_secs(2))) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok(s);
                        }
                        Err(e) => last = e.to_string(),
                    }
                }
            }
            Err(e) => last = format!("cannot resolve {}: {e}", target.0),
        }
        thread::sleep(
            Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())),
        );
    }
}

/// Ranks in ascending order, runs written as ranges: `1-4, 7, 9-10`.
pub fn rank_ranges(ranks: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let start = ranks[i];
        let mut end = start;
        while i + 1 < ranks.len() && ranks[i + 1] == end + 1 {
            i += 1;
            end = ranks[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

fn bind_data(addr: SocketAddr) -> Result<TcpListener, BenchError> {
    TcpListener::bind(addr).map_err(|e| runtime(format!("cannot open a data port on {addr}: {e}")))
}

fn unspecified_like(listener: &TcpListener) -> SocketAddr {
    match listener.local_addr() {
        Ok(SocketAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
    }
}

fn local_port(listener: &TcpListener) -> Result<u16, BenchError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| runtime(format!("data port: {e}")))
}

fn runtime(message: String) -> BenchError {
    BenchError::Runtime(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
        assert!(same_token("", ""));
    }

    #[test]
    fn missing_ranks_are_summarised_as_ranges() {
        assert_eq!(rank_ranges(&[]), "");
        assert_eq!(rank_ranges(&[1]), "1");
        assert_eq!(rank_ranges(&[1, 2]), "1-2");
        assert_eq!(rank_ranges(&[1, 2, 3, 4, 7, 9, 10]), "1-4, 7, 9-10");
        let all: Vec<usize> = (1..1024).collect();
        assert_eq!(rank_ranges(&all), "1-1023");
    }
}
