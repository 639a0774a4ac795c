//! What can stop apply or rollback; every message names the file, knob or command.

use std::path::PathBuf;

use crate::host::HostError;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Reading or writing a host path failed.
    #[error(transparent)]
    Host(#[from] HostError),
    /// A knob or cgroup the change needs is not on this node.
    #[error("{} does not exist on this node{hint}", path.display())]
    Missing { path: PathBuf, hint: String },
    /// `nft` could not be run, or refused a script.
    #[error("{0}")]
    Nft(String),
    /// A change gputune will not make: malformed, or in a file it did not create.
    #[error("{0}")]
    Refused(String),
    /// The target did not keep what was written.
    #[error("{target} reads back `{got}` after writing `{want}`")]
    Verify {
        target: String,
        got: String,
        want: String,
    },
    /// The journal cannot be read or written.
    #[error("{}: {message}", path.display())]
    Journal { path: PathBuf, message: String },
    /// The lock is held by another apply or rollback, or cannot be taken.
    #[error("{0}")]
    Lock(String),
    /// An error while doing `what` (a setting of the plan, a step of a rollback).
    #[error("{what}: {source}")]
    During {
        what: String,
        #[source]
        source: Box<ApplyError>,
    },
}

impl ApplyError {
    /// Wraps an error with what was being done when it happened.
    pub(crate) fn during(what: impl Into<String>, source: ApplyError) -> ApplyError {
        ApplyError::During {
            what: what.into(),
            source: Box::new(source),
        }
    }
}

/// Why apply, rollback or a rollback preview stopped (exit 3), each with today's text; the
/// errors of the transaction itself are [`ApplyError`].
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The tree under `--root` holds the running kernel's `/proc`.
    #[error(
        "{} is a mounted procfs (the running kernel's /proc, bind-mounted into the tree?): apply would change this machine's live settings. Unmount it to apply to the image's files only, or pass --live to write live values too",
        proc.display()
    )]
    MountedProc { proc: PathBuf },
    /// Checks that could not be read might hide a change (`id: message` each).
    #[error(
        "apply changes nothing while checks cannot be read:\n  {}\nfix what they name, or leave their areas out with --only",
        .0.join("\n  ")
    )]
    Unjudged(Vec<String>),
    /// The journal says an earlier apply never finished.
    #[error(
        "an earlier apply was interrupted ({} says `applying`): run `gputune rollback` first",
        journal.display()
    )]
    Interrupted { journal: PathBuf },
    /// The confirmation could not be read.
    #[error("cannot read the answer: {0}")]
    Answer(#[source] std::io::Error),
    /// The directories apply would create could not be recorded.
    #[error("cannot record the directories apply creates, nothing was changed: {0}")]
    CreatedDirs(#[source] std::io::Error),
    /// The journal could not be written before the first change.
    #[error("cannot write the journal, nothing was changed: {0}")]
    Begin(#[source] ApplyError),
    /// Every change held but the journal could not say so.
    #[error(
        "every change was applied and verified, but marking the journal failed ({0}); `gputune rollback` still undoes it"
    )]
    Mark(#[source] ApplyError),
    /// A change failed and every earlier one was restored.
    #[error(
        "apply failed at change {} of {of}: {error}\nevery earlier change was restored in reverse order; the node is as it started",
        step + 1
    )]
    Restored {
        step: usize,
        of: usize,
        error: ApplyError,
    },
    /// A change failed and some earlier ones could not be restored.
    #[error(
        "apply failed at change {} of {of}: {error}\ncould not restore: {}\nthe journal {} keeps the old values: fix the cause and run `gputune rollback`",
        step + 1,
        unrestored.join("; "),
        journal.display()
    )]
    Unrestored {
        step: usize,
        of: usize,
        error: ApplyError,
        unrestored: Vec<String>,
        journal: PathBuf,
    },
    /// Rollback could not restore these targets.
    #[error(
        "could not restore: {}\nthe journal is kept: fix the cause and run `gputune rollback` again",
        .0.join("; ")
    )]
    Rollback(Vec<String>),
    /// The rollback preview could not read these targets.
    #[error(
        "cannot read what rollback would restore: {}\nnothing was changed",
        .0.join("; ")
    )]
    Unreadable(Vec<String>),
    /// The image belongs to someone else.
    #[error(
        "{} is an image owned by another user: run gputune as root or as the image's owner",
        .0.display()
    )]
    NotOwner(PathBuf),
    /// Writing the live node needs root.
    #[error(
        "gputune apply and rollback write kernel settings and files under /etc: run it as root (`apply --dry-run` shows the plan without root)"
    )]
    NotRoot,
}
