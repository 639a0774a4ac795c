//! The CUDA driver API gputune uses (the driver version for the audit; devices, a context,
//! a stream and device memory for the NCCL backend), bound at run time from `libcuda.so.1`
//! (the name the driver installs; cudarc panics when it is missing, so this small binding
//! opens it with dlopen and turns every failure into a typed error).
//!
//! As nvml-wrapper-sys does: one table of functions resolved when the library opens, each
//! entry on its own (a function an older driver lacks fails only its own call); `CUresult`
//! codes by name; and owned handles that give back what they hold when dropped: a retained
//! primary [`Context`], a [`Stream`], a [`DeviceBuffer`]. Each handle keeps the library (and
//! the buffers and stream their context) alive, so none can outlive what it needs. No raw
//! CUDA handle or device address leaves `crate::ffi`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::library::{LoadError, Loaded, Missing, Symbol, symbol_table};

mod types;
use types::check_range;
pub(crate) use types::{CuResult, OutOfBounds};

/// The driver library's file name.
pub(crate) const LIBCUDA: &str = "libcuda.so.1";

type CuDevice = c_int;
type CuContext = *mut c_void;
type CuStream = *mut c_void;
/// `CUdeviceptr`: a device address (64-bit on every platform gputune runs on).
pub(super) type CuDevicePtr = u64;

/// `CU_STREAM_NON_BLOCKING`: the stream does not wait for, nor hold up, the NULL stream.
const STREAM_NON_BLOCKING: c_uint = 1;

/// Why CUDA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver: {0}")]
    NoDriver(LoadError),
    #[error("no GPU: the CUDA driver found no device ({0})")]
    NoDevice(String),
    #[error("{LIBCUDA} has no symbol {0} (driver too old)")]
    Symbol(&'static str),
    #[error("{function} failed: {message} ({code})")]
    Call {
        function: &'static str,
        code: CuResult,
        message: String,
    },
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
}

impl From<Missing> for CudaError {
    fn from(missing: Missing) -> CudaError {
        CudaError::Symbol(missing.0)
    }
}

symbol_table! {
    /// The functions gputune calls, with cuda.h's signatures, under the names cuda.h maps them
    /// to (`_v2` where it does): resolved once, when the library opens.
    // SAFETY: every type is cuda.h's signature of the name beside it; a library that exports
    // these names is the CUDA driver (or a stand-in keeping to cuda.h).
    unsafe struct Api {
        "cuInit" => fn init(c_uint) -> CuResult;
        "cuDriverGetVersion" => fn driver_get_version(*mut c_int) -> CuResult;
        "cuGetErrorString" => fn get_error_string(CuResult, *mut *const c_char) -> CuResult;
        "cuDeviceGetCount" => fn device_get_count(*mut c_int) -> CuResult;
        "cuDeviceGet" => fn device_get(*mut CuDevice, c_int) -> CuResult;
        "cuDeviceGetName" => fn device_get_name(*mut c_char, c_int, CuDevice) -> CuResult;
        "cuDevicePrimaryCtxRetain" => fn primary_ctx_retain(*mut CuContext, CuDevice) -> CuResult;
        "cuDevicePrimaryCtxRelease_v2" => fn primary_ctx_release(CuDevice) -> CuResult;
        "cuCtxSetCurrent" => fn ctx_set_current(CuContext) -> CuResult;
        "cuMemAlloc_v2" => fn mem_alloc(*mut CuDevicePtr, usize) -> CuResult;
        "cuMemFree_v2" => fn mem_free(CuDevicePtr) -> CuResult;
        "cuMemcpyHtoDAsync_v2" =>
            fn memcpy_htod_async(CuDevicePtr, *const c_void, usize, CuStream) -> CuResult;
        "cuMemcpyDtoHAsync_v2" =>
            fn memcpy_dtoh_async(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult;
        "cuMemsetD8Async" => fn memset_d8_async(CuDevicePtr, u8, usize, CuStream) -> CuResult;
        "cuStreamCreate" => fn stream_create(*mut CuStream, c_uint) -> CuResult;
        "cuStreamDestroy_v2" => fn stream_destroy(CuStream) -> CuResult;
        "cuStreamSynchronize" => fn stream_synchronize(CuStream) -> CuResult;
        "cuStreamQuery" => fn stream_query(CuStream) -> CuResult;
    }
}

/// The loaded driver: cheap to clone (every handle made from it holds a clone).
#[derive(Clone)]
pub(crate) struct Cuda(Arc<Loaded<Api>>);

/// The driver's CUDA version (`cuDriverGetVersion`, e.g. 12040), which needs neither
/// `cuInit` nor a GPU: loads `libcuda.so.1` by its soname.
pub(crate) fn driver_version() -> Result<c_int, CudaError> {
    Cuda::load(Path::new(LIBCUDA))?.driver_version()
}

/// A device ordinal the driver gave (`CUdevice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Device(CuDevice);

impl Cuda {
    /// Opens the driver from `$GPUTUNE_CUDA_LIB` (a file) or the linker's search, and
    /// initialises it.
    pub(crate) fn open() -> Result<Cuda, CudaError> {
        let path = std::env::var_os("GPUTUNE_CUDA_LIB")
            .map_or_else(|| PathBuf::from(LIBCUDA), PathBuf::from);
        Cuda::open_at(&path)
    }

    /// Opens and initialises the driver at `path`; no device is an error of its own.
    fn open_at(path: &Path) -> Result<Cuda, CudaError> {
        let cuda = Cuda::load(path)?;
        let init = cuda.api().init;
        // SAFETY: cuInit takes flags, which must be 0.
        match cuda.call(init, |f| unsafe { f(0) }) {
            Err(CudaError::Call {
                code: CuResult::NO_DEVICE,
                message,
                ..
            }) => Err(CudaError::NoDevice(message)),
            other => other.map(|()| cuda),
        }
    }

    /// Loads the library and resolves its table, without initialising the driver.
    fn load(path: &Path) -> Result<Cuda, CudaError> {
        // SAFETY: loading the driver runs its initialisers, which only set up static state.
        // The path is the driver's soname or the file root named in GPUTUNE_CUDA_LIB (trusted,
        // as DESIGN.md's security model trusts root), so the table's cuda.h signatures hold.
        let loaded = unsafe { Loaded::open(path, Api::load) }.map_err(CudaError::NoDriver)?;
        Ok(Cuda(Arc::new(loaded)))
    }

    fn api(&self) -> &Api {
        self.0.table()
    }

    /// Runs one table entry through `invoke` (which makes the C call) and names a failure
    /// after the entry.
    fn call<F: Copy>(
        &self,
        symbol: Symbol<F>,
        invoke: impl FnOnce(F) -> CuResult,
    ) -> Result<(), CudaError> {
        match invoke(symbol.get()?) {
            CuResult::SUCCESS => Ok(()),
            code => Err(self.failure(symbol.name(), code)),
        }
    }

    /// A failed call, with the driver's words for its code.
    fn failure(&self, function: &'static str, code: CuResult) -> CudaError {
        CudaError::Call {
            function,
            code,
            message: self.error_string(code),
        }
    }

    /// [`Cuda::call`] for giving a handle back while dropping, where a failure (or a driver
    /// without the function) cannot be acted on.
    fn release<F: Copy>(&self, symbol: Symbol<F>, invoke: impl FnOnce(F) -> CuResult) {
        let _ = self.call(symbol, invoke);
    }

    /// The driver's own text for a code, else the code's name.
    fn error_string(&self, code: CuResult) -> String {
        let mut text: *const c_char = std::ptr::null();
        let asked = self.api().get_error_string.get().map(|get| {
            // SAFETY: `text` is a valid out-pointer for the call.
            unsafe { get(code, &mut text) }
        });
        if asked != Ok(CuResult::SUCCESS) || text.is_null() {
            return code.to_string();
        }
        // SAFETY: the driver returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    pub(crate) fn driver_version(&self) -> Result<c_int, CudaError> {
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid out-pointer for the call.
        self.call(self.api().driver_get_version, |f| unsafe {
            f(&mut version)
        })?;
        Ok(version)
    }

    /// How many GPUs the driver sees; none is [`CudaError::NoDevice`].
    pub(crate) fn device_count(&self) -> Result<usize, CudaError> {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid out-pointer for the call.
        self.call(self.api().device_get_count, |f| unsafe { f(&mut count) })?;
        match usize::try_from(count) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(CudaError::NoDevice(
                "cuDeviceGetCount reports 0 devices".into(),
            )),
        }
    }

    pub(crate) fn device(&self, ordinal: usize) -> Result<Device, CudaError> {
        let ordinal = c_int::try_from(ordinal).map_err(|_| CudaError::Call {
            function: "cuDeviceGet",
            code: CuResult::INVALID_DEVICE,
            message: format!("device ordinal {ordinal} is out of range"),
        })?;
        let mut device: CuDevice = 0;
        // SAFETY: `device` is a valid out-pointer for the call.
        self.call(self.api().device_get, |f| unsafe {
            f(&mut device, ordinal)
        })?;
        Ok(Device(device))
    }

    pub(crate) fn device_name(&self, device: Device) -> Result<String, CudaError> {
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds 256 writable bytes and the driver writes at most `len`,
        // NUL included.
        self.call(self.api().device_get_name, |f| unsafe {
            f(name.as_mut_ptr(), name.len() as c_int, device.0)
        })?;
        // The last byte stays 0 whatever the driver wrote, so the string ends in the array.
        name[name.len() - 1] = 0;
        // SAFETY: NUL-terminated within the array (just ensured).
        Ok(unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Retains the device's primary context and makes it current on this thread.
    pub(crate) fn primary_context(&self, device: Device) -> Result<Context, CudaError> {
        let mut raw: CuContext = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for the call.
        self.call(self.api().primary_ctx_retain, |f| unsafe {
            f(&mut raw, device.0)
        })?;
        // From here the retain is owned: a failure below releases it (Drop).
        let context = Context(Arc::new(Retained {
            cuda: self.clone(),
            device,
            raw,
        }));
        context.make_current()?;
        Ok(context)
    }
}

/// A device's primary context, retained: released when the last clone is dropped, and every
/// stream and buffer made from it holds a clone, so it outlives them.
#[derive(Clone)]
pub(crate) struct Context(Arc<Retained>);

struct Retained {
    cuda: Cuda,
    device: Device,
    raw: CuContext,
}

// SAFETY: a CUcontext is a driver handle that any thread may make current or release; the
// driver synchronises its use.
unsafe impl Send for Retained {}
// SAFETY: as above: the handle is only passed to the driver, never dereferenced here.
unsafe impl Sync for Retained {}

impl Drop for Retained {
    fn drop(&mut self) {
        let (cuda, device) = (&self.cuda, self.device.0);
        // SAFETY: one release for the one retain of `Cuda::primary_context`.
        cuda.release(cuda.api().primary_ctx_release, |f| unsafe { f(device) });
    }
}

impl Context {
    fn cuda(&self) -> &Cuda {
        &self.0.cuda
    }

    /// Makes the context current on the calling thread (every thread that calls the driver
    /// or NCCL for this device needs it).
    pub(crate) fn make_current(&self) -> Result<(), CudaError> {
        let raw = self.0.raw;
        // SAFETY: `raw` is the retained primary context, alive while `self` is.
        self.cuda()
            .call(self.cuda().api().ctx_set_current, |f| unsafe { f(raw) })
    }

    /// A stream that does not synchronise with the NULL stream (`CU_STREAM_NON_BLOCKING`).
    pub(crate) fn stream(&self) -> Result<Stream, CudaError> {
        let mut raw: CuStream = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for the call.
        self.cuda()
            .call(self.cuda().api().stream_create, |f| unsafe {
                f(&mut raw, STREAM_NON_BLOCKING)
            })?;
        Ok(Stream {
            context: self.clone(),
            raw,
        })
    }

    /// `bytes` of device memory; failing (out of memory) is an error, never an abort.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: `ptr` is a valid out-pointer; cuMemAlloc refuses 0 bytes, so ask for 1.
        self.cuda().call(self.cuda().api().mem_alloc, |f| unsafe {
            f(&mut ptr, bytes.max(1))
        })?;
        Ok(DeviceBuffer {
            context: self.clone(),
            ptr,
            len: bytes,
        })
    }
}

/// A stream of the context, destroyed on Drop.
pub(crate) struct Stream {
    context: Context,
    raw: CuStream,
}

impl Stream {
    fn cuda(&self) -> &Cuda {
        self.context.cuda()
    }

    /// True once everything queued on the stream has completed (`cuStreamQuery`).
    /// Polled in the timed loop, so "not yet" is a plain answer, not an error with the
    /// driver's message looked up and allocated.
    pub(crate) fn is_idle(&self) -> Result<bool, CudaError> {
        let (raw, cuda) = (self.raw, self.cuda());
        let query = cuda.api().stream_query;
        // SAFETY: `raw` came from cuStreamCreate and lives as long as `self`.
        match unsafe { query.get()?(raw) } {
            CuResult::SUCCESS => Ok(true),
            CuResult::NOT_READY => Ok(false),
            code => Err(cuda.failure(query.name(), code)),
        }
    }

    /// Waits for everything queued on the stream.
    fn synchronize(&self) -> Result<(), CudaError> {
        let raw = self.raw;
        // SAFETY: `raw` came from cuStreamCreate and lives as long as `self`.
        self.cuda()
            .call(self.cuda().api().stream_synchronize, |f| unsafe { f(raw) })
    }

    /// The handle, for NCCL's calls in [`super::nccl`].
    pub(super) fn raw(&self) -> CuStream {
        self.raw
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let (cuda, raw) = (self.cuda(), self.raw);
        // SAFETY: `raw` came from cuStreamCreate and is destroyed once, here.
        cuda.release(cuda.api().stream_destroy, |f| unsafe { f(raw) });
    }
}

/// Device memory, freed on Drop. Every access names a byte range that is checked against
/// the allocation first. Reads and writes take `&self`: the memory is the device's, reached
/// through the driver like a file through its descriptor, never through a Rust reference.
pub(crate) struct DeviceBuffer {
    context: Context,
    ptr: CuDevicePtr,
    len: usize,
}

impl DeviceBuffer {
    fn cuda(&self) -> &Cuda {
        self.context.cuda()
    }

    /// The size asked for, in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The device address of `offset..offset + len`, once checked to lie inside the buffer
    /// (for NCCL's calls in [`super::nccl`]).
    pub(super) fn address(&self, offset: usize, len: usize) -> Result<CuDevicePtr, OutOfBounds> {
        check_range(offset, len, self.len)?;
        Ok(self.ptr + offset as CuDevicePtr)
    }

    /// Copies `src` to `offset` on `stream` and waits for the copy: it runs after the work
    /// queued before it and the work queued after it reads the new data (a copy on the NULL
    /// stream would not order with a non-blocking stream); when this returns, `src` is no
    /// longer read.
    pub(crate) fn write(
        &self,
        offset: usize,
        src: &[u8],
        stream: &Stream,
    ) -> Result<(), CudaError> {
        let dst = self.address(offset, src.len())?;
        let raw = stream.raw;
        // SAFETY: `src` is readable for its length and `dst` has that many bytes (checked).
        // `src` is pageable (this binding never pins host memory), which the driver stages
        // before the call returns; the stream is also synchronised below.
        self.cuda()
            .call(self.cuda().api().memcpy_htod_async, |f| unsafe {
                f(dst, src.as_ptr().cast(), src.len(), raw)
            })?;
        stream.synchronize()
    }

    /// Copies from `offset` into `dst` on `stream` (after the work queued before it) and
    /// waits for the copy.
    pub(crate) fn read(
        &self,
        offset: usize,
        dst: &mut [u8],
        stream: &Stream,
    ) -> Result<(), CudaError> {
        let src = self.address(offset, dst.len())?;
        let raw = stream.raw;
        // SAFETY: `dst` is writable for its length and `src` has that many bytes (checked).
        // `dst` is pageable (this binding never pins host memory), so the driver returns only
        // once the copy into it is complete; the stream is also synchronised below.
        self.cuda()
            .call(self.cuda().api().memcpy_dtoh_async, |f| unsafe {
                f(dst.as_mut_ptr().cast(), src, dst.len(), raw)
            })?;
        stream.synchronize()
    }

    /// Zeroes `len` bytes at `offset`, queued on `stream` (nothing on the host is involved,
    /// so it need not be waited for).
    pub(crate) fn clear(
        &self,
        offset: usize,
        len: usize,
        stream: &Stream,
    ) -> Result<(), CudaError> {
        let dst = self.address(offset, len)?;
        let raw = stream.raw;
        // SAFETY: `dst` has `len` bytes (checked); the stream is live.
        self.cuda()
            .call(self.cuda().api().memset_d8_async, |f| unsafe {
                f(dst, 0, len, raw)
            })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let (cuda, ptr) = (self.cuda(), self.ptr);
        // SAFETY: `ptr` came from cuMemAlloc and is freed once, here. A collective may still
        // use it: cuMemFree waits for the device's work on it (the driver documents its
        // synchronous behaviour), and the NCCL backend drops its communicator, which finishes
        // or aborts that work, before its buffers.
        cuda.release(cuda.api().mem_free, |f| unsafe { f(ptr) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_no_driver_naming_the_path() {
        let Err(err) = Cuda::open_at(Path::new("/nonexistent/libcuda.so.1")) else {
            panic!("a missing file opened as the driver")
        };
        assert!(matches!(err, CudaError::NoDriver(_)), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("no CUDA driver: cannot load /nonexistent/libcuda.so.1"),
            "{err}"
        );
    }

    /// A library that loads but is not the driver: the table is built and each call fails
    /// alone, naming the function it lacks.
    #[test]
    fn a_library_without_the_functions_fails_each_call_by_name() {
        let cuda = Cuda::load(Path::new("libm.so.6")).unwrap();
        assert!(cuda.api().missing().contains(&"cuMemAlloc_v2"));
        assert!(matches!(
            cuda.driver_version(),
            Err(CudaError::Symbol("cuDriverGetVersion"))
        ));
        assert!(matches!(
            cuda.device_count(),
            Err(CudaError::Symbol("cuDeviceGetCount"))
        ));
        assert_eq!(
            cuda.error_string(CuResult::OUT_OF_MEMORY),
            "CUDA_ERROR_OUT_OF_MEMORY"
        );
        let Err(err) = Cuda::open_at(Path::new("libm.so.6")) else {
            panic!("libm initialised as the driver")
        };
        assert_eq!(
            err.to_string(),
            "libcuda.so.1 has no symbol cuInit (driver too old)"
        );
    }
}
