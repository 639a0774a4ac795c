//! Every TCP algorithm and collective, end to end (the built binary, real processes, real
//! sockets): exact results for every type and operation with 2, 3 and 4 ranks (a power of
//! two, and the folded non-power of two), at sizes that give one element, empty and uneven
//! blocks.

use crate::common;

use std::time::Duration;

use common::*;

const TYPES: [&str; 5] = ["f32", "f16", "bf16", "f64", "i32"];
const OPS: [&str; 5] = ["sum", "prod", "min", "max", "avg"];

#[test]
fn every_allreduce_algorithm_is_exact_for_every_type_and_op() {
    for algo in ["rd", "rabenseifner", "ring"] {
        for ranks in [2, 3, 4] {
            for dtype in TYPES {
                for op in OPS {
                    let doc =
                        local_json("allreduce", ranks, &["--algo", algo, "-d", dtype, "-o", op]);
                    let what = format!("{algo} {ranks} {dtype} {op}");
                    assert_eq!(json_rows_all_right(&doc), 6, "{what}");
                    assert_eq!(doc["settings"]["algo"], algo, "{what}");
                    for row in doc["results"].as_array().unwrap() {
                        assert_eq!(row["algo"], algo, "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn auto_chooses_by_size() {
    let doc = local_json("allreduce", 2, &["-b", "16K", "-e", "16M", "-f", "32"]);
    let algos: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["algo"].as_str().unwrap())
        .collect();
    assert_eq!(algos, ["rd", "rabenseifner", "ring"]);
    assert_eq!(json_rows_all_right(&doc), 3);
}

#[test]
fn allgather_reducescatter_and_broadcast_are_exact_for_every_type_and_op() {
    for collective in ["allgather", "reducescatter", "broadcast"] {
        for ranks in [2, 3, 4] {
            for dtype in TYPES {
                for op in OPS {
                    let algos: &[&str] = if collective == "allgather" {
                        &["rd", "ring"]
                    } else {
                        &["auto"]
                    };
                    for algo in algos {
                        let doc =
                            local_json(collective, ranks, &["--algo", algo, "-d", dtype, "-o", op]);
                        let what = format!("{collective} {algo} {ranks} {dtype} {op}");
                        assert_eq!(json_rows_all_right(&doc), 6, "{what}");
                        assert_eq!(doc["command"], format!("bench {collective}"), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn sizes_counts_and_bus_bandwidth_follow_nccl_tests() {
    // 4 ranks, 4 KiB of f32: AllGather and ReduceScatter pass 256 elements per rank and
    // move 3/4 of the whole per rank; Broadcast passes 1024 from root 0 at busbw = algbw.
    for (collective, count, factor, redop, root) in [
        ("allgather", 256, 0.75, "none", -1),
        ("reducescatter", 256, 0.75, "sum", -1),
        ("broadcast", 1024, 1.0, "none", 0),
        ("allreduce", 1024, 1.5, "sum", -1),
    ] {
        let doc = local_json(collective, 4, &["-b", "4K", "-e", "4K"]);
        let row = &doc["results"][0];
        assert_eq!(row["size"], 4096, "{collective}");
        assert_eq!(row["count"], count, "{collective}");
        assert_eq!(row["redop"], redop, "{collective}");
        assert_eq!(row["root"], root, "{collective}");
        let half = &row["out_of_place"];
        let (alg, bus) = (
            half["alg_bw"].as_f64().unwrap(),
            half["bus_bw"].as_f64().unwrap(),
        );
        assert!(
            (bus - alg * factor).abs() <= 1e-9 * alg.max(1.0),
            "{collective}: {half}"
        );
        let expected_alg = 4096.0 / (half["time"].as_f64().unwrap() * 1e-6) / 1e9;
        assert!(
            (alg - expected_alg).abs() <= 1e-6 * expected_alg,
            "{collective}: {half}"
        );
    }
}

#[test]
fn a_killed_rank_stops_a_pairwise_run_naming_it() {
    // Rank 2 of 3 dies while the others run recursive doubling on 8-byte messages.
    let port = free_port();
    let args = [
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "100000000",
        "-w",
        "0",
        "-c",
        "0",
        "--timeout",
        "5",
    ];
    let mut r0 = torchrun_rank(0, 3, port, &args).spawn().unwrap();
    let r1 = torchrun_rank(1, 3, port, &args).spawn().unwrap();
    let r2 = torchrun_rank(2, 3, port, &args).spawn().unwrap();
    read_until(&mut r0, "#wrong", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    let results = kill_one(
        r2,
        [("rank 0", r0), ("rank 1", r1)],
        Duration::from_secs(12),
    );
    assert_stopped(results, &["rank 2"], Duration::from_secs(8));
}

#[test]
fn each_collective_takes_its_own_profile_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("fsdp.toml");
    std::fs::write(
        &profile,
        "description = \"test\"\n[bench]\nmin_busbw = 0.0\nallgather_min_busbw = 100000.0\nreducescatter_min_busbw = 0.0\n",
    )
    .unwrap();
    let bench = |collective: &str| {
        common::gputune()
            .args(["bench", collective, "--backend", "tcp", "--ranks", "2"])
            .args([
                "-b",
                "8",
                "-e",
                "8",
                "-n",
                "1",
                "--format",
                "json",
                "--profile",
            ])
            .arg(&profile)
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap()
    };
    let gather = bench("allgather");
    assert_eq!(gather.status.code(), Some(1), "{}", text(&gather.stderr));
    assert!(
        text(&gather.stderr).contains("allgather_min_busbw"),
        "{}",
        text(&gather.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&gather.stdout).unwrap();
    assert_eq!(doc["min_busbw"], 100000.0);
    for passing in ["allreduce", "reducescatter"] {
        let out = bench(passing);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{passing}: {}",
            text(&out.stderr)
        );
    }
    // No broadcast threshold in the profile: none applies.
    let out = bench("broadcast");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc.get("min_busbw").is_none(), "{doc}");
}
