//! Live facts: what gputune learns other than by reading files (NVML, libcuda, ethtool,
//! netlink, getrlimit/statvfs, the firewall tools). Checks reach them only through the
//! [`Probes`] in their [`Context`](crate::checks::Context), so tests hand in fixed ones and
//! `--root` gets absent ones that say why. Each probe's trait, its real implementation and
//! its absent one live here, below `checks/` and `inventory/`, which only use them.

pub(crate) mod cuda;
pub(crate) mod ethtool;
pub(crate) mod firewall;
pub(crate) mod limits;
pub(crate) mod nvml;
pub(crate) mod route;

use crate::host::Root;
use cuda::CudaProbe;
use ethtool::EthtoolProbe;
use firewall::{FirewallProbe, LiveFirewall, NoFirewall};
use limits::{LimitsProbe, LiveLimits, NoLimits};
use nvml::NvmlProbe;
use route::RouteProbe;

/// The sources that are not files. On `--root DIR` they would describe the machine
/// gputune runs on rather than DIR, so they are replaced by absent ones saying so.
pub struct Probes {
    pub nvml: Box<dyn NvmlProbe>,
    pub cuda: Box<dyn CudaProbe>,
    pub ethtool: Box<dyn EthtoolProbe>,
    /// Rings, offloads, coalescing, pause and channels over ethtool netlink.
    pub nic_settings: Box<dyn crate::host::ethtool::Ethtool>,
    pub routes: Box<dyn RouteProbe>,
    /// This process's resource limits and `/dev/shm`'s free space.
    pub limits: Box<dyn LimitsProbe>,
    /// The firewall tools (`nft`, `iptables-save`) and the kernel's legacy tables.
    pub firewall: Box<dyn FirewallProbe>,
}

/// Why live-only facts are missing under `--root`.
pub(crate) const NOT_LIVE: &str = "describes the running node only, not --root";

impl Probes {
    /// Real probes on the live node, absent ones with the reason under `--root`.
    pub(crate) fn for_root(root: &Root) -> Probes {
        if root.is_live() {
            Probes {
                nvml: Box::new(nvml::RealNvml),
                cuda: Box::new(cuda::RealCuda),
                ethtool: Box::new(ethtool::RealEthtool),
                nic_settings: Box::new(crate::host::ethtool::netlink::Netlink),
                routes: Box::new(route::Netlink),
                limits: Box::new(LiveLimits),
                firewall: Box::new(LiveFirewall(root.clone())),
            }
        } else {
            Probes::absent(&format!("{NOT_LIVE} {}", root.dir().display()))
        }
    }

    /// Probes that all answer `reason`.
    pub(crate) fn absent(reason: &str) -> Probes {
        Probes {
            nvml: Box::new(nvml::NoNvml(format!("NVML {reason}"))),
            cuda: Box::new(cuda::NoCuda(format!("libcuda {reason}"))),
            ethtool: Box::new(ethtool::NoEthtool(format!("ethtool {reason}"))),
            nic_settings: Box::new(crate::host::ethtool::NoNic(format!(
                "ethtool netlink {reason}"
            ))),
            routes: Box::new(route::NoRoutes(format!("netlink {reason}"))),
            limits: Box::new(NoLimits(format!("getrlimit and statvfs {reason}"))),
            firewall: Box::new(NoFirewall(format!("the firewall tools {reason}"))),
        }
    }
}
