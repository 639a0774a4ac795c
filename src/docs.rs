//! Man pages and shell completions, generated from the clap definition so they never drift.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// `(file name, content)` of every man page: `gputune.1` and one per subcommand.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let mut cmd = Cli::command();
    cmd.build();
    let mut pages = vec![("gputune.1".to_string(), render_man(cmd.clone()))];
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let name = format!("gputune-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .display_name(name.clone())
            .bin_name(name.clone());
        pages.push((format!("{name}.1"), render_man(page)));
    }
    pages
}

fn render_man(cmd: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = clap_mangen::Man::new(cmd).render(&mut out);
    out
}

/// `(file name, content)` of the bash, zsh and fish completion scripts.
pub fn completions() -> Vec<(String, Vec<u8>)> {
    [
        (Shell::Bash, "gputune.bash"),
        (Shell::Zsh, "_gputune"),
        (Shell::Fish, "gputune.fish"),
    ]
    .into_iter()
    .map(|(shell, file)| {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "gputune", &mut out);
        (file.to_string(), out)
    })
    .collect()
}
