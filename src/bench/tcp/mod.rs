//! The TCP backend: the collectives between CPU ranks over plain TCP, the path the kernel's
//! network sysctls tune (socket buffers, window scaling, congestion control). The pipelined
//! ring ([`ring`]) runs over `--streams` connections to each neighbour and direction, the
//! pairwise algorithms ([`pairwise`], [`gather`]) over one connection per peer; [`Route`]
//! says which one a collective takes at a size.

mod gather;
mod link;
mod pairwise;
pub(crate) mod placement;
mod ring;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::control::auth;
use super::control::frame::Message;
use super::control::gate::{Arrival, Gate};
use super::control::group::JobStop;
use super::control::rendezvous::connect_retrying;
use super::control::wait::{Cause, Wait};
use super::measure::collective::{Collective, Shape};
use super::measure::data::{self, DType, Op};
use super::{Algo, Backend, BenchError};
pub(crate) use link::{Link, Peer, Spin};
pub(crate) use pairwise::Mesh;
pub(crate) use ring::Ring;

/// One reduction: `out = input ∘ incoming`, or in place (`input` `None`: `out` holds this
/// rank's data) `out ∘= incoming`, element by element in `dtype` with `op`. Every
/// reducing algorithm takes its buffers as one of these.
pub(crate) struct Reduce<'a> {
    pub input: Option<&'a [u8]>,
    pub out: &'a mut [u8],
    pub dtype: DType,
    pub op: Op,
}

impl Reduce<'_> {
    /// The same reduction over the bytes `range` of its input and output.
    pub(crate) fn part(&mut self, range: std::ops::Range<usize>) -> Reduce<'_> {
        Reduce {
            input: self.input.map(|i| &i[range.clone()]),
            out: &mut self.out[range],
            dtype: self.dtype,
            op: self.op,
        }
    }

    /// Reduces `incoming`, as long as `out`, into `out`.
    pub(crate) fn apply(self, incoming: &[u8]) {
        match self.input {
            Some(input) => data::reduce_from(self.dtype, self.op, self.out, input, incoming),
            None => data::reduce(self.dtype, self.op, self.out, incoming),
        }
    }
}

/// Pause before opening a data connection again that the neighbour dropped unanswered.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How the data connections are opened.
pub struct Options {
    pub streams: usize,
    /// SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's autotuning.
    pub sockbuf: u64,
    pub timeout: Duration,
    pub token: String,
}

/// Opens the data connections: `streams` connections to the ring's right neighbour and the
/// same number accepted from the left one, plus one connection to every other rank for the
/// pairwise algorithms (opened by the lower rank, used both ways). Each is checked (the
/// job's token, the expected rank and stream) and registered with `fatal`, so stopping the
/// job interrupts a blocked transfer.
pub fn connect(
    rank: usize,
    world: usize,
    listener: TcpListener,
    addrs: &[SocketAddr],
    hosts: &[String],
    options: &Options,
    fatal: Arc<JobStop>,
) -> Result<Connections, BenchError> {
    if world == 1 {
        return Ok(Connections::alone());
    }
    let left = (rank + world - 1) % world;
    let right = (rank + 1) % world;
    let streams = options.streams;
    let deadline = Instant::now() + options.timeout;
    if options.sockbuf > 0 {
        set_buffers(&listener, options.sockbuf);
    }
    // Ring connections carry streams 0..streams; a pairwise link carries stream `streams`.
    let mut expected: Vec<(usize, usize)> = (0..streams).map(|t| (left, t)).collect();
    expected.extend((0..rank).map(|p| (p, streams)));
    let (tx, rx) = mpsc::channel();
    let token = options.token.clone();
    thread::spawn(move || {
        let _ = tx.send(accept(listener, expected, &token, deadline));
    });
    // A neighbour busy with strangers on its data port drops a connection unanswered: that
    // is retried until the deadline, like the rendezvous.
    let open = |to: usize, stream: usize| -> Result<TcpStream, BenchError> {
        let addr = addrs.get(to).ok_or(LinkError::NoAddress(to))?;
        let target = (addr.ip().to_string(), addr.port());
        let mut wait = Wait::new("data port", format!("rank {to} at {addr}"), deadline);
        loop {
            let mut s = if options.sockbuf > 0 {
                connect_with_buffers(addr, options.sockbuf, deadline).map_err(|source| {
                    LinkError::Unreachable {
                        to,
                        addr: *addr,
                        source,
                    }
                })?
            } else {
                connect_retrying(&target, &mut wait)?
            };
            let opening = Message::DataHello {
                nonce: auth::nonce().map_err(LinkError::Nonce)?,
                rank,
                stream,
            };
            match auth::open(&mut s, &options.token, &opening, deadline) {
                Ok(()) => return Ok(s),
                Err(auth::AuthError::Frame(e))
                    if !e.is_timeout() && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    wait.failed(format!("the connection was closed ({e})"), Cause::Dropped);
                    thread::sleep(RETRY_PAUSE);
                }
                Err(auth::AuthError::Frame(e)) if e.is_timeout() => {
                    return Err(LinkError::Silent {
                        to,
                        addr: *addr,
                        secs: options.timeout.as_secs(),
                    }
                    .into());
                }
                Err(source) => {
                    return Err(LinkError::Refused {
                        to,
                        addr: *addr,
                        source,
                    }
                    .into());
                }
            }
        }
    };
    let mut send = Vec::new();
    for stream in 0..streams {
        send.push(open(right, stream)?);
    }
    let mut links: Vec<Option<TcpStream>> = (0..world).map(|_| None).collect();
    for (p, slot) in links.iter_mut().enumerate().skip(rank + 1) {
        *slot = Some(open(p, streams)?);
    }
    let accepted = rx.recv().map_err(|_| LinkError::ListenerStopped)??;
    let mut recv = Vec::new();
    for ((from, stream), s) in accepted {
        if stream < streams {
            recv.push(s);
        } else if let Some(slot) = links.get_mut(from) {
            *slot = Some(s);
        }
    }
    for s in send.iter().chain(recv.iter()).chain(links.iter().flatten()) {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(options.timeout));
        let _ = s.set_write_timeout(Some(options.timeout));
        fatal.register(s);
    }
    let peer = |r: usize| Peer {
        rank: r,
        host: hosts.get(r).cloned().unwrap_or_default(),
    };
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let local = hosts.iter().filter(|h| Some(*h) == hosts.get(rank)).count();
    let spin = Spin::for_host(local, cores);
    let socket_error = LinkError::Socket;
    let links = links
        .into_iter()
        .enumerate()
        .map(|(p, s)| s.map(|s| Link::new(peer(p), s)).transpose())
        .collect::<Result<Vec<_>, _>>()
        .map_err(socket_error)?;
    Ok(Connections {
        ring: Ring::new(
            rank,
            world,
            send,
            recv,
            peer(left),
            peer(right),
            spin,
            options.timeout,
            fatal.clone(),
        )
        .map_err(socket_error)?,
        mesh: Mesh::new(rank, world, links, spin, options.timeout),
        fatal,
    })
}

/// Why the data connections could not be opened or used (exit 3).
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("no address for rank {0}")]
    NoAddress(usize),
    #[error("cannot reach rank {to} at {addr}: {source}")]
    Unreachable {
        to: usize,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot reach rank {to} at {addr}: {source}")]
    Refused {
        to: usize,
        addr: SocketAddr,
        #[source]
        source: auth::AuthError,
    },
    #[error("{0}")]
    Nonce(#[source] auth::AuthError),
    #[error(
        "rank {to} at {addr} did not answer this rank's data connection within {secs}s ({})",
        Cause::Silent.hint()
    )]
    Silent {
        to: usize,
        addr: SocketAddr,
        secs: u64,
    },
    #[error("the data port's listener stopped")]
    ListenerStopped,
    #[error("data socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("data port: {0}")]
    Port(#[source] std::io::Error),
    /// These ranks did not connect; `strangers` says who came instead, if anyone.
    #[error(
        "rank {} did not open its data connections to this rank in time{strangers}",
        missing.join(", rank ")
    )]
    Late {
        missing: Vec<String>,
        strangers: String,
    },
    #[error("input and output differ in length")]
    Lengths,
    #[error("the ring has no connections")]
    NoRing,
    #[error("a ring stream stopped")]
    Stopped,
}

/// What [`connect`] opened.
pub struct Connections {
    pub ring: Ring,
    pub mesh: Mesh,
    fatal: Arc<JobStop>,
}

impl Connections {
    pub(crate) fn alone() -> Connections {
        let spin = Spin::for_host(1, 1);
        Connections {
            ring: Ring::alone(),
            mesh: Mesh::new(0, 1, vec![None], spin, Duration::from_secs(1)),
            fatal: Arc::default(),
        }
    }
}

/// A connection a rank waits for: `(rank, stream)`.
type Expected = (usize, usize);

/// Accepts the expected `(rank, stream)` connections through the port's [`Gate`] (the same
/// admission as the rendezvous: a flood of strangers cannot keep a neighbour out); anything
/// else on the port is dropped.
fn accept(
    listener: TcpListener,
    expected: Vec<Expected>,
    token: &str,
    deadline: Instant,
) -> Result<Vec<(Expected, TcpStream)>, BenchError> {
    listener.set_nonblocking(true).map_err(LinkError::Port)?;
    let mut slots: Vec<Option<TcpStream>> = expected.iter().map(|_| None).collect();
    let (tx, rx) = mpsc::channel::<Arrival>();
    let gate = Gate::new("data port");
    while slots.iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            let missing: Vec<String> = expected
                .iter()
                .zip(&slots)
                .filter(|(_, s)| s.is_none())
                .map(|((r, _), _)| r.to_string())
                .collect();
            let strangers = gate
                .summary()
                .map(|s| format!("; meanwhile {s}"))
                .unwrap_or_default();
            gate.close_all();
            return Err(LinkError::Late { missing, strangers }.into());
        }
        gate.accept_turn(&listener, token, &tx)
            .map_err(LinkError::Port)?;
        // An opening arrives here only once it has proved the job's token.
        while let Ok(Arrival {
            stream,
            addr,
            opening,
        }) = rx.try_recv()
        {
            let slot = match &opening {
                Message::DataHello { rank, stream, .. } => expected
                    .iter()
                    .position(|e| *e == (*rank, *stream))
                    .filter(|&i| slots[i].is_none()),
                _ => None,
            };
            match slot {
                Some(i) => slots[i] = Some(stream),
                None => gate.stranger(addr, "not a connection this rank expects"),
            }
        }
        thread::sleep(Duration::from_millis(2));
    }
    gate.close_all();
    if let Some(s) = gate.summary() {
        eprintln!("# data port: every expected connection arrived; {s}");
    }
    Ok(expected
        .into_iter()
        .zip(slots.into_iter().flatten())
        .collect())
}

fn set_buffers(socket: impl AsFd, bytes: u64) {
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    let socket = SockRef::from(&socket);
    // Best effort, as the kernel clamps to rmem_max/wmem_max anyway.
    let _ = socket.set_send_buffer_size(bytes);
    let _ = socket.set_recv_buffer_size(bytes);
}

/// Buffers must be sized before the handshake for the window scale to follow, so this opens
/// the socket by hand: socket, buffer sizes, connect (retrying until `deadline`).
fn connect_with_buffers(
    addr: &SocketAddr,
    bytes: u64,
    deadline: Instant,
) -> std::io::Result<TcpStream> {
    loop {
        let socket = Socket::new(
            Domain::for_address(*addr),
            Type::STREAM,
            Some(Protocol::TCP),
        )?;
        set_buffers(&socket, bytes);
        match socket.connect(&(*addr).into()) {
            Ok(()) => return Ok(socket.into()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The TCP backend: host buffers, the ring and the pairwise links, and the algorithm choice.
pub struct TcpBackend {
    conns: Connections,
    algo: Algo,
    shape: Shape,
    /// The send buffer as loaded.
    input: Vec<u8>,
    /// The receive buffer; in place, the one buffer (send-sized for ReduceScatter).
    output: Vec<u8>,
}

impl TcpBackend {
    pub fn new(conns: Connections, algo: Algo) -> TcpBackend {
        TcpBackend {
            conns,
            algo,
            shape: Shape::new(Collective::AllReduce, DType::F32, 0, 1),
            input: Vec::new(),
            output: Vec::new(),
        }
    }

    fn world(&self) -> usize {
        self.conns.mesh.world()
    }

    /// Bytes of one rank's block (AllGather, ReduceScatter).
    fn block(&self) -> usize {
        self.shape.block_bytes()
    }

    /// The algorithm this collective takes at `bytes`.
    fn choose(&self, bytes: usize) -> Route {
        let n = self.world();
        match self.shape.collective {
            Collective::AllReduce => match self.algo.resolve(bytes, n) {
                Algo::Rd => Route::Rd,
                Algo::Rabenseifner => Route::Rabenseifner,
                Algo::Ring | Algo::Auto => Route::Ring,
            },
            Collective::AllGather => {
                let rd = match self.algo {
                    Algo::Auto => bytes <= Algo::RD_MAX,
                    Algo::Rd | Algo::Rabenseifner => true,
                    Algo::Ring => false,
                };
                if rd && n.is_power_of_two() {
                    Route::Rd
                } else {
                    Route::Ring
                }
            }
            Collective::ReduceScatter => Route::Ring,
            Collective::Broadcast => Route::Tree,
        }
    }

    fn op(&mut self, op: Op, in_place: bool) -> Result<(), BenchError> {
        let route = self.choose(self.output.len());
        let (dtype, rank, block) = (self.shape.dtype, self.conns.mesh.rank, self.block());
        let input = (!in_place).then_some(self.input.as_slice());
        let out = &mut self.output;
        let mesh = &mut self.conns.mesh;
        let job = Reduce {
            input,
            out,
            dtype,
            op,
        };
        let result = match self.shape.collective {
            Collective::AllReduce => match route {
                Route::Rd => mesh.recursive_doubling(job),
                Route::Rabenseifner => mesh.rabenseifner(job),
                Route::Ring | Route::Tree => return self.conns.ring.allreduce(job),
            },
            Collective::AllGather => {
                if let Some(input) = job.input {
                    job.out[rank * block..][..block].copy_from_slice(input);
                }
                mesh.allgather(job.out, block, route == Route::Rd)
            }
            Collective::ReduceScatter => mesh.reduce_scatter(match input {
                Some(_) => Reduce {
                    out: &mut job.out[..block],
                    ..job
                },
                None => job,
            }),
            Collective::Broadcast => {
                if rank == 0
                    && let Some(input) = input
                {
                    job.out.copy_from_slice(input);
                }
                mesh.broadcast(job.out)
            }
        };
        result.map_err(|e| match self.conns.fatal.reason() {
            Some(verdict) => BenchError::Runtime(verdict),
            None => BenchError::Transfer {
                peer: e.peer,
                reason: mesh.failure(&e),
            },
        })
    }
}

/// How a collective moves at a given size, as the header and JSON name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Recursive doubling (AllReduce, AllGather).
    Rd,
    /// Recursive halving then doubling (AllReduce).
    Rabenseifner,
    /// The ring (AllReduce pipelined; AllGather and ReduceScatter step by step).
    Ring,
    /// A binomial tree from rank 0 (Broadcast).
    Tree,
}

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Rd => "rd",
            Route::Rabenseifner => "rabenseifner",
            Route::Ring => "ring",
            Route::Tree => "tree",
        }
    }
}

impl Backend for TcpBackend {
    fn prepare(&mut self, shape: Shape, input: &[u8]) -> Result<(), BenchError> {
        self.shape = shape;
        self.input.clear();
        self.input.extend_from_slice(input);
        self.output.clear();
        self.output.resize(shape.recv_bytes(), 0);
        Ok(())
    }

    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError> {
        for _ in 0..iters {
            self.op(op, in_place)?;
        }
        Ok(())
    }

    fn reset(&mut self, in_place: bool) -> Result<(), BenchError> {
        let (es, rank, block) = (self.shape.dtype.size(), self.conns.mesh.rank, self.block());
        let len = if in_place {
            self.shape.counts.send.max(self.shape.counts.recv)
        } else {
            self.shape.counts.recv
        } * es;
        self.output.clear();
        self.output.resize(len, 0);
        if in_place {
            match self.shape.collective {
                Collective::AllGather => {
                    self.output[rank * block..][..block].copy_from_slice(&self.input)
                }
                _ => self.output.copy_from_slice(&self.input),
            }
        }
        Ok(())
    }

    fn result(&mut self, in_place: bool) -> Result<Vec<u8>, BenchError> {
        let (rank, block) = (self.conns.mesh.rank, self.block());
        Ok(match self.shape.collective {
            Collective::ReduceScatter if in_place => self.output[rank * block..][..block].to_vec(),
            _ => self.output.clone(),
        })
    }

    fn algorithm(&self, bytes: usize) -> Option<&'static str> {
        Some(self.choose(bytes).name())
    }
}
