//! `gputune pin`: exec a command on the CPUs and memory local to its GPU.

use clap::Args;

use crate::error::{Error, ExitCode, Result};
use crate::host::Root;

#[derive(Debug, Args)]
pub struct PinArgs {
    /// The GPU index to bind to [default: $LOCAL_RANK, as torchrun, Slurm and Open MPI set it].
    #[arg(long, value_name = "N")]
    pub local_rank: Option<u32>,
    /// Say which CPUs and memory nodes the command was bound to.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(_args: &PinArgs, _root: &Root) -> Result<ExitCode> {
    Err(Error::NotBuilt("pin"))
}
