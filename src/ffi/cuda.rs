//! The CUDA driver API calls gputune needs (the driver version for the audit; devices,
//! contexts, memory and streams for the NCCL backend), bound at run time from
//! `libcuda.so.1` (the name the driver installs; cudarc panics when it is missing, so this
//! small binding opens it with dlopen and turns every failure into a message).

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::path::PathBuf;

/// The driver library's file name.
pub const LIBCUDA: &str = "libcuda.so.1";
/// `CUDA_ERROR_NO_DEVICE`.
const NO_DEVICE: c_int = 100;
/// `CUDA_ERROR_NOT_READY`: a stream still has work queued.
pub const NOT_READY: c_int = 600;

pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuStream = *mut c_void;

/// A stream made by [`Cuda::stream`] (so calls on it need no raw pointer from callers).
#[derive(Clone, Copy)]
pub struct Stream(pub(crate) CuStream);
pub type CuDevicePtr = u64;

/// Why CUDA cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver: cannot load {LIBCUDA} ({0})")]
    NoDriver(String),
    #[error("no GPU: the CUDA driver found no device ({0})")]
    NoDevice(String),
    #[error("{LIBCUDA} has no symbol {0} (driver too old)")]
    Symbol(&'static str),
    #[error("{function} failed: {message} (CUresult {code})")]
    Call {
        function: &'static str,
        code: c_int,
        message: String,
    },
}

/// The driver's CUDA version (`cuDriverGetVersion`, e.g. 12040), which needs neither
/// `cuInit` nor a GPU: loads `libcuda.so.1` by its soname.
pub fn driver_version() -> Result<c_int, CudaError> {
    // SAFETY: loading the driver runs its initialisers, which only set up static state.
    let library = unsafe { libloading::Library::new(LIBCUDA) }
        .map_err(|e| CudaError::NoDriver(e.to_string()))?;
    // SAFETY: the signature is CUresult cuDriverGetVersion(int *driverVersion).
    let get = unsafe {
        library.get::<unsafe extern "C" fn(*mut c_int) -> c_int>(b"cuDriverGetVersion\0")
    }
    .map_err(|_| CudaError::Symbol("cuDriverGetVersion"))?;
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid out pointer for the call's duration.
    let code = unsafe { get(&mut version) };
    if code != 0 {
        return Err(CudaError::Call {
            function: "cuDriverGetVersion",
            code,
            message: format!("CUresult {code}"),
        });
    }
    Ok(version)
}

/// The loaded driver.
pub struct Cuda {
    library: libloading::Library,
}

impl Cuda {
    /// Opens the driver from `$GPUTUNE_CUDA_LIB` (a file) or the linker's search, and
    /// initialises it.
    pub fn open() -> Result<Cuda, CudaError> {
        let path = std::env::var_os("GPUTUNE_CUDA_LIB")
            .map_or_else(|| PathBuf::from(LIBCUDA), PathBuf::from);
        // SAFETY: loading the driver runs its initialisers, which only set up static state.
        let library = unsafe { libloading::Library::new(&path) }
            .map_err(|e| CudaError::NoDriver(e.to_string()))?;
        let cuda = Cuda { library };
        // SAFETY: CUresult cuInit(unsigned int Flags).
        let init: unsafe extern "C" fn(c_uint) -> c_int = unsafe { cuda.symbol("cuInit")? };
        // SAFETY: flags must be 0.
        let code = unsafe { init(0) };
        if code == NO_DEVICE {
            return Err(CudaError::NoDevice(cuda.error_string(code)));
        }
        cuda.check("cuInit", code)?;
        Ok(cuda)
    }

    /// # Safety
    /// `T` must be the exact C signature of `name`.
    pub unsafe fn symbol<T: Copy>(&self, name: &'static str) -> Result<T, CudaError> {
        let c = format!("{name}\0");
        // SAFETY: the caller guarantees the signature.
        unsafe { self.library.get::<T>(c.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| CudaError::Symbol(name))
    }

    pub fn error_string(&self, code: c_int) -> String {
        // SAFETY: CUresult cuGetErrorString(CUresult error, const char **pStr).
        let Ok(get) = (unsafe {
            self.symbol::<unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int>(
                "cuGetErrorString",
            )
        }) else {
            return format!("CUDA error {code}");
        };
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `text` is a valid out-pointer.
        if unsafe { get(code, &mut text) } != 0 || text.is_null() {
            return format!("CUDA error {code}");
        }
        // SAFETY: the driver returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    pub fn check(&self, function: &'static str, code: c_int) -> Result<(), CudaError> {
        if code == 0 {
            Ok(())
        } else {
            Err(CudaError::Call {
                function,
                code,
                message: self.error_string(code),
            })
        }
    }

    pub fn device_count(&self) -> Result<usize, CudaError> {
        // SAFETY: CUresult cuDeviceGetCount(int *count).
        let f: unsafe extern "C" fn(*mut c_int) -> c_int =
            unsafe { self.symbol("cuDeviceGetCount")? };
        let mut n = 0;
        // SAFETY: valid out-pointer.
        self.check("cuDeviceGetCount", unsafe { f(&mut n) })?;
        if n <= 0 {
            return Err(CudaError::NoDevice(
                "cuDeviceGetCount reports 0 devices".into(),
            ));
        }
        Ok(n as usize)
    }

    pub fn device(&self, ordinal: usize) -> Result<CuDevice, CudaError> {
        // SAFETY: CUresult cuDeviceGet(CUdevice *device, int ordinal).
        let f: unsafe extern "C" fn(*mut CuDevice, c_int) -> c_int =
            unsafe { self.symbol("cuDeviceGet")? };
        let mut d = 0;
        // SAFETY: valid out-pointer.
        self.check("cuDeviceGet", unsafe { f(&mut d, ordinal as c_int) })?;
        Ok(d)
    }

    pub fn device_name(&self, device: CuDevice) -> Result<String, CudaError> {
        // SAFETY: CUresult cuDeviceGetName(char *name, int len, CUdevice dev).
        let f: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> c_int =
            unsafe { self.symbol("cuDeviceGetName")? };
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` holds 256 writable bytes; the driver NUL-terminates within `len`.
        self.check("cuDeviceGetName", unsafe {
            f(buf.as_mut_ptr(), buf.len() as c_int, device)
        })?;
        // SAFETY: NUL-terminated by the driver.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Makes the device's primary context current on this thread.
    pub fn use_device(&self, device: CuDevice) -> Result<CuContext, CudaError> {
        // SAFETY: CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev).
        let retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> c_int =
            unsafe { self.symbol("cuDevicePrimaryCtxRetain")? };
        // SAFETY: CUresult cuCtxSetCurrent(CUcontext ctx).
        let set: unsafe extern "C" fn(CuContext) -> c_int =
            unsafe { self.symbol("cuCtxSetCurrent")? };
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: valid out-pointer; `ctx` comes from the driver.
        self.check("cuDevicePrimaryCtxRetain", unsafe {
            retain(&mut ctx, device)
        })?;
        self.check("cuCtxSetCurrent", unsafe { set(ctx) })?;
        Ok(ctx)
    }

    pub fn alloc(&self, bytes: usize) -> Result<CuDevicePtr, CudaError> {
        // SAFETY: CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize).
        let f: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> c_int =
            unsafe { self.symbol("cuMemAlloc_v2")? };
        let mut p = 0;
        // SAFETY: valid out-pointer.
        self.check("cuMemAlloc", unsafe { f(&mut p, bytes.max(1)) })?;
        Ok(p)
    }

    pub fn free(&self, ptr: CuDevicePtr) {
        // SAFETY: CUresult cuMemFree_v2(CUdeviceptr dptr).
        if let Ok(f) =
            unsafe { self.symbol::<unsafe extern "C" fn(CuDevicePtr) -> c_int>("cuMemFree_v2") }
        {
            // SAFETY: `ptr` came from cuMemAlloc and is freed once.
            unsafe { f(ptr) };
        }
    }

    pub fn copy_to_device(&self, dst: CuDevicePtr, src: &[u8]) -> Result<(), CudaError> {
        // SAFETY: CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n).
        let f: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> c_int =
            unsafe { self.symbol("cuMemcpyHtoD_v2")? };
        // SAFETY: `src` is valid for its length; `dst` was allocated at least that large.
        self.check("cuMemcpyHtoD", unsafe {
            f(dst, src.as_ptr().cast(), src.len())
        })
    }

    /// Waits for all of the context's work, every stream included: a `cuMemcpyHtoD` from
    /// pageable memory on the NULL stream does not order with a `CU_STREAM_NON_BLOCKING`
    /// stream, so a copy must be finished before a collective on that stream reads it (as
    /// nccl-tests ends its initialisation with a device synchronise).
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: CUresult cuCtxSynchronize(void).
        let f: unsafe extern "C" fn() -> c_int = unsafe { self.symbol("cuCtxSynchronize")? };
        // SAFETY: no arguments; the context is current on this thread.
        self.check("cuCtxSynchronize", unsafe { f() })
    }

    pub fn copy_to_host(&self, dst: &mut [u8], src: CuDevicePtr) -> Result<(), CudaError> {
        // SAFETY: CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n).
        let f: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> c_int =
            unsafe { self.symbol("cuMemcpyDtoH_v2")? };
        // SAFETY: `dst` is writable for its length; `src` holds at least that many bytes.
        self.check("cuMemcpyDtoH", unsafe {
            f(dst.as_mut_ptr().cast(), src, dst.len())
        })
    }

    pub fn stream(&self) -> Result<Stream, CudaError> {
        // SAFETY: CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags).
        let f: unsafe extern "C" fn(*mut CuStream, c_uint) -> c_int =
            unsafe { self.symbol("cuStreamCreate")? };
        let mut s: CuStream = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flag 1 = CU_STREAM_NON_BLOCKING.
        self.check("cuStreamCreate", unsafe { f(&mut s, 1) })?;
        Ok(Stream(s))
    }

    /// Destroys a stream from [`Cuda::stream`] (errors ignored: this is cleanup).
    pub fn destroy_stream(&self, stream: Stream) {
        // SAFETY: CUresult cuStreamDestroy_v2(CUstream hStream).
        if let Ok(f) =
            unsafe { self.symbol::<unsafe extern "C" fn(CuStream) -> c_int>("cuStreamDestroy_v2") }
        {
            // SAFETY: `stream` came from cuStreamCreate and is destroyed once.
            unsafe { f(stream.0) };
        }
    }

    /// Releases the primary context [`Cuda::use_device`] retained (errors ignored).
    pub fn release_device(&self, device: CuDevice) {
        // SAFETY: CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev).
        if let Ok(f) = unsafe {
            self.symbol::<unsafe extern "C" fn(CuDevice) -> c_int>("cuDevicePrimaryCtxRelease_v2")
        } {
            // SAFETY: one release for the one retain of `use_device`.
            unsafe { f(device) };
        }
    }

    /// 0 when the stream's work is done, [`NOT_READY`] while it runs, else an error code.
    pub fn stream_query(&self, stream: Stream) -> Result<c_int, CudaError> {
        // SAFETY: CUresult cuStreamQuery(CUstream hStream).
        let f: unsafe extern "C" fn(CuStream) -> c_int = unsafe { self.symbol("cuStreamQuery")? };
        // SAFETY: `stream` came from cuStreamCreate.
        Ok(unsafe { f(stream.0) })
    }
}
