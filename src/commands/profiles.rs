//! `gputune profiles list | show NAME`.

use clap::{Args, Subcommand};
use comfy_table::{Table, presets::NOTHING};

use crate::checks;
use crate::error::{ExitCode, Result};
use crate::host::Root;
use crate::profile::Loader;

#[derive(Debug, Args)]
pub struct ProfilesArgs {
    #[command(subcommand)]
    pub command: ProfilesCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProfilesCommand {
    /// List built-in and site profiles (/etc/gputune/profiles wins on a name clash).
    List {
        /// Print only the names, one per line (for scripts and shell completion).
        #[arg(long)]
        names: bool,
    },
    /// Print a profile fully resolved (includes merged), each setting with its origin.
    Show {
        /// Profile name or TOML file.
        #[arg(value_name = "NAME|FILE")]
        name: String,
    },
}

pub(crate) fn run(args: &ProfilesArgs, root: &Root) -> Result<ExitCode> {
    let loader = Loader::new(root, &checks::keys);
    let text = match &args.command {
        ProfilesCommand::List { names: true } => {
            loader.list()?.into_iter().map(|l| l.name + "\n").collect()
        }
        ProfilesCommand::List { names: false } => {
            let mut table = Table::new();
            table
                .load_style(NOTHING)
                .set_header(["NAME", "SOURCE", "DESCRIPTION"]);
            for l in loader.list()? {
                table.add_row([l.name, l.source, l.description]);
            }
            match crate::profile::default::choose(root) {
                Ok((name, reason)) => {
                    format!("{table}\n\nDefault for this node: {name} ({reason})\n")
                }
                // An image without a site default has none: say why instead of failing.
                Err(crate::Error::Usage(why)) => format!("{table}\n\nNo default: {why}\n"),
                Err(e) => return Err(e),
            }
        }
        ProfilesCommand::Show { name } => loader.load(name)?.to_toml(),
    };
    super::emit(&text, None)?;
    Ok(ExitCode::Ok)
}
