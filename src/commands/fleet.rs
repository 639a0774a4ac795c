//! `gputune fleet`: many nodes' audit reports (files, directories, or stdin as `pdsh`,
//! `clush` and `srun` collect them) compared, so the node unlike the others stands out.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::error::{Error, ExitCode, Result};
use crate::fleet::{self, input};

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Audit JSON reports: files, directories of *.json, or `-` for a stream on stdin.
    #[arg(value_name = "REPORT.json|DIR|-", required = true)]
    pub reports: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: FleetFormat,
    /// Write the result to FILE (atomically; missing directories are created) instead of
    /// stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FleetFormat {
    Table,
    Json,
}

pub fn run(args: &FleetArgs) -> Result<ExitCode> {
    // A report that cannot be read or is not an audit is the user's input: exit 2, named.
    let docs = input::read_all(&args.reports, &mut std::io::stdin().lock())
        .map_err(|e| Error::Usage(e.to_string()))?;
    let nodes = fleet::reports(&docs).map_err(|e| Error::Usage(e.to_string()))?;
    let analysis = fleet::analyse(&nodes);
    let text = match args.format {
        FleetFormat::Table => fleet::render_text(&analysis),
        FleetFormat::Json => {
            let mut text = serde_json::to_string_pretty(&serde_json::json!({
                "schema_version": 1,
                "passed": !analysis.failed,
                "nodes": analysis.nodes,
                "drift": analysis.drift,
                "failures": analysis.failures,
            }))
            .map_err(|e| Error::Runtime(format!("cannot render JSON: {e}")))?;
            text.push('\n');
            text
        }
    };
    super::emit(&text, args.output.as_deref())?;
    Ok(if analysis.failed {
        ExitCode::Findings
    } else {
        ExitCode::Ok
    })
}
