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
