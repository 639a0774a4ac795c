//! The rendezvous: rank 0 listens at `MASTER_ADDR:MASTER_PORT` (that address only) until every
//! rank has joined, then tells each one who the members are and where their data ports are.
//!
//! Nothing from the network is trusted: every connection goes through the port's [`Gate`]
//! (the token handshake on its own thread, a bounded number at once with eviction), the same
//! one every data port has, and the final message says when strangers held the port.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::auth::{self, AuthError};
use super::frame::{self, FrameError, Message};
use super::gate::{Arrival, Gate, HANDSHAKE_DEADLINE};
use super::group::Group;
use super::wait::{Cause, Wait};
use crate::bench::{BenchError, Settings};

/// One rank of the job as the header lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub rank: usize,
    pub host: String,
    pub pid: u32,
    /// What the rank measures with: a GPU's name, or `cpu`.
    pub device: String,
}

/// The transport a run measured with: `--backend` once resolved (`auto` picks one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Nccl,
    Tcp,
}

impl Transport {
    /// The word headers, labels and the rendezvous use: `nccl`, `tcp`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Nccl => "nccl",
            Transport::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the ranks could not meet, each with its own text (exit 3). `host` and `port` are
/// `MASTER_ADDR` and `MASTER_PORT`.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("cannot resolve MASTER_ADDR={host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot open the rendezvous at MASTER_ADDR={host} MASTER_PORT={port}: {why} (MASTER_ADDR \
         must name an address of rank 0's host, and the port must be free)"
    )]
    Listen {
        host: String,
        port: u16,
        why: NoListener,
    },
    /// The rendezvous socket itself failed (its address, its mode, a peer's address).
    #[error("rendezvous: {0}")]
    Socket(#[source] io::Error),
    /// No fresh nonce for this rank's opening.
    #[error("rendezvous: {0}")]
    Nonce(#[source] AuthError),
    #[error(
        "rank{} {} did not join the rendezvous at port {port} within {secs}s: check that they \
         were started, that MASTER_ADDR points at this host and that the port is open{}",
        if missing.len() == 1 { "" } else { "s" },
        rank_ranges(missing),
        strangers.as_ref().map(|s| format!("; meanwhile {s}")).unwrap_or_default()
    )]
    Missing {
        missing: Vec<usize>,
        port: u16,
        secs: u64,
        /// What the gate says of strangers that held the port, if any did.
        strangers: Option<String>,
    },
    /// Two processes proved the token for one rank.
    #[error(
        "rank {rank} joined twice, from {first} and from {second}: a launcher started it twice, \
         or a stranger knows this job's token (set GPUTUNE_BENCH_TOKEN to a secret shared only \
         by the job's ranks)"
    )]
    Twice {
        rank: usize,
        /// The first one's address, `?` when it could no longer be read.
        first: String,
        second: SocketAddr,
    },
    #[error("rank {rank} on {host} uses backend {theirs}, rank 0 uses {ours}")]
    Backend {
        rank: usize,
        host: String,
        theirs: Transport,
        ours: Transport,
    },
    #[error(
        "rank {rank} on {host} was started with different settings than rank 0 ({theirs:?} vs \
         {ours:?})"
    )]
    Settings {
        rank: usize,
        host: String,
        theirs: Box<Settings>,
        ours: Box<Settings>,
    },
    #[error("rendezvous: cannot answer rank {rank}: {source}")]
    Answer {
        rank: usize,
        #[source]
        source: io::Error,
    },
    /// Another rank could not reach rank 0 before its timeout (the [`Wait`]'s verdict).
    #[error("{0}")]
    Unreached(String),
    #[error(
        "rank 0 at {host}:{port} could not prove this job's token (wrong job token): it was \
         started with a different GPUTUNE_BENCH_TOKEN, belongs to another job, or is not \
         gputune at all"
    )]
    WrongToken { host: String, port: u16 },
    #[error("rendezvous with rank 0 at {host}:{port}: {source}")]
    Handshake {
        host: String,
        port: u16,
        #[source]
        source: AuthError,
    },
    #[error("rendezvous with rank 0 at {host}:{port}: {source}")]
    Answered {
        host: String,
        port: u16,
        #[source]
        source: FrameError,
    },
    /// Rank 0 refused this rank or stopped the job, with its reason.
    #[error("rank 0 at {host}:{port} refused rank {rank}: {reason}")]
    Refused {
        host: String,
        port: u16,
        rank: usize,
        reason: String,
    },
    #[error("rendezvous: unexpected {0:?} from rank 0")]
    Unexpected(Box<Message>),
    #[error(
        "the other ranks did not all join within {secs}s (rank 0 at {host}:{port} is still \
         waiting for them)"
    )]
    OthersLate { secs: u64, host: String, port: u16 },
    #[error("rendezvous: no data port was opened")]
    NoDataPort,
    #[error("rank 0 answered with {members} members for a world of {world}")]
    Members { members: usize, world: usize },
    #[error("rank 0 sent a bad address `{0}`")]
    BadAddress(String),
    #[error("cannot open a data port on {addr}: {source}")]
    DataPort {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("data port: {0}")]
    DataPortAddress(#[source] io::Error),
}

/// Why rank 0 could not listen at `MASTER_ADDR`: the last thing that failed.
#[derive(Debug, thiserror::Error)]
pub enum NoListener {
    #[error("MASTER_ADDR={0} resolves to no address")]
    NoAddress(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

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
    /// The job's secret: proved, never sent.
    pub token: String,
    pub member: Member,
    pub backend: Transport,
    pub settings: Settings,
}

/// Rank 0's rendezvous socket, bound to the address `MASTER_ADDR` names and no other: a job
/// told to meet on 127.0.0.1 is not reachable from the network.
pub(crate) fn listen(master: &(String, u16)) -> Result<TcpListener, BenchError> {
    let addrs: Vec<SocketAddr> = (master.0.as_str(), master.1)
        .to_socket_addrs()
        .map_err(|source| RendezvousError::Resolve {
            host: master.0.clone(),
            source,
        })?
        .collect();
    let mut last = NoListener::NoAddress(master.0.clone());
    for addr in &addrs {
        match TcpListener::bind(addr) {
            Ok(listener) => {
                if addr.ip().is_loopback()
                    && master.0.parse::<IpAddr>().is_err()
                    && master.0 != "localhost"
                {
                    eprintln!(
                        "# rendezvous: MASTER_ADDR={} resolves to {} on this host, so only \
                         ranks on this host can join (check /etc/hosts)",
                        master.0,
                        addr.ip()
                    );
                }
                return Ok(listener);
            }
            Err(source) => {
                last = NoListener::Bind {
                    addr: *addr,
                    source,
                }
            }
        }
    }
    Err(RendezvousError::Listen {
        host: master.0.clone(),
        port: master.1,
        why: last,
    }
    .into())
}

/// Rank 0's side of the rendezvous: waits until every other rank has joined with the job's
/// token, or `timeout` has passed (naming the ranks still missing, and strangers if any).
pub(crate) fn serve(
    listener: TcpListener,
    me: Identity,
    nccl_id: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Joined, BenchError> {
    let deadline = Instant::now() + timeout;
    let world = me.world;
    let own = listener.local_addr().map_err(RendezvousError::Socket)?;
    // The data port listens where the rendezvous does, not on every address.
    let data_listener = bind_data(SocketAddr::new(own.ip(), 0))?;
    let data_port = local_port(&data_listener)?;
    listener
        .set_nonblocking(true)
        .map_err(RendezvousError::Socket)?;
    let (tx, rx) = mpsc::channel::<Arrival>();
    let gate = Gate::new("rendezvous");
    let mut joined: BTreeMap<usize, (TcpStream, Member, u16)> = BTreeMap::new();
    while joined.len() + 1 < world {
        if Instant::now() >= deadline {
            return Err(RendezvousError::Missing {
                missing: (1..world).filter(|r| !joined.contains_key(r)).collect(),
                port: own.port(),
                secs: timeout.as_secs(),
                strangers: gate.summary(),
            }
            .into());
        }
        // Take every connection waiting, so a flood cannot fill the backlog ahead of a rank.
        if let Err(e) = gate.accept_turn(&listener, &me.token, &tx) {
            eprintln!("# rendezvous: accept failed: {e}");
        }
        while let Ok(Arrival {
            mut stream,
            addr,
            opening,
        }) = rx.try_recv()
        {
            let Message::Hello {
                rank,
                world: their_world,
                member,
                data_port,
                backend,
                settings,
                ..
            } = opening
            else {
                gate.stranger(addr, "a data connection sent to the rendezvous port");
                continue;
            };
            let refusal = if their_world != world {
                Some(format!("WORLD_SIZE={their_world} but rank 0 has {world}"))
            } else if rank == 0 || rank >= world {
                Some(format!("rank {rank} is not in 1..{world}"))
            } else {
                None
            };
            if let Some(reason) = refusal {
                eprintln!("# rendezvous: refused {addr}: {reason}");
                let _ = frame::write(&mut stream, &Message::Reject { reason });
                continue;
            }
            // Two processes that both prove the token claim one rank: a launcher started it
            // twice, or a stranger knows the token (a derived one). Either way the figures
            // could be anyone's, so the job stops rather than keeping the first to arrive.
            let twice = joined
                .get(&rank)
                .map(|(first, _, _)| RendezvousError::Twice {
                    rank,
                    first: first
                        .peer_addr()
                        .map_or_else(|_| "?".to_string(), |a| a.to_string()),
                    second: addr,
                });
            let refusal = twice.or_else(|| {
                if backend != me.backend {
                    Some(RendezvousError::Backend {
                        rank,
                        host: member.host.clone(),
                        theirs: backend,
                        ours: me.backend,
                    })
                } else if settings != me.settings {
                    Some(RendezvousError::Settings {
                        rank,
                        host: member.host.clone(),
                        theirs: Box::new(settings),
                        ours: Box::new(me.settings.clone()),
                    })
                } else {
                    None
                }
            });
            if let Some(refusal) = refusal {
                let reason = refusal.to_string();
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
                return Err(refusal.into());
            }
            joined.insert(rank, (stream, member, data_port));
        }
        thread::sleep(Duration::from_millis(2));
    }
    drop(listener);
    gate.close_all();
    if let Some(s) = gate.summary() {
        eprintln!("# rendezvous: every rank joined; {s}");
    }

    let mut members = vec![me.member.clone()];
    let mut peer_addrs = Vec::new();
    for (stream, member, port) in joined.values() {
        members.push(member.clone());
        let ip = stream
            .peer_addr()
            .map(|a| a.ip())
            .map_err(RendezvousError::Socket)?;
        peer_addrs.push(SocketAddr::new(ip, *port));
    }
    let own_data = SocketAddr::new(own.ip(), data_port);
    let mut writers = Vec::new();
    for (rank, (mut stream, _, _)) in joined {
        let mut addrs = vec![own_data.to_string()];
        addrs.extend(peer_addrs.iter().map(|a| a.to_string()));
        let welcome = Message::Welcome {
            members: members.clone(),
            data_addrs: addrs,
            nccl_id: nccl_id.clone(),
        };
        frame::write(&mut stream, &welcome)
            .map_err(|source| RendezvousError::Answer { rank, source })?;
        let _ = stream.set_read_timeout(None);
        writers.push((rank, stream));
    }
    let mut data_addrs = vec![own_data];
    data_addrs.extend(peer_addrs);
    let group = Group::root(me.world, members, writers, timeout)?;
    Ok(Joined {
        group,
        data_listener,
        data_addrs,
        nccl_id,
    })
}

/// Another rank's side: connects to rank 0 (retrying until `timeout`, saying what it waits
/// for as [`Wait`] does), says who it is, and waits for the list of members.
pub fn join(master: &(String, u16), me: Identity, timeout: Duration) -> Result<Joined, BenchError> {
    let deadline = Instant::now() + timeout;
    let mut wait = Wait::new(
        "rendezvous",
        format!("rank 0 at {}:{}", master.0, master.1),
        deadline,
    );
    let mut data_listener: Option<TcpListener> = None;
    // Rank 0 drops a connection it cannot read yet (too many at once): that shows here as a
    // reset or a close without an answer, and is retried while this rank's timeout lasts.
    let (stream, members, data_addrs, nccl_id) = loop {
        let mut stream = connect_retrying(master, &mut wait)?;
        let data_port = match &data_listener {
            Some(l) => local_port(l)?,
            None => {
                let local_ip = stream
                    .local_addr()
                    .map(|a| a.ip())
                    .map_err(RendezvousError::Socket)?;
                let l = bind_data(SocketAddr::new(local_ip, 0))?;
                let port = local_port(&l)?;
                data_listener = Some(l);
                port
            }
        };
        let hello = Message::Hello {
            nonce: auth::nonce().map_err(RendezvousError::Nonce)?,
            rank: me.rank,
            world: me.world,
            member: me.member.clone(),
            data_port,
            backend: me.backend,
            settings: me.settings.clone(),
        };
        // Rank 0 gives each connection HANDSHAKE_DEADLINE; a little more here covers the
        // round trip, so a busy rank 0 drops the connection before this side gives up.
        let allowance = HANDSHAKE_DEADLINE + Duration::from_secs(1);
        let by = deadline.min(Instant::now() + allowance);
        let answer = match auth::open(&mut stream, &me.token, &hello, by) {
            Ok(()) => {
                let remaining = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(100));
                let _ = stream.set_read_timeout(Some(remaining));
                frame::read(&mut stream)
            }
            Err(AuthError::WrongToken) => {
                return Err(RendezvousError::WrongToken {
                    host: master.0.clone(),
                    port: master.1,
                }
                .into());
            }
            // Nothing answered the opening: not rank 0, or a rank 0 too busy to.
            Err(AuthError::Frame(e)) if e.is_timeout() => {
                wait.failed(
                    format!(
                        "no answer to this rank's opening within {}s",
                        allowance.as_secs()
                    ),
                    Cause::Silent,
                );
                continue;
            }
            Err(AuthError::Frame(e)) => Err(e),
            Err(AuthError::Send(e)) => Err(FrameError::Io(e)),
            Err(source) => {
                return Err(RendezvousError::Handshake {
                    host: master.0.clone(),
                    port: master.1,
                    source,
                }
                .into());
            }
        };
        match answer {
            Ok(Message::Welcome {
                members,
                data_addrs,
                nccl_id,
            }) => break (stream, members, data_addrs, nccl_id),
            Ok(Message::Reject { reason }) | Ok(Message::Abort { reason }) => {
                return Err(RendezvousError::Refused {
                    host: master.0.clone(),
                    port: master.1,
                    rank: me.rank,
                    reason,
                }
                .into());
            }
            Ok(other) => {
                return Err(RendezvousError::Unexpected(Box::new(other)).into());
            }
            // Rank 0 proved the token and is waiting for the others.
            Err(e) if e.is_timeout() => {
                return Err(RendezvousError::OthersLate {
                    secs: timeout.as_secs(),
                    host: master.0.clone(),
                    port: master.1,
                }
                .into());
            }
            Err(e) if dropped_unanswered(&e) => {
                wait.failed(format!("the connection was closed ({e})"), Cause::Dropped);
                thread::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())));
            }
            Err(source) => {
                return Err(RendezvousError::Answered {
                    host: master.0.clone(),
                    port: master.1,
                    source,
                }
                .into());
            }
        }
    };
    let data_listener = data_listener.ok_or(RendezvousError::NoDataPort)?;
    if members.len() != me.world || data_addrs.len() != me.world {
        return Err(RendezvousError::Members {
            members: members.len(),
            world: me.world,
        }
        .into());
    }
    let data_addrs = data_addrs
        .iter()
        .map(|a| {
            a.parse::<SocketAddr>()
                .map_err(|_| RendezvousError::BadAddress(a.clone()))
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

/// Pause before connecting again to a rank 0 that dropped the connection unanswered.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Rank 0 closed or reset the connection without answering: it was busy, not refusing.
pub(crate) fn dropped_unanswered(e: &FrameError) -> bool {
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

/// Connects to `target`, retrying failed attempts (each recorded in `wait`) until its time
/// is up; then fails with its verdict.
pub(crate) fn connect_retrying(
    target: &(String, u16),
    wait: &mut Wait,
) -> Result<TcpStream, BenchError> {
    loop {
        let remaining = wait.remaining();
        if remaining.is_zero() {
            return Err(RendezvousError::Unreached(wait.verdict()).into());
        }
        match (target.0.as_str(), target.1).to_socket_addrs() {
            Ok(addrs) => {
                for addr in addrs {
                    match TcpStream::connect_timeout(&addr, remaining.min(Duration::from_secs(2))) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            return Ok(s);
                        }
                        Err(e) => wait.failed(e.to_string(), Cause::of_connect(&e)),
                    }
                }
            }
            Err(e) => wait.failed(
                format!("cannot resolve {}: {e}", target.0),
                Cause::Unreachable,
            ),
        }
        thread::sleep(Duration::from_millis(50).min(wait.remaining()));
    }
}

/// Ranks in ascending order, runs written as ranges: `1-4, 7, 9-10`.
pub(crate) fn rank_ranges(ranks: &[usize]) -> String {
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
    TcpListener::bind(addr).map_err(|source| RendezvousError::DataPort { addr, source }.into())
}

fn local_port(listener: &TcpListener) -> Result<u16, BenchError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| RendezvousError::DataPortAddress(e).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_reads_as_the_text_it_replaced() {
        let io = || io::Error::from(io::ErrorKind::ConnectionRefused);
        let io_text = io().to_string();
        let at = |host: &str| (host.to_string(), 29500);
        let (host, port) = at("n1");
        let addr: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        let settings = Settings {
            sweep: crate::bench::measure::harness::Sweep {
                collective: crate::bench::measure::collective::Collective::AllReduce,
                min_bytes: 8,
                max_bytes: 8,
                step: crate::bench::measure::size::SizeStep::Factor(2),
                dtype: crate::bench::measure::data::DType::F32,
                op: crate::bench::measure::data::Op::Sum,
                iters: 1,
                warmup: 0,
                check: 0,
            },
            backend: crate::bench::job::Choice::Tcp,
            streams: 1,
            sockbuf: 0,
            algo: crate::bench::Algo::Auto,
        };
        let mut other = settings.clone();
        other.streams = 2;
        let cases: Vec<(RendezvousError, String)> =
            vec![
            (
                RendezvousError::Resolve { host: host.clone(), source: io() },
                format!("cannot resolve MASTER_ADDR=n1: {io_text}"),
            ),
            (
                RendezvousError::Listen {
                    host: host.clone(),
                    port,
                    why: NoListener::NoAddress(host.clone()),
                },
                "cannot open the rendezvous at MASTER_ADDR=n1 MASTER_PORT=29500: MASTER_ADDR=n1 \
                 resolves to no address (MASTER_ADDR must name an address of rank 0's host, and \
                 the port must be free)"
                    .to_string(),
            ),
            (
                RendezvousError::Listen {
                    host: host.clone(),
                    port,
                    why: NoListener::Bind { addr, source: io() },
                },
                format!(
                    "cannot open the rendezvous at MASTER_ADDR=n1 MASTER_PORT=29500: cannot \
                     listen on 10.0.0.2:4000: {io_text} (MASTER_ADDR must name an address of \
                     rank 0's host, and the port must be free)"
                ),
            ),
            (RendezvousError::Socket(io()), format!("rendezvous: {io_text}")),
            (
                RendezvousError::Nonce(AuthError::BadNonce),
                "rendezvous: malformed nonce".to_string(),
            ),
            (
                RendezvousError::Missing {
                    missing: vec![1, 2, 3, 5],
                    port,
                    secs: 30,
                    strangers: Some("2 connections from 10.0.0.9 did not prove".into()),
                },
                "ranks 1-3, 5 did not join the rendezvous at port 29500 within 30s: check that \
                 they were started, that MASTER_ADDR points at this host and that the port is \
                 open; meanwhile 2 connections from 10.0.0.9 did not prove"
                    .to_string(),
            ),
            (
                RendezvousError::Missing {
                    missing: vec![4],
                    port,
                    secs: 30,
                    strangers: None,
                },
                "rank 4 did not join the rendezvous at port 29500 within 30s: check that they \
                 were started, that MASTER_ADDR points at this host and that the port is open"
                    .to_string(),
            ),
            (
                RendezvousError::Twice {
                    rank: 3,
                    first: "?".into(),
                    second: addr,
                },
                "rank 3 joined twice, from ? and from 10.0.0.2:4000: a launcher started it \
                 twice, or a stranger knows this job's token (set GPUTUNE_BENCH_TOKEN to a \
                 secret shared only by the job's ranks)"
                    .to_string(),
            ),
            (
                RendezvousError::Backend {
                    rank: 2,
                    host: "b".into(),
                    theirs: Transport::Tcp,
                    ours: Transport::Nccl,
                },
                "rank 2 on b uses backend tcp, rank 0 uses nccl".to_string(),
            ),
            (
                RendezvousError::Settings {
                    rank: 2,
                    host: "b".into(),
                    theirs: Box::new(other.clone()),
                    ours: Box::new(settings.clone()),
                },
                format!(
                    "rank 2 on b was started with different settings than rank 0 ({other:?} vs \
                     {settings:?})"
                ),
            ),
            (
                RendezvousError::Answer { rank: 7, source: io() },
                format!("rendezvous: cannot answer rank 7: {io_text}"),
            ),
            (
                RendezvousError::Unreached("cannot reach rank 0 within 3s".into()),
                "cannot reach rank 0 within 3s".to_string(),
            ),
            (
                RendezvousError::WrongToken { host: host.clone(), port },
                "rank 0 at n1:29500 could not prove this job's token (wrong job token): it was \
                 started with a different GPUTUNE_BENCH_TOKEN, belongs to another job, or is not \
                 gputune at all"
                    .to_string(),
            ),
            (
                RendezvousError::Handshake {
                    host: host.clone(),
                    port,
                    source: AuthError::BadNonce,
                },
                "rendezvous with rank 0 at n1:29500: malformed nonce".to_string(),
            ),
            (
                RendezvousError::Answered {
                    host: host.clone(),
                    port,
                    source: FrameError::Closed,
                },
                format!("rendezvous with rank 0 at n1:29500: {}", FrameError::Closed),
            ),
            (
                RendezvousError::Refused {
                    host: host.clone(),
                    port,
                    rank: 5,
                    reason: "WORLD_SIZE=4 but rank 0 has 8".into(),
                },
                "rank 0 at n1:29500 refused rank 5: WORLD_SIZE=4 but rank 0 has 8".to_string(),
            ),
            (
                RendezvousError::Unexpected(Box::new(Message::Release { seq: 4 })),
                format!(
                    "rendezvous: unexpected {:?} from rank 0",
                    Message::Release { seq: 4 }
                ),
            ),
            (
                RendezvousError::OthersLate {
                    secs: 30,
                    host: host.clone(),
                    port,
                },
                "the other ranks did not all join within 30s (rank 0 at n1:29500 is still \
                 waiting for them)"
                    .to_string(),
            ),
            (
                RendezvousError::NoDataPort,
                "rendezvous: no data port was opened".to_string(),
            ),
            (
                RendezvousError::Members { members: 3, world: 4 },
                "rank 0 answered with 3 members for a world of 4".to_string(),
            ),
            (
                RendezvousError::BadAddress("nowhere".into()),
                "rank 0 sent a bad address `nowhere`".to_string(),
            ),
            (
                RendezvousError::DataPort { addr, source: io() },
                format!("cannot open a data port on 10.0.0.2:4000: {io_text}"),
            ),
            (
                RendezvousError::DataPortAddress(io()),
                format!("data port: {io_text}"),
            ),
        ];
        crate::testing::assert_bench_failures(cases);
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
