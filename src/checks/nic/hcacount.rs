//! `rdma.hca_count`: the RDMA devices (HCAs) the node has against the profile, as Azure's
//! health checks count IB devices: a node that lost one (not enumerated at boot, driver
//! failed to probe) runs NCCL's IB transport on fewer rails and every collective slows.

use crate::finding::{Area, Finding};
use crate::inventory::Inventory;
use crate::profile::setting::Setting;

use super::super::{Context, setting_check, value_by_rule};

/// The HCAs in `/sys/class/infiniband` (EFA included), each with its ACTIVE ports.
pub fn count(ctx: &Context, inv: &Inventory, setting: &Setting) -> Finding {
    let check = setting_check(ctx, Area::Nic, "rdma.hca_count", setting);
    let listed: Vec<String> = inv
        .rdma
        .iter()
        .map(|d| {
            let active = d.ports.iter().filter(|p| p.state == "ACTIVE").count();
            format!(
                "{} ({}, {active} of {} port(s) ACTIVE)",
                d.name,
                d.pci_address.as_deref().unwrap_or("no PCI address"),
                d.ports.len()
            )
        })
        .collect();
    let found = if listed.is_empty() {
        "no RDMA device in /sys/class/infiniband".to_string()
    } else {
        listed.join(", ")
    };
    value_by_rule(
        &check.found(found, "; "),
        setting,
        inv.rdma.len(),
        "drain the node; check `lspci -d 15b3:` and `dmesg` for the HCA the node lacks (a driver probe failure, a card off the bus), reseat or replace it, and reboot",
    )
}
