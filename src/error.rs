//! The one error type of the library and the exit code each kind maps to.

use std::io;
use std::path::PathBuf;

use crate::host::HostError;
use crate::profile::ProfileError;

/// Exit codes, one meaning each (DESIGN.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything checked passed, or the action succeeded.
    Ok = 0,
    /// A check failed or a benchmark fell below its threshold.
    Findings = 1,
    /// Usage or configuration error.
    Usage = 2,
    /// A runtime error stopped the job.
    Runtime = 3,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error("{0}")]
    Host(#[from] HostError),
    /// A flag or value the user gave is wrong; the message names it.
    #[error("{0}")]
    Usage(String),
    /// Something on the node stopped the job; the message says what to do.
    #[error("{0}")]
    Runtime(String),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] io::Error),
    /// apply or rollback finished (the journal says what was done) but its report could not
    /// be written: exit 3, even for a closed pipe, since nobody saw the outcome.
    #[error(
        "the work is complete and recorded in the journal, but its report could not be written to standard output ({0}); run `gputune audit` to see the node's state"
    )]
    Unseen(#[source] io::Error),
    /// `bench`: exit 1 when the figures fail, 2 for usage, 3 when the job stopped.
    #[error("{0}")]
    Bench(#[from] BenchError),
}

impl Error {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Profile(_) | Error::Usage(_) => ExitCode::Usage,
            Error::Host(_)
            | Error::Runtime(_)
            | Error::Write { .. }
            | Error::Stdout(_)
            | Error::Unseen(_) => ExitCode::Runtime,
            Error::Bench(e) => e.exit_code(),
        }
    }

    /// A reader closed our stdout (`gputune audit | head`): not an error worth a message.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Stdout(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a benchmark did not pass.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag, variable or setting is wrong (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Something stopped the job: a rank left, a library is missing (exit 3).
    #[error("{0}")]
    Runtime(String),
    /// NCCL refused or failed, as the library said (exit 3): kept typed so the caller can
    /// tell a call that failed from a library that is missing or too old.
    #[error(transparent)]
    Nccl(#[from] crate::ffi::nccl::NcclError),
    /// The CUDA driver refused or failed (exit 3).
    #[error(transparent)]
    Cuda(#[from] crate::ffi::cuda::CudaError),
    /// A transfer with another rank failed (exit 3); `peer` is that rank, the one this rank
    /// suspects when rank 0 decides whom to blame.
    #[error("{reason}")]
    Transfer { peer: usize, reason: String },
    /// The run finished but failed its checks: wrong results or bandwidth below the
    /// threshold (exit 1). The figures were printed.
    #[error("{0}")]
    Failed(String),
    /// Standard output went away (`| head`): the caller exits quietly on a broken pipe.
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
}

impl BenchError {
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            BenchError::Usage(_) => ExitCode::Usage,
            BenchError::Runtime(_)
            | BenchError::Nccl(_)
            | BenchError::Cuda(_)
            | BenchError::Transfer { .. }
            | BenchError::Stdout(_) => ExitCode::Runtime,
            BenchError::Failed(_) => ExitCode::Findings,
        }
    }
}
