//! `gputune preflight`: started by the job's own launcher on every node, it checks that the
//! job will start (names, `MASTER_ADDR`, NCCL's interface, versions, every pair's ports)
//! before the first GPU-hour is spent. Ranks meet through the bench's launcher detection and
//! authenticated frames ([`crate::bench::control::launch`],
//! [`crate::bench::control::auth`]); unlike the bench's rendezvous, a rank that never arrives
//! does not stop the check: rank 0 reports it with everything else when the deadline comes.

pub(crate) mod facts;
pub(crate) mod ifaces;
pub(crate) mod judge;
pub(crate) mod meet;
pub(crate) mod plan;
pub(crate) mod probe;
pub(crate) mod render;
pub(crate) mod wire;

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, ExitCode, Result};
use crate::host::Root;

/// The most ranks a preflight takes: rank 0 keeps one connection per rank (and raises its
/// open-file limit for them), no thread.
pub(crate) const MAX_WORLD: usize = 16384;

/// How the report is written (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    /// One self-contained page: the reachability matrix and, with --pairs-report, bandwidth.
    Html,
}

/// A validated command line.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub timeout: Duration,
    pub format: Format,
    pub output: Option<PathBuf>,
    /// `bench --pairs --format json` output, shown as a heat map in the HTML page.
    pub pairs_report: Option<PathBuf>,
}

/// Runs this rank's part of the check.
pub(crate) fn run(options: &Options, root: &Root) -> Result<ExitCode> {
    let vars: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let env = crate::bench::control::launch::from_vars_up_to(&vars, MAX_WORLD)
        .map_err(|e| Error::Usage(e.to_string()))?
        .ok_or_else(|| {
            Error::Usage(
                "preflight runs on every node of a job: start it with srun, torchrun-style \
                 RANK/WORLD_SIZE/MASTER_ADDR variables, or mpirun"
                    .into(),
            )
        })?;
    let pairs = match &options.pairs_report {
        Some(path) => Some(render::read_pairs(path).map_err(|e| Error::Usage(e.to_string()))?),
        None => None,
    };
    let ports = plan::job_ports(root);
    if env.rank == 0 {
        meet::rank0(options, root, &env, &ports, pairs.as_ref())
    } else {
        meet::member(options, root, &env, &ports)
    }
}
