//! The facts behind the findings that must be alike on every node of a job, recorded in the
//! audit report (`host.facts`) so `fleet` can name a node that differs even when it passes:
//! its NICs and their speeds, its HCAs, the NVIDIA driver, and the `NCCL_*` settings of
//! `/etc/nccl.conf` (the GID index among them). Read from files only, so it works on
//! `--root` as on the live node; versions read by probes are already findings.

use std::collections::BTreeMap;

use crate::host::Root;
use crate::inventory::{nic, rdma};
use crate::probe::ethtool::NoEthtool;

/// `name → value`, dotted names (`nic.eth0.speed_mbps`); what cannot be read is left out.
pub(crate) fn read(root: &Root) -> BTreeMap<String, String> {
    let mut facts = BTreeMap::new();
    let probe = NoEthtool("not needed for fleet facts".into());
    let hcas = rdma::devices(root).unwrap_or_default();
    if let Ok((nics, _)) = nic::nics(root, &probe, &hcas) {
        for n in nics {
            let key = |field: &str| format!("nic.{}.{field}", n.name);
            if let Some(speed) = n.speed_mbps {
                facts.insert(key("speed_mbps"), speed.to_string());
            }
            if let Some(mtu) = n.mtu {
                facts.insert(key("mtu"), mtu.to_string());
            }
            if let Some(driver) = &n.driver {
                facts.insert(key("driver"), driver.clone());
            }
        }
    }
    for h in &hcas {
        let ports: Vec<String> = h
            .ports
            .iter()
            .map(|p| {
                format!("{}: {} {}", p.port, p.state, p.rate)
                    .trim()
                    .to_string()
            })
            .collect();
        facts.insert(format!("hca.{}.ports", h.name), ports.join(","));
        if let Some(fw) = &h.firmware {
            facts.insert(format!("hca.{}.firmware", h.name), fw.clone());
        }
    }
    for path in ["/sys/module/nvidia/version"] {
        if let Ok(Some(v)) = root.read_optional(path) {
            facts.insert("nvidia.driver".into(), v.trim().to_string());
        }
    }
    if let Ok(Some(conf)) = root.read_optional("/etc/nccl.conf") {
        for (key, value) in nccl_conf(&conf) {
            facts.insert(format!("nccl_conf.{key}"), value);
        }
    }
    facts
}

/// `NCCL_*=value` lines of nccl.conf (comments and other lines ignored; the last one wins,
/// as NCCL reads it).
fn nccl_conf(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.trim().starts_with("NCCL_"))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn nccl_conf_lines() {
        let conf = super::nccl_conf(
            "# site\nNCCL_SOCKET_IFNAME=eth0\nNCCL_IB_GID_INDEX = 3\nFOO=1\nNCCL_IB_GID_INDEX=5\n",
        );
        assert_eq!(conf["NCCL_SOCKET_IFNAME"], "eth0");
        assert_eq!(conf["NCCL_IB_GID_INDEX"], "5");
        assert!(!conf.contains_key("FOO"));
    }
}
