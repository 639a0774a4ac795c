//! `gputune explain` through the built binary, on real logs: every log under
//! tests/fixtures/explain/ comes from a public issue thread (its `.toml` names the thread and
//! the cause the thread established) or was made here with the real libnccl.so.2.

use std::collections::{BTreeMap, BTreeSet};

use std::path::{Path, PathBuf};

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

struct Fixture {
    name: String,
    log: PathBuf,
    category: String,
    /// Categories the log may show besides its cause (a symptom of it).
    also: Vec<String>,
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
    let from_threads = fixtures.iter().filter(|f| !f.name.starts_with("here-")).count();
    assert!(from_threads >= 35, "only {from_threads} logs from threads");
    let mut misses = Vec::new();
    let mut fired: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &fixtures {
        let (code, doc) = explain_json(&f.log);
        let problems = doc["problems"].as_array().unwrap();
        for p in problems {
            fired
                .entry(p["rule"].as_str().unwrap().to_string())
                .or_default()
                .insert(f.name.clone());
            let category = p["category"].as_str().unwrap();
            assert!(
                category == f.category || f.also.iter().any(|a| a == category),
                "{}: {category} is neither its cause {} nor an expected symptom {:?}",
                f.name,
                f.category,
                f.also
            );
            if NOT_NODE.contains(&category) {
                assert_eq!(p["node_config"], false, "{}: {category}", f.name);
            }
            for e in p["evidence"].as_array().unwrap() {
                assert!(e["line"].as_u64().unwrap() >= 1, "{}", f.name);
            }
        }
        let first = problems.first().map(|p| p["category"].as_str().unwrap());
        if f.category == "none" {
            assert!(problems.is_empty(), "{}: {problems:?}", f.name);
            assert_eq!(code, Some(0), "{}", f.name);
        } else {
            assert_eq!(code, Some(1), "{}", f.name);
            if first != Some(f.category.as_str()) {
                misses.push(format!("{}: {:?} instead of {}", f.name, first, f.category));
            }
        }
    }
    let judged = fixtures.iter().filter(|f| f.category != "none").count();
    println!(
        "first problem's category = established cause: {}/{judged} ({:.0}%)",
        judged - misses.len(),
        100.0 * (judged - misses.len()) as f64 / judged as f64
    );
    assert!(misses.is_empty(), "{misses:#?}");
    // Every shipped rule is backed by at least one real log that triggers it.
    let rules = gputune::explain::rules::parse("rules", gputune::explain::rules::BUILTIN).unwrap();
    let unfired: Vec<&str> = rules
        .rules
        .iter()
        .map(|r| r.id.as_str())
        .filter(|id| !fired.contains_key(*id))
        .collect();
    assert!(unfired.is_empty(), "rules no real log triggers: {unfired:?}");
}
