//! NVML (the NVIDIA driver's management library), loaded at run time from
//! `libnvidia-ml.so.1`. Absent or without a loaded driver is a normal state: callers get the
//! reason and show sysfs facts alone.

use std::ffi::OsStr;

use serde::Serialize;

use crate::probe_error::ProbeError;

/// The soname drivers ship (many installs lack the unversioned `libnvidia-ml.so`).
pub(crate) const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// `NVML_NVLINK_MAX_LINKS` of current drivers (18 links per GPU on Hopper).
const NVLINK_MAX_LINKS: u32 = 18;

/// What NVML says about one GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvmlGpu {
    /// Normalised to sysfs form, `0000:3b:00.0`.
    pub pci_address: String,
    pub name: String,
    pub memory_bytes: Option<u64>,
    pub persistence_mode: Option<bool>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected: Option<u64>,
    /// PCI addresses of the peers reached through active NVLinks (a peer per link).
    pub nvlink_peers: Vec<String>,
    /// Every NVLink the GPU has (NVML answers for it) and whether it is active; GPUs
    /// without NVLink have none.
    #[serde(default)]
    pub nvlinks: Vec<NvLink>,
    /// The row remapper's state (A100 and later); `None` where NVML cannot say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<crate::ffi::nvml::RemappedRows>,
    /// Pages retired after ECC errors, and whether a retirement waits for the next driver
    /// reload (GPUs before Ampere); `None` where NVML cannot say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_pages: Option<RetiredPages>,
}

/// Dynamic page retirement of one GPU (`nvmlDeviceGetRetiredPages`,
/// `nvmlDeviceGetRetiredPagesPendingStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetiredPages {
    /// Pages retired after multiple single-bit errors.
    pub single_bit: u64,
    /// Pages retired after a double-bit error.
    pub double_bit: u64,
    /// A retirement waits for the driver to reload (or the GPU to reset).
    pub pending: bool,
}

/// One NVLink of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NvLink {
    pub link: u32,
    pub active: bool,
}

/// What NVML says about the node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NvmlFacts {
    pub driver_version: Option<String>,
    /// CUDA driver API version as `12.4`.
    pub cuda_version: Option<String>,
    pub gpus: Vec<NvmlGpu>,
}

/// A source of NVML facts: the real library, or a fixed answer in tests.
pub trait NvmlProbe {
    /// The facts, or why NVML cannot give them (shown as the skip reason).
    fn probe(&self) -> Result<NvmlFacts, ProbeError>;
}

/// `00000000:3B:00.0` (NVML) → `0000:3b:00.0` (sysfs).
pub(crate) fn normalise_bus_id(bus_id: &str) -> String {
    let lower = bus_id.trim().to_ascii_lowercase();
    match lower.len() {
        n if n > 12 => lower[n - 12..].to_string(),
        _ => lower,
    }
}

/// `12040` (cudaDriverGetVersion form) → `12.4`.
pub(crate) fn cuda_version_text(code: i32) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

/// NVML through nvml-wrapper, opening `libnvidia-ml.so.1` explicitly.
pub(crate) struct RealNvml;

impl NvmlProbe for RealNvml {
    fn probe(&self) -> Result<NvmlFacts, ProbeError> {
        use nvml_wrapper::error::NvmlError;
        use nvml_wrapper::{
            Nvml, enum_wrappers::device::EccCounter, enum_wrappers::device::MemoryError,
            enum_wrappers::device::RetirementCause,
        };
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(NVML_LIBRARY))
            .init()
            .map_err(|e| match e {
                NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => ProbeError::Absent(
                    format!("NVIDIA driver not found ({NVML_LIBRARY} cannot be loaded)"),
                ),
                NvmlError::DriverNotLoaded => {
                    ProbeError::Absent("NVIDIA driver not loaded".to_string())
                }
                NvmlError::NoPermission => {
                    ProbeError::Denied("no permission to use NVML".to_string())
                }
                other => ProbeError::Failed(format!("NVML failed to start: {other}")),
            })?;
        let count = nvml
            .device_count()
            .map_err(|e| ProbeError::Failed(format!("NVML cannot count GPUs: {e}")))?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            let Ok(pci) = device.pci_info() else { continue };
            let mut nvlink_peers = Vec::new();
            let mut nvlinks = Vec::new();
            for link in 0..NVLINK_MAX_LINKS {
                let wrapper = device.link_wrapper_for(link);
                // An error (NotSupported, InvalidArg) means the GPU has no such link.
                let Ok(active) = wrapper.is_active() else {
                    continue;
                };
                nvlinks.push(NvLink { link, active });
                if active && let Ok(remote) = wrapper.remote_pci_info() {
                    nvlink_peers.push(normalise_bus_id(&remote.bus_id));
                }
            }
            // Each of these is its own call: a GPU or driver lacking one loses only that fact.
            let retired = |cause| device.retired_pages(cause).map(|p| p.len() as u64);
            let retired_pages = match (
                retired(RetirementCause::MultipleSingleBitEccErrors),
                retired(RetirementCause::DoubleBitEccError),
                device.are_pages_pending_retired(),
            ) {
                (Ok(single_bit), Ok(double_bit), Ok(pending)) => Some(RetiredPages {
                    single_bit,
                    double_bit,
                    pending,
                }),
                _ => None,
            };
            gpus.push(NvmlGpu {
                remapped_rows: crate::ffi::nvml::remapped_rows(&nvml, &device).ok(),
                retired_pages,
                pci_address: normalise_bus_id(&pci.bus_id),
                name: device.name().unwrap_or_default(),
                memory_bytes: device.memory_info().ok().map(|m| m.total),
                persistence_mode: device.is_in_persistent_mode().ok(),
                ecc_uncorrected: device
                    .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
                    .ok(),
                nvlink_peers,
                nvlinks,
            });
        }
        Ok(NvmlFacts {
            driver_version: nvml.sys_driver_version().ok(),
            cuda_version: nvml.sys_cuda_driver_version().ok().map(cuda_version_text),
            gpus,
        })
    }
}

/// No NVML to ask, with the reason (not the live node, or a test).
pub(crate) struct NoNvml(pub String);

impl NvmlProbe for NoNvml {
    fn probe(&self) -> Result<NvmlFacts, ProbeError> {
        Err(ProbeError::NotLive(self.0.clone()))
    }
}

/// A fixed answer, for tests of what gputune does with NVML facts.
#[cfg(test)]
pub(crate) struct FixedNvml(pub NvmlFacts);

#[cfg(test)]
impl NvmlProbe for FixedNvml {
    fn probe(&self) -> Result<NvmlFacts, ProbeError> {
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_and_versions() {
        assert_eq!(normalise_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(normalise_bus_id("0000:3b:00.0"), "0000:3b:00.0");
        assert_eq!(cuda_version_text(12040), "12.4");
        assert_eq!(cuda_version_text(11080), "11.8");
    }

    #[test]
    fn real_nvml_is_absent_here_and_says_why() {
        // No NVIDIA driver on development and CI machines: a reason, never a panic.
        if std::path::Path::new("/proc/driver/nvidia/version").exists() {
            return;
        }
        let reason = RealNvml.probe().unwrap_err().to_string();
        assert!(reason.contains("NVIDIA driver"), "{reason}");
    }
}
