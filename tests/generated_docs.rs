//! The man pages in man/ and the completions in completions/ are generated from the clap
//! definition; this test fails when they are stale. Regenerate with
//! `GPUTUNE_BLESS=1 cargo test --test node generated_docs`.

use std::path::Path;

fn check(dir: &str, files: Vec<(String, Vec<u8>)>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let bless = std::env::var_os("GPUTUNE_BLESS").is_some();
    if bless {
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
    let mut stale = Vec::new();
    for (name, content) in &files {
        let path = dir.join(name);
        if bless {
            std::fs::write(&path, content).unwrap();
        } else if std::fs::read(&path).ok().as_ref() != Some(content) {
            stale.push(name.clone());
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    on_disk.retain(|n| !files.iter().any(|(f, _)| f == n));
    assert!(
        stale.is_empty() && on_disk.is_empty(),
        "{} is stale (changed: {stale:?}, no longer generated: {on_disk:?}); run `GPUTUNE_BLESS=1 cargo test --test node generated_docs` and commit the result",
        dir.display()
    );
}

#[test]
fn man_pages_are_fresh() {
    check("man", gputune::docs::man_pages());
}

#[test]
fn completions_are_fresh() {
    check("completions", gputune::docs::completions());
}

/// Every check id the audit emits on the fixture trees (captured nodes, with the profiles
/// that judge the most keys) is documented in gputune-checks(7).
#[test]
fn every_check_the_audit_emits_on_the_fixtures_is_in_gputune_checks_7() {
    use gputune::docs::reference::{documented, matches};
    let page = gputune::docs::man_pages()
        .into_iter()
        .find(|(n, _)| n == "gputune-checks.7")
        .map(|(_, c)| String::from_utf8(c).unwrap())
        .expect("gputune-checks.7 is generated");
    let patterns = documented();
    for (pattern, _, _) in &patterns {
        assert!(
            page.contains(&pattern.replace('-', "\\-")),
            "{pattern} is not on the page"
        );
    }
    let fixtures = crate::common::fixture("");
    let mut roots = Vec::new();
    for dir in [
        "node",
        "tuned-node",
        "untuned-node",
        "node_exporter-ib",
        "cgroup-v2",
        "cgroup-v1",
        "cgroup-hybrid",
        "hwloc",
        "ghw",
    ] {
        let path = fixtures.join(dir);
        if path.join("proc").exists() || path.join("sys").exists() {
            roots.push(path);
        } else {
            for entry in std::fs::read_dir(&path).unwrap() {
                roots.push(entry.unwrap().path());
            }
        }
    }
    let cgroup_profile = crate::common::fixture("profiles/cgroup-all.toml");
    let mut seen = 0;
    for root in &roots {
        for profile in ["ddp-roce", "ddp-100gbe", cgroup_profile.to_str().unwrap()] {
            let out = crate::common::gputune()
                .args(["audit", "--format", "json", "--profile", profile, "--root"])
                .arg(root)
                .output()
                .unwrap();
            let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
                continue;
            };
            for f in doc["findings"].as_array().unwrap() {
                let id = f["id"].as_str().unwrap();
                seen += 1;
                assert!(
                    patterns.iter().any(|(p, _, _)| matches(p, id)),
                    "{id} (from {}, {profile}) is not in gputune-checks(7)",
                    root.display()
                );
            }
        }
    }
    assert!(seen > 200, "only {seen} findings: did the fixtures move?");
}
