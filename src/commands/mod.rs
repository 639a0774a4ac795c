//! One module per subcommand: its arguments and what it does.

pub mod apply;
pub(crate) mod audit;
pub mod bench;
pub(crate) mod explain;
pub(crate) mod fleet;
pub(crate) mod health;
pub(crate) mod pin;
pub(crate) mod preflight;
pub(crate) mod profiles;
pub(crate) mod status;
pub(crate) mod topo;

use std::io::Write;
use std::path::Path;

use crate::cli::{Cli, Command};
use crate::error::{Error, ExitCode, Result};
use crate::host::Root;

pub(crate) fn run(cli: Cli) -> Result<ExitCode> {
    let root = match cli.root {
        // A missing root is a failed mount or unpack, not a typo to correct: exit 3, so a
        // pipeline never mistakes it for a usage problem of its own.
        Some(dir) if !dir.is_dir() => {
            return Err(crate::image::RootError::Missing(dir).into());
        }
        Some(dir) => Root::new(dir),
        None => Root::live(),
    };
    match cli.command {
        Command::Audit(args) => audit::run(&args, &root),
        // Their transaction completes whatever happens to stdout; a report nobody saw is exit 3.
        Command::Apply(args) => crate::say::finish(apply::run(&args, &root)),
        Command::Rollback(args) => crate::say::finish(apply::rollback(&args, &root)),
        Command::Status(args) => status::run(&args, &root),
        Command::Profiles(args) => profiles::run(&args, &root),
        Command::Topo(args) => topo::run(&args, &root),
        Command::Pin(args) => pin::run(&args, &root),
        Command::Bench(args) => bench::run(&args, &root),
        Command::Health(args) => health::run(&args, &root),
        Command::Fleet(args) => fleet::run(&args),
        Command::Explain(args) => explain::run(&args, &root),
        Command::Preflight(args) => preflight::run(&args, &root),
    }
}

/// Writes a rendered report to `--output` atomically, or to stdout.
pub(crate) fn emit(text: &str, output: Option<&Path>) -> Result<()> {
    match output {
        Some(path) => crate::host::atomic::write_output(path, text.as_bytes()).map_err(|source| {
            Error::Write {
                path: path.to_path_buf(),
                source,
            }
        }),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .map_err(Error::Stdout)
        }
    }
}
