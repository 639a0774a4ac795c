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
