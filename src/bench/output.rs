//! The two renderings of a run: nccl-tests' table (so results paste next to
//! `all_reduce_perf` output) and one JSON document with nccl-tests' `-J` field names, the
//! settings, versions and hosts (never the environment: it may hold secrets).

use serde::Serialize;

use super::Settings;
use super::stats::{Half, Row, average_busbw, total_wrong};

/// One rank of the job as the header lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Member {
    pub rank: usize,
    pub host: String,
    pub pid: u32,
    /// What the rank measures with: a GPU's name, or `cpu`.
    pub device: String,
}

/// Everything a rendering needs besides the rows.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub backend: String,
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
    if info.backend == "tcp" {
        use super::collective::Collective;
        let algo = match (s.sweep.collective, s.algo) {
            (Collective::AllReduce, super::Algo::Auto) => format!(
                "auto (rd up to {} B, rabenseifner below {} B, ring from there)",
                super::Algo::RD_MAX,
                super::Algo::RABENSEIFNER_MAX
            ),
            (Collective::AllGather, super::Algo::Auto) => format!(
                "auto (rd up to {} B with a power-of-two rank count, ring otherwise)",
                super::Algo::RD_MAX
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

/// The closing lines.
pub fn table_footer(rows: &[Row]) -> String {
    format!(
        "# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:.6}\n#\n",
        total_wrong(rows),
        if total_wrong(rows) == 0 {
            "OK"
        } else {
            "FAILED"
        },
        average_busbw(rows)
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
    #[serde(skip_serializing_if = "Option::is_none")]
    min_busbw: Option<f64>,
}

/// The JSON document (one object, a trailing newline).
pub fn json(info: &RunInfo, rows: &[Row], min_busbw: Option<f64>) -> String {
    let command = format!("bench {}", info.settings.sweep.collective.name());
    let doc = Document {
        schema_version: 1,
        command: &command,
        info,
        hosts: info.hosts(),
        results: rows,
        average_bus_bandwidth: average_busbw(rows),
        out_of_bounds_values: total_wrong(rows),
        min_busbw,
    };
    let mut text =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::data::{DType, Op};
    use crate::bench::harness::Sweep;
    use crate::bench::size::SizeStep;

    fn info() -> RunInfo {
        RunInfo {
            backend: "tcp".into(),
            settings: Settings {
                sweep: Sweep {
                    collective: crate::bench::collective::Collective::AllReduce,
                    min_bytes: 8,
                    max_bytes: 16,
                    step: SizeStep::Factor(2),
                    dtype: DType::F32,
                    op: Op::Sum,
                    iters: 20,
                    warmup: 1,
                    check: 1,
                },
                backend: "tcp".into(),
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

    #[test]
    fn footer_and_json_carry_the_average() {
        let rows = [row(8, Some(0)), row(16, Some(0))];
        let f = table_footer(&rows);
        assert!(f.contains("# Out of bounds values : 0 OK"));
        assert!(f.contains("# Avg bus bandwidth    : 1.000000"), "{f}");
        let doc: serde_json::Value =
            serde_json::from_str(&json(&info(), &rows, Some(2.0))).unwrap();
        assert_eq!(doc["average_bus_bandwidth"], 1.0);
        assert_eq!(doc["results"][1]["size"], 16);
        assert_eq!(doc["results"][1]["in_place"]["bus_bw"], 1.5);
        assert_eq!(doc["results"][0]["out_of_place"]["nwrong"], 0);
        assert_eq!(doc["results"][0]["redop"], "sum");
        assert_eq!(doc["results"][0]["root"], -1);
        assert_eq!(doc["hosts"], serde_json::json!(["a", "b"]));
        assert_eq!(doc["settings"]["iters"], 20);
        assert_eq!(doc["min_busbw"], 2.0);
        assert!(doc.get("env").is_none());
    }
}
