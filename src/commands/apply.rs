//! `gputune apply` and `gputune rollback`.

use clap::Args;

use crate::error::{Error, ExitCode, Result};
use crate::finding::Area;
use crate::host::Root;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Profile name or TOML file to apply.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: String,
    /// Print the plan (before -> after) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Apply without asking for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Change the live values only; write nothing that survives a reboot.
    #[arg(long)]
    pub no_persist: bool,
    /// Apply only the changes of these areas.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "AREA,...")]
    pub only: Vec<Area>,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {}

pub fn run(_args: &ApplyArgs, _root: &Root) -> Result<ExitCode> {
    Err(Error::NotBuilt("apply"))
}

pub fn rollback(_args: &RollbackArgs, _root: &Root) -> Result<ExitCode> {
    Err(Error::NotBuilt("rollback"))
}
