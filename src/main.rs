//! The `gputune` binary: parse, run, map the outcome to a documented exit code.

use std::io::Write;

use clap::Parser;

fn main() {
    // DESIGN.md: an empty GPUTUNE_ROOT means unset (clap would reject the empty value).
    if std::env::var_os("GPUTUNE_ROOT").is_some_and(|v| v.is_empty()) {
        // SAFETY: nothing else runs yet: no thread can be reading the environment.
        unsafe { std::env::remove_var("GPUTUNE_ROOT") };
    }
    let cli = gputune::cli::Cli::parse();
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
