//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use assert_cmd::Command;

/// A fixture root under tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The gputune binary with a clean environment for the variables it reads.
pub fn gputune() -> Command {
    let mut cmd = Command::cargo_bin("gputune").expect("the gputune binary is built");
    cmd.env_remove("GPUTUNE_ROOT");
    cmd
}

/// The gputune binary as a plain process (to run inside a network namespace, or to keep
/// running while the test acts), with the same clean environment as [`gputune`].
pub fn gputune_process() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gputune"));
    cmd.env_remove("GPUTUNE_ROOT");
    cmd
}

/// Fails the test with the command's stderr unless it exited 0.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `gputune audit --root FIXTURE ARGS... --format json` and parses the document.
pub fn audit_json(fixture_name: &str, args: &[&str]) -> (i32, serde_json::Value) {
    let out = gputune()
        .arg("audit")
        .arg("--root")
        .arg(fixture(fixture_name))
        .args(args)
        .args(["--format", "json"])
        .output()
        .expect("gputune runs");
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code().unwrap_or(-1), doc)
}

/// The finding with this id in an audit document.
pub fn finding<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["findings"]
        .as_array()
        .and_then(|all| all.iter().find(|f| f["id"] == id))
        .unwrap_or_else(|| panic!("no finding {id} in {doc:#}"))
}

mod hw;
#[allow(unused_imports)]
pub use hw::*;

mod bench;
#[allow(unused_imports)]
pub use bench::*;
