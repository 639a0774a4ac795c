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
    /// `--root` names no usable tree.
    #[error(transparent)]
    Root(#[from] crate::image::RootError),
    /// An image's state directory is missing or not safely ours.
    #[error(transparent)]
    StateDir(#[from] crate::image::StateDirError),
    /// The transaction of apply or rollback failed.
    #[error(transparent)]
    Apply(#[from] crate::apply::error::ApplyError),
    /// Apply or rollback refused, or stopped and says what it left behind (boxed: it is the
    /// largest).
    #[error(transparent)]
    Refused(Box<crate::apply::error::Refusal>),
    /// A document could not be serialised.
    #[error("cannot render {what}: {source}")]
    Render {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// `explain`'s log could not be read.
    #[error(transparent)]
    Log(#[from] crate::commands::explain::LogError),
    /// `pin` could not bind or start the command.
    #[error(transparent)]
    Pin(#[from] crate::commands::pin::PinError),
    /// `health --slurm` could not reach Slurm or name the node.
    #[error(transparent)]
    Slurm(#[from] crate::commands::health::SlurmStop),
    /// A preflight rank could not meet rank 0 or hear its verdict.
    #[error(transparent)]
    Meet(#[from] crate::preflight::meet::MeetError),
    /// `bench`: exit 1 when the figures fail, 2 for usage, 3 when the job stopped.
    #[error("{0}")]
    Bench(#[from] BenchError),
}

impl From<crate::apply::error::Refusal> for Error {
    fn from(refusal: crate::apply::error::Refusal) -> Error {
        Error::Refused(Box::new(refusal))
    }
}

impl Error {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Profile(_) | Error::Usage(_) => ExitCode::Usage,
            Error::Host(_)
            | Error::Runtime(_)
            | Error::Root(_)
            | Error::StateDir(_)
            | Error::Apply(_)
            | Error::Refused(_)
            | Error::Render { .. }
            | Error::Log(_)
            | Error::Pin(_)
            | Error::Slurm(_)
            | Error::Meet(_)
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
    /// The control connections failed: a rank stalled, left or reported nonsense (exit 3).
    #[error(transparent)]
    Control(#[from] crate::bench::control::group::ControlError),
    /// The ranks could not meet at rank 0's rendezvous (exit 3).
    #[error(transparent)]
    Rendezvous(#[from] crate::bench::control::rendezvous::RendezvousError),
    /// The NCCL backend could not start or stopped, outside a failed NCCL call (exit 3).
    #[error(transparent)]
    NcclBackend(#[from] crate::bench::nccl::BackendError),
    /// The TCP backend's data connections failed (exit 3).
    #[error(transparent)]
    Link(#[from] crate::bench::tcp::LinkError),
    /// The job could not start its ranks or write its results (exit 3).
    #[error(transparent)]
    Job(#[from] JobError),
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
            | BenchError::Control(_)
            | BenchError::Rendezvous(_)
            | BenchError::NcclBackend(_)
            | BenchError::Link(_)
            | BenchError::Job(_)
            | BenchError::Nccl(_)
            | BenchError::Cuda(_)
            | BenchError::Transfer { .. }
            | BenchError::Stdout(_) => ExitCode::Runtime,
            BenchError::Failed(_) => ExitCode::Findings,
        }
    }
}

/// What stopped a benchmark job on this rank outside its transfers, each with its own text.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot open a local rendezvous port: {0}")]
    LocalPort(#[source] io::Error),
    #[error("{0}")]
    PortOf(#[source] io::Error),
    #[error("rank {rank} ended with {status}")]
    Ended {
        rank: usize,
        status: std::process::ExitStatus,
    },
    #[error("cannot find this program to start rank {rank}: {source}")]
    NoProgram {
        rank: usize,
        #[source]
        source: io::Error,
    },
    #[error("cannot start rank {rank}: {source}")]
    Start {
        rank: usize,
        #[source]
        source: io::Error,
    },
    #[error("cannot allocate {bytes} bytes for size {size}")]
    Allocate { bytes: usize, size: u64 },
    #[error("pairs: {0}")]
    Pairs(#[source] io::Error),
    #[error("{0}")]
    Render(#[source] serde_json::Error),
    #[error("cannot write {}: {source}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
