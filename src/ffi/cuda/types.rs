//! The CUDA driver's plain C types as cuda.h defines them (result codes), and the check that
//! keeps every device-memory access inside its allocation. Nothing here calls the driver.

use crate::ffi::codes::result_codes;

result_codes! {
    /// A `CUresult`.
    pub struct CuResult, unknown = "CUresult";
    SUCCESS = 0, "CUDA_SUCCESS";
    INVALID_VALUE = 1, "CUDA_ERROR_INVALID_VALUE";
    OUT_OF_MEMORY = 2, "CUDA_ERROR_OUT_OF_MEMORY";
    NOT_INITIALIZED = 3, "CUDA_ERROR_NOT_INITIALIZED";
    DEINITIALIZED = 4, "CUDA_ERROR_DEINITIALIZED";
    /// The driver found is the toolkit's stub, not a real driver.
    STUB_LIBRARY = 34, "CUDA_ERROR_STUB_LIBRARY";
    DEVICE_UNAVAILABLE = 46, "CUDA_ERROR_DEVICE_UNAVAILABLE";
    NO_DEVICE = 100, "CUDA_ERROR_NO_DEVICE";
    INVALID_DEVICE = 101, "CUDA_ERROR_INVALID_DEVICE";
    INVALID_CONTEXT = 201, "CUDA_ERROR_INVALID_CONTEXT";
    INVALID_HANDLE = 400, "CUDA_ERROR_INVALID_HANDLE";
    NOT_FOUND = 500, "CUDA_ERROR_NOT_FOUND";
    /// A stream still has work queued (`cuStreamQuery`).
    NOT_READY = 600, "CUDA_ERROR_NOT_READY";
    ILLEGAL_ADDRESS = 700, "CUDA_ERROR_ILLEGAL_ADDRESS";
    LAUNCH_FAILED = 719, "CUDA_ERROR_LAUNCH_FAILED";
    SYSTEM_NOT_READY = 802, "CUDA_ERROR_SYSTEM_NOT_READY";
    SYSTEM_DRIVER_MISMATCH = 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    UNKNOWN = 999, "CUDA_ERROR_UNKNOWN";
}

/// A range of bytes that does not fit in its device buffer: refused before any call, since
/// the driver and NCCL would read or write past the allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutOfBounds {
    #[error("{len} bytes at offset {offset} do not fit in a device buffer of {size} bytes")]
    Range {
        offset: usize,
        len: usize,
        size: usize,
    },
    #[error("{count} elements of {element} bytes, {times} times, exceed the address space")]
    Overflow {
        count: usize,
        element: usize,
        times: usize,
    },
}

/// Checks that `offset..offset + len` lies inside `size` bytes (without overflowing).
pub(crate) fn check_range(offset: usize, len: usize, size: usize) -> Result<(), OutOfBounds> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(OutOfBounds::Range { offset, len, size }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_codes_have_cuda_h_names_and_unknown_ones_keep_their_number() {
        assert_eq!(CuResult::NOT_READY.to_string(), "CUDA_ERROR_NOT_READY");
        assert_eq!(CuResult::NO_DEVICE.to_string(), "CUDA_ERROR_NO_DEVICE");
        assert_eq!(CuResult(0).to_string(), "CUDA_SUCCESS");
        assert_eq!(CuResult(12345).to_string(), "CUresult 12345");
        assert_eq!(CuResult(12345).name(), None);
        assert_eq!(CuResult::KNOWN.len(), 18);
        for code in CuResult::KNOWN {
            let name = code.name().unwrap_or_default();
            assert!(name.starts_with("CUDA_"), "{code:?} is named {name:?}");
        }
    }

    #[test]
    fn ranges_must_fit_in_the_buffer_without_overflowing() {
        assert_eq!(check_range(0, 16, 16), Ok(()));
        assert_eq!(check_range(16, 0, 16), Ok(()));
        assert_eq!(check_range(8, 8, 16), Ok(()));
        assert_eq!(
            check_range(8, 9, 16),
            Err(OutOfBounds::Range {
                offset: 8,
                len: 9,
                size: 16
            })
        );
        assert!(check_range(17, 0, 16).is_err());
        assert!(check_range(usize::MAX, 2, usize::MAX).is_err());
        let message = check_range(8, 9, 16).unwrap_err().to_string();
        assert_eq!(
            message,
            "9 bytes at offset 8 do not fit in a device buffer of 16 bytes"
        );
    }
}
