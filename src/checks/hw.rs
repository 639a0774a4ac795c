//! What the hardware areas (gpu, nic, numa, platform) share: the inventory, read once per
//! audit and borrowed by every area.

use crate::finding::{Area, Check, Finding};
use crate::inventory::Inventory;

use super::Context;

/// The inventory with live probes on the live node, or an error finding saying which file
/// could not be read.
pub fn inventory<'c>(ctx: &'c Context, area: Area) -> Result<&'c Inventory, Box<Finding>> {
    ctx.inventory()
        .as_ref()
        .map_err(|e| Box::new(Check::new(format!("{area}.inventory"), area).error(e.to_string())))
}
