//! A benchmark as node_exporter textfile gauges (`bench ... --format prometheus --output
//! FILE`, written atomically like audit's): bus and algorithm bandwidth and time per size and
//! placement, the average, wrong elements and pass/fail, so a dashboard tracks each node's
//! fabric between health checks. No sample timestamps; the run time is its own gauge.

use std::fmt::Write as _;

use super::output::RunInfo;
use super::stats::{Row, average_busbw, total_wrong};
use crate::report::prometheus::label;

/// The rendered text; `collective` names the benchmark (`allreduce`).
pub fn render(
    collective: &str,
    info: &RunInfo,
    rows: &[Row],
    min_busbw: Option<f64>,
    passed: bool,
) -> String {
    let base = format!(
        "collective=\"{}\",backend=\"{}\",ranks=\"{}\"",
        label(collective),
        label(&info.backend),
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
        "gputune_bench_busbw_gbps",
        "Bus bandwidth per size, nccl-tests' definition, in GB/s (1e9 bytes/s).",
        &per_size(|h| h.bus_bw),
    );
    gauge(
        "gputune_bench_algbw_gbps",
        "Algorithm bandwidth (size / time) per size, in GB/s.",
        &per_size(|h| h.alg_bw),
    );
    gauge(
        "gputune_bench_time_seconds",
        "Time per operation per size, averaged across ranks.",
        &per_size(|h| h.time * 1e-6),
    );
    gauge(
        "gputune_bench_avg_busbw_gbps",
        "Mean of every bus bandwidth of the run (nccl-tests' Avg bus bandwidth).",
        &[(base.clone(), average_busbw(rows))],
    );
    gauge(
        "gputune_bench_wrong_elements",
        "Wrong elements in the checked results, summed across ranks.",
        &[(base.clone(), total_wrong(rows) as f64)],
    );
    if let Some(min) = min_busbw {
        gauge(
            "gputune_bench_min_busbw_gbps",
            "The threshold the average was judged against.",
            &[(base.clone(), min)],
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
