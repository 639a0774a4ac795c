//! The user-space stack above the driver: cuDNN (`cudnn.version`) and the CUDA version the
//! installed torch was built for against what the driver supports (`torch.cuda`). Both are
//! read from files, never loaded, so they are judged on images too.

use crate::finding::{Area, Check, Finding};
use crate::host::libsearch::SearchEnv;
use crate::host::version::Version;
use crate::host::{cudnn, torch};
use crate::inventory::Inventory;
use crate::probe::Probes;
use crate::profile::setting::Setting;

use super::super::{Context, by_rule_found, setting_check};
use super::versions::library_not_found;

/// `cudnn.version`: the cuDNN a job would load, its version and where both were found.
pub(crate) fn cudnn(ctx: &Context, inv: &Inventory, setting: &Setting, env: &SearchEnv) -> Finding {
    let check = setting_check(ctx, Area::Gpu, "cudnn.version", setting);
    let found = match cudnn::locate(ctx.root, env) {
        Ok(f) => f,
        Err(searched) => {
            return library_not_found(
                check,
                inv,
                setting,
                &format!("cuDNN ({})", cudnn::SONAMES.join(", ")),
                &searched,
                "pip install nvidia-cudnn-cu12 (PyTorch's cuDNN) or install NVIDIA's cudnn9 package",
            );
        }
    };
    let Some(version) = found.version.clone() else {
        return check.error(format!(
            "{} (found via {}): no version in its headers, wheel metadata or file name",
            found.path, found.origin
        ));
    };
    by_rule_found(
        check,
        setting,
        format!(
            "{} (found via {}; version from {})",
            found.path, found.origin, found.version_source
        ),
        ". ",
        version,
        "upgrade cuDNN: pip install -U nvidia-cudnn-cu12, or NVIDIA's cudnn9 packages",
    )
}

/// The CUDA version the driver supports and where that was read: NVML, libcuda, else
/// the driver version through the CUDA release notes' table.
fn driver_cuda(ctx: &Context, inv: &Inventory, probes: &Probes) -> Option<(String, String)> {
    if let Some(v) = inv.nvml.as_ref().ok().and_then(|f| f.cuda_version.clone()) {
        return Some((v, "NVML".into()));
    }
    if let Ok(v) = probes.cuda.driver_version() {
        return Some((v, "cuDriverGetVersion".into()));
    }
    let (driver, source) = super::versions::driver_version(ctx.root, inv).ok()?;
    torch::cuda_for_driver(&driver).map(|c| {
        (
            c.to_string(),
            format!("driver {driver} ({source}) by the CUDA release notes' driver table"),
        )
    })
}

/// `torch.cuda`: warns when the installed torch was built for a newer CUDA than the driver
/// supports (CUDA initialisation fails, or with minor version compatibility, PTX kernels
/// fail to JIT).
pub(crate) fn torch_cuda(
    ctx: &Context,
    inv: &Inventory,
    probes: &Probes,
    env: &SearchEnv,
) -> Finding {
    let check = Check::new("torch.cuda", Area::Gpu).expected("<= the driver's CUDA version");
    let found = match torch::locate(ctx.root, env) {
        Ok(t) => t,
        Err(reason) => return check.skip(reason.to_string()),
    };
    let shown = format!(
        "torch {} ({})",
        found.version.as_deref().unwrap_or("?"),
        found.path
    );
    let Some(built) = found.cuda.clone() else {
        return check.skip(format!(
            "{shown} is a CPU-only (or ROCm) build: it never uses CUDA"
        ));
    };
    let Some((driver, source)) = driver_cuda(ctx, inv, probes) else {
        return check.skip(format!(
            "{shown} was built for CUDA {built}; the driver's CUDA version is unknown (no NVIDIA driver found)"
        ));
    };
    let newer = match (Version::parse(&built), Version::parse(&driver)) {
        (Some(b), Some(d)) => b > d,
        _ => false,
    };
    let check = check.expected(format!("<= {driver} (the driver's CUDA, from {source})"));
    if !newer {
        return check
            .why(format!(
                "{shown} was built for CUDA {built}, which the driver supports"
            ))
            .pass(built);
    }
    let why = if built.split('.').next() == driver.split('.').next() {
        format!(
            "{shown} was built for CUDA {built} but the driver supports {driver}: it starts through CUDA minor version compatibility (driver >= {}), but kernels needing PTX JIT fail",
            torch::major_minimum(&built).unwrap_or("?")
        )
    } else {
        format!(
            "{shown} was built for CUDA {built} but the driver supports only {driver}: CUDA fails to initialise"
        )
    };
    let fix = format!(
        "upgrade the NVIDIA driver to one supporting CUDA {built}, or install the torch wheel built for CUDA {driver} or older (pip install torch --index-url https://download.pytorch.org/whl/cuXYZ)"
    );
    check.why(why).warn(built, fix)
}
