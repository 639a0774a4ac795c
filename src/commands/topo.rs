//! `gputune topo`: GPUs, NICs, NUMA nodes and how they reach each other.

use clap::Args;

use crate::error::{Error, ExitCode, Result};
use crate::host::Root;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopoFormat {
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct TopoArgs {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: TopoFormat,
}

pub fn run(_args: &TopoArgs, _root: &Root) -> Result<ExitCode> {
    Err(Error::NotBuilt("topo"))
}
