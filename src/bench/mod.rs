//! `gputune bench allreduce`: one harness (sizes, timing, checking, bandwidth) over a
//! [`Backend`] that moves the data — NCCL on GPUs, or a ring over TCP between CPU ranks —
//! and a control plane ([`control`]) that joins the ranks, synchronises them and makes every
//! rank stop within the timeout when one of them dies or stalls.

pub mod control;
pub mod data;
pub mod frame;
pub mod harness;
pub mod hostlist;
pub mod job;
pub mod launch;
pub mod nccl;
pub mod output;
pub mod pairs;
pub mod prometheus;
pub mod rendezvous;
pub mod size;
pub mod stats;
pub mod tcp;

use serde::{Deserialize, Serialize};

use crate::error::ExitCode;
use data::{DType, Op};
use size::Step;

/// The settings every rank must share; rank 0 refuses a rank whose settings differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step: Step,
    pub iters: usize,
    pub warmup: usize,
    pub check: usize,
    pub dtype: DType,
    pub op: Op,
    /// The backend asked for (`auto`, `nccl`, `tcp`).
    pub backend: String,
    /// TCP connections per ring neighbour and direction.
    pub streams: usize,
    /// SO_SNDBUF/SO_RCVBUF in bytes for data sockets; 0 leaves the kernel's autotuning.
    pub sockbuf: u64,
}

/// Why a benchmark did not pass.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag, variable or setting is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Something stopped the job: a rank left, a library is missing (exit 3).
    #[error("{0}")]
    Runtime(String),
    /// The run finished but failed its checks: wrong results or bandwidth below the
    /// threshold (exit 1). The figures were printed.
    #[error("{0}")]
    Failed(String),
    /// Standard output went away (`| head`): the caller exits quietly on a broken pipe.
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
}

impl BenchError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            BenchError::Usage(_) => ExitCode::Usage,
            BenchError::Runtime(_) | BenchError::Stdout(_) => ExitCode::Runtime,
            BenchError::Failed(_) => ExitCode::Findings,
        }
    }
}

/// Moves the data of one AllReduce. Buffers live wherever the backend keeps them (host
/// memory for TCP, device memory for NCCL); the harness only sees bytes at the edges.
pub trait Backend {
    /// Allocates buffers for `input.len() / dtype.size()` elements and loads this rank's input.
    fn prepare(&mut self, dtype: DType, input: &[u8]) -> Result<(), BenchError>;
    /// Runs `iters` AllReduces back to back and returns once the last one completed.
    fn run(&mut self, op: Op, in_place: bool, iters: usize) -> Result<(), BenchError>;
    /// Loads the input again where an in-place run overwrote it.
    fn reset(&mut self, in_place: bool) -> Result<(), BenchError>;
    /// The result of the last run.
    fn result(&mut self, in_place: bool) -> Result<Vec<u8>, BenchError>;
}
