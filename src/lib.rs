//! gputune: tune and validate Linux GPU training nodes.
//!
//! Layers, data flowing one way: [`cli`] → [`commands`] → [`profile`] and [`checks`] (per
//! area of the node) → [`host`] (every path under one [`host::Root`]); [`report`] renders.
//!
//! `unsafe` is refused everywhere but [`ffi`], so a foreign call cannot creep in unreviewed.

#![deny(unsafe_code)]

pub mod apply;
pub mod bench;
pub mod checks;
pub mod cli;
pub mod commands;
pub mod docs;
pub(crate) mod error;
pub mod explain;
#[allow(unsafe_code)] // the one home of foreign calls; every block there has a SAFETY note
pub(crate) mod ffi;
pub mod finding;
pub(crate) mod fleet;
pub mod host;
pub mod image;
pub(crate) mod inventory;
pub(crate) mod preflight;
pub(crate) mod probe;
pub(crate) mod probe_error;
pub mod profile;
pub(crate) mod report;
pub(crate) mod say;
pub(crate) mod slurm;
#[cfg(test)]
pub(crate) mod testing;

pub use error::{Error, ExitCode, Result};

/// Runs a parsed command line.
pub fn run(cli: cli::Cli) -> Result<ExitCode> {
    commands::run(cli)
}
