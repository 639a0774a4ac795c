//! The CUDA driver API version from `libcuda.so.1` (`cuDriverGetVersion`, which needs no
//! `cuInit` and no GPU), bound with libloading: cudarc panics when the library is missing.

use std::ffi::c_int;

/// The soname the NVIDIA driver installs.
pub const CUDA_LIBRARY: &str = "libcuda.so.1";

/// A source of the CUDA driver version: the real library, or a fixed answer in tests.
pub trait CudaProbe {
    /// `12.4`, or why it cannot be known (shown as the skip reason).
    fn driver_version(&self) -> Result<String, String>;
}

/// `libcuda.so.1` loaded at run time.
pub struct RealCuda;

impl CudaProbe for RealCuda {
    fn driver_version(&self) -> Result<String, String> {
        // SAFETY: loading the NVIDIA driver's user-space library runs its initialisers,
        // which are designed to be loaded by any process.
        let lib = unsafe { libloading::Library::new(CUDA_LIBRARY) }.map_err(|e| {
            format!("NVIDIA driver not found ({CUDA_LIBRARY} cannot be loaded: {e})")
        })?;
        // SAFETY: the signature is CUresult cuDriverGetVersion(int *driverVersion).
        let get: libloading::Symbol<unsafe extern "C" fn(*mut c_int) -> c_int> =
            unsafe { lib.get(b"cuDriverGetVersion\0") }
                .map_err(|e| format!("{CUDA_LIBRARY} lacks cuDriverGetVersion: {e}"))?;
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid out pointer for the call's duration.
        let rc = unsafe { get(&mut version) };
        if rc != 0 {
            return Err(format!("cuDriverGetVersion failed with CUresult {rc}"));
        }
        Ok(super::nvml::cuda_version_text(version))
    }
}

/// No CUDA to ask, with the reason.
pub struct NoCuda(pub String);

impl CudaProbe for NoCuda {
    fn driver_version(&self) -> Result<String, String> {
        Err(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_libcuda_is_a_reason_not_a_panic() {
        if std::path::Path::new("/proc/driver/nvidia/version").exists() {
            return;
        }
        let reason = RealCuda.driver_version().unwrap_err();
        assert!(reason.contains(CUDA_LIBRARY), "{reason}");
    }
}
