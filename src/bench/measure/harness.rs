//! The measurement loop shared by every backend, as nccl-tests runs it: at each size, for
//! out-of-place then in-place, `warmup` untimed operations, a barrier, `iters` operations
//! timed back to back on the wall clock (time per operation = elapsed / iters), then `check`
//! operations on fresh input compared element by element with the exact answer. Rank 0
//! averages every rank's time and sums every rank's wrong elements.

use std::time::Instant;

use super::collective::{Collective, Shape};
use super::data::{DType, Op};
use super::size::{self, SizeStep};
use super::stats::{Half, Row};
use crate::bench::control::group::Group;
use crate::bench::{Backend, BenchError, JobError};
use serde::{Deserialize, Serialize};

/// What is measured: the collective, the sizes (`-b`, `-e`, `-f`/`-i`), the data and the
/// iteration counts. Part of every rank's [`Settings`](crate::bench::Settings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub collective: Collective,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step: SizeStep,
    pub dtype: DType,
    pub op: Op,
    pub iters: usize,
    pub warmup: usize,
    pub check: usize,
}

impl Sweep {
    /// The sizes, `min_bytes` to `max_bytes` by `step` (validated by the command).
    pub(crate) fn sizes(&self) -> Vec<u64> {
        size::sizes(self.min_bytes, self.max_bytes, self.step)
    }
}

/// Elements for a requested size: whole elements, at least one.
pub(crate) fn element_count(size: u64, dtype: DType) -> u64 {
    (size / dtype.size() as u64).max(1)
}

/// Runs the plan; `on_row` sees each row as rank 0 completes it (other ranks get none).
pub fn run(
    backend: &mut dyn Backend,
    group: &mut Group,
    plan: &Sweep,
    mut on_row: impl FnMut(&Row) -> Result<(), BenchError>,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    let es = plan.dtype.size();
    for (seq, &size) in plan.sizes().iter().enumerate() {
        let coll = plan.collective;
        let requested = usize::try_from(element_count(size, plan.dtype))
            .map_err(|_| BenchError::Usage(format!("size {size} does not fit in memory")))?;
        let shape = Shape::new(coll, plan.dtype, requested, group.world);
        let counts = shape.counts;
        let bytes = counts
            .send
            .checked_mul(es)
            .ok_or_else(|| BenchError::Usage(format!("size {size} does not fit in memory")))?;
        let mut input = Vec::new();
        input
            .try_reserve_exact(bytes)
            .map_err(|_| JobError::Allocate { bytes, size })?;
        input.resize(bytes, 0);
        coll.fill_input(plan.dtype, plan.op, group.rank, group.world, &mut input);
        backend.prepare(shape, &input)?;
        drop(input);

        let mut times = [0.0; 2];
        let mut wrong = [None; 2];
        for (half, in_place) in [false, true].into_iter().enumerate() {
            backend.reset(in_place)?;
            backend.run(plan.op, in_place, plan.warmup)?;
            group.barrier()?;
            let start = Instant::now();
            backend.run(plan.op, in_place, plan.iters)?;
            times[half] = start.elapsed().as_secs_f64() * 1e6 / plan.iters.max(1) as f64;
            if plan.check > 0 {
                let mut total = 0;
                for _ in 0..plan.check {
                    backend.reset(in_place)?;
                    backend.run(plan.op, in_place, 1)?;
                    let result = backend.result(in_place)?;
                    total +=
                        coll.count_wrong(plan.dtype, plan.op, group.rank, group.world, &result);
                }
                wrong[half] = Some(total);
            }
        }
        // A rank can find at most every element it checks wrong, on every check iteration.
        let max_wrong = (counts.send.max(counts.recv) as u64).saturating_mul(plan.check as u64);
        if let Some(all) = group.report(seq as u64, times, wrong, max_wrong)? {
            // nccl-tests: the size is the larger buffer, algbw that size over the time.
            let bytes = (counts.send.max(counts.recv) * es) as u64;
            let factor = coll.busbw_factor(all.len());
            let half = |h: usize| {
                let t: Vec<f64> = all.iter().map(|(t, _)| t[h]).collect();
                let w: Vec<Option<u64>> = all.iter().map(|(_, w)| w[h]).collect();
                Half::with_factor(bytes, factor, &t, &w)
            };
            let row = Row {
                algo: backend.algorithm(bytes as usize),
                size: bytes,
                count: counts.param as u64,
                dtype: plan.dtype.name(),
                redop: if coll.reduces() {
                    plan.op.name()
                } else {
                    "none"
                },
                root: coll.root(),
                out_of_place: half(0),
                in_place: half(1),
            };
            on_row(&row)?;
            rows.push(row);
        }
    }
    Ok(rows)
}
