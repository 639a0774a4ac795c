//! `--format prometheus --output FILE`: node_exporter textfile gauges, from a real two-rank
//! TCP `bench allreduce` run and from `audit`, written atomically and named in base units.

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

/// Prometheus' naming rules (and node_exporter's practice): snake_case under the
/// `gputune_` prefix, one base unit spelt out as the last word (`_seconds`, `_bytes`), no
/// scaled units (`_ms`, `_mbps`, `_gbps`, `_kib`), and `_total` only on counters.
fn assert_named_in_base_units(text: &str) {
    let scaled = [
        "_ms",
        "_us",
        "_ns",
        "_minutes",
        "_hours",
        "_kb",
        "_mb",
        "_gb",
        "_kib",
        "_mib",
        "_gib",
        "_mbps",
        "_gbps",
        "_bits",
        "_percent",
        "_celsius_milli",
    ];
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        }
    }
    for key in samples(text).keys() {
        let name = key.split('{').next().unwrap();
        assert!(
            name.starts_with("gputune_")
                && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
        for unit in scaled {
            assert!(
                !name.ends_with(unit) && !name.contains(&format!("{unit}_")),
                "{name} is not in base units"
            );
        }
        let kind = types
            .get(name)
            .unwrap_or_else(|| panic!("{name} has no TYPE"));
        assert_eq!(
            name.ends_with("_total"),
            kind == "counter",
            "{name}: {kind}"
        );
    }
}

#[test]
fn audit_metrics_are_named_in_base_units_and_say_what_was_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gputune.prom");
    let out = gputune()
        .args([
            "audit",
            "--only",
            "network,memory",
            "--skip",
            "vm.swappiness",
        ])
        .args(["--format", "prometheus", "--output"])
        .arg(&file)
        .arg("--root")
        .arg(common::fixture("untuned-node"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out.stderr));
    let text = std::fs::read_to_string(&file).unwrap();
    assert_named_in_base_units(&text);
    let s = samples(&text);
    let status = |id: &str| {
        s[&format!(
            "gputune_check_status{{area=\"{}\",id=\"{id}\",mode=\"live\",profile=\"ddp-25gbe\"}}",
            if id.starts_with("vm.") {
                "memory"
            } else {
                "network"
            }
        )]
    };
    assert_eq!(status("vm.swappiness"), 3.0, "skipped by --skip: {text}");
    assert_eq!(status("net.core.rmem_max"), 2.0);
    assert!(s["gputune_audit_last_run_timestamp_seconds"] > 1.7e9);
}
