//! `gputune preflight`: the flags, checked without touching the host, then handed to
//! [`crate::preflight`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::error::{Error, ExitCode, Result};
use crate::host::Root;
use crate::preflight::{self, Format, Options};

#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// Hard deadline in seconds for the whole check, on every rank: a rank that has not
    /// joined by then is reported missing.
    #[arg(long, value_name = "SECS", default_value = "30")]
    pub timeout: u64,
    /// Output format (rank 0's report; the other ranks print one line each).
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write rank 0's report to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// `bench allreduce --pairs --format json` output, drawn as a bandwidth heat map in the
    /// HTML page.
    #[arg(long, value_name = "FILE")]
    pub pairs_report: Option<PathBuf>,
}

pub(crate) fn run(args: &PreflightArgs, root: &Root) -> Result<ExitCode> {
    if !root.is_live() {
        return Err(Error::Usage(
            "preflight checks the running job on this node's network: --root does not apply".into(),
        ));
    }
    if !(2..=3600).contains(&args.timeout) {
        return Err(Error::Usage(format!(
            "--timeout {}: give 2 to 3600 seconds",
            args.timeout
        )));
    }
    if args.pairs_report.is_some() && args.format != Format::Html {
        return Err(Error::Usage(
            "--pairs-report is drawn in the HTML page: add --format html".into(),
        ));
    }
    preflight::run(
        &Options {
            timeout: Duration::from_secs(args.timeout),
            format: args.format,
            output: args.output.clone(),
            pairs_report: args.pairs_report.clone(),
        },
        root,
    )
}
