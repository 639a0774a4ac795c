//! `bench allreduce --format prometheus --output FILE`: node_exporter textfile gauges from a
//! real two-rank TCP run, written atomically.

use crate::common;

use std::collections::BTreeMap;

use common::gputune;

/// `name{labels} value` lines, keyed by name and labels.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                key.to_string(),
                value.parse().unwrap_or_else(|_| panic!("bad value {l:?}")),
            )
        })
        .collect()
}

#[test]
fn bench_writes_node_exporter_gauges() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gputune_bench.prom");
    let out = gputune()
        .args(["bench", "allreduce", "--backend", "tcp", "--ranks", "2"])
        .args(["-b", "1K", "-e", "4K", "--format", "prometheus", "--output"])
        .arg(&file)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let text = std::fs::read_to_string(&file).unwrap();
    // Nothing but the file: no temp file left beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let s = samples(&text);
    let base = "collective=\"allreduce\",backend=\"tcp\",ranks=\"2\"";
    for size in [1024, 2048, 4096] {
        for placement in ["out_of_place", "in_place"] {
            let labels = format!(
                "{base},size=\"{size}\",type=\"float\",redop=\"sum\",placement=\"{placement}\""
            );
            let busbw = s[&format!("gputune_bench_busbw_bytes_per_second{{{labels}}}")];
            let time = s[&format!("gputune_bench_time_seconds{{{labels}}}")];
            assert!(busbw > 0.0 && time > 0.0, "{text}");
        }
    }
    assert!(s[&format!("gputune_bench_avg_busbw_bytes_per_second{{{base}}}")] > 0.0);
    assert_eq!(s[&format!("gputune_bench_passed{{{base}}}")], 1.0);
    assert_eq!(s[&format!("gputune_bench_wrong_elements{{{base}}}")], 0.0);
    assert!(text.contains("# TYPE gputune_bench_busbw_bytes_per_second gauge"));

    // An impossible threshold: exit 1, and the gauge says failed.
    let out = gputune()
        .args(["bench", "allreduce", "--backend", "tcp", "--ranks", "2"])
        .args([
            "-b",
            "1K",
            "-e",
            "1K",
            "--min-busbw",
            "100000",
            "--format",
            "prometheus",
            "--output",
        ])
        .arg(&file)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let s = samples(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(s[&format!("gputune_bench_passed{{{base}}}")], 0.0);
    assert_eq!(
        s[&format!("gputune_bench_min_busbw_bytes_per_second{{{base}}}")],
        100000.0e9
    );
}
