//! `gputune apply` and `gputune rollback`: their flags, handed to [`crate::apply::run`],
//! which decides and says what it does.

use clap::Args;

use crate::apply::nft::NftCommand;
use crate::apply::operator::Console;
use crate::apply::run::{Request, apply_with, rollback_preview, rollback_with};
use crate::checks;
use crate::error::{Error, ExitCode, Result};
use crate::finding::Area;
use crate::host::Root;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Profile name or TOML file to apply.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: String,
    /// Print the plan (before -> after) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Apply without asking for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Change the live values only; write nothing that survives a reboot.
    #[arg(long)]
    pub no_persist: bool,
    /// Apply only the changes of these areas.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "AREA,...")]
    pub only: Vec<Area>,
    /// Write live kernel values even though --root has a mounted /proc (the running kernel's).
    #[arg(long)]
    pub live: bool,
    /// Leave these checks alone: no change for them is planned (an ID covers its subjects,
    /// as in `audit --skip`).
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = checks::parse_skip_id)]
    pub skip: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// Print what rollback would restore (before -> after per target, files removed or
    /// restored) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `gputune apply`: as the user running it, with the real `nft`.
pub(crate) fn run(args: &ApplyArgs, root: &Root) -> Result<ExitCode> {
    apply_with(&args.request(), root, &Console, &NftCommand)
}

impl ApplyArgs {
    /// The flags as apply's request.
    fn request(&self) -> Request {
        Request {
            profile: self.profile.clone(),
            dry_run: self.dry_run,
            yes: self.yes,
            no_persist: self.no_persist,
            only: self.only.clone(),
            live: self.live,
            skip: self.skip.clone(),
        }
    }
}

/// `gputune rollback`: restores what the journal recorded before the last applies.
pub(crate) fn rollback(args: &RollbackArgs, root: &Root) -> Result<ExitCode> {
    if args.dry_run {
        // A preview changed nothing: a closed stdout ends it quietly, as for every
        // read-only command (`rollback --dry-run | head`), not as an unseen transaction.
        let result = rollback_preview(root, &Console, &NftCommand);
        return match crate::say::take_failure() {
            Some(e) => Err(Error::Stdout(e)),
            None => result,
        };
    }
    rollback_with(root, &Console, &NftCommand)
}
