//! GPU memory repair state from NVML: the row remapper (A100 and later) and dynamic page
//! retirement (before Ampere). A repair waiting for a GPU reset, or one that failed, needs
//! action before the GPU takes jobs (NVIDIA's GPU memory error management guide).

use crate::finding::{Area, Check, Finding};
use crate::inventory::gpu::Gpu;
use crate::probe::nvml::NvmlGpu;

/// `gpuN.row_remap`: a failed remapping (no spare row left: NVIDIA's replacement
/// criterion) or one pending a reset fails; otherwise the counts pass.
pub(crate) fn row_remap(g: &Gpu, n: &NvmlGpu) -> Option<Finding> {
    let r = n.remapped_rows?;
    let check = Check::new(format!("gpu{}.row_remap", g.index), Area::Gpu)
        .expected("no remapping pending or failed");
    let counts = format!(
        "{} row(s) remapped after uncorrectable errors, {} after correctable ones",
        r.uncorrectable, r.correctable
    );
    let who = who(g, n);
    Some(if r.failed {
        check
            .why(format!("{who}: a row remapping failed (the bank has no spare row left); {counts}"))
            .fail(
                "remapping failed",
                "drain the node and have the GPU replaced: a failed row remapping is NVIDIA's replacement (RMA) criterion",
            )
    } else if r.pending {
        check
            .why(format!("{who}: a row remapping waits for the next GPU reset; until then the failing row stays in use; {counts}"))
            .fail("remapping pending", reset_fix(g))
    } else {
        check
            .why(format!("{who}: {counts}"))
            .pass(format!("{} remapped", r.uncorrectable + r.correctable))
    })
}

/// `gpuN.retired_pages`: a page retirement waiting for the driver to reload fails; the
/// counts otherwise pass.
pub(crate) fn retired_pages(g: &Gpu, n: &NvmlGpu) -> Option<Finding> {
    let p = n.retired_pages?;
    let check = Check::new(format!("gpu{}.retired_pages", g.index), Area::Gpu)
        .expected("no retirement pending");
    let counts = format!(
        "{} page(s) retired after a double-bit error, {} after repeated single-bit errors",
        p.double_bit, p.single_bit
    );
    let who = who(g, n);
    Some(if p.pending {
        check
            .why(format!("{who}: a page retirement waits for the driver to reload; until then the bad page can be handed to jobs; {counts}"))
            .fail("retirement pending", reset_fix(g))
    } else {
        check
            .why(format!("{who}: {counts}"))
            .pass(format!("{} retired", p.double_bit + p.single_bit))
    })
}

/// The GPU as its findings name it: NVML's name and the PCI address.
fn who(g: &Gpu, n: &NvmlGpu) -> String {
    format!("{} ({})", n.name, g.pci_address)
}

/// The fix for a repair that waits for a reset: both repairs take effect the same way.
fn reset_fix(g: &Gpu) -> String {
    format!(
        "drain the node, then reset the GPU (`nvidia-smi -r -i {}`) or reboot",
        g.pci_address
    )
}
