//! A benchmark as node_exporter textfile gauges (`bench ... --format prometheus --output
//! FILE`, written atomically like audit's): bus and algorithm bandwidth and time per size and
//! placement, the average, wrong elements and pass/fail, so a dashboard tracks each node's
//! fabric between health checks. No sample timestamps; the run time is its own gauge.
//!
//! Values are in base units, as Prometheus' and node_exporter's naming conventions ask
//! (`node_network_receive_bytes_total`, `_seconds`): bandwidth in bytes per second, not the
//! table's GB/s, so dashboards scale it with their own units and no gauge name carries a
//! prefix that the value does not.

use std::fmt::Write as _;

use super::context::{BaselineCheck, Judged, Source};
use super::output::RunInfo;
use super::stats::{Row, average_busbw, total_wrong};
use crate::report::prometheus::label;

/// The rendered text; `collective` names the benchmark (`allreduce`).
pub(crate) fn render(
    collective: &str,
    info: &RunInfo,
    rows: &[Row],
    judged: &Judged,
    passed: bool,
) -> String {
    let min_busbw = judged.min_busbw.map(|m| m.0);
    let base = format!(
        "collective=\"{}\",backend=\"{}\",ranks=\"{}\"",
        label(collective),
        label(info.backend.name()),
        info.members.len()
    );
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let per_size = |value: fn(&super::stats::Half) -> f64| -> Vec<(String, f64)> {
        rows.iter()
            .flat_map(|r| {
                [("out_of_place", &r.out_of_place), ("in_place", &r.in_place)].map(
                    |(placement, half)| {
                        (
                            format!(
                                "{base},size=\"{}\",type=\"{}\",redop=\"{}\",placement=\"{placement}\"",
                                r.size,
                                label(r.dtype),
                                label(r.redop)
                            ),
                            value(half),
                        )
                    },
                )
            })
            .collect()
    };
    gauge(
        "gputune_bench_busbw_bytes_per_second",
        "Bus bandwidth per size, nccl-tests' definition, in bytes per second.",
        &per_size(|h| bytes_per_second(h.bus_bw)),
    );
    gauge(
        "gputune_bench_algbw_bytes_per_second",
        "Algorithm bandwidth (size / time) per size, in bytes per second.",
        &per_size(|h| bytes_per_second(h.alg_bw)),
    );
    gauge(
        "gputune_bench_time_seconds",
        "Time per operation per size, averaged across ranks.",
        &per_size(|h| h.time * 1e-6),
    );
    gauge(
        "gputune_bench_avg_busbw_bytes_per_second",
        "Mean of every bus bandwidth of the run (nccl-tests' Avg bus bandwidth), in bytes per second.",
        &[(base.clone(), bytes_per_second(average_busbw(rows)))],
    );
    gauge(
        "gputune_bench_wrong_elements",
        "Wrong elements in the checked results, summed across ranks.",
        &[(base.clone(), total_wrong(rows) as f64)],
    );
    if let Some(min) = min_busbw {
        gauge(
            "gputune_bench_min_busbw_bytes_per_second",
            "The threshold the average was judged against, in bytes per second.",
            &[(base.clone(), bytes_per_second(min))],
        );
    }
    if let Ok(r) = &judged.reference {
        let labels = format!("{base},source=\"{}\"", label(source_name(r.source)));
        gauge(
            "gputune_bench_reference_bytes_per_second",
            "What the path can carry per direction (NIC link rate, NVLink or PCIe rate, or the memory copy rate over loopback).",
            &[(labels.clone(), r.rate_bytes_per_second)],
        );
        gauge(
            "gputune_bench_avg_busbw_ratio",
            "The average bus bandwidth as a fraction of the reference rate.",
            &[(labels, r.fraction(average_busbw(rows)))],
        );
    }
    if let Some((_, _, checks)) = &judged.baseline {
        let per_size = |value: fn(&BaselineCheck) -> f64| -> Vec<(String, f64)> {
            checks
                .iter()
                .map(|c| (format!("{base},size=\"{}\"", c.size), value(c)))
                .collect()
        };
        gauge(
            "gputune_bench_baseline_busbw_bytes_per_second",
            "The profile's expected bus bandwidth at this size, in bytes per second.",
            &per_size(|c| bytes_per_second(c.expected)),
        );
        gauge(
            "gputune_bench_baseline_passed",
            "1 when the size's out-of-place bus bandwidth met its baseline less the tolerance.",
            &per_size(|c| f64::from(u8::from(c.passed))),
        );
    }
    gauge(
        "gputune_bench_passed",
        "1 when the run passed: results exact and the average at or above the threshold.",
        &[(base.clone(), f64::from(u8::from(passed)))],
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    gauge(
        "gputune_bench_last_run_timestamp_seconds",
        "When the benchmark ran, in seconds since the epoch.",
        &[(base.clone(), now)],
    );
    out
}

/// The `source` label of a reference.
fn source_name(source: Source) -> &'static str {
    match source {
        Source::Nic => "nic",
        Source::Nvlink => "nvlink",
        Source::Pcie => "pcie",
        Source::LoopbackCopy => "loopback_copy",
    }
}

/// GB/s (the table's and `--min-busbw`'s unit, 1e9 bytes per second) as bytes per second.
fn bytes_per_second(gb_per_second: f64) -> f64 {
    gb_per_second * 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::control::rendezvous::Member;
    use crate::bench::measure::output::Versions;
    use crate::bench::measure::stats::Half;

    fn info() -> RunInfo {
        let job = crate::bench::Settings {
            sweep: crate::bench::measure::harness::Sweep {
                collective: crate::bench::measure::collective::Collective::AllReduce,
                min_bytes: 1 << 20,
                max_bytes: 1 << 20,
                step: crate::bench::measure::size::SizeStep::Factor(2),
                dtype: crate::bench::measure::data::DType::F32,
                op: crate::bench::measure::data::Op::Sum,
                iters: 1,
                warmup: 0,
                check: 1,
            },
            backend: crate::bench::job::Choice::Tcp,
            streams: 1,
            sockbuf: 0,
            algo: crate::bench::Algo::Auto,
        };
        RunInfo {
            backend: crate::bench::control::rendezvous::Transport::Tcp,
            settings: job,
            members: vec![Member {
                rank: 0,
                host: "a".into(),
                pid: 1,
                device: "cpu".into(),
            }],
            versions: Versions {
                gputune: "0",
                nccl: None,
            },
        }
    }

    /// `name{labels}` → value, for every sample line.
    fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }

    /// The table's GB/s are 1e9 bytes per second in the gauges, names in base units.
    #[test]
    fn bandwidth_gauges_are_bytes_per_second() {
        let half = |bus_bw, alg_bw| Half {
            time: 80.0,
            alg_bw,
            bus_bw,
            nwrong: Some(0),
        };
        let row = crate::bench::measure::stats::Row {
            algo: None,
            size: 1 << 20,
            count: 1 << 18,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place: half(12.5, 6.25),
            in_place: half(2.5, 1.25),
        };
        let reference = crate::bench::measure::context::of_nics(
            &[crate::bench::measure::context::Link::netdev(
                "eth0", 100_000,
            )],
            "r",
        );
        let baseline = crate::profile::Baseline {
            tolerance: 0.1,
            sizes: [(1 << 20, 20.0)].into(),
        };
        let checks =
            crate::bench::measure::context::judge_baseline(&baseline, std::slice::from_ref(&row));
        let judged = Judged {
            reference: reference.ok_or(crate::bench::measure::context::NoReference::NoGpu),
            min_busbw: Some((3.0, crate::profile::Threshold::Gbps(3.0))),
            baseline: Some((baseline, "p".into(), checks)),
        };
        let text = render("allreduce", &info(), &[row], &judged, true);
        let s = samples(&text);
        let base = "collective=\"allreduce\",backend=\"tcp\",ranks=\"1\"";
        let sized = |placement: &str| {
            format!(
                "{base},size=\"1048576\",type=\"float\",redop=\"sum\",placement=\"{placement}\""
            )
        };
        let at = |name: &str, labels: &str| s[&format!("{name}{{{labels}}}")];
        let bus = "gputune_bench_busbw_bytes_per_second";
        let alg = "gputune_bench_algbw_bytes_per_second";
        assert_eq!(at(bus, &sized("out_of_place")), 12.5e9);
        assert_eq!(at(bus, &sized("in_place")), 2.5e9);
        assert_eq!(at(alg, &sized("out_of_place")), 6.25e9);
        let time = at("gputune_bench_time_seconds", &sized("in_place"));
        assert!((time - 80e-6).abs() < 1e-15, "{time}");
        assert_eq!(at("gputune_bench_avg_busbw_bytes_per_second", base), 7.5e9);
        assert_eq!(at("gputune_bench_min_busbw_bytes_per_second", base), 3e9);
        assert_eq!(at("gputune_bench_passed", base), 1.0);
        let nic = format!("{base},source=\"nic\"");
        assert_eq!(at("gputune_bench_reference_bytes_per_second", &nic), 12.5e9);
        assert_eq!(at("gputune_bench_avg_busbw_ratio", &nic), 0.6);
        let size = format!("{base},size=\"1048576\"");
        assert_eq!(
            at("gputune_bench_baseline_busbw_bytes_per_second", &size),
            20e9
        );
        assert_eq!(at("gputune_bench_baseline_passed", &size), 0.0, "12.5 < 18");
        assert!(text.contains("# TYPE gputune_bench_busbw_bytes_per_second gauge"));
        assert!(!text.contains("gbps"), "{text}");
    }
}
