//! Ring AllReduce: reduce-scatter then all-gather, 2(n−1) steps, each moving one n-th of the
//! message to the right neighbour while one n-th arrives from the left.
//!
//! The steps are pipelined on the calling thread. Every segment is cut into slices, and the
//! bytes of a slice received at step s (reduced into the result during the reduce-scatter,
//! stored during the all-gather) leave again at step s+1 as soon as they are in place, while
//! the rest is still arriving. The sockets are non-blocking and one loop moves whatever can
//! move, so no step waits for the whole previous one, no thread hands data to another, and
//! what was just reduced is still in cache when it leaves. With several streams
//! (`--streams`), slice j of every segment travels on stream j mod streams, so a slice's
//! bytes always arrive in order on one connection.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::poll::PollFd;

use super::link::{Idle, Peer, Spin, failed, interest, poll_all, read_some, write_some};
use super::{LinkError, Reduce};
use crate::bench::BenchError;
use crate::bench::control::group::JobStop;
use crate::bench::measure::data::{self, DType, Op};

/// Bytes per slice: the largest write a stream makes per turn and the reduce-scatter's
/// scratch. Reduced bytes are forwarded as they land whatever the slice, so pipelining does
/// not need small slices; large ones mean fewer turns, which matters when local ranks
/// outnumber cores and every turn may cost a context switch. Measured on loopback (medians
/// of 8 alternating runs): 4 ranks on 2 cores, 2 MiB took 1.97 ms with 1 MiB slices against
/// 2.31 with 256 KiB, 4 MiB 4.14 against 4.84; 3 ranks at 2 MiB 1.25 against 1.45; 2 ranks
/// (a core each) no slower.
const SLICE_BYTES: usize = 1 << 20;

/// The elements of segment `k` when `count` elements are cut into `world` segments.
pub(crate) fn segment(count: usize, world: usize, k: usize) -> Range<usize> {
    let at = |i: usize| ((i as u128 * count as u128) / world as u128) as usize;
    at(k)..at(k + 1)
}

/// The segment a rank sends at step `s` (reduce-scatter for `s < n−1`, then all-gather).
pub(crate) fn send_segment(rank: usize, world: usize, s: usize) -> usize {
    let n = world;
    if s < n - 1 {
        (rank + n - s % n) % n
    } else {
        (rank + 1 + n - (s - (n - 1)) % n) % n
    }
}

/// The segment a rank receives at step `s`.
pub(crate) fn recv_segment(rank: usize, world: usize, s: usize) -> usize {
    let n = world;
    if s < n - 1 {
        (rank + 2 * n - s - 1) % n
    } else {
        (rank + n - (s - (n - 1)) % n) % n
    }
}

/// One connection each way to the ring's neighbours: a stream.
struct Link {
    send: TcpStream,
    recv: TcpStream,
}

/// This rank's place in the ring and its connections.
pub struct Ring {
    rank: usize,
    world: usize,
    links: Vec<Link>,
    /// One per stream: incoming reduce-scatter bytes before they are reduced.
    scratch: Vec<Vec<u8>>,
    left: Peer,
    right: Peer,
    spin: Spin,
    timeout: Duration,
    fatal: Arc<JobStop>,
}

/// Why a stream stopped.
enum Failure {
    Send(io::Error),
    Recv(io::Error),
    /// Another stream of the same operation failed first; its failure says why.
    Interrupted,
}

impl Ring {
    pub(crate) fn alone() -> Ring {
        let nobody = || Peer {
            rank: 0,
            host: String::new(),
        };
        Ring {
            rank: 0,
            world: 1,
            links: Vec::new(),
            scratch: Vec::new(),
            left: nobody(),
            right: nobody(),
            spin: Spin::for_host(1, 1),
            timeout: Duration::from_secs(1),
            fatal: Arc::default(),
        }
    }

    /// The ring over `send` (to the right neighbour) and `recv` (from the left one), one
    /// pair per stream; the sockets are made non-blocking.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        rank: usize,
        world: usize,
        send: Vec<TcpStream>,
        recv: Vec<TcpStream>,
        left: Peer,
        right: Peer,
        spin: Spin,
        timeout: Duration,
        fatal: Arc<JobStop>,
    ) -> io::Result<Ring> {
        let links = send
            .into_iter()
            .zip(recv)
            .map(|(send, recv)| {
                send.set_nonblocking(true)?;
                recv.set_nonblocking(true)?;
                Ok(Link { send, recv })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Ring {
            rank,
            world,
            scratch: links.iter().map(|_| Vec::new()).collect(),
            links,
            left,
            right,
            spin,
            timeout,
            fatal,
        })
    }

    /// `out = input ∘ (every other rank's input)`; `input` `None` means in place (`out` holds
    /// the input).
    pub(crate) fn allreduce(&mut self, job: Reduce) -> Result<(), BenchError> {
        let (input, out, dtype, op) = (job.input, job.out, job.dtype, job.op);
        if let Some(input) = input
            && input.len() != out.len()
        {
            return Err(LinkError::Lengths.into());
        }
        if self.world == 1 {
            if let Some(input) = input {
                out.copy_from_slice(input);
            }
            return Ok(());
        }
        if self.links.is_empty() {
            return Err(LinkError::NoRing.into());
        }
        let layout = Layout::new(self.rank, self.world, out.len(), dtype, self.links.len());
        for scratch in &mut self.scratch {
            if scratch.len() < layout.slice_bytes() {
                scratch.resize(layout.slice_bytes(), 0);
            }
        }
        let work = Work { layout, input, op };
        let shares = Share::split(out, &layout);
        let driver = Driver {
            work: &work,
            links: &self.links,
            spin: self.spin,
            timeout: self.timeout,
            failed: AtomicBool::new(false),
        };
        let result = if self.links.len() == 1 {
            let share = shares.into_iter().next().unwrap_or_default();
            driver.drive(0, &mut self.scratch[0], share)
        } else {
            // A thread per stream, each moving its own slices: the copies through the kernel
            // spread over cores, as fast NICs need.
            let driver = &driver;
            std::thread::scope(|scope| {
                let running: Vec<_> = shares
                    .into_iter()
                    .zip(self.scratch.iter_mut())
                    .enumerate()
                    .map(|(t, (share, scratch))| {
                        scope.spawn(move || {
                            super::placement::release_current_thread();
                            driver.drive(t, scratch, share)
                        })
                    })
                    .collect();
                let mut first = Ok(());
                for thread in running {
                    let result = thread.join().unwrap_or(Err(Failure::Interrupted));
                    // The first failure that is not just another stream's echo.
                    if let Err(failure) = result
                        && (first.is_ok() || matches!(first, Err(Failure::Interrupted)))
                    {
                        first = Err(failure);
                    }
                }
                first
            })
        };
        result.map_err(|failure| self.blame(failure))
    }

    /// The error for a failed operation: rank 0's verdict when there is one, else the
    /// neighbour the failing side was talking to.
    fn blame(&self, failure: Failure) -> BenchError {
        if let Some(verdict) = self.fatal.reason() {
            return BenchError::Runtime(verdict);
        }
        let (doing, peer, e) = match failure {
            Failure::Send(e) => ("sending to", &self.right, e),
            Failure::Recv(e) => ("receiving from", &self.left, e),
            Failure::Interrupted => {
                return LinkError::Stopped.into();
            }
        };
        BenchError::Transfer {
            peer: peer.rank,
            reason: failed(doing, peer, &e, self.timeout),
        }
    }
}

/// How one operation is cut: segments per step, slices per segment, slices per stream.
#[derive(Debug, Clone, Copy)]
struct Layout {
    rank: usize,
    world: usize,
    count: usize,
    elem: usize,
    slice_elems: usize,
    streams: usize,
    dtype: DType,
}

impl Layout {
    fn new(rank: usize, world: usize, bytes: usize, dtype: DType, streams: usize) -> Layout {
        let elem = dtype.size();
        Layout {
            rank,
            world,
            count: bytes / elem,
            elem,
            slice_elems: (SLICE_BYTES / elem).max(1),
            streams,
            dtype,
        }
    }

    fn steps(&self) -> usize {
        2 * (self.world - 1)
    }

    fn slice_bytes(&self) -> usize {
        self.slice_elems * self.elem
    }

    /// Whether step `s` belongs to the reduce-scatter.
    fn reduces(&self, s: usize) -> bool {
        s < self.world - 1
    }

    /// Byte range of slice `j` of segment `seg`, if the segment has one.
    fn slice(&self, seg: usize, j: usize) -> Option<Range<usize>> {
        let elems = segment(self.count, self.world, seg);
        let start = elems.start + j * self.slice_elems;
        (start < elems.end)
            .then(|| start * self.elem..(start + self.slice_elems).min(elems.end) * self.elem)
    }

    /// The slot (segment, slice) sent or received at a step.
    fn sent(&self, s: usize, j: usize) -> Option<Slot> {
        let seg = send_segment(self.rank, self.world, s);
        self.slot(s, seg, j)
    }

    fn received(&self, s: usize, j: usize) -> Option<Slot> {
        let seg = recv_segment(self.rank, self.world, s);
        self.slot(s, seg, j)
    }

    fn slot(&self, step: usize, seg: usize, slice: usize) -> Option<Slot> {
        self.slice(seg, slice).map(|bytes| Slot {
            step,
            seg,
            slice,
            bytes,
        })
    }

    /// The first slot at or after (`s`, `j`) that stream `t` carries, in (step, slice)
    /// order, on the side `side` names.
    fn next(
        &self,
        t: usize,
        mut s: usize,
        mut j: usize,
        side: fn(&Layout, usize, usize) -> Option<Slot>,
    ) -> Option<Slot> {
        while s < self.steps() {
            if let Some(slot) = side(self, s, j) {
                return Some(slot);
            }
            (s, j) = (s + 1, t);
        }
        None
    }

    /// The slot after `at` on the same stream and side.
    fn after(&self, at: &Slot, side: fn(&Layout, usize, usize) -> Option<Slot>) -> Option<Slot> {
        self.next(
            at.slice % self.streams,
            at.step,
            at.slice + self.streams,
            side,
        )
    }
}

/// One operation: its layout and data.
struct Work<'a> {
    layout: Layout,
    input: Option<&'a [u8]>,
    op: Op,
}

/// A slice of a segment at one step, with its bytes in the message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    step: usize,
    seg: usize,
    slice: usize,
    bytes: Range<usize>,
}

impl Slot {
    /// (step, slice): the order a stream carries its slots in.
    fn order(&self) -> (usize, usize) {
        (self.step, self.slice)
    }
}

/// One stream's share of the result: `of[seg][j / streams]` is slice j of segment `seg`
/// (the slices j ≡ t mod streams). Streams own disjoint bytes, so each can run on its own
/// thread.
#[derive(Default)]
struct Share<'a> {
    of: Vec<Vec<&'a mut [u8]>>,
}

impl<'a> Share<'a> {
    /// Cuts `out` into every stream's share.
    fn split(out: &'a mut [u8], layout: &Layout) -> Vec<Share<'a>> {
        let mut shares: Vec<Share> = (0..layout.streams)
            .map(|_| Share {
                of: (0..layout.world).map(|_| Vec::new()).collect(),
            })
            .collect();
        let mut rest = out;
        for seg in 0..layout.world {
            let len = segment(layout.count, layout.world, seg).len() * layout.elem;
            let (mut bytes, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            let mut j = 0;
            while !bytes.is_empty() {
                let cut = layout.slice_bytes().min(bytes.len());
                let (piece, tail) = std::mem::take(&mut bytes).split_at_mut(cut);
                bytes = tail;
                shares[j % layout.streams].of[seg].push(piece);
                j += 1;
            }
        }
        shares
    }

    fn get(&mut self, at: &Slot, streams: usize) -> &mut [u8] {
        &mut *self.of[at.seg][at.slice / streams]
    }
}

/// Runs streams: each moves its own slots, and a failing one wakes the others.
struct Driver<'a> {
    work: &'a Work<'a>,
    links: &'a [Link],
    spin: Spin,
    timeout: Duration,
    failed: AtomicBool,
}

impl Driver<'_> {
    /// Moves every slot of stream `t`: sends what is in place, receives what arrives, and
    /// waits (spin, then poll) only when nothing could move.
    fn drive(&self, t: usize, scratch: &mut [u8], mut share: Share) -> Result<(), Failure> {
        let result = self.moves(t, scratch, &mut share);
        if result.is_err() && self.links.len() > 1 {
            self.failed.store(true, Ordering::SeqCst);
            // Wake streams blocked on a healthy peer. Only the local read side is shut: the
            // peers must see their own first-hand error (or rank 0's verdict), not a
            // connection this rank closed.
            for link in self.links {
                let _ = link.recv.shutdown(Shutdown::Read);
            }
        }
        result
    }

    fn moves(&self, t: usize, scratch: &mut [u8], share: &mut Share) -> Result<(), Failure> {
        let (work, link) = (self.work, &self.links[t]);
        let layout = &work.layout;
        let mut at = Cursors {
            send: layout.next(t, 0, t, Layout::sent),
            sent: 0,
            recv: layout.next(t, 0, t, Layout::received),
            got: 0,
            ready: 0,
        };
        let mut idle = Idle::new(self.spin, self.timeout);
        loop {
            if self.failed.load(Ordering::Relaxed) {
                return Err(Failure::Interrupted);
            }
            let sent = at.send(work, &link.send, share).map_err(Failure::Send)?;
            let received = at
                .receive(work, &link.recv, scratch, share)
                .map_err(|e| self.failure(e))?;
            if at.send.is_none() && at.recv.is_none() {
                return Ok(());
            }
            if sent || received {
                idle.moved();
                continue;
            }
            let wait = match idle.wait() {
                Ok(Some(wait)) => wait,
                Ok(None) => continue,
                // A silent left neighbour, or a right one that stopped reading.
                Err(e) if at.recv.is_some() => return Err(Failure::Recv(e)),
                Err(e) => return Err(Failure::Send(e)),
            };
            poll_all(
                &mut [
                    PollFd::new(link.send.as_fd(), interest(at.can_send(), false)),
                    PollFd::new(link.recv.as_fd(), interest(false, at.recv.is_some())),
                ],
                wait,
            )
            .map_err(Failure::Recv)?;
        }
    }

    /// A receive failed: because another stream shut it (`Interrupted`), or on its own.
    fn failure(&self, e: io::Error) -> Failure {
        if self.failed.load(Ordering::SeqCst) {
            Failure::Interrupted
        } else {
            Failure::Recv(e)
        }
    }
}

/// Where one stream stands: the slot it is sending and how much of it left, the slot it is
/// receiving and how much of it arrived and is in place (reduced or stored).
struct Cursors {
    send: Option<Slot>,
    sent: usize,
    recv: Option<Slot>,
    got: usize,
    ready: usize,
}

impl Cursors {
    /// Bytes of the slot being sent that are in place to leave: all of it at step 0, else
    /// as much of the same slice of the previous step as arrived (a stream receives the
    /// previous step's slice before this one, in order).
    fn sendable(&self, at: &Slot) -> usize {
        if at.step == 0 {
            return at.bytes.len();
        }
        let previous = (at.step - 1, at.slice);
        match &self.recv {
            None => at.bytes.len(),
            Some(r) if r.order() > previous => at.bytes.len(),
            Some(r) if r.order() == previous => self.ready,
            Some(_) => 0,
        }
    }

    fn can_send(&self) -> bool {
        self.send
            .as_ref()
            .is_some_and(|at| self.sendable(at) > self.sent)
    }

    /// Sends what is ready, one write per turn so that receiving is never starved (each
    /// write is a copy into the kernel; what arrives meanwhile waits, cooling, in the socket
    /// buffer); whether anything moved.
    fn send(&mut self, work: &Work, mut to: &TcpStream, share: &mut Share) -> io::Result<bool> {
        let layout = &work.layout;
        let Some(at) = &self.send else {
            return Ok(false);
        };
        let ready = self.sendable(at);
        if self.sent >= ready {
            return Ok(false);
        }
        let whole: &[u8] = match work.input {
            Some(input) if at.step == 0 => &input[at.bytes.clone()],
            _ => share.get(at, layout.streams),
        };
        let n = write_some(&mut to, &whole[self.sent..ready])?;
        self.sent += n;
        if self.sent == at.bytes.len() {
            self.send = layout.after(at, Layout::sent);
            self.sent = 0;
        }
        Ok(n > 0)
    }

    /// Receives what arrived, reducing (reduce-scatter) or storing (all-gather) it in
    /// place, until nothing more is there; whether anything moved.
    fn receive(
        &mut self,
        work: &Work,
        mut from: &TcpStream,
        scratch: &mut [u8],
        share: &mut Share,
    ) -> io::Result<bool> {
        let layout = &work.layout;
        let mut moved = false;
        while let Some(at) = &self.recv {
            let len = at.bytes.len();
            let reduces = layout.reduces(at.step);
            let dst = share.get(at, layout.streams);
            let n = if reduces {
                read_some(&mut from, &mut scratch[self.got..len])?
            } else {
                read_some(&mut from, &mut dst[self.got..])?
            };
            if n == 0 {
                break;
            }
            self.got += n;
            moved = true;
            if reduces {
                // Whole elements, reduced while they are still in cache.
                let end = self.got / layout.elem * layout.elem;
                let done = self.ready..end;
                let dst = &mut dst[done.clone()];
                let incoming = &scratch[done.clone()];
                let local = at.bytes.start + done.start..at.bytes.start + done.end;
                let step = Reduce {
                    input: work.input.map(|input| &input[local]),
                    out: &mut *dst,
                    dtype: layout.dtype,
                    op: work.op,
                };
                step.apply(incoming);
                // The last reduce-scatter step completes this rank's own segment.
                if at.step == layout.world - 2 && work.op == Op::Avg {
                    data::finish_avg(layout.dtype, layout.world, dst);
                }
                self.ready = end;
            } else {
                self.ready = self.got;
            }
            if self.ready == len {
                self.recv = layout.after(at, Layout::received);
                (self.got, self.ready) = (0, 0);
            }
        }
        Ok(moved)
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
    }

    /// Every stream's slices, in the order it carries them.
    fn carried(
        layout: &Layout,
        t: usize,
        side: fn(&Layout, usize, usize) -> Option<Slot>,
    ) -> Vec<Range<usize>> {
        let mut at = layout.next(t, 0, t, side);
        let mut all = Vec::new();
        while let Some(slot) = at {
            all.push(slot.bytes.clone());
            at = layout.after(&slot, side);
        }
        all
    }

    #[test]
    fn streams_carry_every_slice_once_and_match_the_neighbours() {
        // 3 ranks, 8 MiB of f32 (uneven segments of three slices, the last one short), 1
        // and 3 streams; and a message smaller than the ring (empty segments).
        for (bytes, n, streams) in [(8 << 20, 3, 1), ((8 << 20) + 8, 3, 3), (8, 4, 2)] {
            for r in 0..n {
                let me = Layout::new(r, n, bytes, DType::F32, streams);
                let left = Layout::new((r + n - 1) % n, n, bytes, DType::F32, streams);
                let mut received = Vec::new();
                for t in 0..streams {
                    // What the left neighbour sends on stream t is what this rank receives.
                    assert_eq!(
                        carried(&left, t, Layout::sent),
                        carried(&me, t, Layout::received)
                    );
                    received.extend(carried(&me, t, Layout::received));
                }
                // Every byte but this rank's own share arrives once in each phase.
                let total: usize = received.iter().map(|r| r.len()).sum();
                let own = segment(bytes / 4, n, r).len() + segment(bytes / 4, n, (r + 1) % n).len();
                assert_eq!(total, 2 * bytes - own * 4, "bytes={bytes} n={n} r={r}");
            }
        }
    }
}
