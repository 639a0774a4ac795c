//! The collectives `gputune bench` measures, with nccl-tests' semantics: how big each rank's
//! send and receive buffers are for a row's size, where an in-place operation keeps its
//! data, what each rank contributes, the exact answer, and the bus-bandwidth factor.
//!
//! Sizes follow nccl-tests' `*GetCollByteCount`: a row's size is the larger buffer (the
//! gathered or scattered whole); AllGather and ReduceScatter use whole per-rank blocks
//! (`count / n` elements each); the count column is the per-rank count they pass to NCCL.

use serde::{Deserialize, Serialize};

use super::data::{self, DType, Op};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
}

/// What one row moves: the collective, its element type and its buffers' element counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub collective: Collective,
    pub dtype: DType,
    pub counts: Counts,
}

impl Shape {
    /// `count` elements of `dtype` requested between `ranks` ranks (see
    /// [`Collective::counts`]).
    pub(crate) fn new(collective: Collective, dtype: DType, count: usize, ranks: usize) -> Shape {
        Shape {
            collective,
            dtype,
            counts: collective.counts(count, ranks),
        }
    }

    /// Bytes of each rank's receive buffer.
    pub(crate) fn recv_bytes(&self) -> usize {
        self.counts.recv.saturating_mul(self.dtype.size())
    }

    /// Bytes of the count the library call takes: one rank's block for AllGather and
    /// ReduceScatter.
    pub(crate) fn block_bytes(&self) -> usize {
        self.counts.param.saturating_mul(self.dtype.size())
    }

    /// Bytes of the larger buffer, the one an in-place operation works in.
    pub(crate) fn whole_bytes(&self) -> usize {
        (self.counts.send.max(self.counts.recv)).saturating_mul(self.dtype.size())
    }
}

/// Element counts of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Elements in each rank's send buffer.
    pub send: usize,
    /// Elements in each rank's receive buffer.
    pub recv: usize,
    /// The count passed to the library call (and printed).
    pub param: usize,
    /// Where, in elements, the send data sits inside the receive buffer in place
    /// (AllGather), or the result inside the send buffer (ReduceScatter).
    pub in_place_offset: usize,
}

impl Collective {
    #[cfg(test)]
    pub(crate) const ALL: [Collective; 4] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
    ];

    /// The subcommand's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "allreduce",
            Collective::AllGather => "allgather",
            Collective::ReduceScatter => "reducescatter",
            Collective::Broadcast => "broadcast",
        }
    }

    /// nccl-tests' bus-bandwidth factor: AllReduce 2(n−1)/n, AllGather and ReduceScatter
    /// (n−1)/n, Broadcast 1.
    pub(crate) fn busbw_factor(self, ranks: usize) -> f64 {
        if ranks == 0 {
            return 0.0;
        }
        let n = ranks as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter => (n - 1.0) / n,
            Collective::Broadcast => 1.0,
        }
    }

    /// Whether the reduction operation matters (the redop column shows `none` otherwise).
    pub(crate) fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::ReduceScatter)
    }

    /// The root column: Broadcast from rank 0, the others have none (-1).
    pub(crate) fn root(self) -> i32 {
        if self == Collective::Broadcast { 0 } else { -1 }
    }

    /// Buffer sizes for `count` elements requested between `ranks` ranks (at least one
    /// element per rank).
    pub(crate) fn counts(self, count: usize, ranks: usize) -> Counts {
        let n = ranks.max(1);
        let per = (count / n).max(1);
        match self {
            Collective::AllReduce | Collective::Broadcast => Counts {
                send: count,
                recv: count,
                param: count,
                in_place_offset: 0,
            },
            Collective::AllGather => Counts {
                send: per,
                recv: per * n,
                param: per,
                in_place_offset: 0,
            },
            Collective::ReduceScatter => Counts {
                send: per * n,
                recv: per,
                param: per,
                in_place_offset: 0,
            },
        }
    }

    /// This rank's send buffer.
    pub(crate) fn fill_input(
        self,
        dtype: DType,
        op: Op,
        rank: usize,
        ranks: usize,
        out: &mut [u8],
    ) {
        let es = dtype.size();
        let per = out.len() / es;
        for (i, element) in out.chunks_exact_mut(es).enumerate() {
            let value = match self {
                Collective::AllReduce | Collective::ReduceScatter => {
                    data::input_value(op, rank, ranks, i)
                }
                Collective::AllGather => gathered_value(rank, ranks, rank * per + i),
                Collective::Broadcast => gathered_value(rank, ranks, i),
            };
            dtype.encode(value, element);
        }
    }

    /// How many elements of this rank's result differ from the exact answer.
    pub(crate) fn count_wrong(
        self,
        dtype: DType,
        op: Op,
        rank: usize,
        ranks: usize,
        result: &[u8],
    ) -> u64 {
        let es = dtype.size();
        let len = result.len() / es;
        match self {
            Collective::AllReduce => data::count_wrong_from(dtype, op, ranks, 0, result),
            Collective::ReduceScatter => {
                data::count_wrong_from(dtype, op, ranks, rank * len, result)
            }
            Collective::AllGather => {
                let per = len / ranks.max(1);
                exact(dtype, result, |i| {
                    let owner = (i / per.max(1)).min(ranks.saturating_sub(1));
                    gathered_value(owner, ranks, i)
                })
            }
            Collective::Broadcast => exact(dtype, result, |i| gathered_value(0, ranks, i)),
        }
    }
}

/// What rank `rank` contributes at element `index` of a gathered or broadcast buffer: small
/// integers (exact in every type) that differ between neighbouring ranks, so a block in the
/// wrong place is counted.
fn gathered_value(rank: usize, _ranks: usize, index: usize) -> f64 {
    ((index * 13 + rank * 7 + 3) % 17) as f64 - 8.0
}

fn exact(dtype: DType, result: &[u8], want: impl Fn(usize) -> f64) -> u64 {
    let es = dtype.size();
    let mut expected = [0u8; 8];
    let mut wrong = 0;
    for (i, element) in result.chunks_exact(es).enumerate() {
        dtype.encode(want(i), &mut expected[..es]);
        if dtype.decode(element) != dtype.decode(&expected[..es]) {
            wrong += 1;
        }
    }
    wrong
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_nccl_tests() {
        let c = Collective::AllGather.counts(10, 4);
        assert_eq!((c.send, c.recv, c.param), (2, 8, 2));
        let c = Collective::ReduceScatter.counts(10, 4);
        assert_eq!((c.send, c.recv, c.param), (8, 2, 2));
        let c = Collective::Broadcast.counts(10, 4);
        assert_eq!((c.send, c.recv, c.param), (10, 10, 10));
        assert_eq!(Collective::AllGather.counts(1, 4).recv, 4);
        assert_eq!(Collective::AllGather.busbw_factor(4), 0.75);
        assert_eq!(Collective::ReduceScatter.busbw_factor(2), 0.5);
        assert_eq!(Collective::Broadcast.busbw_factor(8), 1.0);
        assert_eq!(Collective::AllReduce.busbw_factor(2), 1.0);
    }

    #[test]
    fn the_checks_accept_the_answer_and_count_every_misplaced_element() {
        let (n, dtype, op) = (3, DType::Bf16, Op::Sum);
        let per = 7; // not a multiple of the inputs' period (5), so blocks differ
        // AllGather: concatenate every rank's input.
        let mut all = Vec::new();
        for r in 0..n {
            let mut block = vec![0u8; per * 2];
            Collective::AllGather.fill_input(dtype, op, r, n, &mut block);
            all.extend_from_slice(&block);
        }
        assert_eq!(Collective::AllGather.count_wrong(dtype, op, 1, n, &all), 0);
        let mut swapped = all.clone();
        swapped[..per * 2].copy_from_slice(&all[per * 2..per * 4]);
        assert!(Collective::AllGather.count_wrong(dtype, op, 1, n, &swapped) > 0);
        // Broadcast: rank 0's input everywhere; another rank's input is wrong.
        let mut root = vec![0u8; 16];
        Collective::Broadcast.fill_input(dtype, op, 0, n, &mut root);
        assert_eq!(Collective::Broadcast.count_wrong(dtype, op, 2, n, &root), 0);
        let mut other = vec![0u8; 16];
        Collective::Broadcast.fill_input(dtype, op, 1, n, &mut other);
        assert_eq!(
            Collective::Broadcast.count_wrong(dtype, op, 2, n, &other),
            8
        );
        // ReduceScatter: rank r's block of the reduced whole.
        let mut whole = vec![0u8; per * n * 2];
        for (i, e) in whole.chunks_exact_mut(2).enumerate() {
            dtype.encode(data::expected_value(op, dtype, n, i), e);
        }
        let block = &whole[per * 2 * 2..per * 3 * 2];
        assert_eq!(
            Collective::ReduceScatter.count_wrong(dtype, op, 2, n, block),
            0
        );
        assert!(Collective::ReduceScatter.count_wrong(dtype, op, 0, n, block) > 0);
    }
}
