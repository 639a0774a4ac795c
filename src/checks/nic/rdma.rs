//! InfiniBand and RoCE ports judged as NCCL's IB transport uses them: each port ACTIVE and
//! LinkUp, its rate and link layer against the profile, on RoCE a RoCE v2 GID where NCCL
//! will look for one, PCIe relaxed ordering against the root complex above the HCA, and the
//! network plugin or verbs library the fabric needs.

use crate::finding::{Area, Check, Finding};
use crate::host::libsearch;
use crate::inventory::Inventory;
use crate::inventory::pci;
use crate::inventory::rdma::{RdmaDevice, RdmaPort};
use crate::profile::setting::Setting;

use super::super::judged::judge_of;
use super::super::{Context, value_by_rule};
use super::Judge;
use super::ncclenv::NcclConfig;

/// Every check of one HCA.
pub fn audit(ctx: &Context, hca: &RdmaDevice, why: &str, nccl: &NcclConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    if hca.ports.is_empty() {
        out.push(
            Check::new(format!("rdma.{}.ports", hca.name), Area::Nic)
                .expected("a port")
                .skip(format!(
                    "{} lists no ports in /sys/class/infiniband/{}/ports",
                    hca.name, hca.name
                )),
        );
    }
    for port in &hca.ports {
        out.push(state(hca, port, why));
        for (key, setting) in ctx.profile.area(Area::Nic) {
            let Some(Judge::Port(attribute)) = judge_of(super::JUDGED, key) else {
                continue;
            };
            let judge = match attribute {
                Port::Rate => rate,
                Port::ActiveMtu => active_mtu,
                Port::LinkLayer => link_layer,
            };
            let check = super::super::setting_check(ctx, Area::Nic, key, setting)
                .suffixed(&format!(".{}.{}", hca.name, port.port));
            out.push(judge(check, setting, hca, port));
        }
        if port.is_roce() {
            out.push(gid(hca, port, nccl));
        }
    }
    if let Some(f) = relaxed_ordering(ctx, hca) {
        out.push(f);
    }
    out
}

/// A port attribute the profile judges on every port of every HCA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Port {
    Rate,
    ActiveMtu,
    LinkLayer,
}

/// The sysfs file of a port attribute, for messages.
fn port_file(hca: &RdmaDevice, port: &RdmaPort, file: &str) -> String {
    format!(
        "/sys/class/infiniband/{}/ports/{}/{file}",
        hca.name, port.port
    )
}

/// `rdma.rate_mbps` of an active port.
fn rate(check: Check, setting: &Setting, hca: &RdmaDevice, port: &RdmaPort) -> Finding {
    if !port.is_active() {
        return check.skip(format!("{} port {} is not active", hca.name, port.port));
    }
    let Some(mbps) = port.rate_mbps else {
        return if port.rate.is_empty() {
            check.skip(format!(
                "{} is missing or empty: the port's rate is unknown (`ibstat {}` shows it)",
                port_file(hca, port, "rate"),
                hca.name
            ))
        } else {
            check.error(format!(
                "{}: `{}` is not a rate",
                port_file(hca, port, "rate"),
                port.rate
            ))
        };
    };
    let check = check.found(
        format!("{} port {} runs at `{}`", hca.name, port.port, port.rate),
        "; ",
    );
    value_by_rule(
        &check,
        setting,
        mbps,
        format!(
            "check the cable and the switch port (`ibstat {}`, `mlxlink -d {}`): a rate below the adapter's means it trained down",
            hca.name, hca.name
        ),
    )
}

/// `rdma.active_mtu`: the RDMA payload a RoCE port's netdev MTU allows.
fn active_mtu(check: Check, setting: &Setting, hca: &RdmaDevice, port: &RdmaPort) -> Finding {
    let Some(mtu) = port.active_mtu else {
        return check.skip(match port.link_layer.as_deref() {
            Some("Ethernet") => format!(
                "{} port {} has no netdev MTU to derive it from",
                hca.name, port.port
            ),
            Some("InfiniBand") => format!(
                "{} port {} is InfiniBand: the subnet manager sets its MTU, which sysfs does not show (`ibv_devinfo`)",
                hca.name, port.port
            ),
            Some(other) => format!(
                "{} port {} has link layer `{other}`, not RoCE: no netdev MTU bounds it (`ibv_devinfo -d {}` shows it)",
                hca.name, port.port, hca.name
            ),
            None => format!(
                "{} is missing: without the link layer the IB MTU cannot be derived (`ibv_devinfo -d {}` shows it)",
                port_file(hca, port, "link_layer"),
                hca.name
            ),
        });
    };
    let check = check.found(format!(
        "{} port {} carries {mtu}-byte RDMA payloads (the largest IB MTU its netdev's MTU holds)",
        hca.name, port.port
    ), "; ");
    let netdevs = if hca.netdevs.is_empty() {
        "its netdev".to_string()
    } else {
        hca.netdevs.join(", ")
    };
    value_by_rule(
        &check,
        setting,
        mtu,
        format!(
            "raise the MTU of {netdevs} to 9000 (and on the switch ports) so RoCE runs at IB MTU 4096"
        ),
    )
}

/// `rdma.link_layer`: InfiniBand or Ethernet (RoCE), as the profile's fabric. EFA is
/// neither (its sysfs says `Unknown`; AWS's SRD runs over it), so the rule does not apply.
fn link_layer(check: Check, setting: &Setting, hca: &RdmaDevice, port: &RdmaPort) -> Finding {
    if hca.driver.as_deref() == Some("efa") {
        return check.skip(format!(
            "{} is an AWS EFA device: neither InfiniBand nor RoCE, reached through the aws-ofi-nccl plugin",
            hca.name
        ));
    }
    let Some(layer) = &port.link_layer else {
        return check.skip(format!(
            "{} is missing: the port's link layer is unknown (`ibv_devinfo -d {}` shows it)",
            port_file(hca, port, "link_layer"),
            hca.name
        ));
    };
    value_by_rule(
        &check,
        setting,
        layer,
        "use the profile for this fabric (ddp-infiniband for InfiniBand, ddp-roce for RoCE)",
    )
}

/// `ACTIVE, LinkUp`, naming what the kernel did not show.
fn state_text(port: &RdmaPort) -> String {
    let state = if port.state.is_empty() {
        "state unknown"
    } else {
        &port.state
    };
    match &port.phys_state {
        Some(phys) => format!("{state}, {phys}"),
        None => format!("{state}, physical state unknown"),
    }
}

fn state(hca: &RdmaDevice, port: &RdmaPort, why: &str) -> Finding {
    let mut missing: Vec<String> = Vec::new();
    if port.state.is_empty() {
        missing.push(port_file(hca, port, "state"));
    }
    if port.phys_state.is_none() {
        missing.push(port_file(hca, port, "phys_state"));
    }
    let missing = if missing.is_empty() {
        String::new()
    } else {
        format!(
            "; {} missing, so the port is judged on what is shown",
            missing.join(" and ")
        )
    };
    let check = Check::new(format!("rdma.{}.{}.state", hca.name, port.port), Area::Nic)
        .expected("ACTIVE, LinkUp")
        .why(format!(
            "{} port {} ({}, {}, firmware {}) is judged because {why}; a port that is not ACTIVE carries no traffic and NCCL skips it{missing}",
            hca.name,
            port.port,
            port.link_layer.as_deref().unwrap_or("link layer unknown"),
            if port.rate.is_empty() { "rate unknown" } else { &port.rate },
            hca.firmware.as_deref().unwrap_or("unknown"),
        ));
    let actual = state_text(port);
    if port.state.is_empty() {
        return check.skip(format!(
            "{} is missing: the port's state is unknown",
            port_file(hca, port, "state")
        ));
    }
    if port.is_active() {
        return check.pass(actual);
    }
    let fix = match (port.state.as_str(), port.phys_state.as_deref()) {
        (_, Some("Polling")) => format!(
            "the port sees no peer: check the cable and the switch port (`ibstat {}`)",
            hca.name
        ),
        ("INIT", _) | ("ARMED", _) => {
            "the link is up but no subnet manager configured it: start opensm or check the fabric's SM".to_string()
        }
        (_, Some("Disabled")) => format!(
            "enable the port (`ibportstate` or `mlxlink -d {} -a UP`)",
            hca.name
        ),
        _ => format!("bring the port up and check `ibstat {}`", hca.name),
    };
    check.fail(actual, fix)
}

/// NCCL uses GID index `NCCL_IB_GID_INDEX` when set; unset, NCCL 2.21+ picks a RoCE v2
/// entry of the configured address family. A wrong index is NCCL's "error 12" at connect
/// time, and indexes shift when addresses are added, so a job's index can go stale.
fn gid(hca: &RdmaDevice, port: &RdmaPort, nccl: &NcclConfig) -> Finding {
    let id = format!("rdma.{}.{}.gid", hca.name, port.port);
    let table: Vec<String> = port
        .gids
        .iter()
        .map(|g| {
            format!(
                "{} {} {}{}",
                g.index,
                g.kind,
                g.gid,
                g.netdev
                    .as_ref()
                    .map_or(String::new(), |n| format!(" ({n})"))
            )
        })
        .collect();
    let table = if table.is_empty() {
        "empty".to_string()
    } else {
        table.join("; ")
    };
    let set = nccl.get("NCCL_IB_GID_INDEX");
    let index = set.and_then(|s| s.value.trim().parse::<i64>().ok());
    let check = Check::new(id, Area::Nic);
    let Some(i) = index.filter(|i| *i >= 0) else {
        let check = check
            .expected("a RoCE v2 GID NCCL can pick (NCCL_IB_GID_INDEX unset)")
            .why(format!(
                "NCCL picks a RoCE v2 GID of the interface's address; without one its connections fail. Table: {table}"
            ));
        return match port.gids.iter().find(|g| g.is_roce_v2()) {
            Some(g) => check.pass(format!("index {} {} {}", g.index, g.kind, g.gid)),
            None => check.fail(
                "no RoCE v2 GID",
                format!(
                    "give the RoCE interface an IP address (RoCE v2 GIDs come from addresses) and check `show_gids {}`",
                    hca.name
                ),
            ),
        };
    };
    let entry = port.gids.iter().find(|g| i64::from(g.index) == i);
    let source = set.map(|s| s.source.to_string()).unwrap_or_default();
    let check = check
        .expected(format!("a RoCE v2 GID at NCCL_IB_GID_INDEX={i} ({source})"))
        .why(format!(
            "NCCL connects with GID index {i}; a missing or RoCE v1 entry fails connections (NCCL \"error 12\"), and indexes move when addresses change. Table: {table}"
        ));
    let actual = entry.map_or_else(
        || format!("no GID at index {i}"),
        |g| format!("{} {}", g.kind, g.gid),
    );
    if entry.is_some_and(|g| g.is_roce_v2()) {
        return check.pass(actual);
    }
    let fix = match port.gids.iter().find(|g| g.is_roce_v2() && g.is_ipv4()) {
        Some(g) => format!(
            "set NCCL_IB_GID_INDEX={} or unset it so NCCL (2.21+) picks a RoCE v2 entry itself",
            g.index
        ),
        None => format!(
            "give the RoCE interface an IPv4 address so a RoCE v2 GID appears (`show_gids {}`)",
            hca.name
        ),
    };
    check.fail(actual, fix)
}

/// Root ports whose relaxed-ordering handling Linux distrusts (`quirk_relaxedordering_disable`
/// in drivers/pci/quirks.c): Intel Xeon E5 v3/v4 (Haswell-EP, Broadwell-EP) root ports and
/// AMD's A1100 (Seattle). Devices below them must not use relaxed ordering.
fn ro_broken_root_port(vendor: u32, device: u32) -> bool {
    (vendor == 0x8086
        && ((0x6f01..=0x6f0e).contains(&device) || (0x2f01..=0x2f0e).contains(&device)))
        || (vendor == 0x1022 && (0x1a00..=0x1a02).contains(&device))
}

/// PCIe relaxed ordering on the HCA against the root port above it: on a root complex that
/// mishandles it, a device with it enabled corrupts or stalls RDMA traffic (NCCL hangs);
/// elsewhere NCCL uses it (`NCCL_IB_PCI_RELAXED_ORDERING`, default 2 = when available),
/// which matters most in VMs.
fn relaxed_ordering(ctx: &Context, hca: &RdmaDevice) -> Option<Finding> {
    let enabled = hca.relaxed_ordering?;
    let root_port = hca
        .bridges
        .first()
        .and_then(|bdf| pci::read_device(ctx.root, &format!("/sys/bus/pci/devices/{bdf}")).ok());
    let (vendor, device) = root_port
        .as_ref()
        .map_or((0, 0), |p| (p.vendor.unwrap_or(0), p.device.unwrap_or(0)));
    let broken_cpu = ro_broken_root_port(vendor, device);
    let cpu = root_port
        .as_ref()
        .map_or("unknown root port".to_string(), |p| {
            format!("root port {} ({vendor:04x}:{device:04x})", p.address)
        });
    let id = format!("rdma.{}.relaxed_ordering", hca.name);
    Some(match (enabled, broken_cpu) {
        (true, true) => Check::new(id, Area::Nic)
            .expected("relaxed ordering off below a root port that mishandles it")
            .why(format!(
                "{} has PCIe relaxed ordering enabled below {cpu}, whose relaxed ordering Linux distrusts; RDMA writes can be reordered (NCCL hangs, corruption)",
                hca.name
            ))
            .fail("enabled", format!(
                "disable it on the HCA (`setpci -s {} CAP_EXP+8.w` clear bit 4, or mlxconfig PCI_WR_ORDERING=0) and set NCCL_IB_PCI_RELAXED_ORDERING=0",
                hca.pci_address.as_deref().unwrap_or("?")
            )),
        (enabled, _) => Check::new(id, Area::Nic)
            .expected("relaxed ordering as the root complex supports")
            .why(format!(
                "{}: relaxed ordering {} below {cpu}, which handles it; NCCL uses it when enabled (NCCL_IB_PCI_RELAXED_ORDERING)",
                hca.name,
                if enabled { "enabled" } else { "disabled" }
            ))
            .pass(if enabled { "enabled" } else { "disabled" }),
    })
}

/// The fabric's transport library: NCCL's built-in IB transport needs `libibverbs.so.1`
/// (without it NCCL silently falls back to TCP sockets); EFA needs the aws-ofi-nccl plugin;
/// an `NCCL_NET_PLUGIN` name must resolve to `libnccl-net-NAME.so`.
pub fn net_plugin(ctx: &Context, inv: &Inventory, nccl: &NcclConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    let env = libsearch::SearchEnv::from_process();
    let find = |names: &[&str]| -> Result<libsearch::Found, Vec<String>> {
        libsearch::find_any(ctx.root, &env, names)
    };
    let efa = inv.rdma.iter().any(|r| r.driver.as_deref() == Some("efa"));
    let verbs = inv.rdma.iter().any(|r| r.driver.as_deref() != Some("efa"));
    if verbs {
        out.push(found_or(
            "nccl.net.ibverbs",
            "libibverbs.so.1",
            find(&["libibverbs.so.1"]),
            "NCCL's InfiniBand/RoCE transport loads libibverbs.so.1 at run time; without it NCCL logs one INFO line and uses TCP sockets, at a fraction of the fabric's bandwidth",
            "install rdma-core (libibverbs1 / libibverbs) or MLNX_OFED/DOCA-OFED",
        ));
    }
    if efa {
        out.push(found_or(
            "nccl.net.plugin",
            "libnccl-net-ofi.so or libnccl-net.so (aws-ofi-nccl)",
            find(&["libnccl-net-ofi.so", "libnccl-net.so"]),
            "EFA is reached only through the aws-ofi-nccl plugin; without it NCCL uses TCP sockets",
            "install aws-ofi-nccl (the EFA installer or the AWS DLAMI ship it) and put its lib directory on LD_LIBRARY_PATH",
        ));
    }
    if let Some(s) = nccl.get("NCCL_NET_PLUGIN") {
        let name = s.value.trim();
        if !name.is_empty() && name != "none" {
            let file = if name.ends_with(".so") || name.contains('/') {
                name.to_string()
            } else {
                format!("libnccl-net-{name}.so")
            };
            out.push(found_or(
                "nccl.net.plugin_named",
                &format!("{file} (NCCL_NET_PLUGIN from {})", s.source),
                find(&[file.as_str()]),
                "NCCL looks for the named network plugin and, when it cannot load it, falls back to its internal transports without failing",
                "install the plugin or correct NCCL_NET_PLUGIN",
            ));
        }
    }
    out
}

fn found_or(
    id: &str,
    expected: &str,
    found: Result<libsearch::Found, Vec<String>>,
    why: &str,
    fix: &str,
) -> Finding {
    match found {
        Ok(f) => Check::new(id, Area::Nic)
            .expected(expected)
            .why(format!("found in {}", f.origin))
            .pass(f.path.clone()),
        Err(searched) => Check::new(id, Area::Nic)
            .expected(expected)
            .why(format!("{why} (searched {})", searched.join(", ")))
            .fail("not found", fix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relaxed_ordering_quirk_list() {
        assert!(ro_broken_root_port(0x8086, 0x6f02));
        assert!(ro_broken_root_port(0x8086, 0x2f0e));
        assert!(ro_broken_root_port(0x1022, 0x1a01));
        assert!(!ro_broken_root_port(0x8086, 0x347a));
        assert!(!ro_broken_root_port(0x1022, 0x1483));
    }
}
