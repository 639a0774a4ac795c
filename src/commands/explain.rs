//! `gputune explain`: read a job's log and say what NCCL did, what went wrong, why, how to
//! fix it and which checks detect it; `--check` runs those checks here.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::checks::{self, AuditOptions};
use crate::error::{Error, ExitCode, Result};
use crate::explain::{self, render, rules, verify};
use crate::host::Root;
use crate::image::Mode;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The log: NCCL_DEBUG=INFO/WARN output, PyTorch/torchrun errors, nccl-tests or Slurm
    /// output; `-` or nothing reads standard input.
    #[arg(value_name = "LOG|-")]
    pub log: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ExplainFormat,
    /// Run the checks each problem (or possible cause) names on this node (or --root) and
    /// say whether the node confirms or refutes it; also flag what NCCL left unused here
    /// (active RDMA ports, nvidia_peermem, NVLink).
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainFormat {
    Text,
    Json,
}

/// Why the log could not be read (exit 3); `shown` is the path as the user may see it.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot read {shown}: {source}")]
    Open {
        shown: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {0}: it is a directory; name a log file or - for standard input")]
    Directory(String),
    #[error("cannot read the log: {0}")]
    Read(#[source] std::io::Error),
}

/// How long `--check`'s audit may take, as `audit`'s.
const CHECK_LIMITS: checks::TimeLimits = checks::TimeLimits {
    per_area: std::time::Duration::from_secs(60),
    total: std::time::Duration::from_secs(300),
};

fn open(path: Option<&PathBuf>) -> Result<Box<dyn BufRead>> {
    let path = match path {
        None => return Ok(Box::new(BufReader::new(std::io::stdin()))),
        Some(p) if p.as_os_str() == "-" => return Ok(Box::new(BufReader::new(std::io::stdin()))),
        Some(p) => p,
    };
    // The user named it: a FIFO or device is read as asked; a directory is not a log.
    let shown = || explain::clean(path.as_os_str().as_encoded_bytes());
    let unreadable = |source| LogError::Open {
        shown: shown(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if meta.is_dir() {
        return Err(LogError::Directory(shown()).into());
    }
    Ok(Box::new(BufReader::with_capacity(1 << 16, file)))
}

pub(crate) fn run(args: &ExplainArgs, root: &Root) -> Result<ExitCode> {
    let rules = rules::load(root).map_err(|e| Error::Usage(e.to_string()))?;
    let mut reader = open(args.log.as_ref())?;
    let mut analysis = explain::analyse(&mut reader, &rules).map_err(LogError::Read)?;
    let checks = if args.check {
        crate::image::check_root(root)?;
        let node = explain::node::Node::read(root);
        let here = node.slowdowns(&analysis.nccl);
        analysis.nccl.slowdowns.extend(here);
        analysis.nccl.slowdowns.sort_by_key(|s| s.line);
        let (profile, _) = super::audit::load_profile(None, root)?;
        let mode = Mode::detect(root, false);
        let options = AuditOptions {
            persisted: mode != Mode::Live,
            mode,
            ..AuditOptions::default()
        };
        let findings = checks::run_limited(root, &profile, &options, &[], CHECK_LIMITS);
        let judge = |problems: &[explain::Problem]| {
            problems
                .iter()
                .map(|p| verify::judge(p, &findings, &profile.name))
                .collect::<Vec<_>>()
        };
        Some(verify::Verdicts {
            problems: judge(&analysis.problems),
            candidates: judge(&analysis.candidates),
        })
    } else {
        None
    };
    let text = match args.format {
        ExplainFormat::Text => render::text(&analysis, checks.as_ref()),
        ExplainFormat::Json => {
            let mut text = serde_json::to_string_pretty(&render::json(&analysis, checks.as_ref()))
                .map_err(|source| Error::Render {
                    what: "JSON",
                    source,
                })?;
            text.push('\n');
            text
        }
    };
    super::emit(&text, None)?;
    Ok(
        if analysis.problems.is_empty() && analysis.not_understood_total == 0 {
            ExitCode::Ok
        } else {
            ExitCode::Findings
        },
    )
}
