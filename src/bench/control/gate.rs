//! Admission to a port other ranks connect to: rank 0's rendezvous and every rank's data
//! port. Both are visible to any local user (`ss -ltn`), so both must stay open to the real
//! ranks while strangers hold connections to them.
//!
//! Each new connection must complete the token handshake ([`auth`]) within
//! [`HANDSHAKE_DEADLINE`], on its own thread; at most [`MAX_PENDING`] handshakes run at
//! once, and when that many are open the oldest one past [`EVICT_GRACE`] is dropped to make
//! room, so a flood of silent connections delays a real rank by at most the deadline (a real
//! rank's handshake takes a round trip or two). Every connection that fails the handshake is
//! counted, and the final message says when strangers held the port.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::auth;
use super::frame::Message;

/// How long a new connection has to complete the whole handshake (one deadline, not per read).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(2);
/// Handshakes in progress at once; past this the oldest one older than [`EVICT_GRACE`] is
/// dropped for the newcomer (or, when all are younger, the newcomer is).
pub const MAX_PENDING: usize = 256;
/// The least time a connection keeps its place before a newcomer may take it: a real rank
/// completes the handshake well within it, so only a flood of more than [`MAX_PENDING`]
/// connections per this time could keep it out.
pub const EVICT_GRACE: Duration = Duration::from_millis(500);
/// Handshake threads need little stack (serde_json stops nesting at 128 levels); a
/// bounded one keeps [`MAX_PENDING`] of them cheap. A test parses the deepest frame on it.
pub(crate) const HANDSHAKE_STACK: usize = 1024 * 1024;
/// Connections taken from the backlog per turn of the accept loop, so a flood cannot keep
/// it from seeing the deadline or the ranks that completed their handshake.
const ACCEPTS_PER_TURN: usize = 512;
/// How many stranger addresses the final message lists.
const LISTED_STRANGERS: usize = 8;
/// Strangers named one line each; past these, one line says that more are being counted.
const STRANGER_LINES: usize = 8;

/// A connection whose opening proved the job's token.
pub struct Arrival {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    pub opening: Message,
}

/// Connections to one port still in their handshake, and those that failed it.
pub struct Gate {
    /// The port, as messages name it: `rendezvous` or `data port`.
    what: &'static str,
    pending: Mutex<Vec<Pending>>,
    strangers: Mutex<Strangers>,
    next_id: AtomicU64,
}

struct Pending {
    id: u64,
    since: Instant,
    /// A clone, shut down to evict the connection from under its handshake thread.
    stream: TcpStream,
    addr: SocketAddr,
}

#[derive(Default)]
struct Strangers {
    count: usize,
    from: BTreeSet<IpAddr>,
}

impl Gate {
    /// The gate of one port; `what` names it in messages (`rendezvous`, `data port`).
    pub fn new(what: &'static str) -> Arc<Gate> {
        Arc::new(Gate {
            what,
            pending: Mutex::default(),
            strangers: Mutex::default(),
            next_id: AtomicU64::new(0),
        })
    }

    /// Takes every connection waiting on `listener` (which must be non-blocking), up to a
    /// turn's worth, and starts each one's handshake on its own thread: those that prove
    /// `token` arrive on `arrivals`. Only an error of the listener itself is returned.
    pub fn accept_turn(
        self: &Arc<Self>,
        listener: &TcpListener,
        token: &str,
        arrivals: &Sender<Arrival>,
    ) -> io::Result<()> {
        for _ in 0..ACCEPTS_PER_TURN {
            match listener.accept() {
                Ok((stream, addr)) => {
                    if let Some(id) = self.admit(&stream, addr) {
                        self.spawn_handshake(stream, addr, id, token, arrivals.clone());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                // The peer gave up before it was taken from the backlog: not the port's fault.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Makes room for a new connection (evicting the oldest past the grace period when
    /// full) and returns its id, or `None` when it must be dropped.
    fn admit(&self, stream: &TcpStream, addr: SocketAddr) -> Option<u64> {
        let clone = stream.try_clone().ok()?;
        let mut pending = lock(&self.pending);
        if pending.len() >= MAX_PENDING {
            let oldest = pending
                .iter()
                .enumerate()
                .filter(|(_, p)| p.since.elapsed() >= EVICT_GRACE)
                .min_by_key(|(_, p)| p.since)
                .map(|(i, _)| i);
            match oldest {
                Some(i) => {
                    let evicted = pending.swap_remove(i);
                    let _ = evicted.stream.shutdown(std::net::Shutdown::Both);
                    self.stranger(
                        evicted.addr,
                        &format!(
                            "no handshake after {:.1}s while {MAX_PENDING} connections were open",
                            evicted.since.elapsed().as_secs_f64()
                        ),
                    );
                }
                None => {
                    self.stranger(addr, "too many connections at once");
                    return None;
                }
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        pending.push(Pending {
            id,
            since: Instant::now(),
            stream: clone,
            addr,
        });
        Some(id)
    }

    /// The handshake of `id` ended; false when it had been evicted already.
    fn done(&self, id: u64) -> bool {
        let mut pending = lock(&self.pending);
        match pending.iter().position(|p| p.id == id) {
            Some(i) => {
                pending.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Runs a new connection's handshake on its own thread, so a slow or hostile peer
    /// delays no one; only an opening whose sender proved the token is passed on.
    fn spawn_handshake(
        self: &Arc<Self>,
        mut stream: TcpStream,
        addr: SocketAddr,
        id: u64,
        token: &str,
        arrivals: Sender<Arrival>,
    ) {
        let deadline = Instant::now() + HANDSHAKE_DEADLINE;
        let token = token.to_string();
        let gate = self.clone();
        let spawned = thread::Builder::new()
            .name("handshake".into())
            .stack_size(HANDSHAKE_STACK)
            .spawn(move || {
                let _ = stream.set_nonblocking(false);
                let outcome = auth::accept(&mut stream, &token, deadline);
                if !gate.done(id) {
                    return; // evicted: already counted
                }
                match outcome {
                    Ok(opening) => {
                        let _ = arrivals.send(Arrival {
                            stream,
                            addr,
                            opening,
                        });
                    }
                    Err(e) if e.is_peer_fault() => gate.stranger(addr, &e.to_string()),
                    Err(e) => eprintln!("# {}: handshake with {addr} failed: {e}", gate.what),
                }
            });
        if let Err(e) = spawned {
            self.done(id);
            eprintln!(
                "# {}: dropped {addr}: cannot start a thread for it: {e}",
                self.what
            );
        }
    }

    /// Counts a connection that did not prove the token (or proved it for the wrong port).
    /// The first few are named one line each; a flood is summed up at the end.
    pub fn stranger(&self, addr: SocketAddr, why: &str) {
        let mut s = lock(&self.strangers);
        s.count += 1;
        if s.count <= STRANGER_LINES {
            eprintln!("# {}: refused {addr} (a stranger: {why})", self.what);
        }
        if s.count == STRANGER_LINES {
            eprintln!(
                "# {}: more strangers are connecting; they are counted, not listed",
                self.what
            );
        }
        if s.from.len() < LISTED_STRANGERS {
            s.from.insert(addr.ip());
        }
    }

    /// Drops every connection still in its handshake: once every expected connection has
    /// arrived, they are strangers, and their threads end now instead of at their deadline.
    pub fn close_all(&self) {
        let left: Vec<Pending> = lock(&self.pending).drain(..).collect();
        for p in left {
            let _ = p.stream.shutdown(std::net::Shutdown::Both);
            self.stranger(p.addr, "still no handshake when every rank had connected");
        }
    }

    /// "N connections from ADDRS ...", when strangers came.
    pub fn summary(&self) -> Option<String> {
        let s = lock(&self.strangers);
        if s.count == 0 {
            return None;
        }
        let from: Vec<String> = s.from.iter().map(IpAddr::to_string).collect();
        Some(format!(
            "{} connection{} from {} did not prove the job's token (a stranger held the port, \
             or a rank has a different GPUTUNE_BENCH_TOKEN)",
            s.count,
            if s.count == 1 { "" } else { "s" },
            from.join(", ")
        ))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::control::auth::AuthError;
    use crate::bench::control::frame::{self, FrameError};

    /// At capacity a newcomer is refused while every open handshake is younger than the
    /// grace period, and takes the oldest one's place after it: the evicted peer's connection
    /// is closed and counted as a stranger.
    #[test]
    fn a_full_gate_evicts_the_oldest_past_the_grace_period() {
        use std::io::Read;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate::new("test port");
        let mut peers = Vec::new();
        let mut accepted = Vec::new();
        for _ in 0..=MAX_PENDING {
            peers.push(TcpStream::connect(addr).unwrap());
            accepted.push(listener.accept().unwrap());
        }
        let (last, last_addr) = accepted.pop().unwrap();
        for (stream, from) in &accepted {
            assert!(gate.admit(stream, *from).is_some());
        }
        assert_eq!(gate.admit(&last, last_addr), None, "all are young: refused");
        thread::sleep(EVICT_GRACE + Duration::from_millis(50));
        let id = gate.admit(&last, last_addr).expect("the oldest makes room");
        assert!(gate.done(id));
        assert!(!gate.done(id), "an id ends once");
        // Exactly one of the first peers was shut out: its read ends at once.
        let mut closed = 0;
        for p in peers[..MAX_PENDING].iter_mut() {
            p.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
            if matches!(p.read(&mut [0u8; 1]), Ok(0)) {
                closed += 1;
            }
        }
        assert_eq!(closed, 1);
        let summary = gate.summary().unwrap();
        assert!(
            summary.starts_with("2 connections from 127.0.0.1"),
            "{summary}"
        );
    }

    /// A connection that proves the token arrives with its opening; one that stays silent
    /// is dropped by `close_all` and counted.
    #[test]
    fn a_proved_opening_arrives_and_a_silent_one_is_a_stranger() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let gate = Gate::new("test port");
        let (tx, rx) = std::sync::mpsc::channel();
        let _silent = TcpStream::connect(addr).unwrap();
        let opener = thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let opening = Message::DataHello {
                nonce: auth::nonce().unwrap(),
                rank: 3,
                stream: 1,
            };
            auth::open(&mut s, "tok", &opening, Instant::now() + HANDSHAKE_DEADLINE)
        });
        let until = Instant::now() + Duration::from_secs(10);
        let arrival = loop {
            gate.accept_turn(&listener, "tok", &tx).unwrap();
            if let Ok(a) = rx.try_recv() {
                break a;
            }
            assert!(Instant::now() < until, "no arrival");
            thread::sleep(Duration::from_millis(2));
        };
        opener.join().unwrap().unwrap();
        assert!(matches!(
            arrival.opening,
            Message::DataHello {
                rank: 3,
                stream: 1,
                ..
            }
        ));
        assert_eq!(gate.summary(), None);
        gate.close_all();
        assert!(gate.summary().unwrap().starts_with("1 connection from"));
    }

    /// The most deeply nested opening serde_json will parse, read by a handshake thread with
    /// the stack rank 0 gives it: refused, not a stack overflow that would end rank 0.
    #[test]
    fn the_deepest_opening_fits_a_handshake_threads_stack() {
        use std::io::Write;
        for depth in [127, 128, 129, 100_000] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (stream, _) = listener.accept().unwrap();
            let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            peer.write_all(&frame::framed(body.as_bytes())).unwrap();
            let reader = thread::Builder::new()
                .stack_size(HANDSHAKE_STACK)
                .spawn(move || {
                    let mut stream = stream;
                    auth::accept(&mut stream, "t", Instant::now() + Duration::from_secs(5))
                })
                .unwrap();
            let outcome = reader.join().expect("the handshake thread survived");
            assert!(
                matches!(outcome, Err(AuthError::Frame(FrameError::Malformed(_)))),
                "{depth}: {outcome:?}"
            );
        }
    }
}
