//! `gputune fleet`: many nodes' audit reports (files, directories, or stdin as `pdsh`,
//! `clush` and `srun` collect them) folded into value groups per check and fact, nodes named
//! as Slurm hostlists, what fails first.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::error::{Error, ExitCode, Result};
use crate::fleet::{self, render, verdict};

#[derive(Debug, Args)]
#[command(after_help = "\
Output (table), for 10,000 nodes that share six failures:
  gputune fleet: 10000 nodes, 9989 failing, 6 failing checks, 1 differing check or fact
  failing: gpu[00001-00996,00998-10000]

  FAIL net.core.rmem_max (network)
     9989  fail   212992 (want >= 16777216)  gpu[00001-00996,00998-10000]
       11  pass   16777216                   gpu[00997,01001-01010]
  ...
  DIFFERS kernel (fact)
     9999  6.8.0-45-generic  gpu[00001-04999,05001-10000]
        1  6.8.0-31-generic  gpu05000

The profile's verdict decides what is wrong, not the majority; a skipped check is no value.
Exit 0 when nothing fails, 1 when a node fails a check or a value that must be alike
(kernel, gpu and nic values, host facts) differs, 3 when no report could be read.")]
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
    /// Write the result to FILE (atomically) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FleetFormat {
    Table,
    Json,
    Prometheus,
}

pub fn run(args: &FleetArgs) -> Result<ExitCode> {
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
                .map(|p| crate::say::clean(&p.display().to_string()).into_owned())
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
