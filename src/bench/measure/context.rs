//! What the measured path can carry, so each result reads as a fraction of it (nccl-tests
//! defines busbw to be compared with the hardware's peak; its users do that by hand):
//! - ranks on several hosts: the link rate of the NICs rank 0 routes to the other hosts
//!   through (`/sys/class/net/X/speed` under the [`Root`], summed over several NICs);
//! - NCCL on one host: the GPUs' interconnect, NVLink (generation × active links, from NVML)
//!   or else their PCIe links (generation and width, from sysfs), the slowest GPU bounding it;
//! - TCP on one host (loopback): a bounded memcpy probe of rank 0's memory in the same run.
//!
//! Every rate is per direction in bytes per second; GB/s is 1e9 bytes/s as nccl-tests prints.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::stats::Row;
use crate::host::Root;
use crate::inventory::gpu::Gpu;
use crate::inventory::pci::PciLink;
use crate::inventory::rdma::RdmaDevice;
use crate::probe::nvml::NvmlGpu;
use crate::probe::route::RouteProbe;
use crate::profile::bandwidth::percent;
use crate::profile::{Baseline, Threshold};

/// What the reference rate was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Nic,
    Nvlink,
    Pcie,
    LoopbackCopy,
}

/// One NIC or GPU behind a reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    pub name: String,
    pub rate_bytes_per_second: f64,
}

/// The rate a run is put against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reference {
    pub source: Source,
    /// Per direction, bytes per second.
    pub rate_bytes_per_second: f64,
    /// Short, for the footer: `100 Gb/s link (ens1f0)`.
    pub label: String,
    /// How it was derived, with the figures it came from.
    pub how: String,
    /// The NICs summed (source `nic`) or the GPUs whose slowest is the rate.
    pub parts: Vec<Part>,
}

impl Reference {
    pub fn gbps(&self) -> f64 {
        self.rate_bytes_per_second / 1e9
    }

    /// `busbw` (GB/s) as a fraction of the reference.
    pub fn fraction(&self, busbw: f64) -> f64 {
        busbw * 1e9 / self.rate_bytes_per_second
    }

    /// Each NIC's share of `busbw` (GB/s) as a fraction of its own rate, the traffic spread
    /// evenly over the NICs (as NCCL spreads channels): a slower NIC shows the higher load.
    pub fn per_nic(&self, busbw: f64) -> Vec<(String, f64)> {
        if self.source != Source::Nic || self.parts.is_empty() {
            return Vec::new();
        }
        let share = busbw * 1e9 / self.parts.len() as f64;
        self.parts
            .iter()
            .map(|p| (p.name.clone(), share / p.rate_bytes_per_second))
            .collect()
    }
}

/// A link speed in Mb/s (`/sys/class/net/X/speed`, ethtool's unit) as bytes per second.
pub fn nic_bytes_per_second(mbps: u64) -> f64 {
    mbps as f64 * 1e6 / 8.0
}

/// `100 Gb/s`, `2.5 Gb/s`, `100 Mb/s`.
fn link_speed(mbps: u64) -> String {
    if mbps >= 1000 {
        format!("{} Gb/s", mbps as f64 / 1000.0)
    } else {
        format!("{mbps} Mb/s")
    }
}

/// Bytes per second one PCIe lane carries per direction at `gts` GT/s, with its line code:
/// Gen1/2 lose 2 bits in 10 (8b/10b), Gen3-5 2 in 130 (128b/130b), Gen6 carries 242 bytes
/// of data in each 256-byte FLIT.
pub fn pcie_lane(gts: f64) -> Option<(f64, &'static str)> {
    let (data, line, code) = match PciLink::generation(gts)? {
        1 | 2 => (8.0, 10.0, "8b/10b"),
        3..=5 => (128.0, 130.0, "128b/130b"),
        _ => (242.0, 256.0, "242/256 FLIT"),
    };
    Some((gts * 1e9 * data / line / 8.0, code))
}

/// The NVLink generation of a GPU model by its name (NVML's or `/proc/driver/nvidia`'s).
pub fn nvlink_generation(model: &str) -> Option<u32> {
    const MODELS: [(&str, u32); 12] = [
        ("GB300", 5),
        ("GB200", 5),
        ("B300", 5),
        ("B200", 5),
        ("B100", 5),
        ("GH200", 4),
        ("H200", 4),
        ("H100", 4),
        ("H800", 4),
        ("A100", 3),
        ("A800", 3),
        ("V100", 2),
    ];
    let upper = model.to_ascii_uppercase();
    MODELS
        .iter()
        .find(|(name, _)| upper.contains(name))
        .map(|(_, g)| *g)
        .or_else(|| upper.contains("P100").then_some(1))
}

/// Bytes per second one NVLink carries per direction: 20 GB/s (NVLink1, P100), 25 GB/s
/// (NVLink2-4: V100, A100, H100), 50 GB/s (NVLink5, Blackwell).
pub fn nvlink_link(generation: u32) -> Option<f64> {
    match generation {
        1 => Some(20e9),
        2..=4 => Some(25e9),
        5 => Some(50e9),
        _ => None,
    }
}

/// One NIC (or RDMA port) behind a multi-host reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// `ens1f0`, or an RDMA port as NCCL names it (`mlx5_0:1`).
    pub name: String,
    pub mbps: u64,
    /// Where the speed was read and what it said, for the `how` text.
    pub read: String,
}

impl Link {
    /// A network interface whose `/sys/class/net/NAME/speed` said `mbps`.
    pub fn netdev(name: &str, mbps: u64) -> Link {
        Link {
            name: name.to_string(),
            mbps,
            read: format!("/sys/class/net/{name}/speed {mbps} Mb/s"),
        }
    }
}

/// The sum of the links' rates, `route` saying why these links.
pub fn of_nics(links: &[Link], route: &str) -> Option<Reference> {
    if links.is_empty() {
        return None;
    }
    let parts: Vec<Part> = links
        .iter()
        .map(|l| Part {
            name: l.name.clone(),
            rate_bytes_per_second: nic_bytes_per_second(l.mbps),
        })
        .collect();
    let total: u64 = links.iter().map(|l| l.mbps).sum();
    let names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
    let reads: Vec<&str> = links.iter().map(|l| l.read.as_str()).collect();
    Some(Reference {
        source: Source::Nic,
        rate_bytes_per_second: nic_bytes_per_second(total),
        label: format!(
            "{} link{} ({})",
            link_speed(total),
            if links.len() == 1 { "" } else { "s" },
            names.join(" + ")
        ),
        how: format!(
            "{}{}, ÷ 8 bits per byte; {route}",
            reads.join(" + "),
            if links.len() == 1 { "" } else { " summed" },
        ),
        parts,
    })
}

/// The active RDMA ports NCCL's IB transport would use, as `NCCL_IB_HCA` selects them
/// (`mlx5_0:1,mlx5_1` by prefix, `=mlx5_0` exactly, `^mlx5_2` all but), each with its rate.
pub(crate) fn ib_ports(devices: &[RdmaDevice], spec: Option<&str>) -> Vec<Link> {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty());
    let (exclude, rest) = match spec {
        Some(s) => match s.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, s),
        },
        None => (false, ""),
    };
    let (exact, rest) = match rest.strip_prefix('=') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let entries: Vec<(&str, Option<u32>)> = rest
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once(':') {
            Some((name, port)) => (name, port.trim().parse().ok()),
            None => (e, None),
        })
        .collect();
    let mut out = Vec::new();
    for d in devices {
        for p in d.ports.iter().filter(|p| p.is_active()) {
            let named = entries.iter().any(|(name, port)| {
                let by_name = if exact {
                    d.name == *name
                } else {
                    d.name.starts_with(name)
                };
                by_name && port.is_none_or(|n| n == p.port)
            });
            let chosen = spec.is_none() || named != exclude;
            if let (true, Some(mbps)) = (chosen, p.rate_mbps) {
                let name = crate::say::clean_line(&d.name);
                out.push(Link {
                    name: format!("{name}:{}", p.port),
                    mbps,
                    read: crate::say::clean_line(&format!(
                        "/sys/class/infiniband/{name}/ports/{}/rate {}",
                        p.port, p.rate
                    )),
                });
            }
        }
    }
    out
}

/// Why no reference rate could be derived (the run is then judged without one).
#[derive(Debug, thiserror::Error)]
pub enum NoReference {
    /// The route probe's error names the peer.
    #[error(transparent)]
    Route(#[from] crate::probe_error::ProbeError),
    #[error(transparent)]
    Host(#[from] crate::host::HostError),
    #[error("no interface with index {0} under /sys/class/net")]
    NoIndex(u32),
    #[error("{0} reports no link speed (/sys/class/net/{0}/speed): a virtual or down interface")]
    NoSpeed(String),
    /// `nvlink_model`: the model whose NVLink generation is unknown, when links are active.
    #[error(
        "GPU {pci} reports no PCIe link speed and width (current_link_speed, current_link_width){}",
        nvlink_model.as_ref().map_or(String::new(), |m| format!(" and its NVLink generation is unknown for `{m}`"))
    )]
    NoLink {
        pci: String,
        nvlink_model: Option<String>,
    },
    #[error("GPU {pci}: {gts} GT/s is no PCIe generation")]
    Generation { pci: String, gts: f64 },
    #[error("no GPU found under /sys/bus/pci/devices")]
    NoGpu,
    #[error("no interface carries the traffic to the other hosts")]
    NoCarrier,
}

/// One GPU's interconnect rate per direction and how it was derived: active NVLinks when
/// NVML reports them and the generation is known from the model, else its PCIe link.
pub(crate) fn gpu_rate(
    gpu: &Gpu,
    nvml: Option<&NvmlGpu>,
) -> Result<(Source, f64, String), NoReference> {
    let model = crate::say::clean_line(
        &nvml
            .map(|n| n.name.clone())
            .or_else(|| gpu.model.clone())
            .unwrap_or_default(),
    );
    let active = nvml.map_or(0, |n| n.nvlinks.iter().filter(|l| l.active).count());
    if active > 0 {
        let generation = nvlink_generation(&model);
        if let Some((g, per_link)) = generation.and_then(|g| nvlink_link(g).map(|r| (g, r))) {
            return Ok((
                Source::Nvlink,
                active as f64 * per_link,
                format!(
                    "NVLink{g} ({model}): {active} active link{} × {} GB/s",
                    if active == 1 { "" } else { "s" },
                    per_link / 1e9
                ),
            ));
        }
    }
    let (Some(gts), Some(width)) = (gpu.link.current_gts, gpu.link.current_width) else {
        return Err(NoReference::NoLink {
            pci: gpu.pci_address.clone(),
            nvlink_model: (active > 0).then_some(model),
        });
    };
    let (lane, code) = pcie_lane(gts).ok_or_else(|| NoReference::Generation {
        pci: gpu.pci_address.clone(),
        gts,
    })?;
    Ok((
        Source::Pcie,
        lane * f64::from(width),
        format!(
            "PCIe {} ({gts} GT/s × {width} lanes, {code})",
            gpu.link.current()
        ),
    ))
}

/// The slowest GPU's interconnect: a ring through every GPU runs at its slowest link.
pub(crate) fn of_gpus(gpus: &[Gpu], nvml: &[NvmlGpu]) -> Result<Reference, NoReference> {
    let mut rated = Vec::new();
    for g in gpus {
        let facts = nvml.iter().find(|n| n.pci_address == g.pci_address);
        rated.push((g, gpu_rate(g, facts)?));
    }
    let Some((slowest, (source, rate, how))) =
        rated.iter().min_by(|a, b| a.1.1.total_cmp(&b.1.1)).cloned()
    else {
        return Err(NoReference::NoGpu);
    };
    let label = match source {
        Source::Nvlink => how.split(" (").next().unwrap_or("NVLink").to_string(),
        _ => format!("PCIe {}", slowest.link.current()),
    };
    Ok(Reference {
        source,
        rate_bytes_per_second: rate,
        label: format!("{label} of GPU {}", slowest.pci_address),
        how: format!(
            "{how} = {:.2} GB/s per direction, the slowest of {} GPU{}",
            rate / 1e9,
            rated.len(),
            if rated.len() == 1 { "" } else { "s" }
        ),
        parts: rated
            .iter()
            .map(|(g, (_, r, _))| Part {
                name: g.pci_address.clone(),
                rate_bytes_per_second: *r,
            })
            .collect(),
    })
}

/// The memcpy probe's buffer: larger than any CPU's last-level cache.
const COPY_BYTES: usize = 64 << 20;

/// Measures this process's memory copy rate for at most about `budget` (one copy at
/// least): the best of the copies, in bytes copied per second.
pub fn loopback_copy(budget: Duration) -> Reference {
    let src = vec![0x5au8; COPY_BYTES];
    let mut dst = vec![0u8; COPY_BYTES];
    let start = Instant::now();
    let mut best = Duration::MAX;
    let mut copies = 0;
    while copies == 0 || start.elapsed() < budget {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        best = best.min(t.elapsed());
        copies += 1;
    }
    let rate = COPY_BYTES as f64 / best.as_secs_f64().max(1e-9);
    Reference {
        source: Source::LoopbackCopy,
        rate_bytes_per_second: rate,
        label: "memory copy rate (loopback)".into(),
        how: format!(
            "memcpy of {} MiB on rank 0, the best of {copies} copies in {} ms; TCP over \
             loopback copies every byte at least twice (into and out of the kernel)",
            COPY_BYTES >> 20,
            start.elapsed().as_millis()
        ),
        parts: Vec::new(),
    }
}

/// The interfaces the kernel routes to `peers` through, by name (from the `ifindex` files
/// under the root), each with its link speed in Mb/s.
pub fn nics_to(
    root: &Root,
    peers: &[IpAddr],
    routes: &dyn RouteProbe,
) -> Result<Vec<Link>, NoReference> {
    let mut indexes = BTreeSet::new();
    for peer in peers {
        indexes.insert(routes.route_to(*peer)?);
    }
    let names = root.list_dir("/sys/class/net")?.unwrap_or_default();
    let mut out = Vec::new();
    for index in indexes {
        let name = names
            .iter()
            .find(|n| {
                root.read_optional(&format!("/sys/class/net/{n}/ifindex"))
                    .ok()
                    .flatten()
                    .and_then(|t| t.trim().parse::<u32>().ok())
                    == Some(index)
            })
            .ok_or(NoReference::NoIndex(index))?;
        let name = crate::say::clean_line(name);
        let speed = root
            .read_optional(&format!("/sys/class/net/{name}/speed"))
            .ok()
            .flatten()
            .and_then(|t| crate::host::net::parse_speed(&t))
            .ok_or_else(|| NoReference::NoSpeed(name.clone()))?;
        out.push(Link::netdev(&name, speed));
    }
    Ok(out)
}

/// The minimum in GB/s `threshold` stands for: as given, or its share of the reference
/// (`None` for a percentage without one).
pub fn minimum(threshold: Threshold, reference: Option<&Reference>) -> Option<f64> {
    match threshold {
        Threshold::Gbps(g) => Some(g),
        Threshold::Fraction(f) => reference.map(|r| f * r.gbps()),
    }
}

/// Whether the average `avg` (GB/s) is below `threshold`. A percentage is compared as a
/// fraction of the reference, so a run at exactly 80% passes `80%` (the product `0.8 ×
/// rate` may round above it); without a reference it cannot pass.
pub fn below(threshold: Threshold, avg: f64, reference: Option<&Reference>) -> bool {
    match (threshold, reference) {
        (Threshold::Gbps(g), _) => avg < g,
        (Threshold::Fraction(f), Some(r)) => r.fraction(avg) < f,
        (Threshold::Fraction(_), None) => true,
    }
}

/// One size judged against its baseline (bus bandwidths in GB/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineCheck {
    pub size: u64,
    pub expected: f64,
    pub floor: f64,
    /// The out-of-place bus bandwidth, the column nccl-tests users quote.
    pub measured: f64,
    pub passed: bool,
}

/// Every measured size that has a baseline, judged: below baseline × (1 − tolerance) fails.
pub fn judge_baseline(baseline: &Baseline, rows: &[Row]) -> Vec<BaselineCheck> {
    rows.iter()
        .filter_map(|r| {
            let expected = *baseline.sizes.get(&r.size)?;
            let floor = baseline.floor(expected);
            let measured = r.out_of_place.bus_bw;
            Some(BaselineCheck {
                size: r.size,
                expected,
                floor,
                measured,
                passed: measured >= floor,
            })
        })
        .collect()
}

/// What a run was judged against besides its exactness, for every rendering.
#[derive(Debug)]
pub struct Judged {
    /// The reference rate, or why there is none (each rendering shows the reason as text).
    pub reference: Result<Reference, NoReference>,
    /// The threshold in GB/s, as given (a percentage resolved against the reference).
    pub min_busbw: Option<(f64, Threshold)>,
    /// The baseline, where it came from, and each measured size that has one, judged.
    pub baseline: Option<(Baseline, String, Vec<BaselineCheck>)>,
}

impl Judged {
    /// Nothing to judge against: no reference, threshold or baseline.
    pub fn nothing(why: NoReference) -> Judged {
        Judged {
            reference: Err(why),
            min_busbw: None,
            baseline: None,
        }
    }

    /// The largest bus bandwidth of the run (GB/s) and its size.
    pub fn peak(rows: &[Row]) -> Option<(f64, u64)> {
        rows.iter()
            .map(|r| (r.out_of_place.bus_bw.max(r.in_place.bus_bw), r.size))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// The footer's lines (each starting `# `, ending in a newline) that put the average,
    /// the peak, each NIC and each baseline size in context.
    pub fn lines(&self, avg: f64, rows: &[Row]) -> String {
        let mut out = String::new();
        match &self.reference {
            Ok(r) => {
                out.push_str(&format!(
                    "# Reference: {:.3} GB/s per direction, {}: {}\n",
                    r.gbps(),
                    r.label,
                    r.how
                ));
                out.push_str(&format!(
                    "# busbw {avg:.3} GB/s (average) = {}% of {}\n",
                    percent_1(r.fraction(avg)),
                    r.label
                ));
                if let Some((peak, size)) = Judged::peak(rows) {
                    out.push_str(&format!(
                        "# busbw {peak:.3} GB/s (peak, {size} B) = {}% of {}\n",
                        percent_1(r.fraction(peak)),
                        r.label
                    ));
                }
                let per_nic = r.per_nic(avg);
                if per_nic.len() > 1 {
                    for ((name, fraction), part) in per_nic.iter().zip(&r.parts) {
                        out.push_str(&format!(
                            "#   {name}: {:.3} GB/s (an even share) = {}% of its {:.3} GB/s\n",
                            avg / per_nic.len() as f64,
                            percent_1(*fraction),
                            part.rate_bytes_per_second / 1e9
                        ));
                    }
                }
            }
            Err(why) => out.push_str(&format!("# Reference: none ({why})\n")),
        }
        if let Some((min, threshold)) = &self.min_busbw {
            out.push_str(&format!("# Minimum busbw : {min:.3} GB/s ({threshold})\n"));
        }
        if let Some((baseline, source, checks)) = &self.baseline {
            out.push_str(&format!(
                "# Baseline ({source}, tolerance {}%): {} of {} sizes measured\n",
                percent(baseline.tolerance),
                checks.len(),
                baseline.sizes.len()
            ));
            for c in checks {
                out.push_str(&format!(
                    "#   {:>12} B: busbw {:.3} GB/s {} {:.3} GB/s (baseline {} GB/s) {}\n",
                    c.size,
                    c.measured,
                    if c.passed { ">=" } else { "<" },
                    c.floor,
                    c.expected,
                    if c.passed { "ok" } else { "FAILED" }
                ));
            }
        }
        crate::say::clean(&out)
    }
}

/// `0.7312` as `73.1`.
fn percent_1(fraction: f64) -> String {
    format!("{:.1}", fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nvml::NvLink;

    #[test]
    fn link_speeds_are_bits_and_busbw_is_bytes() {
        assert_eq!(nic_bytes_per_second(100_000), 12.5e9);
        assert_eq!(nic_bytes_per_second(25_000), 3.125e9);
        assert_eq!(nic_bytes_per_second(100), 12.5e6);
        let r = of_nics(&[Link::netdev("ens1f0", 100_000)], "route").unwrap();
        assert_eq!(r.gbps(), 12.5);
        assert!((r.fraction(9.125) - 0.73).abs() < 1e-12);
        assert_eq!(r.label, "100 Gb/s link (ens1f0)");
        assert!(
            r.how.contains("/sys/class/net/ens1f0/speed 100000 Mb/s"),
            "{}",
            r.how
        );
    }

    /// `80%` fails exactly below 80% of the reference, at any rate.
    #[test]
    fn a_percentage_fails_exactly_below_its_share() {
        let pct = Threshold::Fraction(0.8);
        for mbps in [100, 1000, 25_000, 100_000, 400_000, 3_200_000] {
            let r = of_nics(&[Link::netdev("x", mbps)], "r").unwrap();
            let at = r.gbps() * 0.8;
            assert!(!below(pct, at, Some(&r)), "{mbps}: exactly 80%");
            assert!(
                below(pct, at * (1.0 - 1e-9), Some(&r)),
                "{mbps}: just below"
            );
            assert!(
                !below(pct, at * (1.0 + 1e-9), Some(&r)),
                "{mbps}: just above"
            );
            assert_eq!(minimum(pct, Some(&r)), Some(0.8 * r.gbps()));
        }
        // 10 GB/s is 80% of a 100 Gb/s link (12.5 GB/s), 0.01 GB/s of a 100 Mb/s one, where
        // 0.8 × 0.0125 rounds to 0.010000000000000002: judged on the product, it would fail.
        let r = of_nics(&[Link::netdev("x", 100_000)], "r").unwrap();
        assert!(!below(pct, 10.0, Some(&r)));
        assert!(below(pct, 9.999, Some(&r)));
        let slow = of_nics(&[Link::netdev("x", 100)], "r").unwrap();
        assert!(!below(pct, 0.01, Some(&slow)));
        assert!(below(pct, 0.0099, Some(&slow)));
        assert!(below(pct, 1.0, None), "no reference: cannot pass");
        assert_eq!(minimum(pct, None), None);
        assert!(below(Threshold::Gbps(2.0), 1.999, None));
        assert!(!below(Threshold::Gbps(2.0), 2.0, None));
    }

    #[test]
    fn several_nics_sum_and_each_carries_its_share() {
        let r = of_nics(
            &[Link::netdev("a", 100_000), Link::netdev("b", 25_000)],
            "r",
        )
        .unwrap();
        assert_eq!(r.rate_bytes_per_second, 15.625e9);
        assert_eq!(r.label, "125 Gb/s links (a + b)");
        // 10 GB/s over two NICs: 5 GB/s each, 40% of a and 160% of b (b is the bottleneck).
        let per = r.per_nic(10.0);
        assert_eq!(per[0].0, "a");
        assert!((per[0].1 - 0.4).abs() < 1e-12);
        assert!((per[1].1 - 1.6).abs() < 1e-12);
        assert!(of_nics(&[], "r").is_none());
    }

    fn hca(name: &str, ports: &[(u32, &str, Option<u64>)]) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            pci_address: None,
            numa_node: None,
            driver: None,
            firmware: None,
            hca_type: None,
            netdevs: Vec::new(),
            ports: ports
                .iter()
                .map(|(port, state, mbps)| crate::inventory::rdma::RdmaPort {
                    port: *port,
                    state: state.to_string(),
                    phys_state: None,
                    rate: "400 Gb/sec (4X NDR)".into(),
                    rate_mbps: *mbps,
                    width: Some(4),
                    signalling: Some("NDR".into()),
                    link_layer: Some("InfiniBand".into()),
                    active_mtu: None,
                    gids: Vec::new(),
                })
                .collect(),
            relaxed_ordering: None,
            bridges: Vec::new(),
            host_bridge: None,
        }
    }

    /// NCCL_IB_HCA's three forms pick the ports NCCL would, and only active ports count.
    #[test]
    fn rdma_ports_as_nccl_ib_hca_selects_them() {
        let devices = [
            hca("mlx5_0", &[(1, "ACTIVE", Some(400_000))]),
            hca(
                "mlx5_1",
                &[(1, "ACTIVE", Some(400_000)), (2, "DOWN", Some(400_000))],
            ),
            hca("mlx5_10", &[(1, "ACTIVE", Some(200_000))]),
            hca("mlx5_2", &[(1, "ACTIVE", None)]),
        ];
        let names = |spec: Option<&str>| -> Vec<String> {
            ib_ports(&devices, spec)
                .into_iter()
                .map(|l| l.name)
                .collect()
        };
        assert_eq!(names(None), ["mlx5_0:1", "mlx5_1:1", "mlx5_10:1"]);
        assert_eq!(names(Some("mlx5_1")), ["mlx5_1:1", "mlx5_10:1"], "a prefix");
        assert_eq!(names(Some("=mlx5_1")), ["mlx5_1:1"]);
        assert_eq!(names(Some("^mlx5_1")), ["mlx5_0:1"]);
        assert_eq!(names(Some("^=mlx5_1")), ["mlx5_0:1", "mlx5_10:1"]);
        assert_eq!(
            names(Some("mlx5_0:1,mlx5_1:2")),
            ["mlx5_0:1"],
            "port 2 is down"
        );
        let r = of_nics(&ib_ports(&devices, Some("=mlx5_0,mlx5_10")), "r").unwrap();
        assert_eq!(r.rate_bytes_per_second, 75e9, "400 + 200 Gb/s");
        assert!(
            r.how
                .starts_with("/sys/class/infiniband/mlx5_0/ports/1/rate 400 Gb/sec (4X NDR) + "),
            "{}",
            r.how
        );
    }

    /// The route names an index; the root's sysfs names the interface and its speed. Two
    /// peers behind two NICs sum; one behind a NIC without a speed is no reference.
    #[test]
    fn nics_are_found_by_the_routes_index_under_the_root() {
        use crate::probe::route::FixedRoutes;
        let tree = crate::testing::Tree::with(&[
            ("sys/class/net/lo/ifindex", "1\n"),
            ("sys/class/net/ens1f0/ifindex", "4\n"),
            ("sys/class/net/ens1f0/speed", "100000\n"),
            ("sys/class/net/ens2f0/ifindex", "7\n"),
            ("sys/class/net/ens2f0/speed", "25000\n"),
            ("sys/class/net/veth0/ifindex", "9\n"),
            ("sys/class/net/veth0/speed", "-1\n"),
        ]);
        let (p1, p2, p3) = (
            "10.0.0.2".parse().unwrap(),
            "10.1.0.2".parse().unwrap(),
            "10.9.0.2".parse().unwrap(),
        );
        let routes = FixedRoutes {
            default: vec![],
            peers: vec![(p1, 4), (p2, 7), (p3, 9)],
        };
        let root = tree.root();
        let links = nics_to(&root, &[p1, p1, p2], &routes).unwrap();
        assert_eq!(
            links,
            [
                Link::netdev("ens1f0", 100_000),
                Link::netdev("ens2f0", 25_000)
            ]
        );
        let err = nics_to(&root, &[p1, p3], &routes).unwrap_err().to_string();
        assert!(err.starts_with("veth0 reports no link speed"), "{err}");
        let err = nics_to(&root, &["10.5.0.1".parse().unwrap()], &routes)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "no route to 10.5.0.1");
        let routes = FixedRoutes {
            default: vec![],
            peers: vec![(p1, 12)],
        };
        let err = nics_to(&root, &[p1], &routes).unwrap_err().to_string();
        assert_eq!(err, "no interface with index 12 under /sys/class/net");
    }

    #[test]
    fn pcie_rates_follow_each_generation_line_code() {
        let lane = |gts| pcie_lane(gts).unwrap().0;
        assert_eq!(lane(2.5), 0.25e9);
        assert_eq!(lane(5.0), 0.5e9);
        assert!((lane(8.0) - 0.984_615_384e9).abs() < 1e3);
        assert!((lane(16.0) * 16.0 - 31.507_692e9).abs() < 1e4);
        assert!((lane(32.0) * 16.0 - 63.015_384e9).abs() < 1e4);
        assert!((lane(64.0) - 7.5625e9).abs() < 1.0);
        assert_eq!(pcie_lane(12.0), None);
    }

    #[test]
    fn nvlink_generation_from_the_model() {
        for (model, g) in [
            ("NVIDIA H100 80GB HBM3", 4),
            ("NVIDIA A100-SXM4-80GB", 3),
            ("Tesla V100-SXM2-32GB", 2),
            ("Tesla P100-SXM2-16GB", 1),
            ("NVIDIA B200", 5),
            ("NVIDIA GH200 480GB", 4),
        ] {
            assert_eq!(nvlink_generation(model), Some(g), "{model}");
        }
        assert_eq!(nvlink_generation("NVIDIA L40S"), None);
        assert_eq!(nvlink_link(4), Some(25e9));
        assert_eq!(nvlink_link(5), Some(50e9));
        assert_eq!(nvlink_link(9), None);
    }

    fn gpu(address: &str, gts: Option<f64>, width: Option<u32>) -> Gpu {
        Gpu {
            index: 0,
            pci_address: address.into(),
            device_id: "0x2330".into(),
            driver: None,
            numa_node: None,
            local_cpus: None,
            link: PciLink {
                current_gts: gts,
                max_gts: gts,
                current_width: width,
                max_width: width,
            },
            bridges: Vec::new(),
            host_bridge: None,
            model: None,
            memory_numa_node: None,
            nvml: None,
        }
    }

    fn nvml(address: &str, name: &str, active: usize) -> NvmlGpu {
        NvmlGpu {
            pci_address: address.into(),
            name: name.into(),
            memory_bytes: None,
            persistence_mode: None,
            ecc_uncorrected: None,
            nvlink_peers: Vec::new(),
            nvlinks: (0..18)
                .map(|link| NvLink {
                    link,
                    active: (link as usize) < active,
                })
                .collect(),
            remapped_rows: None,
            retired_pages: None,
        }
    }

    #[test]
    fn gpus_take_nvlink_else_pcie_and_the_slowest_bounds_the_ring() {
        let gpus = [
            gpu("0000:18:00.0", Some(32.0), Some(16)),
            gpu("0000:2a:00.0", Some(32.0), Some(16)),
        ];
        let h100 = [
            nvml("0000:18:00.0", "NVIDIA H100 80GB HBM3", 18),
            nvml("0000:2a:00.0", "NVIDIA H100 80GB HBM3", 16),
        ];
        let r = of_gpus(&gpus, &h100).unwrap();
        assert_eq!(r.source, Source::Nvlink);
        assert_eq!(r.rate_bytes_per_second, 400e9, "16 links × 25 GB/s");
        assert!(
            r.label.starts_with("NVLink4 of GPU 0000:2a:00.0"),
            "{}",
            r.label
        );
        assert!(r.how.contains("16 active links × 25 GB/s"), "{}", r.how);

        // No NVML (or no active link): the PCIe links, Gen4 x16 and a downtrained Gen4 x8.
        let pcie = [
            gpu("0000:18:00.0", Some(16.0), Some(16)),
            gpu("0000:2a:00.0", Some(16.0), Some(8)),
        ];
        let r = of_gpus(&pcie, &[]).unwrap();
        assert_eq!(r.source, Source::Pcie);
        assert!((r.rate_bytes_per_second - 8.0 * 16e9 * 128.0 / 130.0 / 8.0).abs() < 1.0);
        assert_eq!(r.label, "PCIe Gen4 x8 of GPU 0000:2a:00.0");
        assert!(r.how.contains("16 GT/s × 8 lanes, 128b/130b"), "{}", r.how);

        // Active links of an unknown generation fall back to PCIe.
        let r = of_gpus(&pcie[..1], &[nvml("0000:18:00.0", "NVIDIA Future", 4)]).unwrap();
        assert_eq!(r.source, Source::Pcie);

        let err = of_gpus(&[gpu("0000:18:00.0", None, None)], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("0000:18:00.0"), "{err}");
        assert!(of_gpus(&[], &[]).is_err());
    }

    #[test]
    fn the_copy_probe_is_bounded_and_positive() {
        let t = Instant::now();
        let r = loopback_copy(Duration::from_millis(50));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(r.rate_bytes_per_second > 1e8, "{r:?}");
        assert_eq!(r.source, Source::LoopbackCopy);
    }

    fn row(size: u64, out: f64) -> Row {
        let h = crate::bench::measure::stats::Half {
            time: 1.0,
            alg_bw: out,
            bus_bw: out,
            nwrong: None,
        };
        Row {
            size,
            count: size / 4,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place: h,
            in_place: crate::bench::measure::stats::Half { bus_bw: 100.0, ..h },
            algo: None,
        }
    }

    #[test]
    fn baselines_fail_below_the_tolerance_only_at_their_sizes() {
        let b = Baseline {
            tolerance: 0.1,
            sizes: [(1 << 20, 2.0), (8 << 20, 10.0), (1 << 30, 20.0)].into(),
        };
        let rows = [row(1 << 20, 1.8), row(4 << 20, 0.1), row(8 << 20, 8.99)];
        let checks = judge_baseline(&b, &rows);
        assert_eq!(checks.len(), 2, "4M has no baseline, 1G was not measured");
        assert!(checks[0].passed, "1.8 is exactly 2.0 less 10%");
        assert!(!checks[1].passed, "8.99 is below 9.0");
        assert_eq!((checks[1].expected, checks[1].measured), (10.0, 8.99));
    }
}
