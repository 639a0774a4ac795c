//! NIC and HCA driver and firmware versions against `"driver_version.<driver>"` and
//! `"firmware.<driver>"` rules, matched by kernel driver name against the judged NICs and
//! HCAs. Sources: an HCA's `fw_ver` (sysfs, also under `--root`), `ethtool -i` (live), and
//! the module's `/sys/module/<driver>/version` (out-of-tree drivers such as MLNX_OFED's).

use crate::finding::{Area, Finding};
use crate::host::Root;
use crate::profile::setting::Setting;

use super::super::{Context, by_rule_found, setting_check};
use super::select::Chosen;

/// One device's version of one kind, and where it was read.
struct Seen {
    device: String,
    value: Option<String>,
    source: String,
}

/// Every `driver_version.*` and `firmware.*` rule of the profile, one finding per device.
pub fn audit(ctx: &Context, chosen: &Chosen) -> Vec<Finding> {
    let mut out = Vec::new();
    for (key, setting) in ctx.profile.area(Area::Nic) {
        if let Some(driver) = key.strip_prefix("firmware.") {
            out.extend(judge(ctx, key, setting, driver, firmware(chosen, driver)));
        } else if let Some(driver) = key.strip_prefix("driver_version.") {
            out.extend(judge(
                ctx,
                key,
                setting,
                driver,
                driver_versions(ctx.root, chosen, driver),
            ));
        }
    }
    out
}

fn judge(
    ctx: &Context,
    key: &str,
    setting: &Setting,
    driver: &str,
    seen: Vec<Seen>,
) -> Vec<Finding> {
    let check = setting_check(ctx, Area::Nic, key, setting);
    if seen.is_empty() {
        return vec![check.skip(format!("no judged NIC or HCA uses the {driver} driver"))];
    }
    seen.into_iter()
        .map(|s| {
            let check = check.clone().suffixed(&format!(".{}", s.device));
            let Some(value) = s.value else {
                return check.skip(format!("{}: {}", s.device, s.source));
            };
            let found = format!("{} ({driver}) reports {value} ({})", s.device, s.source);
            let fix = if key.starts_with("firmware.") {
                format!(
                    "update the adapter firmware of {} (mlxfwmanager / mstflint for NVIDIA adapters, the vendor's tool otherwise) and reboot or reset the adapter",
                    s.device
                )
            } else {
                format!(
                    "install the {driver} driver version the fleet is qualified with (inbox kernel or MLNX_OFED/DOCA-OFED) and reload it"
                )
            };
            by_rule_found(check, setting, found, "; ", value, fix)
        })
        .collect()
}

fn firmware(chosen: &Chosen, driver: &str) -> Vec<Seen> {
    let mut out: Vec<Seen> = chosen
        .hcas_of(driver)
        .map(|h| Seen {
            device: h.name.clone(),
            value: h.firmware.clone(),
            source: match &h.firmware {
                Some(_) => format!("/sys/class/infiniband/{}/fw_ver", h.name),
                None => format!("/sys/class/infiniband/{}/fw_ver is absent", h.name),
            },
        })
        .collect();
    for n in chosen.nics_of(driver) {
        // An HCA on the same function already gave its firmware.
        if chosen.hcas.iter().any(|h| n.rdma.contains(&h.name)) {
            continue;
        }
        out.push(Seen {
            device: n.name.clone(),
            value: n.firmware.clone(),
            source: match &n.firmware {
                Some(_) => "ethtool -i".into(),
                None => "ethtool -i reports no firmware (or this is not the live node)".into(),
            },
        });
    }
    out
}

fn driver_versions(root: &Root, chosen: &Chosen, driver: &str) -> Vec<Seen> {
    let module = root
        .read_optional(&format!("/sys/module/{driver}/version"))
        .ok()
        .flatten()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let module_source = format!("/sys/module/{driver}/version");
    let mut out = Vec::new();
    for n in chosen.nics_of(driver) {
        let (value, source) = match (&module, &n.driver_version) {
            (Some(m), _) => (Some(m.clone()), module_source.clone()),
            (None, Some(v)) => (Some(v.clone()), "ethtool -i".to_string()),
            (None, None) => (
                None,
                format!(
                    "neither {module_source} nor ethtool -i gives a version (an inbox driver on a non-live root)"
                ),
            ),
        };
        out.push(Seen {
            device: n.name.clone(),
            value,
            source,
        });
    }
    for h in chosen.hcas_of(driver) {
        if chosen.nics.iter().any(|n| n.rdma.contains(&h.name)) {
            continue;
        }
        out.push(Seen {
            device: h.name.clone(),
            value: module.clone(),
            source: if module.is_some() {
                module_source.clone()
            } else {
                format!("{module_source} is absent (an inbox driver carries the kernel's version)")
            },
        });
    }
    out
}
