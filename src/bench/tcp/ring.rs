//! Ring AllReduce: reduce-scatter then all-gather, 2(n−1) steps, each moving one n-th of the
//! message to the right neighbour while one n-th arrives from the left.
//!
//! Large messages are cut into slices and pipelined: one sender and one receiver thread per
//! stream, so while slice j is reduced, slice j+1 is arriving and slice j−1 is leaving. A
//! slice sent at step s is the slice received (and reduced) at step s−1, so the sender waits
//! only for that one slice's flag, not for the whole step. Small messages take a single
//! thread: a step's data fits in the socket buffers, so send-then-receive cannot deadlock,
//! and no thread hand-off adds latency.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::bench::BenchError;
use crate::bench::control::JobStop;
use crate::bench::data::{self, DType, Op};

use super::link::Peer;

/// Bytes per pipelined slice.
const SLICE_BYTES: usize = 256 << 10;
/// Messages up to this size take the single-threaded path (a step is at most half of it).
const SMALL_BYTES: usize = 32 << 10;

/// This rank's place in the ring and its connections.
pub struct Ring {
    rank: usize,
    world: usize,
    send: Vec<TcpStream>,
    recv: Vec<TcpStream>,
    left: Peer,
    right: Peer,
    timeout: Duration,
    fatal: Arc<JobStop>,
    scratch: Vec<Vec<u8>>,
    workers: Vec<Worker>,
    answers: mpsc::Receiver<Result<(), Halt>>,
}

/// Why a ring operation, or one of its workers, stopped.
#[derive(Debug)]
enum Halt {
    /// Another worker of the same operation failed first; its own answer says why.
    Interrupted,
    /// A transfer with a neighbour failed; `peer` is that neighbour's rank.
    Transfer { peer: usize, reason: String },
    /// Something on this rank failed (a socket clone, a thread start).
    Local(String),
}

/// The elements of segment `k` when `count` elements are cut into `world` segments.
pub fn segment(count: usize, world: usize, k: usize) -> Range<usize> {
    let at = |i: usize| ((i as u128 * count as u128) / world as u128) as usize;
    at(k)..at(k + 1)
}

/// The segment a rank sends at step `s` (reduce-scatter for `s < n−1`, then all-gather).
pub fn send_segment(rank: usize, world: usize, s: usize) -> usize {
    let n = world;
    if s < n - 1 {
        (rank + n - s % n) % n
    } else {
        (rank + 1 + n - (s - (n - 1)) % n) % n
    }
}

/// The segment a rank receives at step `s`.
pub fn recv_segment(rank: usize, world: usize, s: usize) -> usize {
    let n = world;
    if s < n - 1 {
        (rank + 2 * n - s - 1) % n
    } else {
        (rank + n - (s - (n - 1)) % n) % n
    }
}

/// Slices of a segment, as element ranges.
fn slices(seg: Range<usize>, slice_elems: usize) -> impl Iterator<Item = Range<usize>> {
    let step = slice_elems.max(1);
    (seg.start..seg.end)
        .step_by(step)
        .map(move |s| s..(s + step).min(seg.end))
}

/// A buffer shared by the sender and receiver threads of one operation.
#[derive(Clone, Copy)]
struct Shared {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: threads touch disjoint regions, ordered by the per-slice flags (see `allreduce_pipelined`).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// # Safety
    /// No other thread may write `range` while the returned slice lives.
    unsafe fn get<'a>(self, range: Range<usize>) -> &'a [u8] {
        assert!(range.end <= self.len);
        // SAFETY: in bounds (checked); the caller rules out concurrent writes.
        unsafe { std::slice::from_raw_parts(self.ptr.add(range.start), range.len()) }
    }

    /// # Safety
    /// No other thread may read or write `range` while the returned slice lives.
    unsafe fn get_mut<'a>(self, range: Range<usize>) -> &'a mut [u8] {
        assert!(range.end <= self.len);
        // SAFETY: in bounds (checked); the caller guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }
}

impl Ring {
    pub fn alone() -> Ring {
        Ring {
            rank: 0,
            world: 1,
            send: Vec::new(),
            recv: Vec::new(),
            left: Peer {
                rank: 0,
                host: String::new(),
            },
            right: Peer {
                rank: 0,
                host: String::new(),
            },
            timeout: Duration::from_secs(1),
            fatal: Arc::default(),
            scratch: Vec::new(),
            workers: Vec::new(),
            answers: mpsc::channel().1,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rank: usize,
        world: usize,
        send: Vec<TcpStream>,
        recv: Vec<TcpStream>,
        left: Peer,
        right: Peer,
        timeout: Duration,
        fatal: Arc<JobStop>,
    ) -> Ring {
        let scratch = vec![vec![0u8; SMALL_BYTES]];
        Ring {
            rank,
            world,
            send,
            recv,
            left,
            right,
            timeout,
            fatal,
            scratch,
            workers: Vec::new(),
            answers: mpsc::channel().1,
        }
    }

    /// `out = input ∘ (every other rank's input)`; `input` `None` means in place (`out` holds
    /// the input).
    pub fn allreduce(
        &mut self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dtype: DType,
        op: Op,
    ) -> Result<(), BenchError> {
        if let Some(input) = input
            && input.len() != out.len()
        {
            return Err(BenchError::Runtime(
                "input and output differ in length".into(),
            ));
        }
        let result = if self.world == 1 {
            if let Some(input) = input {
                out.copy_from_slice(input);
            }
            Ok(())
        } else if out.len() <= SMALL_BYTES {
            self.allreduce_small(input, out, dtype, op)
        } else {
            self.allreduce_pipelined(input, out, dtype, op)
        };
        result.map_err(|halt| match (self.fatal.reason(), halt) {
            (Some(verdict), _) => BenchError::Runtime(verdict),
            (None, Halt::Transfer { peer, reason }) => BenchError::Transfer { peer, reason },
            (None, Halt::Local(reason)) => BenchError::Runtime(reason),
            (None, Halt::Interrupted) => BenchError::Runtime("a ring worker stopped".into()),
        })
    }

    fn send_error(&self, e: io::Error) -> Halt {
        send_halt(&self.right, &e, self.timeout)
    }

    fn recv_error(&self, e: io::Error) -> Halt {
        recv_halt(&self.left, &e, self.timeout)
    }

    fn allreduce_small(
        &mut self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dtype: DType,
        op: Op,
    ) -> Result<(), Halt> {
        let (n, r, es) = (self.world, self.rank, dtype.size());
        let count = out.len() / es;
        let bytes = |seg: usize| {
            let e = segment(count, n, seg);
            e.start * es..e.end * es
        };
        let mut scratch = std::mem::take(&mut self.scratch[0]);
        let result = (|| {
            for s in 0..2 * (n - 1) {
                let send = bytes(send_segment(r, n, s));
                let src = match input {
                    Some(input) if s == 0 => &input[send],
                    _ => &out[send],
                };
                self.send[0]
                    .write_all(src)
                    .map_err(|e| self.send_error(e))?;
                let recv = bytes(recv_segment(r, n, s));
                let len = recv.len();
                if s < n - 1 {
                    self.recv[0]
                        .read_exact(&mut scratch[..len])
                        .map_err(|e| self.recv_error(e))?;
                    match input {
                        Some(input) => data::reduce_from(
                            dtype,
                            op,
                            &mut out[recv.clone()],
                            &input[recv.clone()],
                            &scratch[..len],
                        ),
                        None => data::reduce(dtype, op, &mut out[recv.clone()], &scratch[..len]),
                    }
                    if s == n - 2 && op == Op::Avg {
                        data::finish_avg(dtype, n, &mut out[recv]);
                    }
                } else {
                    self.recv[0]
                        .read_exact(&mut out[recv])
                        .map_err(|e| self.recv_error(e))?;
                }
            }
            Ok(())
        })();
        self.scratch[0] = scratch;
        result
    }

    /// Correctness of the shared buffer: the receiver writes a slice's bytes of `out` at
    /// step s and sets its flag; the sender reads those bytes at step s+1 only after the flag
    /// (release/acquire). The receiver writes a region again only in the all-gather, with
    /// data that could only arrive after this rank's own send of that region finished (the
    /// reduction of a segment needs every rank's share), so reads and writes never overlap.
    /// The buffers outlive the workers' use: this function waits for every worker's answer.
    fn allreduce_pipelined(
        &mut self,
        input: Option<&[u8]>,
        out: &mut [u8],
        dtype: DType,
        op: Op,
    ) -> Result<(), Halt> {
        if self.workers.is_empty() {
            self.start_workers()?;
        }
        let (n, es) = (self.world, dtype.size());
        let count = out.len() / es;
        let slice_elems = (SLICE_BYTES / es).max(1);
        let max_slices = segment(count, n, 0)
            .len()
            .max(segment(count, n, n - 1).len())
            .div_ceil(slice_elems)
            + 1;
        let plan = Arc::new(RingOp {
            rank: self.rank,
            world: n,
            count,
            dtype,
            op,
            slice_elems,
            streams: self.workers.len(),
            max_slices,
            input: input.map(|i| Shared {
                ptr: i.as_ptr() as *mut u8,
                len: i.len(),
            }),
            out: Shared {
                ptr: out.as_mut_ptr(),
                len: out.len(),
            },
            done: (0..2 * (n - 1) * max_slices)
                .map(|_| AtomicBool::new(false))
                .collect(),
            failed: AtomicBool::new(false),
        });
        let mut sent = 0;
        for w in &self.workers {
            if w.sender.send(plan.clone()).is_ok() {
                sent += 1;
            }
            if w.receiver.send(plan.clone()).is_ok() {
                sent += 1;
            }
        }
        let mut first = None;
        for _ in 0..sent {
            match self.answers.recv() {
                Ok(Ok(())) => {}
                Ok(Err(halt)) => {
                    if !matches!(halt, Halt::Interrupted) && first.is_none() {
                        first = Some(halt);
                    }
                    plan.failed.store(true, Ordering::SeqCst);
                    for w in &self.workers {
                        w.sender_thread.unpark();
                    }
                    // Wake receivers blocked on a healthy peer. Only the local read side is
                    // shut: the peers must see their own first-hand error (or rank 0's
                    // verdict), not a connection this rank closed.
                    for r in &self.recv {
                        let _ = r.shutdown(Shutdown::Read);
                    }
                }
                Err(_) => break,
            }
        }
        if sent < 2 * self.workers.len() && first.is_none() {
            first = Some(Halt::Local("a ring worker stopped".into()));
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One sender and one receiver thread per stream, kept for the ring's life so a large
    /// operation costs no thread start-up.
    fn start_workers(&mut self) -> Result<(), Halt> {
        let (answer, answers) = mpsc::channel();
        for (t, (send, recv)) in self.send.iter().zip(self.recv.iter()).enumerate() {
            let clone = |s: &TcpStream| {
                s.try_clone()
                    .map_err(|e| Halt::Local(format!("data socket: {e}")))
            };
            let (mut send, mut recv) = (clone(send)?, clone(recv)?);
            let (right, left, timeout) = (self.right.clone(), self.left.clone(), self.timeout);
            let (send_tx, send_rx) = mpsc::channel::<Arc<RingOp>>();
            let reply = answer.clone();
            let sender = thread::Builder::new()
                .name(format!("ring-send-{t}"))
                .spawn(move || {
                    super::placement::release_current_thread();
                    for plan in send_rx {
                        let result = plan.send(t, &mut send).map_err(|e| match e {
                            Stop::Failed => Halt::Interrupted,
                            Stop::Io(e) => send_halt(&right, &e, timeout),
                        });
                        if reply.send(result).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| Halt::Local(format!("cannot start a ring thread: {e}")))?;
            let sender_thread = sender.thread().clone();
            let (recv_tx, recv_rx) = mpsc::channel::<Arc<RingOp>>();
            let reply = answer.clone();
            let partner = sender_thread.clone();
            thread::Builder::new()
                .name(format!("ring-recv-{t}"))
                .spawn(move || {
                    super::placement::release_current_thread();
                    let mut scratch = vec![0u8; SLICE_BYTES];
                    for plan in recv_rx {
                        let result = plan.receive(t, &mut recv, &mut scratch, &partner).map_err(
                            |e| match e {
                                Stop::Failed => Halt::Interrupted,
                                Stop::Io(e) => recv_halt(&left, &e, timeout),
                            },
                        );
                        if result.is_err() {
                            plan.failed.store(true, Ordering::SeqCst);
                            partner.unpark();
                        }
                        if reply.send(result).is_err() {
                            return;
                        }
                    }
                })
                .map_err(|e| Halt::Local(format!("cannot start a ring thread: {e}")))?;
            self.workers.push(Worker {
                sender: send_tx,
                receiver: recv_tx,
                sender_thread,
            });
        }
        self.answers = answers;
        Ok(())
    }
}

/// A stream's pair of worker threads.
struct Worker {
    sender: mpsc::Sender<Arc<RingOp>>,
    receiver: mpsc::Sender<Arc<RingOp>>,
    sender_thread: thread::Thread,
}

/// Why a worker stopped early.
enum Stop {
    /// Another worker failed first.
    Failed,
    Io(io::Error),
}

/// One pipelined operation, shared by the workers.
struct RingOp {
    rank: usize,
    world: usize,
    count: usize,
    dtype: DType,
    op: Op,
    slice_elems: usize,
    streams: usize,
    max_slices: usize,
    input: Option<Shared>,
    out: Shared,
    /// `done[s * max_slices + j]`: slice j of the segment received at step s is in `out`.
    done: Vec<AtomicBool>,
    failed: AtomicBool,
}

impl RingOp {
    fn bytes(&self, e: Range<usize>) -> Range<usize> {
        let es = self.dtype.size();
        e.start * es..e.end * es
    }

    /// Stream `t`'s share of the sends, each after the slice it depends on arrived.
    fn send(&self, t: usize, to: &mut TcpStream) -> Result<(), Stop> {
        let (n, r) = (self.world, self.rank);
        for s in 0..2 * (n - 1) {
            let seg = segment(self.count, n, send_segment(r, n, s));
            for (j, slice) in slices(seg, self.slice_elems)
                .enumerate()
                .filter(|(j, _)| j % self.streams == t)
            {
                if s > 0 {
                    wait_flag(&self.done[(s - 1) * self.max_slices + j], &self.failed)?;
                }
                // SAFETY: see `allreduce_pipelined`: nobody writes this slice now.
                let src = unsafe {
                    match self.input {
                        Some(i) if s == 0 => i.get(self.bytes(slice)),
                        _ => self.out.get(self.bytes(slice)),
                    }
                };
                to.write_all(src).map_err(Stop::Io)?;
            }
        }
        Ok(())
    }

    /// Stream `t`'s share of the receives: reduce-scatter slices are reduced into `out`,
    /// all-gather slices land in `out` directly.
    fn receive(
        &self,
        t: usize,
        from: &mut TcpStream,
        scratch: &mut [u8],
        sender: &thread::Thread,
    ) -> Result<(), Stop> {
        let (n, r) = (self.world, self.rank);
        for s in 0..2 * (n - 1) {
            let seg = segment(self.count, n, recv_segment(r, n, s));
            for (j, slice) in slices(seg, self.slice_elems)
                .enumerate()
                .filter(|(j, _)| j % self.streams == t)
            {
                if self.failed.load(Ordering::Relaxed) {
                    return Err(Stop::Failed);
                }
                let range = self.bytes(slice);
                let len = range.len();
                // SAFETY: see `allreduce_pipelined`: only this thread touches the slice now.
                let dst = unsafe { self.out.get_mut(range.clone()) };
                let stop = |e: io::Error| {
                    if self.failed.load(Ordering::SeqCst) {
                        Stop::Failed
                    } else {
                        Stop::Io(e)
                    }
                };
                if s < n - 1 {
                    from.read_exact(&mut scratch[..len]).map_err(stop)?;
                    match self.input {
                        // SAFETY: the input is never written during the operation.
                        Some(i) => data::reduce_from(
                            self.dtype,
                            self.op,
                            dst,
                            unsafe { i.get(range) },
                            &scratch[..len],
                        ),
                        None => data::reduce(self.dtype, self.op, dst, &scratch[..len]),
                    }
                    if s == n - 2 && self.op == Op::Avg {
                        data::finish_avg(self.dtype, n, dst);
                    }
                } else {
                    from.read_exact(dst).map_err(stop)?;
                }
                self.done[s * self.max_slices + j].store(true, Ordering::Release);
                sender.unpark();
            }
        }
        Ok(())
    }
}

/// Waits for a slice's flag: a short spin (the common case on a fast link), then parking
/// until the receiver unparks this thread.
fn wait_flag(flag: &AtomicBool, failed: &AtomicBool) -> Result<(), Stop> {
    let mut spins = 0u32;
    loop {
        if flag.load(Ordering::Acquire) {
            return Ok(());
        }
        if failed.load(Ordering::Relaxed) {
            return Err(Stop::Failed);
        }
        if spins < 200 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            thread::park_timeout(Duration::from_millis(5));
        }
    }
}

/// A failed send to the right neighbour.
fn send_halt(right: &Peer, e: &io::Error, timeout: Duration) -> Halt {
    Halt::Transfer {
        peer: right.rank,
        reason: format!("sending to {right} failed: {}", describe(e, timeout)),
    }
}

/// A failed receive from the left neighbour.
fn recv_halt(left: &Peer, e: &io::Error, timeout: Duration) -> Halt {
    let reason = if e.kind() == io::ErrorKind::UnexpectedEof {
        format!("{left} closed its connection (it exited or was killed)")
    } else {
        format!("receiving from {left} failed: {}", describe(e, timeout))
    };
    Halt::Transfer {
        peer: left.rank,
        reason,
    }
}

fn describe(e: &io::Error, timeout: Duration) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            format!(
                "no progress for {}s (the rank stalled or the network dropped)",
                timeout.as_secs()
            )
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_segment_is_reduced_once_and_gathered_once() {
        for n in 2..7 {
            for r in 0..n {
                let reduced: Vec<usize> = (0..n - 1).map(|s| recv_segment(r, n, s)).collect();
                let gathered: Vec<usize> = (n - 1..2 * (n - 1))
                    .map(|s| recv_segment(r, n, s))
                    .collect();
                let owned = (r + 1) % n;
                let mut all = reduced.clone();
                all.sort();
                assert_eq!(
                    all,
                    (0..n).filter(|k| *k != r).collect::<Vec<_>>(),
                    "n={n} r={r}"
                );
                let mut all = gathered.clone();
                all.push(owned);
                all.sort();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "n={n} r={r}");
                for s in 1..2 * (n - 1) {
                    // What a rank sends at step s is what it received at step s-1...
                    assert_eq!(
                        send_segment(r, n, s),
                        recv_segment(r, n, s - 1),
                        "n={n} r={r} s={s}"
                    );
                    // ...and what its right neighbour receives at step s.
                    assert_eq!(send_segment(r, n, s), recv_segment((r + 1) % n, n, s));
                }
                assert_eq!(send_segment(r, n, 0), r);
                assert_eq!(send_segment(r, n, 0), recv_segment((r + 1) % n, n, 0));
            }
        }
    }

    #[test]
    fn segments_cover_the_message() {
        for (count, n) in [(0, 3), (1, 3), (10, 3), (1000, 7)] {
            let mut next = 0;
            for k in 0..n {
                let s = segment(count, n, k);
                assert_eq!(s.start, next);
                next = s.end;
            }
            assert_eq!(next, count);
        }
        let pieces: Vec<_> = slices(0..10, 4).collect();
        assert_eq!(pieces, [0..4, 4..8, 8..10]);
        assert_eq!(slices(5..5, 4).count(), 0);
    }
}
