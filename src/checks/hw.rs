//! Helpers the hardware areas (gpu, nic, numa, platform) share: the inventory (read once
//! per audit) and building findings without repeating every field.

use crate::finding::{Area, Finding, Status};
use crate::inventory::Inventory;
use crate::profile::setting::Setting;

use super::Context;

/// The inventory with live probes on the live node, or an error finding saying which file
/// could not be read.
pub fn inventory(ctx: &Context, area: Area) -> Result<Inventory, Box<Finding>> {
    match ctx.inventory() {
        Ok(inventory) => Ok(inventory.clone()),
        Err(e) => Err(Box::new(Finding::error(
            format!("{area}.inventory"),
            area,
            "-",
            e.to_string(),
        ))),
    }
}

/// A finding with every field given; `fix` is dropped when it passes.
pub fn finding(
    id: impl Into<String>,
    area: Area,
    status: Status,
    expected: impl Into<String>,
    actual: impl Into<String>,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        id: id.into(),
        area,
        status,
        expected: expected.into(),
        actual: actual.into(),
        message: message.into(),
        fix: if status == Status::Pass {
            String::new()
        } else {
            fix.into()
        },
        change: None,
    }
}

/// Judges `actual` against a profile setting: the status and, when it cannot be judged,
/// the reason to put in the message.
pub fn judge(setting: &Setting, actual: &str) -> (Status, Option<String>) {
    setting.status_for(actual)
}
