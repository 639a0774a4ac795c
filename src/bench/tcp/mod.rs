//! The TCP backend: a ring AllReduce between CPU ranks over plain TCP, the path the kernel's
//! network sysctls tune (socket buffers, window scaling, congestion control). Each rank sends
//! to its right neighbour and receives from its left, over `--streams` connections each way.

mod ring;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::auth;
use super::control::Fatal;
use super::data::{DType, Op};
use super::frame::Message;
use super::rendezvous::{HANDSHAKE_DEADLINE, connect_retrying};
use super::{Backend, BenchError};
pub use ring::Ring;

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

/// Opens the ring: `streams` connections to the right neighbour, the same number accepted
/// from the left one (checked: the job's token, the expected rank). Every socket is
/// registered with `fatal`, so stopping the job interrupts a blocked transfer.
pub fn connect(
    rank: usize,
    world: usize,
    listener: TcpListener,
    addrs: &[SocketAddr],
    hosts: &[String],
    options: &Options,
    fatal: Arc<Fatal>,
) -> Result<Ring, BenchError> {
    if world == 1 {
        return Ok(Ring::alone());
    }
    let left = (rank + world - 1) % world;
    let right = (rank + 1) % world;
    let deadline = Instant::now() + options.timeout;
    if options.sockbuf > 0 {
        set_buffers(&listener, options.sockbuf);
    }
    let (tx, rx) = mpsc::channel();
    let (streams, token) = (options.streams, options.token.clone());
    thread::spawn(move || {
        let _ = tx.send(accept_left(listener, left, streams, &token, deadline));
    });
    let right_addr = addrs
        .get(right)
        .ok_or_else(|| BenchError::Runtime(format!("no address for rank {right}")))?;
    let target = (right_addr.ip().to_string(), right_addr.port());
    let mut send = Vec::new();
    for stream in 0..options.streams {
        // A neighbour busy with strangers on its data port drops a connection unanswered:
        // that is retried until the deadline, like the rendezvous.
        let s = loop {
            let mut s = if options.sockbuf > 0 {
                connect_with_buffers(right_addr, options.sockbuf, deadline).map_err(|e| {
                    BenchError::Runtime(format!("cannot reach rank {right} at {right_addr}: {e}"))
                })?
            } else {
                connect_retrying(&target, deadline, || format!("rank {right}'s data port"))?
            };
            let opening = Message::DataHello {
                nonce: auth::nonce().map_err(|e| BenchError::Runtime(e.to_string()))?,
                rank,
                stream,
            };
            match auth::open(&mut s, &options.token, &opening, deadline) {
                Ok(()) => break s,
                Err(auth::AuthError::Frame(e))
                    if !e.is_timeout() && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    eprintln!(
                        "# data port: rank {right} at {right_addr} dropped the connection ({e}); retrying"
                    );
                    thread::sleep(RETRY_PAUSE);
                }
                Err(e) => {
                    return Err(BenchError::Runtime(format!(
                        "cannot reach rank {right} at {right_addr}: {e}"
                    )));
                }
            }
        };
        send.push(s);
    }
    let recv = rx
        .recv()
        .map_err(|_| BenchError::Runtime("the data port's listener stopped".into()))??;
    for s in send.iter().chain(recv.iter()) {
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(options.timeout));
        let _ = s.set_write_timeout(Some(options.timeout));
        fatal.register(s);
    }
    let host = |r: usize| hosts.get(r).cloned().unwrap_or_default();
    Ok(Ring::new(
        rank,
        world,
        send,
        recv,
        (left, host(left)),
        (right, host(right)),
        options.timeout,
        fatal,
    ))
}

/// Accepts the left neighbour's connections; anything else on the port is dropped.
fn accept_left(
    listener: TcpListener,
    left: usize,
    streams: usize,
    token: &str,
    deadline: Instant,
) -> Result<Vec<TcpStream>, BenchError> {
    let _ = listener.set_nonblocking(true);
    let mut slots: Vec<Option<TcpStream>> = (0..streams).map(|_| None).collect();
    // Each connection's opening is read on its own thread, so a silent one delays no one.
    let (tx, rx) = mpsc::channel::<(TcpStream, SocketAddr, Option<Message>)>();
    let mut reading = 0usize;
    while slots.iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            return Err(BenchError::Runtime(format!(
                "rank {left} did not open its data connections to this rank in time"
            )));
        }
        match listener.accept() {
            Ok((s, addr)) if reading < 64 => {
                reading += 1;
                let tx = tx.clone();
                // One deadline for the whole opening, however slowly its bytes arrive.
                let by = Instant::now() + HANDSHAKE_DEADLINE;
                let token = token.to_string();
                thread::spawn(move || {
                    let mut s = s;
                    let _ = s.set_nonblocking(false);
                    let hello = match auth::accept(&mut s, &token, by) {
                        Ok(m) => Some(m),
                        Err(e) => {
                            eprintln!("# data port: refused {addr}: {e}");
                            None
                        }
                    };
                    let _ = tx.send((s, addr, hello));
                });
            }
            Ok((_, addr)) => eprintln!("# data port: refused {addr}: too many connections at once"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(BenchError::Runtime(format!("data port: {e}"))),
        }
        if let Ok((s, addr, hello)) = rx.recv_timeout(Duration::from_millis(2)) {
            reading -= 1;
            match hello {
                Some(Message::DataHello { rank, stream, .. })
                    if rank == left && stream < streams && slots[stream].is_none() =>
                {
                    slots[stream] = Some(s);
                }
                Some(_) => {
                    eprintln!("# data port: refused {addr}: not rank {left} of this job")
                }
                None => {}
            }
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

fn set_buffers(socket: &impl AsRawFd, bytes: u64) {
    let value = bytes.min(i32::MAX as u64) as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: setsockopt on an open socket with a pointer to a live c_int and its size.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Buffers must be sized before the handshake for the window scale to follow, so this opens
/// the socket by hand: socket, setsockopt, connect (retrying until `deadline`).
fn connect_with_buffers(
    addr: &SocketAddr,
    bytes: u64,
    deadline: Instant,
) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    loop {
        let family = if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain socket(2); the fd is owned by the TcpStream below or closed on error.
        let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh socket that nothing else owns.
        let stream = unsafe { TcpStream::from_raw_fd(fd) };
        set_buffers(&stream, bytes);
        let (storage, len) = sockaddr(addr);
        // SAFETY: `storage` holds a valid sockaddr of `len` bytes for the socket's family.
        let rc =
            unsafe { libc::connect(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
        if rc == 0 {
            return Ok(stream);
        }
        let err = std::io::Error::last_os_error();
        if Instant::now() >= deadline {
            return Err(err);
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            (
                storage,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            (
                storage,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// The TCP backend: host buffers and the ring.
pub struct TcpBackend {
    ring: Ring,
    dtype: DType,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl TcpBackend {
    pub fn new(ring: Ring) -> TcpBackend {
        TcpBackend {
            ring,
            dtype: DType::F32,
            input: Vec::new(),
            output: Vec::new(),
        }
    }
}

impl Backend for TcpBackend {
    fn prepare(&mut self, dtype: DType, input: &[u8]) -> Result<(), BenchError> {
        self.dtype = dtype;
        self.input.clear();
        self.input.extend_from_slice(input);
        self.output.clear();
        self.output.resize(input.len(), 0);
        Ok(())
    }

    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError> {
        for _ in 0..iters {
            let input = if in_place {
                None
            } else {
                Some(self.input.as_slice())
            };
            self.ring
                .allreduce(input, &mut self.output, self.dtype, op)?;
        }
        Ok(())
    }

    fn reset(&mut self, in_place: bool) -> Result<(), BenchError> {
        if in_place {
            self.output.copy_from_slice(&self.input);
        }
        Ok(())
    }

    fn result(&mut self, _in_place: bool) -> Result<Vec<u8>, BenchError> {
        Ok(self.output.clone())
    }
}
