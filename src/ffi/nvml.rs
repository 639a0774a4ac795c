//! The NVML calls nvml-wrapper has no safe function for: `nvmlDeviceGetRemappedRows` (the
//! A100-and-later row remapper's state). The symbol comes from the table nvml-wrapper
//! already resolved when it opened `libnvidia-ml.so.1`, one `Result` per symbol, so a driver
//! older than R450 (which lacks it) fails only this call.

use nvml_wrapper::{Device, Nvml};

/// The row remapper's counters for one GPU (`nvmlDeviceGetRemappedRows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RemappedRows {
    /// Rows remapped after correctable errors.
    pub correctable: u32,
    /// Rows remapped after uncorrectable errors.
    pub uncorrectable: u32,
    /// A remapping waits for the next GPU reset.
    pub pending: bool,
    /// A remapping failed: the bank has no spare row left.
    pub failed: bool,
}

/// `NVML_SUCCESS`.
const SUCCESS: u32 = 0;
/// `NVML_ERROR_NOT_SUPPORTED`: the GPU has no row remapper (before Ampere).
const NOT_SUPPORTED: u32 = 3;

/// Why the remapper could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RemapError {
    #[error("the GPU has no row remapper (pre-Ampere GPUs retire pages instead)")]
    NotSupported,
    #[error("the driver's NVML lacks nvmlDeviceGetRemappedRows (older than R450)")]
    Missing,
    #[error("nvmlDeviceGetRemappedRows failed with NVML error {0}")]
    Failed(u32),
}

/// The row remapper's state of `device`.
pub(crate) fn remapped_rows(nvml: &Nvml, device: &Device) -> Result<RemappedRows, RemapError> {
    let call = *nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|_| RemapError::Missing)?;
    let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: `call` is `nvmlDeviceGetRemappedRows` as nvml-wrapper-sys declares it, resolved
    // from the library `nvml` keeps loaded for as long as it and `device` (which borrows it)
    // live; the handle is the live device's, and the four out-pointers are valid `c_uint`s.
    let code = unsafe {
        call(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failed,
        )
    };
    match code {
        SUCCESS => Ok(RemappedRows {
            correctable: corr,
            uncorrectable: unc,
            pending: pending != 0,
            failed: failed != 0,
        }),
        NOT_SUPPORTED => Err(RemapError::NotSupported),
        other => Err(RemapError::Failed(other)),
    }
}
