//! A bidirectional connection to one peer, and the exchange the pairwise algorithms are made
//! of: send one buffer and receive another at the same time, on the calling thread.
//!
//! Latency is what small messages pay for, so an exchange is a handful of non-blocking
//! syscalls (each buffer leaves in one `send`, the data has no header) and a bounded busy-poll
//! before it blocks in `poll(2)`: on a fast link the answer arrives within microseconds, and a
//! blocking wake-up costs more than that. Sending and receiving interleave, so two peers
//! exchanging more than their socket buffers hold cannot deadlock.

use std::io;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::time::{Duration, Instant};

/// A rank on the other end of a connection, as error messages name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    pub rank: usize,
    pub host: String,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} ({})", self.rank, self.host)
    }
}

/// What went wrong moving data with `peer`, in words: `doing` says what this rank was doing
/// ("sending to", "receiving from", "exchanging with").
pub(crate) fn failed(doing: &str, peer: &Peer, e: &io::Error, timeout: Duration) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            format!("{peer} closed its connection (it exited or was killed)")
        }
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
            "{doing} {peer} failed: no progress for {}s (the rank stalled or the network dropped)",
            timeout.as_secs()
        ),
        _ => format!("{doing} {peer} failed: {e}"),
    }
}

/// How long an exchange busy-polls before it blocks. Past the first [`PURE_SPIN`] (a
/// loopback or fast-network round trip) it yields the CPU between polls: when ranks (or
/// anything else) outnumber cores, a pure spin would hold the core the peer needs to
/// answer, and a yield costs no more than the poll's own syscall.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spin {
    /// Busy-poll for at most this long after the last progress.
    pub budget: Duration,
    /// Of which this long without yielding: [`PURE_SPIN`], or zero when this host runs more
    /// ranks than it has cores (a pure spin would then hold the core a peer needs).
    pub pure: Duration,
}

impl Spin {
    /// The spin for `local_ranks` ranks on a host with `cores` cores.
    pub(crate) fn for_host(local_ranks: usize, cores: usize) -> Spin {
        Spin {
            budget: SPIN,
            pure: if local_ranks > cores {
                Duration::ZERO
            } else {
                PURE_SPIN
            },
        }
    }
}

/// How long a pairwise exchange busy-polls before blocking: a loopback or RDMA-class round
/// trip is well inside it, a slow network's is not worth spinning for.
const SPIN: Duration = Duration::from_micros(50);

/// Polls without yielding for this long: a small message's round trip on loopback.
const PURE_SPIN: Duration = Duration::from_micros(10);

/// One connection to one peer, used in both directions.
pub(crate) struct Link {
    pub peer: Peer,
    socket: TcpStream,
}

impl Link {
    /// A link over `socket`, which is made non-blocking: an exchange never waits in a
    /// read or write, only in its bounded spin and then in poll(2).
    pub(crate) fn new(peer: Peer, socket: TcpStream) -> io::Result<Link> {
        socket.set_nonblocking(true)?;
        Ok(Link { peer, socket })
    }

    /// Sends all of `out` while receiving exactly `into.len()` bytes; either may be empty.
    /// Fails when the peer closes the connection or nothing moves for `timeout`.
    pub(crate) fn exchange(
        &self,
        out: &[u8],
        into: &mut [u8],
        spin: Spin,
        timeout: Duration,
    ) -> io::Result<()> {
        shift(self, out, self, into, spin, timeout)
    }
}

/// Sends all of `out` to `to` while receiving exactly `into.len()` bytes from `from` (the
/// same link or two).
/// A failure is the first error on either side.
pub(crate) fn shift(
    to: &Link,
    out: &[u8],
    from: &Link,
    into: &mut [u8],
    spin: Spin,
    timeout: Duration,
) -> io::Result<()> {
    shift_with(to, out, from, into, spin, timeout, &mut |_| {})
}

/// [`shift`], calling `arrived` with the received prefix of `into` each time it grows, so
/// the caller can reduce data while the rest is still arriving (cache-hot, and overlapped
/// with the peer's sending).
pub(crate) fn shift_with(
    to: &Link,
    mut out: &[u8],
    from: &Link,
    whole: &mut [u8],
    spin: Spin,
    timeout: Duration,
    arrived: &mut dyn FnMut(&[u8]),
) -> io::Result<()> {
    let (mut tx, mut rx) = (&to.socket, &from.socket);
    let one_socket = std::ptr::eq(to, from);
    let mut got = 0;
    let mut idle = Idle::new(spin, timeout);
    while !out.is_empty() || got < whole.len() {
        let mut moved = false;
        if !out.is_empty() {
            // The socket is non-blocking: this is one send(2), which std makes MSG_NOSIGNAL.
            let n = write_some(&mut tx, out)?;
            if n > 0 {
                out = &out[n..];
                moved = true;
            }
        }
        if got < whole.len() {
            let n = read_some(&mut rx, &mut whole[got..])?;
            if n > 0 {
                got += n;
                arrived(&whole[..got]);
                moved = true;
            }
        }
        if moved {
            idle.moved();
            continue;
        }
        let Some(wait) = idle.wait()? else {
            continue;
        };
        let (sending, receiving) = (!out.is_empty(), got < whole.len());
        if one_socket {
            let events = interest(sending, receiving);
            poll_all(&mut [PollFd::new(to.socket.as_fd(), events)], wait)?;
        } else {
            poll_all(
                &mut [
                    PollFd::new(to.socket.as_fd(), interest(sending, false)),
                    PollFd::new(from.socket.as_fd(), interest(false, receiving)),
                ],
                wait,
            )?;
        }
    }
    Ok(())
}

/// How an exchange waits when nothing moved: a bounded busy-poll (spinning, then yielding),
/// then blocking in poll(2) for what is left of the timeout, which counts from the last
/// progress.
pub(crate) struct Idle {
    spin: Spin,
    timeout: Duration,
    progress_at: Instant,
}

impl Idle {
    pub(crate) fn new(spin: Spin, timeout: Duration) -> Idle {
        Idle {
            spin,
            timeout,
            progress_at: Instant::now(),
        }
    }

    /// Something moved: the next wait starts spinning again.
    pub(crate) fn moved(&mut self) {
        self.progress_at = Instant::now();
    }

    /// Nothing moved: spins or yields once and returns `None` (try again), or returns how
    /// long to block in poll(2); `TimedOut` once nothing moved for the whole timeout.
    pub(crate) fn wait(&mut self) -> io::Result<Option<PollTimeout>> {
        let idle = self.progress_at.elapsed();
        if idle < self.spin.pure {
            std::hint::spin_loop();
            return Ok(None);
        }
        if idle < self.spin.budget {
            std::thread::yield_now();
            return Ok(None);
        }
        let left = self.timeout.saturating_sub(idle);
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        Ok(Some(PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)))
    }
}

/// The poll(2) events for a socket that is sending and/or receiving.
pub(crate) fn interest(sending: bool, receiving: bool) -> PollFlags {
    let mut events = PollFlags::empty();
    if sending {
        events |= PollFlags::POLLOUT;
    }
    if receiving {
        events |= PollFlags::POLLIN;
    }
    events
}

/// Blocks until one of `fds` is ready or `wait` passes (a signal only ends the wait early).
pub(crate) fn poll_all(fds: &mut [PollFd], wait: PollTimeout) -> io::Result<()> {
    match poll(fds, wait) {
        Ok(_) | Err(Errno::EINTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One non-blocking read: the bytes it moved (0 when none were there), `UnexpectedEof` when
/// the peer closed the connection.
pub(crate) fn read_some(socket: &mut impl Read, into: &mut [u8]) -> io::Result<usize> {
    match socket.read(into) {
        Ok(0) if !into.is_empty() => Err(io::ErrorKind::UnexpectedEof.into()),
        other => would_block_is_zero(other),
    }
}

/// One non-blocking write: the bytes it moved (0 when the socket buffer is full).
pub(crate) fn write_some(socket: &mut impl Write, out: &[u8]) -> io::Result<usize> {
    would_block_is_zero(socket.write(out))
}

/// Bytes moved by a non-blocking read or write: 0 when it would block (or a signal
/// interrupted it), the error otherwise.
fn would_block_is_zero(moved: io::Result<usize>) -> io::Result<usize> {
    match moved {
        Ok(n) => Ok(n),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(0)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (Link, Link) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        let peer = |rank| Peer {
            rank,
            host: "lo".into(),
        };
        (
            Link::new(peer(1), a).expect("non-blocking"),
            Link::new(peer(0), b).expect("non-blocking"),
        )
    }

    const SPIN: Spin = Spin {
        budget: Duration::from_micros(20),
        pure: Duration::from_micros(5),
    };

    #[test]
    fn exchanges_more_than_the_socket_buffers_hold_without_deadlock() {
        let (a, b) = pair();
        let big = 8 << 20;
        let other = std::thread::spawn(move || {
            let out = vec![2u8; big];
            let mut into = vec![0u8; big];
            b.exchange(&out, &mut into, SPIN, Duration::from_secs(30))
                .expect("exchange b");
            into
        });
        let out = vec![1u8; big];
        let mut into = vec![0u8; big];
        a.exchange(&out, &mut into, SPIN, Duration::from_secs(30))
            .expect("exchange a");
        assert!(into.iter().all(|&x| x == 2));
        let theirs = other.join().expect("peer thread");
        assert!(theirs.iter().all(|&x| x == 1));
    }

    #[test]
    fn a_closed_peer_is_an_eof_and_a_silent_one_times_out() {
        let (a, b) = pair();
        let mut into = [0u8; 4];
        let err = a
            .exchange(&[], &mut into, SPIN, Duration::from_millis(200))
            .expect_err("nothing arrives");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(b);
        let err = a
            .exchange(&[], &mut into, SPIN, Duration::from_secs(10))
            .expect_err("peer closed");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
