//! Helpers the hardware areas (gpu, nic, numa, platform) share: the inventory (read once
//! per audit, borrowed by every area) and judging a value against a profile setting.

use crate::finding::{Area, Finding, Status};
use crate::inventory::Inventory;
use crate::profile::setting::Setting;

use super::Context;

/// The inventory with live probes on the live node, or an error finding saying which file
/// could not be read.
pub fn inventory<'c>(ctx: &'c Context, area: Area) -> Result<&'c Inventory, Box<Finding>> {
    match ctx.inventory() {
        Ok(inventory) => Ok(inventory),
        Err(e) => Err(Box::new(Finding::error(
            format!("{area}.inventory"),
            area,
            "-",
            e.to_string(),
        ))),
    }
}

/// Judges `actual` against a profile setting: the status and, when it cannot be judged,
/// the reason to put in the message.
pub fn judge(setting: &Setting, actual: &str) -> (Status, Option<String>) {
    setting.status_for(actual)
}
