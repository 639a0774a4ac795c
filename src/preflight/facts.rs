//! What one node learns about itself before it meets the others: how it resolves
//! `MASTER_ADDR` and its own name, the interface NCCL would pick, the versions that must
//! agree, its `NCCL_*` settings, and the ports it opens for the reachability matrix (with
//! its own firewall's verdict on each).

use std::collections::BTreeMap;
use std::net::{IpAddr, ToSocketAddrs};

use crate::bench::control::launch::{JobEnv, Launcher};
use crate::checks::firewall::{model, read_ruleset};
use crate::checks::nic::ncclenv::NcclConfig;
use crate::host::Root;
use crate::probe::firewall::LiveFirewall;
use crate::profile::job::{NcclPorts, PortRanges};

use super::ifaces;
use super::probe::Listeners;
use super::wire::Facts;

/// `NCCL_*` settings kept per node, and the longest value kept: the report compares them,
/// it does not need a hostile node's megabytes.
const MAX_ENV: usize = 64;
const MAX_VALUE: usize = 256;
/// Ports sampled from each kind of range.
pub(crate) const RENDEZVOUS_SAMPLE: usize = 3;
pub(crate) const NCCL_SAMPLE: usize = 4;

/// The ports the job uses, from the profile's `[job]` section.
#[derive(Debug, Clone)]
pub(crate) struct JobPorts {
    pub rendezvous: PortRanges,
    pub nccl: NcclPorts,
    /// Where they came from, for the report.
    pub source: String,
}

/// `name`'s addresses as this node resolves them (getaddrinfo: /etc/hosts, DNS), in the
/// order a connect tries them, without repeats.
pub(crate) fn resolve(name: &str) -> Result<Vec<IpAddr>, String> {
    let mut out: Vec<IpAddr> = Vec::new();
    for a in (name, 0)
        .to_socket_addrs()
        .map_err(|e| format!("{name} does not resolve: {e}"))?
    {
        if !out.contains(&a.ip()) {
            out.push(a.ip());
        }
    }
    Ok(out)
}

/// Up to `count` ports spread over `ranges` (ends first), none equal to `skip`.
pub(crate) fn sample(ranges: &[(u16, u16)], count: usize, skip: &[u16]) -> Vec<u16> {
    let mut all: Vec<u16> = Vec::new();
    let total: u32 = ranges.iter().map(|(a, b)| u32::from(*b - *a) + 1).sum();
    if total == 0 || count == 0 {
        return all;
    }
    let nth = |mut i: u32| -> Option<u16> {
        for (a, b) in ranges {
            let len = u32::from(*b - *a) + 1;
            if i < len {
                return u16::try_from(u32::from(*a) + i).ok();
            }
            i -= len;
        }
        None
    };
    let steps = count.max(2) as u32 - 1;
    for k in 0..count as u32 {
        let mut i = (total - 1) * k / steps;
        // Step past ports already taken or to be skipped.
        while i < total {
            match nth(i) {
                Some(p) if !skip.contains(&p) && !all.contains(&p) => {
                    all.push(p);
                    break;
                }
                _ => i += 1,
            }
        }
    }
    all
}

/// The kernel's ephemeral range, where NCCL's sockets listen by default.
fn local_port_range(root: &Root) -> Option<(u16, u16)> {
    let text = root
        .read_optional("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()??;
    let mut words = text.split_whitespace().map(|w| w.parse::<u16>().ok());
    match (words.next().flatten(), words.next().flatten()) {
        (Some(lo), Some(hi)) if lo <= hi => Some((lo, hi)),
        _ => None,
    }
}

/// The versions that must agree across the job; "none" where a component is absent (the
/// places searched differ per node and are not a disagreement).
pub(crate) fn versions(root: &Root) -> BTreeMap<String, String> {
    use crate::host::{cudnn, libsearch, nccl, torch};
    let mut v = BTreeMap::new();
    v.insert("gputune".into(), env!("CARGO_PKG_VERSION").to_string());
    let read = |p: &str| root.read_optional(p).ok().flatten();
    v.insert(
        "kernel".into(),
        read("/proc/sys/kernel/osrelease").map_or("unknown".into(), |t| t.trim().to_string()),
    );
    let driver = read("/proc/driver/nvidia/version")
        .and_then(|t| crate::checks::gpu::versions::parse_proc_driver_version(&t));
    v.insert("driver".into(), driver.unwrap_or_else(|| "none".into()));
    let cuda = if root.is_live() {
        use crate::probe::cuda::CudaProbe;
        crate::probe::cuda::RealCuda.driver_version().ok()
    } else {
        None
    };
    v.insert("cuda".into(), cuda.unwrap_or_else(|| "none".into()));
    let env = nccl::SearchEnv::from_process();
    match nccl::locate(root, &env) {
        Ok(found) => {
            let version = nccl::version_of(root, &found)
                .map_or_else(|e| format!("unreadable ({e})"), |n| n.to_string());
            v.insert("nccl".into(), version);
            v.insert("nccl_path".into(), found.path.display().to_string());
        }
        Err(_) => {
            v.insert("nccl".into(), "none".into());
            v.insert("nccl_path".into(), "none".into());
        }
    }
    let libs = libsearch::SearchEnv::from_process();
    match torch::locate(root, &libs) {
        Ok(t) => {
            v.insert(
                "torch".into(),
                t.version.unwrap_or_else(|| "unknown".into()),
            );
            v.insert("torch_cuda".into(), t.cuda.unwrap_or_else(|| "none".into()));
        }
        Err(_) => {
            v.insert("torch".into(), "none".into());
            v.insert("torch_cuda".into(), "none".into());
        }
    }
    let cudnn = cudnn::locate(root, &libs)
        .ok()
        .map(|f| f.version.unwrap_or_else(|| "unknown".into()));
    v.insert("cudnn".into(), cudnn.unwrap_or_else(|| "none".into()));
    for value in v.values_mut() {
        *value = bounded(value);
    }
    v
}

fn bounded(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_VALUE)
        .collect()
}

/// Gathers this node's facts and opens its listeners (kept open while the result lives).
pub(crate) fn gather(root: &Root, env: &JobEnv, ports: &JobPorts) -> (Facts, Listeners) {
    let host = root.hostname();
    let master_resolved = resolve(&env.master.0);
    let own_name = resolve(&host);
    let (addrs, _why) = match ifaces::addresses(root) {
        Ok(a) => (a, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let config = NcclConfig::read(root);
    let get = |k: &str| config.get(k).map(|s| s.value.trim().to_string());
    let nccl = ifaces::nccl_pick(
        &addrs,
        get("NCCL_SOCKET_IFNAME").as_deref(),
        get("NCCL_SOCKET_FAMILY").as_deref(),
    );
    let nccl_env: BTreeMap<String, String> = config
        .settings
        .iter()
        .take(MAX_ENV)
        .map(|(k, s)| (bounded(k), bounded(&s.value)))
        .collect();
    let chosen = nccl.chosen.clone();
    let mtu = chosen.as_ref().and_then(|c| ifaces::mtu(root, &c.name));
    let probe_addr = chosen.as_ref().map(|c| c.addr);
    // The master port is rank 0's rendezvous: it is probed as it is, not opened again.
    let skip = [env.master.1];
    let mut wanted: Vec<(u16, &str)> = sample(&ports.rendezvous, RENDEZVOUS_SAMPLE, &skip)
        .into_iter()
        .map(|p| (p, "rendezvous"))
        .collect();
    let nccl_ranges: Vec<(u16, u16)> = match &ports.nccl {
        NcclPorts::Fixed(r) => r.clone(),
        NcclPorts::LocalPortRange => local_port_range(root).into_iter().collect(),
    };
    let taken: Vec<u16> = wanted.iter().map(|(p, _)| *p).chain(skip).collect();
    wanted.extend(
        sample(&nccl_ranges, NCCL_SAMPLE, &taken)
            .into_iter()
            .map(|p| (p, "nccl")),
    );
    let (listeners, mut listens, echo_port) = Listeners::open(probe_addr, &wanted);
    let firewall_note = match read_ruleset(&LiveFirewall(root.clone())) {
        Ok(ruleset) => {
            for l in &mut listens {
                let walks = model::evaluate(&ruleset.tables, l.port);
                l.firewall = walks
                    .iter()
                    .find(|w| w.verdict == model::Verdict::Dropped)
                    .map(|w| {
                        let when = if w.conditions.is_empty() {
                            String::new()
                        } else {
                            format!(" when {}", w.conditions.join(", "))
                        };
                        bounded(&format!("dropped by {}{when}", w.decided_by))
                    });
            }
            ruleset.blind_spot
        }
        Err(e) => Some(e.to_string()),
    };
    let facts = Facts {
        rank: env.rank,
        host: bounded(&host),
        launcher: match env.launcher {
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "slurm",
            Launcher::OpenMpi => "mpirun",
        }
        .into(),
        master_addr: bounded(&env.master.0),
        master_resolved,
        own_name,
        addresses: addrs.iter().map(|a| a.addr).collect(),
        nccl,
        mtu,
        versions: versions(root),
        nccl_env,
        listens,
        probe_addr,
        echo_port,
        firewall_note: firewall_note.map(|n| bounded(&n)),
    };
    (facts, listeners)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_spread_over_the_ranges_and_skip_what_is_taken() {
        assert_eq!(sample(&[(29500, 29550)], 3, &[]), vec![29500, 29525, 29550]);
        assert_eq!(
            sample(&[(29500, 29550)], 3, &[29500]),
            vec![29501, 29525, 29550]
        );
        assert_eq!(
            sample(&[(32768, 60999)], 4, &[]),
            vec![32768, 42178, 51588, 60999]
        );
        assert_eq!(sample(&[(10, 10)], 3, &[]), vec![10]);
        assert_eq!(sample(&[(1, 2), (5, 6)], 4, &[]), vec![1, 2, 5, 6]);
        assert!(sample(&[], 3, &[]).is_empty());
    }
}
