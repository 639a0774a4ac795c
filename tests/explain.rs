//! `gputune explain` through the built binary, on real logs: every log under
//! tests/fixtures/explain/ comes from a public issue thread (its `.toml` names the thread and
//! the cause the thread established) or was made here with the real libnccl.so.2.

use std::collections::{BTreeMap, BTreeSet};

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use serde_json::Value;

use crate::common::{self, gputune, text};

/// Categories whose causes are user code, the launcher or a library: never node config.
const NOT_NODE: &[&str] = &[
    "user_code_mismatched_collectives",
    "user_code_device_mapping",
    "launcher_misconfig",
    "library_bug",
    "straggler_or_dead_rank_timeout",
    "container_networking",
    "gpu_oom_during_init",
];

/// A held-out set: logs collected after the rules were written and run blind first, so
/// their result is measured, not fitted. Its figures are the ones measured now (README.md in
/// the fixtures): a change to the rules may raise the right answers and lower the wrong
/// guesses, never the reverse.
struct HeldOutSet {
    name: &'static str,
    /// Its logs with an established cause.
    judged: usize,
    /// How many of those get their cause as the first problem.
    right_floor: usize,
    /// Wrong first problems, counting a problem found in a log where nothing is wrong.
    wrong_ceiling: usize,
}

/// The second and third sets (a `blind` field), the fourth (`blind` and `collected`, the
/// helper who collected it), the fifth to the twelfth (those and `heldout_set = 5` to `12`);
/// the first set's 7 logs are held to the fitted logs' standard.
const HELD_OUT: [HeldOutSet; 10] = [
    HeldOutSet {
        name: "second and third",
        judged: 53,
        right_floor: 37,
        wrong_ceiling: 4,
    },
    HeldOutSet {
        name: "fourth",
        judged: 52,
        right_floor: 39,
        wrong_ceiling: 6,
    },
    HeldOutSet {
        name: "fifth",
        judged: 12,
        right_floor: 5,
        wrong_ceiling: 0,
    },
    HeldOutSet {
        name: "sixth",
        judged: 53,
        right_floor: 30,
        wrong_ceiling: 2,
    },
    HeldOutSet {
        name: "seventh",
        judged: 28,
        right_floor: 18,
        wrong_ceiling: 3,
    },
    HeldOutSet {
        name: "eighth",
        judged: 41,
        right_floor: 25,
        wrong_ceiling: 4,
    },
    HeldOutSet {
        name: "ninth",
        judged: 30,
        right_floor: 23,
        wrong_ceiling: 1,
    },
    HeldOutSet {
        name: "tenth",
        judged: 38,
        right_floor: 19,
        wrong_ceiling: 8,
    },
    HeldOutSet {
        name: "eleventh",
        judged: 21,
        right_floor: 13,
        wrong_ceiling: 4,
    },
    HeldOutSet {
        name: "twelfth",
        judged: 17,
        right_floor: 9,
        wrong_ceiling: 3,
    },
];

struct Fixture {
    name: String,
    log: PathBuf,
    category: String,
    /// Categories the log may show besides its cause (a symptom of it).
    also: Vec<String>,
    /// The held-out set (index into `HELD_OUT`) whose `blind` field says how the log's blind
    /// run went; its result is measured, not fitted, so a wrong first category is counted
    /// rather than forbidden.
    held_out: Option<usize>,
}

fn fixtures() -> Vec<Fixture> {
    let dir = common::fixture("explain");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        let meta: toml::Value =
            toml::from_str(&std::fs::read_to_string(path.with_extension("toml")).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            meta.get("url").is_some() || meta.get("made_here").is_some(),
            "{} names neither its thread nor how it was made",
            path.display()
        );
        assert!(meta.get("established").is_some(), "{}", path.display());
        out.push(Fixture {
            name: path.file_stem().unwrap().to_string_lossy().into_owned(),
            log: path.clone(),
            category: meta["category"].as_str().unwrap().to_string(),
            also: meta
                .get("also")
                .and_then(|a| a.as_array())
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default(),
            held_out: match (meta.get("blind"), meta.get("collected")) {
                (Some(_), Some(_)) if meta.get("heldout_set").is_some() => {
                    match meta["heldout_set"].as_integer() {
                        Some(5) => Some(2),
                        Some(6) => Some(3),
                        Some(7) => Some(4),
                        Some(8) => Some(5),
                        Some(9) => Some(6),
                        Some(10) => Some(7),
                        Some(11) => Some(8),
                        Some(12) => Some(9),
                        other => panic!("{}: heldout_set {other:?}", path.display()),
                    }
                }
                (Some(_), Some(_)) => Some(1),
                (Some(_), None) => Some(0),
                (None, Some(_)) => panic!("{}: collected but never run blind", path.display()),
                (None, None) => None,
            },
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn explain_json(log: &Path) -> (Option<i32>, Value) {
    let out = gputune()
        .args(["explain", "--format", "json"])
        .arg(log)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", log.display(), text(&out.stderr)));
    (out.status.code(), doc)
}

#[test]
fn real_logs_get_the_cause_their_thread_established() {
    let fixtures = fixtures();
    let from_threads = fixtures
        .iter()
        .filter(|f| !f.name.starts_with("here-"))
        .count();
    assert!(from_threads >= 35, "only {from_threads} logs from threads");
    let mut misses = Vec::new();
    let mut fired: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Logs given possible causes, and of those, how many list the cause the thread settled.
    let (mut possible_logs, mut possible_right) = (0u32, 0u32);
    let mut blind_right = [0usize; HELD_OUT.len()];
    let mut blind_judged = [0usize; HELD_OUT.len()];
    let mut blind_silent = [0u32; HELD_OUT.len()];
    let mut blind_wrong: [Vec<String>; HELD_OUT.len()] = Default::default();
    for f in &fixtures {
        let (code, doc) = explain_json(&f.log);
        let problems = doc["problems"].as_array().unwrap();
        let candidates = doc["candidates"].as_array().unwrap();
        for p in problems {
            let category = p["category"].as_str().unwrap();
            assert!(
                f.held_out.is_some()
                    || category == f.category
                    || f.also.iter().any(|a| a == category),
                "{}: {category} is neither its cause {} nor an expected symptom {:?}",
                f.name,
                f.category,
                f.also
            );
            for e in p["evidence"].as_array().unwrap() {
                assert!(e["line"].as_u64().unwrap() >= 1, "{}", f.name);
            }
        }
        // Problems and possible causes alike: the rule fired, and user code, launcher
        // mistakes and library bugs are never node configuration.
        for p in problems.iter().chain(candidates) {
            fired
                .entry(p["rule"].as_str().unwrap().to_string())
                .or_default()
                .insert(f.name.clone());
            let category = p["category"].as_str().unwrap();
            if NOT_NODE.contains(&category) {
                assert_eq!(p["node_config"], false, "{}: {category}", f.name);
            }
        }
        // Possible causes: only where no problem is named and a line is not understood.
        if !candidates.is_empty() {
            assert!(problems.is_empty(), "{}", f.name);
            assert!(doc["not_understood_total"].as_u64() > Some(0), "{}", f.name);
            possible_logs += 1;
            if candidates
                .iter()
                .any(|c| c["category"] == f.category.as_str())
            {
                possible_right += 1;
            }
        }
        let first = problems.first().map(|p| p["category"].as_str().unwrap());
        if let Some(set) = f.held_out {
            if f.category == "none" {
                // A problem where the thread found nothing wrong is a wrong guess too.
                match first {
                    Some(c) => {
                        blind_wrong[set].push(format!("{}: {c} where nothing is wrong", f.name))
                    }
                    // Lines it does not understand (exit 1) are no guess either: nccl-259's
                    // `Failed to open libibverbs.so` is harmless on one node only.
                    None => assert!(matches!(code, Some(0) | Some(1)), "{}", f.name),
                }
                continue;
            }
            blind_judged[set] += 1;
            match first {
                Some(c) if c == f.category => blind_right[set] += 1,
                // A held-out log may show no error line at all (a hang, a slow run): then
                // explain finds nothing, which is counted as a miss, never a guess.
                None => blind_silent[set] += u32::from(code == Some(0)),
                Some(c) => {
                    blind_wrong[set].push(format!("{}: {c} instead of {}", f.name, f.category))
                }
            }
            continue;
        }
        if f.category == "none" {
            assert!(problems.is_empty(), "{}: {problems:?}", f.name);
            assert_eq!(code, Some(0), "{}", f.name);
            continue;
        }
        // Something failed in every thread's log: never "nothing wrong".
        assert_eq!(code, Some(1), "{}", f.name);
        match first {
            Some(c) if c == f.category => {}
            // No rule explains it: the lines are shown as not understood, no guess is made.
            None => {
                assert!(
                    doc["not_understood_total"].as_u64().unwrap() > 0,
                    "{}",
                    f.name
                );
                misses.push(format!(
                    "{}: not understood instead of {}",
                    f.name, f.category
                ));
            }
            Some(c) => panic!(
                "{}: guessed {c}, the thread established {}",
                f.name, f.category
            ),
        }
    }
    let judged = fixtures
        .iter()
        .filter(|f| f.category != "none" && f.held_out.is_none())
        .count();
    let rate = (judged - misses.len()) as f64 / judged as f64;
    println!(
        "first problem's category = established cause: {}/{judged} ({:.0}%); not understood: {misses:#?}",
        judged - misses.len(),
        100.0 * rate
    );
    println!(
        "possible causes listed for {possible_logs} logs; the settled cause among them in {possible_right}"
    );
    // Issue 23: at least 75%, aim for 90%.
    assert!(rate >= 0.9, "{misses:#?}");
    // The held-out sets (tests/fixtures/explain/README.md has their blind figures): what the
    // rules get right on logs they were not written from may not fall below what it is now,
    // nor may they guess wrong more often, set by set.
    for (i, set) in HELD_OUT.iter().enumerate() {
        let (right, judged, wrong) = (blind_right[i], blind_judged[i], &blind_wrong[i]);
        println!(
            "{} held-out set: {right}/{judged} ({:.0}%) right, {} with no error line found; wrong: {wrong:#?}",
            set.name,
            100.0 * right as f64 / judged.max(1) as f64,
            blind_silent[i]
        );
        assert_eq!(judged, set.judged, "{} held-out set", set.name);
        assert!(right >= set.right_floor, "{}: {right}/{judged}", set.name);
        assert!(wrong.len() <= set.wrong_ceiling, "{}: {wrong:#?}", set.name);
    }
    // Every shipped rule is backed by at least one real log that triggers it.
    let rules = gputune::explain::rules::builtin().unwrap();
    let unfired: Vec<&str> = rules
        .rules
        .iter()
        .map(|r| r.id.as_str())
        .filter(|id| !fired.contains_key(*id))
        .collect();
    let symptoms = common::fixture("explain/symptoms");
    let mut unfired: Vec<&str> = unfired;
    for entry in std::fs::read_dir(&symptoms).unwrap() {
        let log = entry.unwrap().path();
        if log.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        let meta: toml::Value =
            toml::from_str(&std::fs::read_to_string(log.with_extension("toml")).unwrap()).unwrap();
        assert!(meta.get("url").is_some(), "{}", log.display());
        let rule = meta["rule"].as_str().unwrap();
        let (code, doc) = explain_json(&log);
        assert_eq!(code, Some(1), "{}", log.display());
        let rules: Vec<&str> = doc["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["rule"].as_str().unwrap())
            .collect();
        if meta.get("symptom").and_then(|s| s.as_bool()) == Some(true) {
            // An echo alone explains nothing: its lines are listed as not understood.
            assert!(rules.is_empty(), "{}: {rules:?}", log.display());
            assert!(
                doc["not_understood_total"].as_u64() > Some(0),
                "{}",
                log.display()
            );
            continue;
        }
        assert!(rules.contains(&rule), "{}: {rules:?}", log.display());
        unfired.retain(|r| *r != rule);
    }
    assert!(
        unfired.is_empty(),
        "rules no real log triggers: {unfired:?}"
    );
}

/// The log as standard input, named `-` or not named at all.
fn explain_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    gputune()
        .arg("explain")
        .args(args)
        .write_stdin(input.to_vec())
        .output()
        .unwrap()
}

#[test]
fn reads_standard_input_and_says_what_nccl_did() {
    let log = std::fs::read(common::fixture("explain/tinygrad-kernel-modules-45.log")).unwrap();
    for args in [&["-"][..], &[][..]] {
        let out = explain_stdin(args, &log);
        assert_eq!(out.status.code(), Some(1));
        let shown = text(&out.stdout);
        assert!(shown.contains("What NCCL did"), "{shown}");
        assert!(
            shown.contains("2.26.5 on i-56butc28zq2jtjaluzq7va7p6"),
            "{shown}"
        );
        assert!(shown.contains("mlx5_bond_0:1/RoCE"), "{shown}");
        assert!(shown.contains("NVIDIA GeForce RTX 4090"), "{shown}");
        assert!(shown.contains("1. consumer_gpu_p2p_broken"), "{shown}");
    }
    let out = explain_stdin(&["--format", "json"], b"all good\nstep 1 loss 0.5\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["problems"], serde_json::json!([]));
    assert_eq!(doc["not_understood"], serde_json::json!([]));
    assert!(
        doc["summary"]
            .as_str()
            .unwrap()
            .starts_with("no known problem")
    );
}

#[test]
fn a_failure_without_nccl_messages_asks_for_them_instead_of_guessing() {
    // A bare `unhandled cuda error` has no usual cause in the threads: no guess.
    let log = std::fs::read(common::fixture("explain/vllm-7896.log")).unwrap();
    let out = explain_stdin(&[], &log);
    assert_eq!(out.status.code(), Some(1));
    let shown = text(&out.stdout);
    assert!(shown.contains("No rule explains this log."), "{shown}");
    assert!(
        shown.contains("run the job again with NCCL_DEBUG=INFO"),
        "{shown}"
    );
    assert!(
        shown.contains("line 1: RuntimeError: NCCL error"),
        "{shown}"
    );
    // A bare `unhandled system error` has one (a container's small /dev/shm), named as the
    // usual cause, with the advice to run again with NCCL_DEBUG=INFO in its fix.
    let log = std::fs::read(common::fixture("explain/dekr-18.log")).unwrap();
    let out = explain_stdin(&["--format", "json"], &log);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["problems"][0]["rule"], "bare-system-error", "{doc}");
    assert!(
        doc["problems"][0]["fix"]
            .as_str()
            .unwrap()
            .contains("NCCL_DEBUG=INFO"),
        "{doc}"
    );
}

/// A log that stops without an error line: how far each process got through NCCL's init,
/// and where a hang would have been (nccl#447: two nodes that never finished set-up).
#[test]
fn a_log_that_stops_says_how_far_init_got() {
    let out = gputune()
        .arg("explain")
        .arg(common::fixture("explain/nccl-447.log"))
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(
        shown.contains("  Init:        init complete on 0 of 2 processes; furthest behind: slurm-train-compute-0-1:2119 at \"network chosen\" (its last NCCL line: 11)"),
        "{shown}"
    );
    assert!(
        shown.contains("No known problem found.\nNCCL never reported init complete for 2 of 2 processes: if the job hung, it hung at \"network chosen\"; look at bootstrap"),
        "{shown}"
    );
    let (_, doc) = explain_json(&common::fixture("explain/vllm-9920.log"));
    let init = &doc["nccl"]["init"];
    assert_eq!(
        (init["processes"].as_u64(), init["complete"].as_u64()),
        (Some(2), Some(1)),
        "{init}"
    );
    assert_eq!(init["stalled"][0]["step"], "connected", "{init}");
}

#[test]
fn slowdowns_are_flagged_from_what_nccl_printed() {
    let log = "a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n\
               a:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n\
               a:1:1 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>\n\
               b:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] [send] via NET/Socket/0\n";
    let out = explain_stdin(&["--format", "json"], log.as_bytes());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let slow: Vec<(u64, String)> = doc["nccl"]["slowdowns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["line"].as_u64().unwrap(),
                s["what"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(slow.len(), 3, "{slow:?}");
    assert!(
        slow[0].1.starts_with("NCCL_IB_DISABLE=1") && slow[0].0 == 1,
        "{slow:?}"
    );
    assert!(
        slow[1].1.starts_with("NCCL_P2P_DISABLE=1") && slow[1].0 == 2,
        "{slow:?}"
    );
    assert!(
        slow[2].1.contains("bridge or veth") && slow[2].0 == 3,
        "{slow:?}"
    );
    assert_eq!(doc["problems"][0]["category"], "wrong_socket_interface");
}

#[test]
fn unreadable_input_is_exit_3_and_bad_flags_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = gputune()
        .arg("explain")
        .arg(dir.path().join("missing.log"))
        .output()
        .unwrap();
    common::assert_exit(&out, 3, "cannot read");
    let out = gputune().arg("explain").arg(dir.path()).output().unwrap();
    common::assert_exit(&out, 3, "is a directory");
    let out = gputune()
        .args(["explain", "--format", "yaml", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A root whose /dev/shm is `size` (a copy of the node fixture, /proc/mounts edited).
fn root_with_shm(size: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(common::fixture("node").join("."))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let mounts = dir.path().join("proc/mounts");
    let text = std::fs::read_to_string(&mounts).unwrap();
    assert!(text.contains("size=65536k"), "{text}");
    std::fs::write(&mounts, text.replace("size=65536k", size)).unwrap();
    dir
}

/// `gputune explain --check --root ROOT LOG`, as JSON or as text.
fn explain_check(root: &Path, log: &Path, json: bool) -> std::process::Output {
    let mut cmd = gputune();
    cmd.args(["explain", "--check"]);
    if json {
        cmd.args(["--format", "json"]);
    }
    cmd.arg("--root").arg(root).arg(log).output().unwrap()
}

#[test]
fn possible_causes_are_judged_on_the_node_without_becoming_problems() {
    // A site's candidate (the same format as the shipped ones) checked by /dev/shm's size.
    let log = "worker 3: fatal: the frobnicator wrapped a failure\n";
    for (size, verdict) in [("size=65536k", "confirmed"), ("size=8g", "refuted")] {
        let root = root_with_shm(size);
        let site = root.path().join("etc/gputune/explain");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::write(
            site.join("site.toml"),
            r#"
[[rule]]
id = "frobnicator-shm"
category = "shm_too_small"
node_config = true
priority = 40
candidate = true
any = ["the frobnicator wrapped a failure"]
cause = "One of the causes of the frobnicator's wrapper: /dev/shm too small."
fix = "Mount a larger /dev/shm."
checks = ["dev_shm.size"]

[[rule]]
id = "frobnicator-launcher"
category = "launcher_misconfig"
node_config = false
priority = 10
candidate = true
any = ["the frobnicator wrapped a failure"]
cause = "Another cause of the frobnicator's wrapper: the launcher."
fix = "Start it with the launcher."
"#,
        )
        .unwrap();
        let path = root.path().join("job.log");
        std::fs::write(&path, log).unwrap();
        let out = explain_check(root.path(), &path, true);
        // Still no problem named, and the line still not understood: exit 1, no guess.
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["problems"], serde_json::json!([]));
        assert_eq!(doc["not_understood_total"], 1);
        let candidate = &doc["candidates"][0];
        assert_eq!(candidate["rule"], "frobnicator-shm");
        assert_eq!(candidate["check"]["verdict"], verdict, "{candidate}");
        let launcher = &doc["candidates"][1];
        assert_eq!(launcher["check"]["verdict"], "unknown", "{launcher}");
        let shown = explain_check(root.path(), &path, false);
        let shown = text(&shown.stdout);
        assert!(shown.contains("Possible causes"), "{shown}");
        assert!(
            shown.contains(&format!("Here:     {verdict}: dev_shm.size is")),
            "{shown}"
        );
        assert!(
            shown.contains("Here:     unknown: no node check applies"),
            "{shown}"
        );
    }
}

#[test]
fn check_confirms_or_refutes_each_problem_on_the_node() {
    let log = common::fixture("explain/nccl-342.log");
    for (size, verdict) in [("size=65536k", "confirmed"), ("size=8g", "refuted")] {
        let root = root_with_shm(size);
        let out = explain_check(root.path(), &log, true);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let check = &doc["problems"][0]["check"];
        assert_eq!(check["verdict"], verdict, "{check}");
        let size = check["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "dev_shm.size")
            .unwrap();
        assert_eq!(
            size["status"],
            if verdict == "confirmed" {
                "fail"
            } else {
                "pass"
            }
        );
        let shown = explain_check(root.path(), &log, false);
        assert!(
            text(&shown.stdout).contains(&format!("Here:     {verdict}: dev_shm.size is")),
            "{}",
            text(&shown.stdout)
        );
    }
    // User code has no node check: unknown, never a guess.
    let root = root_with_shm("size=8g");
    let out = explain_check(
        root.path(),
        &common::fixture("explain/lightning-4420.log"),
        true,
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["problems"][0]["check"]["verdict"], "unknown");
    assert_eq!(doc["problems"][0]["node_config"], false);
}

/// `--check` weighs what NCCL chose against what the node offers: TCP sockets beside an
/// active InfiniBand port, GPUDirect RDMA off with nvidia_peermem loaded (nccl#1676: an NCCL
/// that looked for the old module name only).
#[test]
fn check_flags_what_nccl_left_unused_on_the_node() {
    let root = root_with_shm("size=8g");
    let port = root.path().join("sys/class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(&port).unwrap();
    for (file, value) in [
        ("state", "4: ACTIVE"),
        ("phys_state", "5: LinkUp"),
        ("link_layer", "InfiniBand"),
        ("rate", "200 Gb/sec (4X HDR)"),
    ] {
        std::fs::write(port.join(file), format!("{value}\n")).unwrap();
    }
    let slowdowns = |log: &str, check: bool| -> Vec<String> {
        let mut cmd = gputune();
        cmd.args(["explain", "--format", "json", "--root"])
            .arg(root.path());
        if check {
            cmd.arg("--check");
        }
        let out = cmd.arg(common::fixture(log)).output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["nccl"]["slowdowns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!("{}: {}", s["line"], s["what"].as_str().unwrap()))
            .collect()
    };
    let socket = "6: NCCL uses TCP sockets (NET/Socket) although this node has active RDMA ports: mlx5_0 port 1 (InfiniBand)";
    assert!(
        slowdowns("explain/pytorch-68893.log", true).contains(&socket.to_string()),
        "{:?}",
        slowdowns("explain/pytorch-68893.log", true)
    );
    assert!(!slowdowns("explain/pytorch-68893.log", false).contains(&socket.to_string()));
    let peermem = |shown: &[String]| {
        shown
            .iter()
            .any(|s| s.contains("although nvidia_peermem is loaded"))
    };
    assert!(
        !peermem(&slowdowns("explain/nccl-1676.log", true)),
        "not loaded yet"
    );
    std::fs::create_dir_all(root.path().join("sys/module/nvidia_peermem")).unwrap();
    let shown = slowdowns("explain/nccl-1676.log", true);
    assert!(
        shown.iter().any(|s| s.starts_with(
            "1: GPUDirect RDMA is off although nvidia_peermem is loaded on this node"
        )),
        "{shown:?}"
    );
    assert!(!peermem(&slowdowns("explain/nccl-1676.log", false)));
}

#[test]
fn site_rules_add_and_override_and_bad_ones_are_exit_2_with_file_and_line() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("etc/gputune/explain");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("site.toml"),
        "[[rule]]\nid = \"our-switch\"\ncategory = \"ib_port_or_gid_misconfig\"\nnode_config = true\npriority = 99\nany = [\"Frobnicator exploded\"]\ncause = \"Our leaf switch drops RoCE.\"\nfix = \"Page the network team.\"\n",
    )
    .unwrap();
    let out = gputune()
        .args(["explain", "--format", "json", "--root"])
        .arg(root.path())
        .write_stdin("h:1:1 [0] x.cc:1 NCCL WARN Frobnicator exploded\n")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["problems"][0]["rule"], "our-switch", "{doc}");
    assert_eq!(doc["problems"][0]["cause"], "Our leaf switch drops RoCE.");
    // A site rule's `unless` reaches `unless_within` lines of the same rank, no further.
    std::fs::write(
        dir.join("site.toml"),
        "[[rule]]\nid = \"our-switch\"\ncategory = \"ib_port_or_gid_misconfig\"\nnode_config = true\npriority = 99\nany = [\"Frobnicator exploded\"]\nunless = [\"Frobnicator drill\"]\nunless_within = 2\ncause = \"Our leaf switch drops RoCE.\"\nfix = \"Page the network team.\"\n",
    )
    .unwrap();
    for (log, rules) in [
        (
            "h:1:1 [0] NCCL WARN Frobnicator drill\nh:1:1 [0] NCCL WARN Frobnicator exploded\n",
            vec![],
        ),
        (
            "h:1:1 [0] NCCL WARN Frobnicator drill\nh:2:2 [0] NCCL WARN Frobnicator exploded\n",
            vec!["our-switch"],
        ),
        (
            "h:1:1 [0] NCCL WARN Frobnicator drill\n\n\nh:1:1 [0] NCCL WARN Frobnicator exploded\n",
            vec!["our-switch"],
        ),
    ] {
        let out = gputune()
            .args(["explain", "--format", "json", "--root"])
            .arg(root.path())
            .write_stdin(log)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let fired: Vec<&str> = doc["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["rule"].as_str().unwrap())
            .collect();
        assert_eq!(fired, rules, "{log:?}: {doc}");
    }
    std::fs::write(
        dir.join("zz-bad.toml"),
        "[[rule]]\nid = \"x\"\ncategory = \"slow_network\"\nnode_config = true\nany = [\"a\"]\ncause = \"c\"\nfix = \"f\"\n",
    )
    .unwrap();
    let out = gputune()
        .args(["explain", "--root"])
        .arg(root.path())
        .write_stdin("x\n")
        .output()
        .unwrap();
    common::assert_exit(
        &out,
        2,
        "zz-bad.toml:1: rule \"x\": category \"slow_network\" is not one of",
    );
}

#[test]
fn hostile_logs_never_reach_the_terminal_raw_nor_hang() {
    let mut log = Vec::new();
    log.extend_from_slice(
        b"h:1:1 [0] shm.cc:1 NCCL WARN failed to extend /dev/shm/x \x1b]0;owned\x07\x1b[2J\r\n",
    );
    log.extend_from_slice(&[0xff, 0xfe, 0x00, b'\n']);
    log.extend(std::iter::repeat_n(b'A', 5 << 20));
    log.extend_from_slice(b"\nh:1:1 [0] NCCL WARN Frobnicator \x1b[31mred\x1b[0m\n");
    let start = std::time::Instant::now();
    for format in ["text", "json"] {
        let out = explain_stdin(&["--format", format], &log);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            !out.stdout
                .iter()
                .any(|&b| b == 0x1b || b == 0x07 || b == 0 || b == b'\r'),
            "{format}: a control character reached the output"
        );
    }
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
}

#[test]
fn a_log_made_here_with_the_real_libnccl_is_explained() {
    let venv = std::env::var("GPUTUNE_TEST_NCCL_VENV")
        .expect("GPUTUNE_TEST_NCCL_VENV is not set: run scripts/test, which installs nvidia-nccl-cu12 in a venv");
    let python = PathBuf::from(venv).join("bin/python3");
    for (env, value, category) in [
        ("NCCL_SOCKET_IFNAME", "nosuchif0", "wrong_socket_interface"),
        (
            "NCCL_COMM_ID",
            "nosuchhost.invalid:29500",
            "hostname_resolution",
        ),
    ] {
        let out = std::process::Command::new(&python)
            .arg(common::fixture("explain/make_here.py"))
            .env("NCCL_LIB", common::real_nccl())
            .env("NCCL_DEBUG", "INFO")
            .env(env, value)
            .output()
            .unwrap();
        let mut log = out.stdout.clone();
        log.extend_from_slice(&out.stderr);
        assert!(text(&log).contains("NCCL WARN"), "{}", text(&log));
        let out = explain_stdin(&["--format", "json"], &log);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["problems"][0]["category"], category, "{}", text(&log));
        assert_eq!(doc["not_understood_total"], 0, "{doc}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes at all: no panic, and nothing it keeps holds a control character.
    #[test]
    fn any_bytes_are_explained_without_panic(
        lines in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..200),
                Just(b"h:1:1 [0] NCCL WARN NET/IB : Got completion from peer with error 12\x1b[0m".to_vec()),
                Just(b"a:1:1 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0> [".to_vec()),
                Just(b"NCCL version \xff+cuda".to_vec()),
                Just(b"#  Rank  0 device ] ".to_vec()),
                Just(b"x NCCL INFO Channel 00/ : via NET/IB/GDRDMA set by environment to ".to_vec()),
            ],
            0..40,
        )
    ) {
        let rules = gputune::explain::rules::builtin().unwrap();
        let log = lines.join(&b'\n');
        let a = gputune::explain::analyse(&mut std::io::Cursor::new(log), &rules).unwrap();
        let json = gputune::explain::render::json(&a, None).to_string();
        let text = gputune::explain::render::text(&a, None);
        prop_assert!(!text.chars().any(|c| c.is_control() && c != '\n'));
        let escape = char::from(0x1b);
        prop_assert!(!serde_json::from_str::<Value>(&json).unwrap().to_string().contains(escape));
    }
}
