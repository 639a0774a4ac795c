//! The two renderings of a run: nccl-tests' table (so results paste next to
//! `all_reduce_perf` output) and one JSON document with nccl-tests' `-J` field names, the
//! settings, versions and hosts (never the environment: it may hold secrets).

use serde::Serialize;

use super::context::{Judged, Reference};
use super::stats::{Half, Row, average_busbw, total_wrong};
use crate::bench::Settings;
use crate::bench::control::rendezvous::{Member, Transport};
use crate::profile::Threshold;

/// Everything a rendering needs besides the rows.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub backend: Transport,
    pub settings: Settings,
    pub members: Vec<Member>,
    pub versions: Versions,
}

#[derive(Debug, Clone, Serialize)]
pub struct Versions {
    pub gputune: &'static str,
    /// NCCL's version when the NCCL backend ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
}

impl RunInfo {
    /// Distinct host names in rank order.
    pub fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = Vec::new();
        for m in &self.members {
            if !hosts.contains(&m.host) {
                hosts.push(m.host.clone());
            }
        }
        hosts
    }
}

fn time_str(us: f64) -> String {
    if us >= 10000.0 {
        format!("{us:7.0}")
    } else if us >= 100.0 {
        format!("{us:7.1}")
    } else {
        format!("{us:7.2}")
    }
}

fn half_str(h: &Half) -> String {
    let wrong = match h.nwrong {
        Some(n) => format!("{n:6}"),
        None => format!("{:>6}", "N/A"),
    };
    format!(
        "  {}  {:6.2}  {:6.2}  {wrong}",
        time_str(h.time),
        h.alg_bw,
        h.bus_bw
    )
}

/// The header, printed before the first row so a long run shows where it is.
pub fn table_header(info: &RunInfo) -> String {
    let s = &info.settings;
    let hosts = info.hosts();
    let step = match s.sweep.step {
        super::size::SizeStep::Factor(f) => format!("{f}(factor)"),
        super::size::SizeStep::Increment(i) => format!("{i}(bytes)"),
    };
    let mut out = format!(
        "# gputune {} bench {}: backend {}, {} rank{} on {} host{} ({})\n",
        info.versions.gputune,
        s.sweep.collective.name(),
        info.backend,
        info.members.len(),
        if info.members.len() == 1 { "" } else { "s" },
        hosts.len(),
        if hosts.len() == 1 { "" } else { "s" },
        hosts.join(", ")
    );
    if let Some(nccl) = &info.versions.nccl {
        out.push_str(&format!("# NCCL version {nccl}\n"));
    }
    if info.backend == Transport::Tcp {
        use super::collective::Collective;
        let algo = match (s.sweep.collective, s.algo) {
            (Collective::AllReduce, crate::bench::Algo::Auto) => format!(
                "auto (rd up to {} B, rabenseifner below {} B, ring from there)",
                crate::bench::Algo::RD_MAX,
                crate::bench::Algo::RABENSEIFNER_MAX
            ),
            (Collective::AllGather, crate::bench::Algo::Auto) => format!(
                "auto (rd up to {} B with a power-of-two rank count, ring otherwise)",
                crate::bench::Algo::RD_MAX
            ),
            (Collective::ReduceScatter, _) => "ring".to_string(),
            (Collective::Broadcast, _) => "binomial tree".to_string(),
            (_, forced) => forced.name().to_string(),
        };
        out.push_str(&format!("# algorithm: {algo}\n"));
    }
    out.push_str(&format!(
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} agg iters: 1 validation: {} graph: 0\n",
        s.sweep.min_bytes, s.sweep.max_bytes, s.sweep.warmup, s.sweep.iters, s.sweep.check
    ));
    out.push_str("#\n# Using devices\n");
    for m in &info.members {
        out.push_str(&format!(
            "#  Rank {:2} Group  0 Pid {:6} on {:>10} device {}\n",
            m.rank, m.pid, m.host, m.device
        ));
    }
    out.push_str("#\n");
    out.push_str(&format!(
        "#{:51}{:^33}{:^33}\n",
        "", "out-of-place", "in-place"
    ));
    out.push_str(&format!(
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"
    ));
    out.push_str(&format!(
        "#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""
    ));
    out
}

/// One row in nccl-tests' layout: `%12li  %12li  %8s  %6s  %6i` then each half.
pub fn table_row(row: &Row) -> String {
    format!(
        "{:12}  {:12}  {:>8}  {:>6}  {:6}{}{}\n",
        row.size,
        row.count,
        row.dtype,
        row.redop,
        row.root,
        half_str(&row.out_of_place),
        half_str(&row.in_place)
    )
}

/// The closing lines: nccl-tests' two, then the run in context ([`Judged::lines`]).
pub fn table_footer(rows: &[Row], judged: &Judged) -> String {
    format!(
        "# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:.6}\n#\n{}#\n",
        total_wrong(rows),
        if total_wrong(rows) == 0 {
            "OK"
        } else {
            "FAILED"
        },
        average_busbw(rows),
        judged.lines(average_busbw(rows), rows)
    )
}

#[derive(Serialize)]
struct Document<'a> {
    schema_version: u32,
    command: &'a str,
    #[serde(flatten)]
    info: &'a RunInfo,
    hosts: Vec<String>,
    results: &'a [Row],
    average_bus_bandwidth: f64,
    out_of_bounds_values: u64,
    /// The threshold in GB/s, as before schema 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    min_busbw: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_busbw_bytes_per_second: Option<f64>,
    /// Set when the threshold was a percentage of the reference (0.8 for `80%`).
    #[serde(skip_serializing_if = "Option::is_none")]
    min_busbw_fraction: Option<f64>,
    /// What the path can carry; null with `reference_unavailable` saying why.
    reference: Option<ReferenceDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reference_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<BaselineDoc<'a>>,
}

/// Bumped when a field is renamed or removed, or one scripts should know about is added.
/// 2: `reference` (rate, source, how, fractions), `min_busbw_bytes_per_second`,
/// `min_busbw_fraction`, `baseline`.
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Serialize)]
struct ReferenceDoc<'a> {
    #[serde(flatten)]
    reference: &'a Reference,
    /// The average bus bandwidth as a fraction of the rate.
    average_fraction: f64,
    peak_fraction: Option<f64>,
    /// Each size's bus bandwidth as a fraction of the rate.
    fractions: Vec<SizeFraction>,
    /// With several NICs: each one's even share of the average as a fraction of its rate.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    nics: Vec<NicFraction>,
}

#[derive(Serialize)]
struct SizeFraction {
    size: u64,
    out_of_place: f64,
    in_place: f64,
}

#[derive(Serialize)]
struct NicFraction {
    name: String,
    fraction: f64,
}

#[derive(Serialize)]
struct BaselineDoc<'a> {
    source: &'a str,
    tolerance_fraction: f64,
    passed: bool,
    sizes: Vec<BaselineSize>,
}

#[derive(Serialize)]
struct BaselineSize {
    size: u64,
    expected_bytes_per_second: f64,
    floor_bytes_per_second: f64,
    bus_bw_bytes_per_second: f64,
    passed: bool,
}

/// The JSON document (one object, a trailing newline).
pub fn json(info: &RunInfo, rows: &[Row], judged: &Judged) -> String {
    let command = format!("bench {}", info.settings.sweep.collective.name());
    let avg = average_busbw(rows);
    let reference = judged.reference.as_ref().ok().map(|r| ReferenceDoc {
        reference: r,
        average_fraction: r.fraction(avg),
        peak_fraction: Judged::peak(rows).map(|(p, _)| r.fraction(p)),
        fractions: rows
            .iter()
            .map(|row| SizeFraction {
                size: row.size,
                out_of_place: r.fraction(row.out_of_place.bus_bw),
                in_place: r.fraction(row.in_place.bus_bw),
            })
            .collect(),
        nics: r
            .per_nic(avg)
            .into_iter()
            .filter(|_| r.parts.len() > 1)
            .map(|(name, fraction)| NicFraction { name, fraction })
            .collect(),
    });
    let doc = Document {
        schema_version: SCHEMA_VERSION,
        command: &command,
        info,
        hosts: info.hosts(),
        results: rows,
        average_bus_bandwidth: avg,
        out_of_bounds_values: total_wrong(rows),
        min_busbw: judged.min_busbw.map(|m| m.0),
        min_busbw_bytes_per_second: judged.min_busbw.map(|m| m.0 * 1e9),
        min_busbw_fraction: judged.min_busbw.and_then(|m| match m.1 {
            Threshold::Fraction(f) => Some(f),
            Threshold::Gbps(_) => None,
        }),
        reference,
        reference_unavailable: judged.reference.as_ref().err().map(ToString::to_string),
        baseline: judged
            .baseline
            .as_ref()
            .map(|(b, source, checks)| BaselineDoc {
                source,
                tolerance_fraction: b.tolerance,
                passed: checks.iter().all(|c| c.passed),
                sizes: checks
                    .iter()
                    .map(|c| BaselineSize {
                        size: c.size,
                        expected_bytes_per_second: c.expected * 1e9,
                        floor_bytes_per_second: c.floor * 1e9,
                        bus_bw_bytes_per_second: c.measured * 1e9,
                        passed: c.passed,
                    })
                    .collect(),
            }),
    };
    let mut text =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::measure::context::NoReference;
    use crate::bench::measure::data::{DType, Op};
    use crate::bench::measure::harness::Sweep;
    use crate::bench::measure::size::SizeStep;

    #[test]
    fn backend_words_serialise_as_before_the_enums() {
        use crate::bench::job::Choice;
        fn json<T: Serialize>(value: &T) -> String {
            serde_json::to_string(value).unwrap_or_default()
        }
        assert_eq!(json(&Transport::Nccl), "\"nccl\"");
        assert_eq!(json(&Transport::Tcp), "\"tcp\"");
        assert_eq!(Transport::Tcp.to_string(), "tcp");
        for (choice, text) in [
            (Choice::Auto, "\"auto\""),
            (Choice::Nccl, "\"nccl\""),
            (Choice::Tcp, "\"tcp\""),
        ] {
            assert_eq!(json(&choice), text);
            assert_eq!(serde_json::from_str::<Choice>(text).ok(), Some(choice));
        }
        assert!(serde_json::from_str::<Choice>("\"udp\"").is_err());
    }

    fn info() -> RunInfo {
        RunInfo {
            backend: Transport::Tcp,
            settings: Settings {
                sweep: Sweep {
                    collective: crate::bench::measure::collective::Collective::AllReduce,
                    min_bytes: 8,
                    max_bytes: 16,
                    step: SizeStep::Factor(2),
                    dtype: DType::F32,
                    op: Op::Sum,
                    iters: 20,
                    warmup: 1,
                    check: 1,
                },
                backend: crate::bench::job::Choice::Tcp,
                streams: 1,
                sockbuf: 0,
                algo: crate::bench::Algo::Auto,
            },
            members: vec![
                Member {
                    rank: 0,
                    host: "a".into(),
                    pid: 10,
                    device: "cpu".into(),
                },
                Member {
                    rank: 1,
                    host: "b".into(),
                    pid: 11,
                    device: "cpu".into(),
                },
            ],
            versions: Versions {
                gputune: "0.1.0",
                nccl: None,
            },
        }
    }

    fn row(size: u64, wrong: Option<u64>) -> Row {
        let h = Half {
            time: 12.345,
            alg_bw: 0.5,
            bus_bw: 0.5,
            nwrong: wrong,
        };
        Row {
            algo: None,
            size,
            count: size / 4,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place: h,
            in_place: Half { bus_bw: 1.5, ..h },
        }
    }

    #[test]
    fn rows_have_nccl_tests_columns() {
        let line = table_row(&row(8, Some(0)));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            fields,
            [
                "8", "2", "float", "sum", "-1", "12.35", "0.50", "0.50", "0", "12.35", "0.50",
                "1.50", "0"
            ]
        );
        assert_eq!(&line[..12], "           8");
        let unchecked = table_row(&row(8, None));
        assert_eq!(
            unchecked.split_whitespace().filter(|f| *f == "N/A").count(),
            2
        );
    }

    #[test]
    fn header_names_backend_ranks_hosts_and_devices() {
        let h = table_header(&info());
        assert!(h.contains("backend tcp, 2 ranks on 2 hosts (a, b)"), "{h}");
        assert!(
            h.contains("#  Rank  1 Group  0 Pid     11 on          b device cpu"),
            "{h}"
        );
        assert!(h.contains("#wrong"));
    }

    fn judged() -> Judged {
        let reference = crate::bench::measure::context::of_nics(
            &[crate::bench::measure::context::Link::netdev("eth9", 20_000)],
            "test route",
        );
        let baseline = crate::profile::Baseline {
            tolerance: 0.1,
            sizes: [(8, 1.0)].into(),
        };
        let checks = crate::bench::measure::context::judge_baseline(&baseline, &[row(8, Some(0))]);
        Judged {
            reference: reference.ok_or(NoReference::NoGpu),
            min_busbw: Some((2.0, Threshold::Fraction(0.8))),
            baseline: Some((baseline, "profile p [bench.baseline]".into(), checks)),
        }
    }

    #[test]
    fn footer_and_json_carry_the_average() {
        let rows = [row(8, Some(0)), row(16, Some(0))];
        let f = table_footer(&rows, &Judged::nothing(NoReference::NoGpu));
        assert!(f.contains("# Out of bounds values : 0 OK"));
        assert!(f.contains("# Avg bus bandwidth    : 1.000000"), "{f}");
        let doc: serde_json::Value =
            serde_json::from_str(&json(&info(), &rows, &judged())).unwrap();
        assert_eq!(doc["average_bus_bandwidth"], 1.0);
        assert_eq!(doc["results"][1]["size"], 16);
        assert_eq!(doc["results"][1]["in_place"]["bus_bw"], 1.5);
        assert_eq!(doc["results"][0]["out_of_place"]["nwrong"], 0);
        assert_eq!(doc["results"][0]["redop"], "sum");
        assert_eq!(doc["results"][0]["root"], -1);
        assert_eq!(doc["hosts"], serde_json::json!(["a", "b"]));
        assert_eq!(doc["settings"]["iters"], 20);
        assert_eq!(doc["min_busbw"], 2.0);
        assert_eq!(doc["schema_version"], 2);
        assert_eq!(doc["min_busbw_bytes_per_second"], 2e9);
        assert_eq!(doc["min_busbw_fraction"], 0.8);
        assert_eq!(doc["reference"]["source"], "nic");
        assert_eq!(doc["reference"]["rate_bytes_per_second"], 2.5e9);
        assert_eq!(doc["reference"]["average_fraction"], 0.4);
        assert_eq!(doc["reference"]["peak_fraction"], 0.6);
        assert_eq!(doc["reference"]["fractions"][1]["in_place"], 0.6);
        assert_eq!(doc["baseline"]["passed"], false);
        assert_eq!(
            doc["baseline"]["sizes"][0]["expected_bytes_per_second"],
            1e9
        );
        assert!(doc.get("reference_unavailable").is_none());
        let none: serde_json::Value =
            serde_json::from_str(&json(&info(), &rows, &Judged::nothing(NoReference::NoGpu)))
                .unwrap();
        assert!(none["reference"].is_null());
        assert_eq!(
            none["reference_unavailable"],
            "no GPU found under /sys/bus/pci/devices"
        );
        let footer = table_footer(&rows, &judged());
        for line in [
            "# Reference: 2.500 GB/s per direction, 20 Gb/s link (eth9): /sys/class/net/eth9/speed 20000 Mb/s, ÷ 8 bits per byte; test route\n",
            "# busbw 1.000 GB/s (average) = 40.0% of 20 Gb/s link (eth9)\n",
            "# busbw 1.500 GB/s (peak, 16 B) = 60.0% of 20 Gb/s link (eth9)\n",
            "# Minimum busbw : 2.000 GB/s (80%)\n",
            "# Baseline (profile p [bench.baseline], tolerance 10%): 1 of 1 sizes measured\n",
            "#              8 B: busbw 0.500 GB/s < 0.900 GB/s (baseline 1 GB/s) FAILED\n",
        ] {
            assert!(footer.contains(line), "{line}\n{footer}");
        }
        assert!(doc.get("env").is_none());
    }
}
