//! AllGather, ReduceScatter and Broadcast over the pairwise links, on the calling thread:
//!
//! - AllGather: recursive doubling when the rank count is a power of two (log2(n) exchanges
//!   of a doubling block), the ring otherwise (n−1 steps of one block, each rank forwarding
//!   what it received);
//! - ReduceScatter: the ring (n−1 steps, each reducing one block on its way round, so every
//!   rank ends with its own block reduced by all);
//! - Broadcast: a binomial tree from rank 0 (log2(n) rounds).

use super::Reduce;
use super::pairwise::{Mesh, Result, split};
use crate::bench::measure::data::{self, Op};

/// Byte range of rank `k`'s block of `per` bytes.
fn block(k: usize, per: usize) -> std::ops::Range<usize> {
    k * per..(k + 1) * per
}

impl Mesh {
    /// `buf` holds n blocks of `per` bytes, this rank's already in place; fills the others.
    pub(crate) fn allgather(&mut self, buf: &mut [u8], per: usize, rd: bool) -> Result<()> {
        let (n, r) = (self.world, self.rank);
        if n == 1 {
            return Ok(());
        }
        if rd && n.is_power_of_two() {
            let mut mask = 1;
            while mask < n {
                let partner = r ^ mask;
                let (mine, theirs) = (r & !(mask - 1), partner & !(mask - 1));
                let (src, into) = split(
                    buf,
                    mine * per..(mine + mask) * per,
                    theirs * per..(theirs + mask) * per,
                );
                self.exchange(partner, src, into)?;
                mask <<= 1;
            }
            return Ok(());
        }
        let (left, right) = ((r + n - 1) % n, (r + 1) % n);
        for s in 0..n - 1 {
            let send = (r + n - s) % n;
            let recv = (r + 2 * n - s - 1) % n;
            let (src, into) = split(buf, block(send, per), block(recv, per));
            self.shift(right, src, left, into)?;
        }
        Ok(())
    }

    /// `input` holds n blocks of `out.len()` bytes; `out` receives this rank's block reduced
    /// over every rank. In place (`input` `None`), `out` holds the n blocks and the result
    /// lands in this rank's block of it.
    pub(crate) fn reduce_scatter(&mut self, job: Reduce) -> Result<()> {
        let (input, out, dtype, op) = (job.input, job.out, job.dtype, job.op);
        let (n, r) = (self.world, self.rank);
        let per = match input {
            Some(_) => out.len(),
            None => out.len() / n,
        };
        if n == 1 {
            if let Some(input) = input {
                out.copy_from_slice(&input[..per]);
            }
            return Ok(());
        }
        let (left, right) = ((r + n - 1) % n, (r + 1) % n);
        let mut scratch = self.scratch(2 * per);
        let result = (|| {
            let (acc, incoming) = scratch[..2 * per].split_at_mut(per);
            for s in 0..n - 1 {
                let send = (r + 2 * n - s - 1) % n;
                let recv = (r + 2 * n - s - 2) % n;
                let src: &[u8] = match input {
                    _ if s > 0 => acc,
                    Some(input) => &input[block(send, per)],
                    None => &out[block(send, per)],
                };
                self.shift(right, src, left, incoming)?;
                // Each step adds this rank's share of the block passing by; the last one
                // (recv == r) completes this rank's own block, in the result.
                let step = match (input, s == n - 2) {
                    (Some(input), true) => Reduce {
                        input: Some(&input[block(recv, per)]),
                        out: &mut *out,
                        dtype,
                        op,
                    },
                    (None, true) => Reduce {
                        input: None,
                        out: &mut out[block(r, per)],
                        dtype,
                        op,
                    },
                    (Some(input), false) => Reduce {
                        input: Some(&input[block(recv, per)]),
                        out: acc,
                        dtype,
                        op,
                    },
                    (None, false) => Reduce {
                        input: Some(&out[block(recv, per)]),
                        out: acc,
                        dtype,
                        op,
                    },
                };
                step.apply(incoming);
            }
            if op == Op::Avg {
                let mine = if input.is_some() {
                    0..per
                } else {
                    block(r, per)
                };
                data::finish_avg(dtype, n, &mut out[mine]);
            }
            Ok(())
        })();
        self.keep_scratch(scratch);
        result
    }

    /// Rank 0's `buf` to every rank, down a binomial tree.
    pub(crate) fn broadcast(&mut self, buf: &mut [u8]) -> Result<()> {
        let (n, r) = (self.world, self.rank);
        let mut mask = 1;
        while mask < n {
            if r & mask != 0 {
                self.exchange(r - mask, &[], buf)?;
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if r + mask < n {
                self.exchange(r + mask, buf, &mut [])?;
            }
            mask >>= 1;
        }
        Ok(())
    }
}
