//! Every TCP algorithm and collective, end to end (the built binary, real processes, real
//! sockets): exact results for every type and operation with 2, 3 and 4 ranks (a power of
//! two, and the folded non-power of two), at sizes that give one element, empty and uneven
//! blocks.

use crate::common;

use common::*;

/// Runs `collective` for every type and operation with 2, 3 and 4 ranks under each of
/// `algos`, asserts its six rows exact, and passes each document to `check` with its
/// algorithm and the case's name.
fn exact_everywhere(
    collective: &str,
    algos: &[&str],
    check: impl Fn(&serde_json::Value, &str, &str),
) {
    for algo in algos {
        for ranks in [2, 3, 4] {
            for dtype in TYPES {
                for op in OPS {
                    let args = format!("--algo {algo} -d {dtype} -o {op}");
                    let doc = local_json(collective, ranks, &args);
                    let what = format!("{collective} {algo} {ranks} {dtype} {op}");
                    assert_eq!(json_rows_all_right(&doc), 6, "{what}");
                    check(&doc, algo, &what);
                }
            }
        }
    }
}

#[test]
fn every_allreduce_algorithm_is_exact_for_every_type_and_op() {
    let algos = ["rd", "rabenseifner", "ring"];
    exact_everywhere("allreduce", &algos, |doc, algo, what| {
        assert_eq!(doc["settings"]["algo"], algo, "{what}");
        for row in doc["results"].as_array().unwrap() {
            assert_eq!(row["algo"], algo, "{what}");
        }
    });
}

#[test]
fn auto_chooses_by_size() {
    let doc = local_json("allreduce", 2, "-b 16K -e 16M -f 32");
    assert_eq!(
        column(&doc["results"], "algo"),
        ["rd", "rabenseifner", "ring"]
    );
    assert_eq!(json_rows_all_right(&doc), 3);
}

#[test]
fn allgather_reducescatter_and_broadcast_are_exact_for_every_type_and_op() {
    for collective in ["allgather", "reducescatter", "broadcast"] {
        let algos: &[&str] = if collective == "allgather" {
            &["rd", "ring"]
        } else {
            &["auto"]
        };
        exact_everywhere(collective, algos, |doc, _, what| {
            assert_eq!(doc["command"], format!("bench {collective}"), "{what}");
        });
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
        let doc = local_json(collective, 4, "-b 4K -e 4K");
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

halted_rank_tests! {
    // Rank 2 of 3 dies while the others run recursive doubling on 8-byte messages.
    a_killed_rank_stops_a_pairwise_run_naming_it: "-b 8 -e 8 -n 100000000", timeout "5", Kill rank 2, wait 12 s, blaming ["rank 2"], within 8 s;
}

#[test]
fn each_collective_takes_its_own_profile_threshold() {
    let (_dir, profile) = temp_file(
        "fsdp.toml",
        "description = \"test\"\n[bench]\nmin_busbw = 0.0\nallgather_min_busbw = 100000.0\nreducescatter_min_busbw = 0.0\n",
    );
    let run = |collective: &str| {
        bench(&format!(
            "{collective} --backend tcp --ranks 2 -b 8 -e 8 -n 1 --format json --profile"
        ))
        .arg(&profile)
        .output()
        .unwrap()
    };
    let gather = run("allgather");
    assert_exit(&gather, 1, "allgather_min_busbw");
    let doc: serde_json::Value = serde_json::from_slice(&gather.stdout).unwrap();
    assert_eq!(doc["min_busbw"], 100000.0);
    for passing in ["allreduce", "reducescatter"] {
        let out = run(passing);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{passing}: {}",
            text(&out.stderr)
        );
    }
    // No broadcast threshold in the profile: none applies.
    let out = run("broadcast");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc.get("min_busbw").is_none(), "{doc}");
}
