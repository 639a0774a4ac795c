//! The pairwise AllReduce algorithms, run on the calling thread over one connection per peer:
//!
//! - recursive doubling: log2(p) exchanges of the whole message with the partner `rank ^ 2^k`,
//!   each reduced into the result: the fewest dependent steps, for small messages;
//! - Rabenseifner: reduce-scatter by recursive halving (each exchange sends half of what is
//!   left and keeps the other half), then all-gather by recursive doubling: log2(p) steps each
//!   way and 2(p−1)/p of the message sent, for medium messages.
//!
//! A rank count that is not a power of two is folded first, as MPICH does: with p the largest
//! power of two below n and r = n − p, each even rank below 2r hands its input to the odd rank
//! above it and waits; the p remaining ranks run the algorithm; the odd ranks hand the result
//! back.

use std::ops::Range;
use std::time::Duration;

use super::Reduce;
use super::link::{Link, Peer, Spin};
use super::ring::segment;
use crate::bench::measure::data::{self, Op};

/// One rank's connections to every other rank.
pub struct Mesh {
    pub(super) rank: usize,
    pub(super) world: usize,
    /// `links[p]`: the connection to rank p (`None` for this rank).
    links: Vec<Option<Link>>,
    spin: Spin,
    timeout: Duration,
    scratch: Vec<u8>,
}

/// This rank's part in the power-of-two core of a folded rank count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// An even rank below 2r: hands its input to rank + 1, receives the result from it.
    Folded { partner: usize },
    /// Takes part as `new` among the `pof2` core ranks; `folded` is the even rank whose input
    /// it absorbs, if any.
    Core { new: usize, folded: Option<usize> },
}

/// Received data is reduced in chunks of this many bytes as it arrives (small enough to
/// stay in cache, large enough that the call overhead vanishes).
const REDUCE_CHUNK: usize = 64 << 10;

/// The largest power of two not above `n` (n ≥ 1).
pub(crate) fn pof2(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

pub(super) fn role(rank: usize, world: usize) -> Role {
    let rem = world - pof2(world);
    if rank < 2 * rem {
        if rank.is_multiple_of(2) {
            Role::Folded { partner: rank + 1 }
        } else {
            Role::Core {
                new: rank / 2,
                folded: Some(rank - 1),
            }
        }
    } else {
        Role::Core {
            new: rank - rem,
            folded: None,
        }
    }
}

/// The real rank of core rank `new`.
fn real(new: usize, world: usize) -> usize {
    let rem = world - pof2(world);
    if new < rem { 2 * new + 1 } else { new + rem }
}

/// A failure, naming the peer.
#[derive(Debug)]
pub(crate) struct LinkError {
    pub peer: usize,
    pub error: std::io::Error,
}

pub(super) type Result<T> = std::result::Result<T, LinkError>;

/// Two disjoint ranges of one buffer: the first to read, the second to write.
pub(super) fn split(buf: &mut [u8], read: Range<usize>, write: Range<usize>) -> (&[u8], &mut [u8]) {
    if read.start >= write.end {
        let (lo, hi) = buf.split_at_mut(read.start);
        (&hi[..read.len()], &mut lo[write])
    } else {
        assert!(read.end <= write.start, "ranges overlap");
        let (lo, hi) = buf.split_at_mut(write.start);
        (&lo[read], &mut hi[..write.len()])
    }
}

impl Mesh {
    pub(crate) fn new(
        rank: usize,
        world: usize,
        links: Vec<Option<Link>>,
        spin: Spin,
        timeout: Duration,
    ) -> Mesh {
        Mesh {
            rank,
            world,
            links,
            spin,
            timeout,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn world(&self) -> usize {
        self.world
    }

    /// A failed exchange in words, naming the peer by rank and host.
    pub(crate) fn failure(&self, e: &LinkError) -> String {
        let peer = self.links.get(e.peer).and_then(Option::as_ref).map_or_else(
            || Peer {
                rank: e.peer,
                host: "?".into(),
            },
            |l| l.peer.clone(),
        );
        super::link::failed("exchanging with", &peer, &e.error, self.timeout)
    }

    fn link(&self, peer: usize) -> Result<&Link> {
        self.links
            .get(peer)
            .and_then(Option::as_ref)
            .ok_or_else(|| LinkError {
                peer,
                error: std::io::Error::other("no connection"),
            })
    }

    /// Sends `out` to `to` while receiving `into` from `from`; a failure names `from` when
    /// both are involved (a dead peer shows first as a silent or closed receive).
    pub(super) fn shift(&self, to: usize, out: &[u8], from: usize, into: &mut [u8]) -> Result<()> {
        let (t, f) = (self.link(to)?, self.link(from)?);
        super::link::shift(t, out, f, into, self.spin, self.timeout).map_err(|error| LinkError {
            peer: if into.is_empty() { to } else { from },
            error,
        })
    }

    /// [`Mesh::exchange`] that reduces what arrives into `job` as it arrives (`into` holds
    /// the raw bytes), a chunk at a time.
    fn exchange_reducing(
        &self,
        peer: usize,
        out: &[u8],
        into: &mut [u8],
        mut job: Reduce,
    ) -> Result<()> {
        let link = self.link(peer)?;
        let es = job.dtype.size();
        let total = into.len();
        let mut done = 0;
        let mut arrived = |prefix: &[u8]| {
            let end = prefix.len() / es * es;
            if end > done && (end - done >= REDUCE_CHUNK || end == total) {
                job.part(done..end).apply(&prefix[done..end]);
                done = end;
            }
        };
        super::link::shift_with(link, out, link, into, self.spin, self.timeout, &mut arrived)
            .map_err(|error| LinkError { peer, error })
    }

    pub(super) fn exchange(&self, peer: usize, out: &[u8], into: &mut [u8]) -> Result<()> {
        self.link(peer)?
            .exchange(out, into, self.spin, self.timeout)
            .map_err(|error| LinkError { peer, error })
    }

    /// Gives a scratch buffer back for the next operation.
    pub(super) fn keep_scratch(&mut self, scratch: Vec<u8>) {
        self.scratch = scratch;
    }

    pub(super) fn scratch(&mut self, len: usize) -> Vec<u8> {
        let mut s = std::mem::take(&mut self.scratch);
        if s.len() < len {
            s.resize(len, 0);
        }
        s
    }

    /// Runs `core` among the power-of-two core of the ranks, with `scratch` bytes of scratch
    /// (the whole message when this rank absorbs a folded partner's input): an extra rank
    /// first hands its input to its partner, which absorbs it, and receives the result at
    /// the end.
    fn in_core(
        &mut self,
        job: Reduce,
        scratch: usize,
        core: impl FnOnce(&Mesh, Core) -> Result<()>,
    ) -> Result<()> {
        let (input, out, dtype, op) = (job.input, job.out, job.dtype, job.op);
        let role = role(self.rank, self.world);
        let mut fresh = input.is_some();
        match role {
            Role::Folded { partner } => {
                self.exchange(partner, input.unwrap_or(out), &mut [])?;
            }
            Role::Core {
                new, folded: from, ..
            } => {
                let need = if from.is_some() {
                    scratch.max(out.len())
                } else {
                    scratch
                };
                let mut buf = self.scratch(need);
                let result = (|| {
                    if let Some(from) = from {
                        let into = &mut buf[..out.len()];
                        let absorbed = Reduce {
                            input,
                            out: &mut *out,
                            dtype,
                            op,
                        };
                        self.exchange_reducing(from, &[], into, absorbed)?;
                        fresh = false;
                    }
                    let job = Reduce {
                        input: input.filter(|_| fresh),
                        out: &mut *out,
                        dtype,
                        op,
                    };
                    core(
                        self,
                        Core {
                            new,
                            p: pof2(self.world),
                            scratch: &mut buf,
                            job,
                        },
                    )
                })();
                self.scratch = buf;
                result?;
            }
        }
        // Hand the result back to a folded rank, or receive it.
        match role {
            Role::Folded { partner } => self.exchange(partner, &[], out),
            Role::Core {
                folded: Some(to), ..
            } => self.exchange(to, out, &mut []),
            Role::Core { folded: None, .. } => Ok(()),
        }
    }

    /// AllReduce by recursive doubling.
    pub(crate) fn recursive_doubling(&mut self, job: Reduce) -> Result<()> {
        let whole = job.out.len();
        self.in_core(job, whole, |mesh, core| mesh.doubling(core))
    }

    fn doubling(&self, core: Core) -> Result<()> {
        let (new, p, scratch, job) = (core.new, core.p, core.scratch, core.job);
        let (mut input, out, dtype, op) = (job.input, job.out, job.dtype, job.op);
        let mut mask = 1;
        while mask < p {
            let partner = real(new ^ mask, self.world);
            let into = &mut scratch[..out.len()];
            self.exchange(partner, input.unwrap_or(out), into)?;
            let step = Reduce {
                input,
                out: &mut *out,
                dtype,
                op,
            };
            step.apply(into);
            input = None;
            mask <<= 1;
        }
        if let Some(input) = input {
            out.copy_from_slice(input);
        }
        if op == Op::Avg {
            data::finish_avg(dtype, self.world, out);
        }
        Ok(())
    }

    /// AllReduce by recursive halving (reduce-scatter) then recursive doubling (all-gather).
    pub(crate) fn rabenseifner(&mut self, job: Reduce) -> Result<()> {
        let half = job.out.len().div_ceil(2) + job.dtype.size();
        self.in_core(job, half, |mesh, core| mesh.halving_doubling(core))
    }

    fn halving_doubling(&self, core: Core) -> Result<()> {
        let (new, p, scratch, job) = (core.new, core.p, core.scratch, core.job);
        let (mut input, out, dtype, op) = (job.input, job.out, job.dtype, job.op);
        let es = dtype.size();
        let count = out.len() / es;
        // Bytes of blocks lo..hi when the message is cut into p blocks.
        let blocks = |lo: usize, hi: usize| {
            segment(count, p, lo).start * es..segment(count, p, hi.max(lo + 1) - 1).end * es
        };
        let (mut lo, mut hi) = (0, p);
        let mut mask = p / 2;
        while mask > 0 {
            let partner = real(new ^ mask, self.world);
            let mid = (lo + hi) / 2;
            let (keep, give) = if new & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let (keep, give) = (blocks(keep.0, keep.1), blocks(give.0, give.1));
            let into = &mut scratch[..keep.len()];
            match input {
                Some(input) => {
                    let job = Reduce {
                        input: Some(&input[keep.clone()]),
                        out: &mut out[keep],
                        dtype,
                        op,
                    };
                    self.exchange_reducing(partner, &input[give], into, job)?
                }
                None => {
                    let (src, dst) = split(out, give, keep);
                    let job = Reduce {
                        input: None,
                        out: dst,
                        dtype,
                        op,
                    };
                    self.exchange_reducing(partner, src, into, job)?
                }
            }
            input = None;
            if new & mask == 0 {
                hi = mid;
            } else {
                lo = mid;
            }
            mask >>= 1;
        }
        if let Some(input) = input {
            out.copy_from_slice(input);
        }
        if op == Op::Avg {
            data::finish_avg(dtype, self.world, &mut out[blocks(new, new + 1)]);
        }
        let mut mask = 1;
        while mask < p {
            let partner = new ^ mask;
            let mine = blocks(new & !(mask - 1), (new & !(mask - 1)) + mask);
            let theirs = blocks(partner & !(mask - 1), (partner & !(mask - 1)) + mask);
            let (src, into) = split(out, mine, theirs);
            self.exchange(real(partner, self.world), src, into)?;
            mask <<= 1;
        }
        Ok(())
    }
}

/// A core rank's part of a folded reduction.
struct Core<'a> {
    /// Its index among the `p` core ranks.
    new: usize,
    p: usize,
    scratch: &'a mut [u8],
    /// The reduction; its input is `None` once `out` holds this rank's input (in place, or
    /// a folded rank's input already absorbed).
    job: Reduce<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_pairs_ranks_and_the_core_is_a_power_of_two() {
        for n in 1..=9 {
            let p = pof2(n);
            assert!(p <= n && n < 2 * p, "n={n}");
            let mut core: Vec<usize> = Vec::new();
            for r in 0..n {
                match role(r, n) {
                    Role::Folded { partner } => {
                        assert_eq!(
                            role(partner, n),
                            Role::Core {
                                new: partner / 2,
                                folded: Some(r)
                            }
                        );
                    }
                    Role::Core { new, .. } => {
                        assert_eq!(real(new, n), r);
                        core.push(new);
                    }
                }
            }
            assert_eq!(core, (0..p).collect::<Vec<_>>(), "n={n}");
        }
    }

    #[test]
    fn split_gives_disjoint_views() {
        let mut b: Vec<u8> = (0..10).collect();
        let (r, w) = split(&mut b, 6..9, 1..3);
        assert_eq!(r, [6, 7, 8]);
        w.copy_from_slice(&[0, 0]);
        let (r, w) = split(&mut b, 0..2, 4..6);
        assert_eq!(r, [0, 0]);
        assert_eq!(w, [4, 5]);
    }
}
