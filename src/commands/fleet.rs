//! `gputune fleet`: many nodes' audit reports (files, directories, or stdin as `pdsh`,
//! `clush` and `srun` collect them) folded into value groups per check and fact, nodes named
//! as Slurm hostlists, what fails first.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::error::{Error, ExitCode, Result};
use crate::fleet::{self, render, verdict};

/// What the table looks like at scale: `--help` ends with it, the man page's OUTPUT shows it.
pub(crate) const SAMPLE_OUTPUT: &str = "\
Output (the table) for 10,000 nodes that fail the same checks, with eleven odd nodes and one
other kernel:

  gputune fleet: 10000 nodes, 10000 failing; 6 checks fail; 1 value that must be alike differs
  failing: gpu[00001-10000]

  FAIL net.core.wmem_max (network)
    10000  fail   212992 (want >= 16777216)  gpu[00001-10000]
  ...
  FAIL net.core.rmem_max (network)
     9989  fail   212992 (want >= 16777216)  gpu[00001-00996,00998-01000,01011-10000]
       11  pass   16777216                   gpu[00997,01001-01010]

  DIFFERS kernel (fact)
     9999  4.18.0-513.el8.x86_64  gpu[00001-04999,05001-10000]
        1  6.8.0-31-generic       gpu05000

  43 checks and 2 facts alike on every node.

Each check's value groups, failing first, with their node counts and their nodes as Slurm
hostlists. The profile's verdict decides what is wrong, not the majority; a skipped check is
no value. DIFFERS: a value that must be alike on every node of a job (kernel, host facts, gpu
and nic values) is not; VARIES: nodes pass with different values, or some warn (shown, not
failing). Exit 0 when nothing fails, 1 when a node fails a check or a value that must be
alike differs, 3 when no report could be read.";

#[derive(Debug, Args)]
#[command(after_help = SAMPLE_OUTPUT)]
pub struct FleetArgs {
    /// Audit JSON reports: files, directories of *.json, or `-` for a stream on stdin
    /// (concatenated JSON, one per line, clush -b banners, or pdsh/clush `host: ` lines).
    #[arg(value_name = "REPORT.json|DIR|-", required = true)]
    pub reports: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: FleetFormat,
    /// Print only the hostlist of the nodes that fail a check (for scontrol or pdsh -w).
    #[arg(long)]
    pub failing: bool,
    /// Write the result to FILE (atomically; missing directories are created) instead of
    /// stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FleetFormat {
    Table,
    Json,
    Prometheus,
}

pub(crate) fn run(args: &FleetArgs) -> Result<ExitCode> {
    let reading = fleet::read(&args.reports, &mut std::io::stdin());
    // What could not be read is named on stderr (never fatal while anything else was read).
    {
        let mut err = std::io::stderr().lock();
        for problem in &reading.problems {
            let _ = writeln!(err, "gputune: fleet: skipped {problem}");
        }
        if reading.skipped > reading.problems.len() {
            let _ = writeln!(
                err,
                "gputune: fleet: skipped {} more",
                reading.skipped - reading.problems.len()
            );
        }
    }
    if reading.fleet.hosts.is_empty() {
        return Err(Error::Runtime(format!(
            "fleet: no readable audit report in {} ({} skipped); give files, directories of \
             *.json, or `-`, holding `gputune audit --format json` output",
            args.reports
                .iter()
                .map(|p| crate::say::cleaned_line(&p.display().to_string()).into_owned())
                .collect::<Vec<_>>()
                .join(", "),
            reading.skipped
        )));
    }
    let analysis = verdict::analyse(&reading.fleet);
    let text = if args.failing {
        render::failing(&analysis)
    } else {
        match args.format {
            FleetFormat::Table => render::table(&analysis, &reading),
            FleetFormat::Json => render::json(&analysis, &reading),
            FleetFormat::Prometheus => render::prometheus(&analysis, &reading),
        }
    };
    super::emit(&text, args.output.as_deref())?;
    Ok(if analysis.passed {
        ExitCode::Ok
    } else {
        ExitCode::Findings
    })
}
