//! The `gputune` binary: parse, run, map the outcome to a documented exit code.

use std::io::Write;

use clap::{CommandFactory, FromArgMatches};

fn main() {
    let mut command = gputune::cli::Cli::command();
    if std::env::var_os("GPUTUNE_ROOT").is_some_and(|v| v.is_empty()) {
        // DESIGN.md: an empty GPUTUNE_ROOT means unset; clap would reject the empty value.
        command = command.mut_arg("root", |arg| arg.env(None));
    }
    let cli = gputune::cli::Cli::from_arg_matches_mut(&mut command.get_matches())
        .unwrap_or_else(|e| e.exit());
    let code = match gputune::run(cli) {
        Ok(code) => code,
        Err(err) if err.is_broken_pipe() => gputune::ExitCode::Ok,
        Err(err) => {
            // eprintln! would panic on a closed stderr; the exit code still tells.
            let _ = writeln!(std::io::stderr(), "gputune: {err}");
            err.exit_code()
        }
    };
    std::process::exit(code as i32);
}
