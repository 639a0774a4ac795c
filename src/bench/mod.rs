//! `gputune bench allreduce`: one harness (sizes, timing, checking, bandwidth) over a
//! [`Backend`] that moves the data — NCCL on GPUs, or a ring over TCP between CPU ranks —
//! and a control plane ([`control`]) that joins the ranks, synchronises them and makes every
//! rank stop within the timeout when one of them dies or stalls.

pub mod control;
pub(crate) mod job;
pub mod measure;
pub(crate) mod nccl;
pub(crate) mod pairs;
pub mod tcp;

use serde::{Deserialize, Serialize};

pub use crate::error::{BenchError, JobError};
use measure::collective::Shape;
use measure::data::Op;
use measure::harness::Sweep;

/// The settings every rank must share; rank 0 refuses a rank whose settings differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// What is measured (flattened: the JSON keeps `min_bytes`, `iters`... at this level).
    #[serde(flatten)]
    pub sweep: Sweep,
    /// The backend asked for (`auto`, `nccl`, `tcp`).
    pub backend: job::Choice,
    /// TCP connections per ring neighbour and direction.
    pub streams: usize,
    /// SO_SNDBUF/SO_RCVBUF in bytes for data sockets; 0 leaves the kernel's autotuning.
    pub sockbuf: u64,
    /// The TCP backend's algorithm (`auto` chooses by size and rank count).
    pub algo: Algo,
}

/// The TCP backend's AllReduce algorithms, as `--algo` names them (like nccl-tests'
/// `NCCL_ALGO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Algo {
    /// By size and rank count, as MPI's tuned collectives choose.
    Auto,
    /// The pipelined ring: 2(n−1) steps of 1/n of the message, for large messages.
    Ring,
    /// Recursive doubling: log2(n) exchanges of the whole message, for small messages.
    Rd,
    /// Recursive halving then doubling: log2(n) steps each way, for medium messages.
    Rabenseifner,
}

impl Algo {
    /// Up to this many bytes, `auto` takes recursive doubling: on loopback (2 ranks) it
    /// stays ahead of Rabenseifner up to about 512 KiB, the whole message per step costing
    /// less than a second round of wake-ups.
    pub(crate) const RD_MAX: usize = 256 << 10;
    /// Below this many bytes (and above `RD_MAX`), `auto` takes Rabenseifner; from here the
    /// pipelined ring wins. Measured on loopback with 2, 3 and 4 ranks (minimum of 3 runs,
    /// at real-time priority so that other work on the 2-core VM stayed out of the figures):
    /// at 1 MiB Rabenseifner was ahead (0.13 against 0.16 ms with 2 ranks), at 2 MiB the ring
    /// (0.30 against 0.49 ms with 2 ranks, 0.85 against 1.12 with 3, 1.46 against 1.62 with
    /// 4): its separate connection per direction keeps streaming where one connection used
    /// both ways slows down.
    pub(crate) const RABENSEIFNER_MAX: usize = 2 << 20;

    pub(crate) fn name(self) -> &'static str {
        match self {
            Algo::Auto => "auto",
            Algo::Ring => "ring",
            Algo::Rd => "rd",
            Algo::Rabenseifner => "rabenseifner",
        }
    }

    /// The algorithm that runs a message of `bytes` between `world` ranks.
    pub(crate) fn resolve(self, bytes: usize, world: usize) -> Algo {
        match self {
            Algo::Auto if world <= 1 => Algo::Ring,
            Algo::Auto if bytes <= Algo::RD_MAX => Algo::Rd,
            Algo::Auto if bytes < Algo::RABENSEIFNER_MAX => Algo::Rabenseifner,
            Algo::Auto => Algo::Ring,
            other => other,
        }
    }
}

/// Moves the data of one collective. Buffers live wherever the backend keeps them (host
/// memory for TCP, device memory for NCCL); the harness only sees bytes at the edges.
pub trait Backend {
    /// Allocates buffers for one row (`shape`, see
    /// [`measure::collective::Collective::counts`]) and loads this rank's send buffer, `input`.
    fn prepare(&mut self, shape: Shape, input: &[u8]) -> Result<(), BenchError>;
    /// Runs `iters` operations back to back and returns once the last one completed.
    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError>;
    /// Before a checked operation, as nccl-tests: out of place, clears the output (a check
    /// that did nothing must not pass on the timed loop's leftovers); in place, loads the
    /// input again at its in-place position.
    fn reset(&mut self, in_place: bool) -> Result<(), BenchError>;
    /// This rank's result of the last run (the receive buffer, or for ReduceScatter in
    /// place, this rank's block of the send buffer).
    fn result(&mut self, in_place: bool) -> Result<Vec<u8>, BenchError>;
    /// The algorithm a message of `bytes` takes, where the backend chooses one.
    fn algorithm(&self, _bytes: usize) -> Option<&'static str> {
        None
    }
}
