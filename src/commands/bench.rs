//! `gputune bench allreduce`.

use clap::{Args, Subcommand};

use crate::error::{Error, ExitCode, Result};
use crate::host::Root;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// AllReduce bandwidth and latency, with nccl-tests-compatible numbers.
    Allreduce(AllreduceArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    Nccl,
    Tcp,
}

#[derive(Debug, Args)]
pub struct AllreduceArgs {
    /// Which transport to measure: NCCL on GPUs, or TCP between CPU ranks.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: Backend,
    /// Smallest message size (K/M/G are powers of two).
    #[arg(
        short = 'b',
        long = "minbytes",
        default_value = "8",
        value_name = "SIZE"
    )]
    pub min_bytes: String,
    /// Largest message size (K/M/G are powers of two).
    #[arg(
        short = 'e',
        long = "maxbytes",
        default_value = "128M",
        value_name = "SIZE"
    )]
    pub max_bytes: String,
}

pub fn run(_args: &BenchArgs, _root: &Root) -> Result<ExitCode> {
    Err(Error::NotBuilt("bench allreduce"))
}
