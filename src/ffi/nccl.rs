//! libnccl bound at run time (dlopen, never linked), as nvml-wrapper-sys binds NVML: one table
//! of functions resolved when the library opens (a function an older NCCL lacks fails only
//! its own call), `ncclResult_t` codes by name, and a [`Communicator`] that is destroyed when
//! dropped. Collectives take device buffers and byte offsets that are checked against the
//! buffers' sizes before NCCL sees an address, so callers need no `unsafe`.
//! Finding the library, and reading an image's version without loading it, is
//! [`crate::host::nccl`]'s job.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cuda::{Context, CudaError, DeviceBuffer, OutOfBounds, Stream};
use super::library::{LoadError, Loaded, Missing, Symbol, symbol_table};

mod types;
pub(crate) use types::{CollectiveCall, Config, DataType, NcclResult, NcclVersion, RedOp};

/// Why NCCL could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{} has no symbol {symbol} (too old or not NCCL)", path.display())]
    SymbolMissing { path: PathBuf, symbol: &'static str },
    /// Under a root other than `/` the library is never loaded, and its version could not
    /// be read from the file, its package metadata or its name.
    #[error("{} is not loaded from an image and its version could not be read from it: {reason}", path.display())]
    Unread { path: PathBuf, reason: String },
    /// A library found inside an image was about to be loaded into gputune.
    #[error("{} belongs to the root {}, not the running node; gputune never loads an image's libraries", path.display(), root.display())]
    NotLive { path: PathBuf, root: PathBuf },
    #[error("{function} failed: {message} ({code})")]
    Call {
        function: &'static str,
        code: NcclResult,
        message: String,
    },
    /// An error the communicator reported on its own (`ncclCommGetAsyncError`), from work
    /// that was running: a peer left, the network failed.
    #[error("NCCL reported: {message} ({code})")]
    Reported { code: NcclResult, message: String },
    #[error(transparent)]
    Cuda(#[from] CudaError),
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
}

/// The opaque 128-byte id rank 0 creates and every rank needs to join a communicator.
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

// nccl.h's NCCL_UNIQUE_ID_BYTES, passed by value: checked when the crate compiles.
const _: () = assert!(std::mem::size_of::<UniqueId>() == 128);

/// `ncclUniqueId`, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId {
    internal: [u8; UNIQUE_ID_BYTES],
}

type Comm = *mut c_void;
type CuStream = *mut c_void;

symbol_table! {
    /// The functions gputune calls, with nccl.h's signatures: resolved once, when the library
    /// opens.
    // SAFETY: every type is nccl.h's signature of the name beside it (enums are C ints;
    // `ncclUniqueId` is 128 bytes by value); a library exporting these names is NCCL.
    unsafe struct Api {
        "ncclGetVersion" => fn get_version(*mut c_int) -> NcclResult;
        "ncclGetUniqueId" => fn get_unique_id(*mut UniqueId) -> NcclResult;
        "ncclGetErrorString" => fn get_error_string(NcclResult) -> *const c_char;
        "ncclCommInitRank" => fn comm_init_rank(*mut Comm, c_int, UniqueId, c_int) -> NcclResult;
        "ncclCommInitRankConfig" =>
            fn comm_init_rank_config(*mut Comm, c_int, UniqueId, c_int, *mut Config) -> NcclResult;
        "ncclCommGetAsyncError" => fn comm_get_async_error(Comm, *mut NcclResult) -> NcclResult;
        "ncclCommAbort" => fn comm_abort(Comm) -> NcclResult;
        "ncclCommDestroy" => fn comm_destroy(Comm) -> NcclResult;
        /// send, receive, count, type, op, comm, stream.
        "ncclAllReduce" =>
            fn all_reduce(*const c_void, *mut c_void, usize, DataType, RedOp, Comm, CuStream)
                -> NcclResult;
        /// send, receive, count per rank, type, op, comm, stream.
        "ncclReduceScatter" =>
            fn reduce_scatter(*const c_void, *mut c_void, usize, DataType, RedOp, Comm, CuStream)
                -> NcclResult;
        /// send, receive, count per rank, type, comm, stream.
        "ncclAllGather" =>
            fn all_gather(*const c_void, *mut c_void, usize, DataType, Comm, CuStream)
                -> NcclResult;
        /// send, receive, count, type, root, comm, stream.
        "ncclBroadcast" =>
            fn broadcast(*const c_void, *mut c_void, usize, DataType, c_int, Comm, CuStream)
                -> NcclResult;
    }
}

/// An opened NCCL library: cheap to clone (every communicator holds a clone).
#[derive(Clone)]
pub(crate) struct Nccl(Arc<Loaded<Api>>);

impl Nccl {
    /// Loads the library at `path`, which must be NCCL: callers pass only what
    /// [`crate::host::nccl`] located on the running node (never an image's) or what root named
    /// in `GPUTUNE_NCCL_LIB`.
    pub(crate) fn open(path: &Path) -> Result<Nccl, NcclError> {
        // SAFETY: loading runs NCCL's initialisers, which only set up static state. The table
        // gives nccl.h's signatures to nccl.h's names; a library exporting those names with
        // other signatures would break that, which is why only the located NCCL, or the file
        // root chose (DESIGN.md's security model trusts root), is opened here.
        let loaded = unsafe { Loaded::open(path, Api::load) }?;
        Ok(Nccl(Arc::new(loaded)))
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }

    fn api(&self) -> &Api {
        self.0.table()
    }

    fn missing(&self, missing: Missing) -> NcclError {
        NcclError::SymbolMissing {
            path: self.path().to_path_buf(),
            symbol: missing.0,
        }
    }

    /// Runs one table entry through `invoke` (which makes the C call); a code other than
    /// success or in-progress is an error named after the entry.
    fn call<F: Copy>(
        &self,
        symbol: Symbol<F>,
        invoke: impl FnOnce(F) -> NcclResult,
    ) -> Result<Progress, NcclError> {
        let function = symbol.get().map_err(|m| self.missing(m))?;
        match invoke(function) {
            NcclResult::SUCCESS => Ok(Progress::Done),
            NcclResult::IN_PROGRESS => Ok(Progress::InProgress),
            code => Err(self.failure(symbol.name(), code)),
        }
    }

    /// `function` failed with `code`, in NCCL's words.
    pub(crate) fn failure(&self, function: &'static str, code: NcclResult) -> NcclError {
        NcclError::Call {
            function,
            code,
            message: self.error_string(code),
        }
    }

    pub(crate) fn version(&self) -> Result<NcclVersion, NcclError> {
        let mut code: c_int = 0;
        // SAFETY: `code` is a valid out-pointer for the call.
        self.call(self.api().get_version, |f| unsafe { f(&mut code) })?;
        Ok(NcclVersion::from_code(code))
    }

    /// A fresh communicator id (works without a GPU): the bytes rank 0 sends every rank.
    pub(crate) fn unique_id(&self) -> Result<[u8; UNIQUE_ID_BYTES], NcclError> {
        let mut id = UniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: `id` is a writable ncclUniqueId.
        self.call(self.api().get_unique_id, |f| unsafe { f(&mut id) })?;
        Ok(id.internal)
    }

    /// NCCL's own text for a result code, else the code's name.
    pub(crate) fn error_string(&self, code: NcclResult) -> String {
        let Ok(get) = self.api().get_error_string.get() else {
            return code.to_string();
        };
        // SAFETY: NCCL returns a pointer to a static NUL-terminated string, or null.
        let text = unsafe { get(code) };
        if text.is_null() {
            return code.to_string();
        }
        // SAFETY: non-null and NUL-terminated, per NCCL's API.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Whether a call finished, or a non-blocking communicator still works on it (then
/// [`Communicator::state`] says when it is done; NCCL refuses the next call until then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    Done,
    InProgress,
}

/// A device buffer and a byte offset into it: one side of a collective.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub buffer: &'a DeviceBuffer,
    pub offset: usize,
}

/// This rank's member of a communicator. Dropped, it is destroyed (or aborted, when it is
/// busy or broken and NCCL would refuse a destroy); [`Communicator::abort`] ends it at once.
/// It holds its device's context, which NCCL needs until the communicator is gone.
pub(crate) struct Communicator {
    nccl: Nccl,
    /// Null once aborted.
    raw: Comm,
    ranks: usize,
    _context: Context,
}

// SAFETY: NCCL lets a communicator be used from any thread, one call at a time; `&mut` or
// ownership (not `Sync`) keeps it to one thread at a time.
unsafe impl Send for Communicator {}

impl Communicator {
    /// Starts joining without blocking (`ncclCommInitRankConfig` with `config`, NCCL 2.14
    /// and later): returns at once; [`Communicator::state`] turns from
    /// [`NcclResult::IN_PROGRESS`] to [`NcclResult::SUCCESS`] once every rank has joined.
    /// Makes `context` current on this thread first, since NCCL takes the device from it.
    pub(crate) fn start(
        nccl: &Nccl,
        context: &Context,
        ranks: usize,
        rank: usize,
        id: &[u8; UNIQUE_ID_BYTES],
        config: Config,
    ) -> Result<Communicator, NcclError> {
        let (ranks_c, rank_c) = c_ranks("ncclCommInitRankConfig", ranks, rank)?;
        context.make_current()?;
        let mut config = config;
        let id = UniqueId { internal: *id };
        let mut raw: Comm = std::ptr::null_mut();
        // SAFETY: `raw` and `config` are valid for the call (NCCL copies the config before
        // returning); `id` is passed by value.
        let started = nccl.call(nccl.api().comm_init_rank_config, |f| unsafe {
            f(&mut raw, ranks_c, id, rank_c, &mut config)
        });
        let comm = Communicator {
            nccl: nccl.clone(),
            raw,
            ranks,
            _context: context.clone(),
        };
        match started {
            Ok(_) if !comm.raw.is_null() => Ok(comm),
            Ok(_) => Err(nccl.failure("ncclCommInitRankConfig", NcclResult::INTERNAL_ERROR)),
            Err(e) => {
                comm.abort();
                Err(e)
            }
        }
    }

    /// Joins with the blocking `ncclCommInitRank` (every NCCL): returns once every rank has
    /// joined, so callers run it on a thread of their own. Makes `context` current on the
    /// calling thread first, since NCCL takes the device from it.
    pub(crate) fn join(
        nccl: &Nccl,
        context: &Context,
        ranks: usize,
        rank: usize,
        id: &[u8; UNIQUE_ID_BYTES],
    ) -> Result<Communicator, NcclError> {
        let (ranks_c, rank_c) = c_ranks("ncclCommInitRank", ranks, rank)?;
        context.make_current()?;
        let id = UniqueId { internal: *id };
        let mut raw: Comm = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `id` is passed by value.
        nccl.call(nccl.api().comm_init_rank, |f| unsafe {
            f(&mut raw, ranks_c, id, rank_c)
        })?;
        if raw.is_null() {
            return Err(nccl.failure("ncclCommInitRank", NcclResult::INTERNAL_ERROR));
        }
        Ok(Communicator {
            nccl: nccl.clone(),
            raw,
            ranks,
            _context: context.clone(),
        })
    }

    /// The communicator's state (`ncclCommGetAsyncError`): success when idle,
    /// [`NcclResult::IN_PROGRESS`] while a non-blocking call runs, else the error that
    /// broke it. `Err` only when the state cannot be read.
    pub(crate) fn state(&self) -> Result<NcclResult, NcclError> {
        let mut state = NcclResult::IN_PROGRESS;
        let raw = self.raw;
        // SAFETY: `raw` is a live communicator; `state` is a valid out-pointer.
        self.nccl
            .call(self.nccl.api().comm_get_async_error, |f| unsafe {
                f(raw, &mut state)
            })?;
        Ok(state)
    }

    /// The error the communicator reported, in NCCL's words.
    pub(crate) fn reported(&self, code: NcclResult) -> NcclError {
        NcclError::Reported {
            code,
            message: self.nccl.error_string(code),
        }
    }

    /// Ends the communicator now (`ncclCommAbort`), also while a call or a join is still
    /// running; the kernels it queued stop.
    pub(crate) fn abort(mut self) {
        self.abort_raw();
    }

    fn abort_raw(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        // SAFETY: `raw` is live and, nulled above, never used again. Nothing can be done
        // about an error here: the communicator is given up either way.
        let _ = self
            .nccl
            .call(self.nccl.api().comm_abort, |f| unsafe { f(raw) });
    }

    /// Queues `call` on `stream`, reading `send` and writing `recv`, each first checked to
    /// hold what the call touches.
    pub(crate) fn launch(
        &self,
        call: CollectiveCall,
        dtype: DataType,
        send: At<'_>,
        recv: At<'_>,
        stream: &Stream,
    ) -> Result<Progress, NcclError> {
        let (send_len, recv_len) = call.extents(dtype.size(), self.ranks)?;
        let src = send.buffer.address(send.offset, send_len)? as *const c_void;
        let dst = recv.buffer.address(recv.offset, recv_len)? as *mut c_void;
        let (comm, stream, api) = (self.raw, stream.raw(), self.nccl.api());
        // SAFETY (every arm): both ranges hold what the call reads and writes (checked
        // above); the communicator and the stream are live.
        match call {
            CollectiveCall::AllReduce { count, op } => self.nccl.call(api.all_reduce, |f| unsafe {
                f(src, dst, count, dtype, op, comm, stream)
            }),
            CollectiveCall::AllGather { count } => self.nccl.call(api.all_gather, |f| unsafe {
                f(src, dst, count, dtype, comm, stream)
            }),
            CollectiveCall::ReduceScatter { count, op } => {
                self.nccl.call(api.reduce_scatter, |f| unsafe {
                    f(src, dst, count, dtype, op, comm, stream)
                })
            }
            CollectiveCall::Broadcast { count, root } => {
                let root = c_ranks("ncclBroadcast", self.ranks, root)?.1;
                self.nccl.call(api.broadcast, |f| unsafe {
                    f(src, dst, count, dtype, root, comm, stream)
                })
            }
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // NCCL refuses to destroy a communicator that is still working on a call, or broken
        // (its state is not success): abort those.
        if !matches!(self.state(), Ok(NcclResult::SUCCESS)) {
            self.abort_raw();
            return;
        }
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        // SAFETY: `raw` is live, idle and, nulled above, never used again. Errors cannot be
        // acted on while dropping.
        let _ = self
            .nccl
            .call(self.nccl.api().comm_destroy, |f| unsafe { f(raw) });
    }
}

/// `ranks` and `rank` as C ints for `function`, the rank inside the communicator.
fn c_ranks(function: &'static str, ranks: usize, rank: usize) -> Result<(c_int, c_int), NcclError> {
    match (c_int::try_from(ranks), c_int::try_from(rank)) {
        (Ok(n), Ok(r)) if rank < ranks => Ok((n, r)),
        _ => Err(NcclError::Call {
            function,
            code: NcclResult::INVALID_ARGUMENT,
            message: format!("rank {rank} is not one of {ranks} ranks"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_must_fit_the_communicator() {
        assert_eq!(c_ranks("ncclCommInitRank", 4, 3).ok(), Some((4, 3)));
        assert!(c_ranks("ncclCommInitRank", usize::MAX, 0).is_err());
        let err = c_ranks("ncclBroadcast", 4, 4).unwrap_err().to_string();
        assert_eq!(
            err,
            "ncclBroadcast failed: rank 4 is not one of 4 ranks (ncclInvalidArgument)"
        );
    }

    /// A library that loads but is not NCCL: each call fails alone, naming its function.
    #[test]
    fn a_library_without_the_functions_fails_each_call_by_name() {
        let nccl = Nccl::open(Path::new("libm.so.6")).unwrap();
        let Err(NcclError::SymbolMissing { symbol, .. }) = nccl.version() else {
            panic!("libm answered ncclGetVersion")
        };
        assert_eq!(symbol, "ncclGetVersion");
        assert!(matches!(
            nccl.unique_id(),
            Err(NcclError::SymbolMissing {
                symbol: "ncclGetUniqueId",
                ..
            })
        ));
        assert_eq!(
            nccl.error_string(NcclResult::REMOTE_ERROR),
            "ncclRemoteError"
        );
        assert_eq!(
            nccl.api().missing().len(),
            12,
            "libm has none of NCCL's functions"
        );
    }
}

/// The real libnccl.so.2 from the nvidia-nccl-cu12 wheel that scripts/test installs.
#[cfg(test)]
pub(crate) fn test_library() -> PathBuf {
    std::env::var_os("GPUTUNE_TEST_NCCL_LIB")
        .map(PathBuf::from)
        .expect("GPUTUNE_TEST_NCCL_LIB is unset: run the tests with scripts/test, which installs the real NCCL")
}

#[cfg(test)]
mod real_library {
    use super::*;

    fn real_nccl() -> Nccl {
        Nccl::open(&test_library()).unwrap()
    }

    #[test]
    fn reports_the_version_and_makes_ids_without_a_gpu() {
        let nccl = real_nccl();
        let version = nccl.version().unwrap();
        assert_eq!(version.major, 2);
        assert!(version.minor >= 14, "{version}");
        assert!(version.has_config());
        let (a, b) = (nccl.unique_id().unwrap(), nccl.unique_id().unwrap());
        assert_ne!(a, [0; UNIQUE_ID_BYTES]);
        assert_ne!(a, b, "two ids must differ");
    }

    /// Every function gputune calls is in the real library under the name the table
    /// gives, so none is missing when it is called.
    #[test]
    fn resolves_every_function_once_at_open() {
        assert_eq!(real_nccl().api().missing(), Vec::<&str>::new());
    }

    /// NCCL's own words for each code, and the named fallback beyond its table.
    #[test]
    fn error_strings_come_from_the_library() {
        let nccl = real_nccl();
        assert_eq!(nccl.error_string(NcclResult::SUCCESS), "no error");
        assert_eq!(
            nccl.error_string(NcclResult::UNHANDLED_CUDA_ERROR),
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
        );
        assert!(
            nccl.error_string(NcclResult::IN_PROGRESS)
                .contains("in progress"),
            "{}",
            nccl.error_string(NcclResult::IN_PROGRESS)
        );
        let err = nccl.failure("ncclAllReduce", NcclResult::INVALID_ARGUMENT);
        assert!(
            err.to_string()
                .starts_with("ncclAllReduce failed: invalid argument"),
            "{err}"
        );
        assert!(err.to_string().ends_with("(ncclInvalidArgument)"), "{err}");
    }
}
