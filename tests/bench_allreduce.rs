//! `gputune bench allreduce` end to end: the built binary, real processes, real sockets.

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Sizes that cover one element, segments left empty by 3 ranks, uneven segments, the
/// single-threaded path and the pipelined path.
const SIZES: &str = "-b 8 -e 400K -f 15";

/// A million 1 MiB AllReduces: far longer than any test.
const BUSY: &str = "-b 1M -e 1M -n 1000000";

#[test]
fn two_and_three_local_ranks_reduce_every_type_and_op_exactly() {
    for ranks in [2, 3] {
        for dtype in TYPES {
            for op in OPS {
                let doc = local_json("allreduce", ranks, &format!("{SIZES} -d {dtype} -o {op}"));
                assert_eq!(json_rows_all_right(&doc), 5, "{ranks} {dtype} {op}");
                assert_eq!(doc["members"].as_array().unwrap().len(), ranks);
                assert_eq!(doc["backend"], "tcp");
                assert_eq!(doc["results"][0]["redop"], op);
                assert_eq!(doc["results"][4]["size"], 405_000);
                assert!(
                    doc["results"][4]["out_of_place"]["bus_bw"]
                        .as_f64()
                        .unwrap()
                        > 0.0
                );
            }
        }
    }
}

#[test]
fn several_slices_over_several_streams_reduce_exactly() {
    // 7 MiB over 3 ranks: segments of 2.33 MiB, three slices each (the last a third of a
    // slice), alternating over 2 connections.
    for (dtype, op) in [("f16", "sum"), ("i32", "max"), ("f32", "avg")] {
        let out = bench(&format!(
            "allreduce --backend tcp --ranks 3 --streams 2 -b 7M -e 7M -n 1 -w 0 -c 1 -d {dtype} -o {op} --format json"
        ))
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
        assert!(out.status.success(), "{dtype} {op}: {}", text(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json_rows_all_right(&doc), 1);
    }
}

#[test]
fn the_table_has_nccl_tests_columns_and_footer() {
    let out = local_tcp(2, "-b 8 -e 64K -f 8 -n 3");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("backend tcp, 2 ranks on 1 host"),
        "{stdout}"
    );
    assert!(stdout.contains("#  Rank  1 Group  0 Pid"), "{stdout}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    let rows = rows(&stdout);
    let sizes: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(sizes, ["8", "64", "512", "4096", "32768"]);
    for r in &rows {
        assert_eq!(r.len(), 13, "{r:?}");
        assert_eq!(
            (r[2].as_str(), r[3].as_str(), r[4].as_str()),
            ("float", "sum", "-1")
        );
        assert_eq!((r[8].as_str(), r[12].as_str()), ("0", "0"));
    }
    let busbw: Vec<f64> = rows
        .iter()
        .flat_map(|r| [r[7].parse::<f64>().unwrap(), r[11].parse().unwrap()])
        .collect();
    let avg_line = stdout
        .lines()
        .find(|l| l.starts_with("# Avg bus bandwidth    : "))
        .unwrap();
    let avg: f64 = avg_line.rsplit(':').next().unwrap().trim().parse().unwrap();
    let mean = busbw.iter().sum::<f64>() / busbw.len() as f64;
    // The table rounds to 0.01; the footer averages the unrounded figures.
    assert!((avg - mean).abs() < 0.01, "{avg} vs {mean}");
}

#[test]
fn plain_torchrun_environment_joins_and_only_rank_0_prints() {
    let args = "-b 8 -e 256K -f 32 -n 2 --timeout 20";
    let (r0, port) = rank_0_of_two(args);
    let r1 = torchrun_rank(1, 2, port, args).spawn().unwrap();
    let (o0, o1) = both_succeed(r0, r1, Duration::from_secs(60), "torchrun");
    assert_eq!(rows(&text(&o0.stdout)).len(), 4);
    assert_eq!(text(&o1.stdout), "");
}

halted_rank_tests! {
    a_killed_rank_stops_the_others_within_the_timeout_naming_it: BUSY, timeout "5", Kill rank 2, wait 12 s, blaming ["rank 2"], within 8 s;
    a_stalled_rank_stops_the_others_within_the_timeout: BUSY, timeout "3", Stall rank 2, wait 15 s, blaming ["rank 2", "rank 1"], within 11 s;
    // --timeout without progress, then a short wait for rank 0's verdict (a quarter of the
    // timeout, at least 1 s), not a fixed 3 s more.
    a_stalled_rank_0_stops_the_others_soon_after_the_timeout: BUSY, timeout "4", Stall rank 0, wait 30 s, blaming ["rank 0"], within 7 s;
}

#[test]
fn garbage_and_oversized_frames_do_not_disturb_the_rendezvous() {
    let args = "-b 8 -e 64K -f 64 -n 2 --timeout 20";
    let (r0, port) = rank_0_of_two(args);
    let connect = || connect_when_listening(port);
    // A silent peer that holds its connection open for the whole run.
    let silent = connect();
    let mut http = connect();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut huge = connect();
    huge.write_all(b"GTB1\xff\xff\xff\xff").unwrap();
    huge.write_all(&[b'A'; 4096]).unwrap();
    let mut junk_json = connect();
    junk_json
        .write_all(b"GTB1\x00\x00\x00\x08{\"a\": 1}")
        .unwrap();
    // A well-formed Hello for rank 1 with a proof made without the token must not take rank
    // 1's place.
    let hello = serde_json::json!({
        "kind": "hello", "nonce": "00".repeat(32), "rank": 1, "world": 2,
        "member": {"rank": 1, "host": "intruder", "pid": 1, "device": "cpu"},
        "data_port": 9, "backend": "tcp",
        "settings": {"min_bytes": 8, "max_bytes": 65536, "step": {"factor": 64}, "iters": 2,
            "warmup": 1, "check": 1, "dtype": "f32", "op": "sum", "backend": "tcp",
            "streams": 1, "sockbuf": 0, "algo": "auto", "collective": "allreduce"}
    });
    let proof = serde_json::json!({"kind": "proof", "proof": "11".repeat(32)});
    let mut intruder = connect();
    intruder.write_all(&frame(&hello)).unwrap();
    intruder.write_all(&frame(&proof)).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let r1 = torchrun_rank(1, 2, port, args).spawn().unwrap();
    let (o0, _) = both_succeed(r0, r1, Duration::from_secs(60), "strangers");
    drop(silent);
    let (stdout, stderr) = (text(&o0.stdout), text(&o0.stderr));
    assert!(!stdout.contains("intruder"), "{stdout}");
    assert_eq!(rows(&stdout).len(), 3);
    assert!(stderr.contains("not a gputune bench frame"), "{stderr}");
    assert!(stderr.contains("over the"), "{stderr}");
    assert!(stderr.contains("wrong job token"), "{stderr}");
}

#[test]
fn a_rank_of_another_job_is_refused() {
    let args = "-b 8 -e 8 -n 1 --timeout 4";
    let (r0, port) = rank_0_of_two(args);
    let r1 = torchrun_rank(1, 2, port, args)
        .env("GPUTUNE_BENCH_TOKEN", "other-job")
        .spawn()
        .unwrap();
    let (o1, _) = wait_within(r1, Duration::from_secs(20), "rank 1");
    let (o0, took) = wait_within(r0, Duration::from_secs(20), "rank 0");
    assert_exit(&o1, 3, "wrong job token");
    assert_exit(&o0, 3, "rank 1 did not join");
    assert!(took < Duration::from_secs(10));
}

/// `gputune bench allreduce --backend tcp --ranks N ARGS...`, bounded to a minute.
fn local_tcp(ranks: usize, args: &str) -> std::process::Output {
    bench(&format!("allreduce --backend tcp --ranks {ranks} {args}"))
        .output()
        .unwrap()
}

#[test]
fn below_the_threshold_exits_1_with_the_figures() {
    let out = local_tcp(2, "-b 8 -e 1K -n 2 --min-busbw 100000");
    assert_exit(&out, 1, "below the minimum 100000 GB/s (--min-busbw)");
    assert!(text(&out.stdout).contains("# Avg bus bandwidth"));

    let ok = local_tcp(2, "-b 8 -e 1K -n 2 --min-busbw 0");
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
}

#[test]
fn a_profile_threshold_applies() {
    let (_dir, profile) = temp_file(
        "strict.toml",
        "description = \"test\"\n[bench]\nmin_busbw = 100000.0\n",
    );
    let out = bench("allreduce --backend tcp --ranks 2 -b 8 -e 8 -n 1 --format json")
        .arg("--profile")
        .arg(&profile)
        .output()
        .unwrap();
    assert_exit(&out, 1, "profile");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["min_busbw"], 100000.0);
}

#[test]
fn json_names_settings_versions_and_hosts_but_not_the_environment() {
    let out = bench("allreduce --backend tcp --ranks 3 -b 8 -e 64 -n 1 --format json")
        .env("SOME_SECRET", "hunter2")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("hunter2"));
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["settings"]["iters"], 1);
    assert_eq!(doc["settings"]["dtype"], "f32");
    assert!(doc["versions"]["gputune"].is_string());
    assert_eq!(doc["hosts"].as_array().unwrap().len(), 1);
    assert_eq!(json_rows_all_right(&doc), 4);
    assert!(doc["average_bus_bandwidth"].is_number());
}

#[test]
fn bad_sizes_are_usage_errors_naming_the_flag() {
    let out = bench("allreduce -b 8X").output().unwrap();
    assert_exit(&out, 2, "-b/--minbytes");
    let out = bench("allreduce --backend tcp")
        .envs([
            ("RANK", "5"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
        ])
        .output()
        .unwrap();
    assert_exit(&out, 2, "RANK=5");
}

/// `gputune bench allreduce ARGS` with the real NCCL library, bounded to a minute.
fn with_real_nccl(args: &str) -> assert_cmd::Command {
    let mut cmd = bench(&format!("allreduce {args}"));
    cmd.env("GPUTUNE_NCCL_LIB", real_nccl());
    cmd
}

#[test]
fn nccl_backend_without_a_gpu_reports_the_version_and_exits_3() {
    let out = with_real_nccl("--backend nccl --ranks 1 -e 8")
        .env_remove("GPUTUNE_CUDA_LIB")
        .output()
        .unwrap();
    assert_exit(&out, 3, "NCCL 2.");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no CUDA driver") || stderr.contains("no GPU"),
        "{stderr}"
    );
    assert!(stderr.contains("--backend tcp"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn nccl_backend_with_a_library_that_is_not_nccl_exits_3() {
    let (_dir, fake) = temp_file("libnccl.so.2", "not a library");
    let out = bench("allreduce --backend nccl --ranks 1")
        .env("GPUTUNE_NCCL_LIB", &fake)
        .output()
        .unwrap();
    assert_exit(&out, 3, "cannot load");
}

#[test]
fn auto_says_why_it_falls_back_to_tcp() {
    let out = with_real_nccl("--ranks 2 -b 8 -e 64 -n 1")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--backend auto: using TCP, not NCCL"),
        "{stderr}"
    );
    assert!(stderr.contains("NCCL 2."), "{stderr}");
    assert_eq!(
        stderr.matches("--backend auto").count(),
        1,
        "only rank 0 says it: {stderr}"
    );
    assert!(text(&out.stdout).contains("backend tcp"));
}

/// Builds tests/fixtures/fake_libcuda.c into `dir/libcuda.so.1` with the system C compiler.
fn fake_libcuda(dir: &std::path::Path) -> std::path::PathBuf {
    let lib = dir.join("libcuda.so.1");
    let src = fixture("fake_libcuda.c");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("no C compiler (cc): run scripts/test, which installs gcc");
    assert!(status.success(), "cc failed on {}", src.display());
    lib
}

#[test]
fn nccl_backend_names_each_driver_answer_and_carries_nccl_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cuda = fake_libcuda(dir.path());
    let cases = [
        (
            "0",
            "no GPU: the CUDA driver found no device (no CUDA-capable device is detected)",
        ),
        (
            "1",
            "no GPU: the CUDA driver found no device (cuDeviceGetCount reports 0 devices)",
        ),
        // The driver "works", so the real non-blocking ncclCommInitRankConfig runs and fails
        // in NCCL's own words (polled through ncclCommGetAsyncError).
        ("2", "ncclCommInitRankConfig failed: unhandled cuda error"),
    ];
    for (mode, want) in cases {
        let out = with_real_nccl("--backend nccl --ranks 1 -e 8 --timeout 30")
            .env("GPUTUNE_CUDA_LIB", &cuda)
            .env("FAKE_CUDA_MODE", mode)
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "mode {mode}: {stderr}");
        assert!(stderr.contains(want), "mode {mode}: {stderr}");
        assert!(!stderr.contains("panicked"), "mode {mode}: {stderr}");
    }
}

#[test]
fn a_rank_started_with_other_settings_stops_the_job() {
    let (r0, port) = rank_0_of_two("-b 8 -e 64 -n 2 --timeout 10");
    let r1 = torchrun_rank(1, 2, port, "-b 8 -e 64 -n 3 --timeout 10")
        .spawn()
        .unwrap();
    let (o0, _) = wait_within(r0, Duration::from_secs(30), "rank 0");
    let (o1, _) = wait_within(r1, Duration::from_secs(30), "rank 1");
    for (name, out) in [("rank 0", o0), ("rank 1", o1)] {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{name}: {stderr}");
        assert!(
            stderr.contains("rank 1 on") && stderr.contains("different settings"),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn slow_drip_connections_do_not_keep_a_real_rank_out() {
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let args = "-b 8 -e 8K -f 32 -n 2 --timeout 30";
    let (r0, port) = rank_0_of_two(args);
    let connect = || connect_when_listening(port);
    // More peers than rank 0 reads at once, each sending a valid header announcing 4 KiB and
    // then one byte a second: never silent for long enough to trip a per-read timeout.
    let mut drips: Vec<TcpStream> = (0..80).map(|_| connect()).collect();
    for s in drips.iter_mut() {
        let _ = s.write_all(b"GTB1\x00\x00\x10\x00");
    }
    let stop = Arc::new(AtomicBool::new(false));
    // Stopped and joined even when the job's assertions fail.
    let dripping = StopOnDrop::new(
        stop.clone(),
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                for s in drips.iter_mut() {
                    let _ = s.write_all(b" ");
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }),
    );
    std::thread::sleep(Duration::from_millis(500));
    let r1 = torchrun_rank(1, 2, port, args).spawn().unwrap();
    assert_passed_despite_a_stranger(r0, r1, Duration::from_secs(90));
    dripping.stop();
}

#[test]
fn a_world_size_over_the_limit_is_a_usage_error_naming_the_variable() {
    let port = free_port();
    for size in ["5000000", "100000000", "1025"] {
        let child = torchrun_rank(0, 2, port, "-b 8 -e 8 -n 1 --timeout 2")
            .env("WORLD_SIZE", size)
            .spawn()
            .unwrap();
        let (out, _) = wait_within(child, Duration::from_secs(30), "rank 0");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{size}: {stderr}");
        assert!(stderr.contains(&format!("WORLD_SIZE={size}")), "{stderr}");
        assert!(stderr.contains("1024"), "{stderr}");
    }
}

#[test]
fn missing_ranks_are_named_as_a_range() {
    let args = "-b 8 -e 8 -n 1 --timeout 1";
    let child = torchrun_rank(0, 1024, free_port(), args).spawn().unwrap();
    let (out, _) = wait_within(child, Duration::from_secs(30), "rank 0");
    assert_exit(&out, 3, "ranks 1-1023 did not join");
}

/// A process of someone else's (a rank the launcher started) sent SIGKILL when dropped, so a
/// failing test does not leave it stopped; its parent reaps it.
struct KillPidOnDrop(Pid);

impl Drop for KillPidOnDrop {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGKILL);
    }
}

#[test]
fn local_ranks_with_a_stalled_one_end_soon_after_the_timeout() {
    let mut parent = KillOnDrop::spawn(
        gputune_process()
            .arg("bench")
            .args(
                format!("allreduce --backend tcp --ranks 3 {BUSY} -w 0 -c 0 --timeout 3")
                    .split_whitespace(),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    read_until(&mut parent, "#wrong", Duration::from_secs(30));
    let me = parent.id();
    let children =
        std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
    let stalled: Vec<i32> = children
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(stalled.len(), 2, "children of {me}: {children:?}");
    let stalled = Pid::from_raw(stalled[1]);
    // Killed (even stopped) should the launcher not end in time; the launcher itself is
    // killed as `parent` drops.
    let stalled_guard = KillPidOnDrop(stalled);
    std::thread::sleep(Duration::from_millis(300));
    assert!(kill(stalled, Signal::SIGSTOP).is_ok());
    let (out, took) = wait_within(parent, Duration::from_secs(40), "the launcher");
    let alive = std::path::Path::new(&format!("/proc/{stalled}")).exists();
    drop(stalled_guard); // SIGKILL
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!alive, "the stalled rank was left running");
    // 3 s without progress, a moment to settle the verdict, then the stalled rank is killed
    // at once instead of after a fixed 5 s.
    assert!(took < Duration::from_secs(8), "took {took:?}");
}
