//! The software GPUs train with: NVIDIA driver, CUDA driver API and NCCL versions, judged
//! against the profile's minimums.

use crate::finding::{Area, Check, Finding};
use crate::host::Root;
use crate::host::nccl::{self, SearchEnv};
use crate::inventory::Inventory;
use crate::probe::Probes;
use crate::probe_error::Probe;
use crate::profile::setting::Setting;

use super::super::{Context, by_rule_found, setting_check, value_by_rule};

/// Parses `/proc/driver/nvidia/version`: the first dotted number on the `NVRM version:`
/// line (`... Kernel Module  535.104.05  Sat Aug 19 ...`, or `... for x86_64  550.54.15`).
pub(crate) fn parse_proc_driver_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

const PROC_VERSION: &str = "/proc/driver/nvidia/version";
const MODULE_VERSION: &str = "/sys/module/nvidia/version";

/// Why the loaded driver's version is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoDriver {
    /// The driver is bound, but the files that name its version are missing.
    #[error(
        "the nvidia driver is bound to the GPUs but neither {PROC_VERSION} nor {MODULE_VERSION} is readable (a partial snapshot?)"
    )]
    Unreadable,
    /// The kernel module is not loaded.
    #[error(
        "NVIDIA driver not found (no {PROC_VERSION}, no {MODULE_VERSION}: the nvidia kernel module is not loaded)"
    )]
    NotLoaded,
}

/// The loaded driver's version and the file it came from, or why there is none.
pub(crate) fn driver_version(root: &Root, inv: &Inventory) -> Result<(String, String), NoDriver> {
    let proc_file = PROC_VERSION;
    if let Ok(Some(text)) = root.read_optional(proc_file)
        && let Some(v) = parse_proc_driver_version(&text)
    {
        return Ok((v, proc_file.into()));
    }
    let module = MODULE_VERSION;
    if let Ok(Some(text)) = root.read_optional(module)
        && !text.trim().is_empty()
    {
        return Ok((text.trim().to_string(), module.into()));
    }
    if let Ok(facts) = &inv.nvml
        && let Some(v) = &facts.driver_version
    {
        return Ok((v.clone(), "NVML".into()));
    }
    // The module's directory or the driver's /proc tree means it is loaded, whatever the
    // snapshot left out.
    let loaded = root.exists("/sys/module/nvidia") || root.exists("/proc/driver/nvidia/gpus");
    if loaded
        || inv
            .gpus
            .iter()
            .any(|g| g.driver.as_deref() == Some("nvidia"))
    {
        return Err(NoDriver::Unreadable);
    }
    Err(NoDriver::NotLoaded)
}

/// `driver.version`.
pub(crate) fn driver(ctx: &Context, inv: &Inventory, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Gpu, "driver.version", setting);
    match driver_version(ctx.root, inv) {
        Err(reason) => check.skip(reason.to_string()),
        Ok((version, source)) => value_by_rule(
            &check.found(format!("from {source}"), ". "),
            setting,
            version,
            "install a newer NVIDIA data-centre driver (the CUDA release notes list the minimum for each CUDA version), then reboot or reload the nvidia modules",
        ),
    }
}

/// `cuda.version`: the CUDA version the driver supports (what `nvidia-smi` shows).
pub(crate) fn cuda(ctx: &Context, inv: &Inventory, probes: &Probes, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Gpu, "cuda.version", setting);
    let from_nvml = inv.nvml.as_ref().ok().and_then(|f| f.cuda_version.clone());
    let (version, source) = match from_nvml {
        Some(v) => (v, "NVML".to_string()),
        None => match probes.cuda.driver_version() {
            Ok(v) => (v, "cuDriverGetVersion in libcuda.so.1".to_string()),
            Err(reason) => return reason.finding(Probe::Cuda, &check, reason.to_string()),
        },
    };
    value_by_rule(
        &check.found(format!("from {source}"), ". "),
        setting,
        version,
        "upgrade the NVIDIA driver: the CUDA version a node can run is capped by its driver",
    )
}

/// `nccl.version`: the NCCL a job would load, found in gputune's lookup order.
pub(crate) fn nccl(ctx: &Context, inv: &Inventory, setting: &Setting) -> Finding {
    nccl_with(ctx, inv, setting, &SearchEnv::from_process())
}

/// A GPU library (NCCL, cuDNN) that no search found in the places `searched`: failing (at
/// the profile's severity) on a node with GPUs, a skip without them, since nothing on the
/// node would load it.
pub(super) fn library_not_found(
    check: Check,
    inv: &Inventory,
    setting: &Setting,
    library: &str,
    searched: &[String],
    fix: &str,
) -> Finding {
    let message = format!("{library} not found; searched {}", searched.join(", "));
    if inv.gpus.is_empty() {
        return check.skip(format!("no NVIDIA GPU on this node; {message}"));
    }
    check
        .why(message)
        .judge(setting.severity.status(), "not found", fix)
}

pub(crate) fn nccl_with(
    ctx: &Context,
    inv: &Inventory,
    setting: &Setting,
    env: &SearchEnv,
) -> Finding {
    let check = setting_check(ctx, Area::Gpu, "nccl.version", setting);
    let located = match nccl::locate(ctx.root, env) {
        Ok(l) => l,
        Err(searched) => {
            return library_not_found(
                check,
                inv,
                setting,
                nccl::SONAME,
                &searched,
                "pip install nvidia-nccl-cu12 (PyTorch's NCCL) or install libnccl2 from NVIDIA's repository, or point $GPUTUNE_NCCL_LIB at libnccl.so.2",
            );
        }
    };
    let shown = located.path.display().to_string();
    let version = match nccl::version_of(ctx.root, &located) {
        Ok(v) => v.to_string(),
        // An image's library is never loaded; without a readable version there is no verdict.
        Err(e @ nccl::NcclError::Unread { .. }) => return check.skip(e.to_string()),
        Err(e) => return check.error(format!("{shown} (found via {}): {e}", located.origin)),
    };
    by_rule_found(
        check,
        setting,
        format!("{shown} (found via {})", located.origin),
        ". ",
        version,
        "upgrade NCCL: pip install -U nvidia-nccl-cu12 (or the libnccl2 package), or point $GPUTUNE_NCCL_LIB at a newer libnccl.so.2",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_driver_versions() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0\n",
                Some("535.104.05"),
            ),
            (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n",
                Some("550.54.15"),
            ),
            (
                "NVRM version: NVIDIA UNIX aarch64 Kernel Module  580.95.05  Tue Sep 30 2025\n",
                Some("580.95.05"),
            ),
            ("GCC version: gcc version 12.2.0\n", None),
            ("", None),
            ("NVRM version: garbage\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_proc_driver_version(text).as_deref(),
                *want,
                "{text:?}"
            );
        }
    }
}
