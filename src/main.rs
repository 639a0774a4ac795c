//! The `gputune` binary: parse, run, map the outcome to a documented exit code.

use clap::Parser;

fn main() {
    let cli = gputune::cli::Cli::parse();
    let code = match gputune::run(cli) {
        Ok(code) => code,
        Err(err) if err.is_broken_pipe() => gputune::ExitCode::Ok,
        Err(err) => {
            eprintln!("gputune: {err}");
            err.exit_code()
        }
    };
    std::process::exit(code as i32);
}
