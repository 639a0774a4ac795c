//! libnccl bound at run time (dlopen, never linked): the library handle, its symbols resolved
//! by name with their C signatures checked by the caller, its result codes and errors.
//! Finding the library, and reading an image's without loading it, is
//! [`crate::host::nccl`]'s job.

use std::ffi::{CStr, c_char, c_int};
use std::fmt;
use std::path::{Path, PathBuf};

/// Why NCCL could not be used.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    #[error("cannot load {}: {message}", path.display())]
    Load { path: PathBuf, message: String },
    #[error("{} has no symbol {symbol} (too old or not NCCL)", path.display())]
    SymbolMissing { path: PathBuf, symbol: &'static str },
    /// Under a root other than `/` the library is never loaded, and its version could not
    /// be read from the file, its package metadata or its name.
    #[error("{} is not loaded from an image and its version could not be read from it: {reason}", path.display())]
    Unread { path: PathBuf, reason: String },
    /// A library found inside an image was about to be loaded into gputune.
    #[error("{} belongs to the root {}, not the running node; gputune never loads an image's libraries", path.display(), root.display())]
    NotLive { path: PathBuf, root: PathBuf },
    #[error("{function} failed: {message} (ncclResult_t {code})")]
    Call {
        function: &'static str,
        code: i32,
        message: String,
    },
}

/// NCCL's version as `ncclGetVersion` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// The raw code (`23203` for 2.32.3).
    pub code: i32,
}

impl NcclVersion {
    /// Decodes NCCL_VERSION_CODE: `X*10000 + Y*100 + Z` since 2.9, `X*1000 + Y*100 + Z` before.
    pub fn from_code(code: i32) -> NcclVersion {
        let c = code.max(0) as u32;
        let (major, minor, patch) = if c >= 10000 {
            (c / 10000, (c % 10000) / 100, c % 100)
        } else {
            (c / 1000, (c % 1000) / 100, c % 100)
        };
        NcclVersion {
            major,
            minor,
            patch,
            code,
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The opaque 128-byte id rank 0 creates and every rank needs to join a communicator.
pub const UNIQUE_ID_BYTES: usize = 128;

/// An opened NCCL library. Each function is resolved when called, so a library that lacks
/// one fails only that call.
pub struct Nccl {
    path: PathBuf,
    library: libloading::Library,
}

impl Nccl {
    pub fn open(path: &Path) -> Result<Nccl, NcclError> {
        // SAFETY: loading runs NCCL's initialisers, which only set up static state.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| NcclError::Load {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Nccl {
            path: path.to_path_buf(),
            library,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The loaded library, for callers that bind further NCCL functions.
    pub fn library(&self) -> &libloading::Library {
        &self.library
    }

    /// Resolves a symbol of type `T` (a function pointer matching NCCL's C signature).
    ///
    /// # Safety
    /// `T` must be the exact C signature of `symbol`.
    pub unsafe fn symbol<T: Copy>(&self, symbol: &'static str) -> Result<T, NcclError> {
        let name = format!("{symbol}\0");
        // SAFETY: the caller guarantees `T` matches the symbol's signature.
        unsafe { self.library.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| NcclError::SymbolMissing {
                path: self.path.clone(),
                symbol,
            })
    }

    pub fn version(&self) -> Result<NcclVersion, NcclError> {
        // SAFETY: ncclResult_t ncclGetVersion(int *version).
        let get: unsafe extern "C" fn(*mut c_int) -> c_int =
            unsafe { self.symbol("ncclGetVersion")? };
        let mut code: c_int = 0;
        // SAFETY: `code` is a valid out-pointer for the duration of the call.
        self.check("ncclGetVersion", unsafe { get(&mut code) })?;
        Ok(NcclVersion::from_code(code))
    }

    /// A fresh communicator id (works without a GPU).
    pub fn unique_id(&self) -> Result<[u8; UNIQUE_ID_BYTES], NcclError> {
        // SAFETY: ncclResult_t ncclGetUniqueId(ncclUniqueId *id), ncclUniqueId = char[128].
        let get: unsafe extern "C" fn(*mut u8) -> c_int =
            unsafe { self.symbol("ncclGetUniqueId")? };
        let mut id = [0u8; UNIQUE_ID_BYTES];
        // SAFETY: `id` is 128 writable bytes, the size of ncclUniqueId.
        self.check("ncclGetUniqueId", unsafe { get(id.as_mut_ptr()) })?;
        Ok(id)
    }

    /// NCCL's own text for a result code.
    pub fn error_string(&self, code: i32) -> String {
        // SAFETY: const char *ncclGetErrorString(ncclResult_t result).
        let Ok(get) = (unsafe {
            self.symbol::<unsafe extern "C" fn(c_int) -> *const c_char>("ncclGetErrorString")
        }) else {
            return format!("NCCL error {code}");
        };
        // SAFETY: NCCL returns a pointer to a static NUL-terminated string, or null.
        let text = unsafe { get(code) };
        if text.is_null() {
            return format!("NCCL error {code}");
        }
        // SAFETY: non-null and NUL-terminated, per NCCL's API.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// Turns a non-zero `ncclResult_t` into an error carrying NCCL's message.
    pub fn check(&self, function: &'static str, code: c_int) -> Result<(), NcclError> {
        if code == 0 {
            Ok(())
        } else {
            Err(NcclError::Call {
                function,
                code,
                message: self.error_string(code),
            })
        }
    }
}
