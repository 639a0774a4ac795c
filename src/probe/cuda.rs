//! The CUDA driver API version for the audit, through [`crate::ffi::cuda`], behind a trait
//! so tests can give any answer.

use crate::probe_error::ProbeError;

/// The soname the NVIDIA driver installs.
pub(crate) const CUDA_LIBRARY: &str = crate::ffi::cuda::LIBCUDA;

/// A source of the CUDA driver version: the real library, or a fixed answer in tests.
pub trait CudaProbe {
    /// `12.4`, or why it cannot be known (shown as the skip reason).
    fn driver_version(&self) -> Result<String, ProbeError>;
}

/// `libcuda.so.1` loaded at run time.
pub(crate) struct RealCuda;

impl CudaProbe for RealCuda {
    fn driver_version(&self) -> Result<String, ProbeError> {
        use crate::ffi::cuda::{self, CudaError};
        match cuda::driver_version() {
            Ok(version) => Ok(crate::probe::nvml::cuda_version_text(version)),
            Err(CudaError::NoDriver(e)) => Err(ProbeError::Absent(format!(
                "NVIDIA driver not found ({CUDA_LIBRARY} cannot be loaded: {})",
                e.message
            ))),
            Err(CudaError::Call { code, .. }) => Err(ProbeError::Failed(format!(
                "cuDriverGetVersion failed with {code}"
            ))),
            Err(e) => Err(ProbeError::Failed(e.to_string())),
        }
    }
}

/// No CUDA to ask, with the reason.
pub(crate) struct NoCuda(pub String);

impl CudaProbe for NoCuda {
    fn driver_version(&self) -> Result<String, ProbeError> {
        Err(ProbeError::NotLive(self.0.clone()))
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
        let reason = RealCuda.driver_version().unwrap_err().to_string();
        assert!(reason.contains(CUDA_LIBRARY), "{reason}");
    }
}
