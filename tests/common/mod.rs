//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use assert_cmd::Command;
use serde_json::Value;

/// A fixture root under tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The built gputune binary's path, for commands that run it through another program.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gputune")
}

/// The gputune binary with a clean environment for the variables it reads.
pub fn gputune() -> Command {
    let mut cmd = Command::cargo_bin("gputune").expect("the gputune binary is built");
    cmd.env_remove("GPUTUNE_ROOT");
    cmd
}

/// [`gputune`] with the words of `line` (split at spaces) as its arguments.
pub fn gputune_words(line: &str) -> Command {
    let mut cmd = gputune();
    cmd.args(line.split_whitespace());
    cmd
}

/// The gputune binary as a plain process (to run inside a network namespace, or to keep
/// running while the test acts), with the same clean environment as [`gputune`].
pub fn gputune_process() -> std::process::Command {
    let mut cmd = std::process::Command::new(bin());
    cmd.env_remove("GPUTUNE_ROOT");
    cmd
}

/// Bytes as text, for messages and for searching output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Fails the test with the command's stderr unless it exited 0.
pub fn assert_success(out: &std::process::Output) {
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Asserts the run exited with `code` and its stderr contains `needle`.
pub fn assert_exit(out: &std::process::Output, code: i32, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "{stderr}");
}

/// `gputune --root ROOT pin` with none of the launchers' local-rank variables (LOCAL_RANK,
/// SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK) the test itself may have been started with.
pub fn pin(root: &Path) -> Command {
    let mut cmd = gputune();
    cmd.arg("--root").arg(root).arg("pin");
    for var in ["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"] {
        cmd.env_remove(var);
    }
    cmd
}

/// Parses a command's stdout as JSON, showing both streams when it is not.
pub fn stdout_json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// A file holding `content` in a temp dir of its own (a site profile, a config file); the
/// dir lives as long as the returned guard.
pub fn temp_file(name: &str, content: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    (dir, path)
}

/// Writes `content` (text or bytes) at `host_path` under `root`, creating its directories.
pub fn put(root: &Path, host_path: &str, content: impl AsRef<[u8]>) {
    let path = root.join(host_path.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Runs `gputune audit --root FIXTURE ARGS... --format json` and parses the document.
pub fn audit_json(fixture_name: &str, args: &[&str]) -> (i32, Value) {
    let out = gputune()
        .arg("audit")
        .arg("--root")
        .arg(fixture(fixture_name))
        .args(args)
        .args(["--format", "json"])
        .output()
        .expect("gputune runs");
    (out.status.code().unwrap_or(-1), stdout_json(&out))
}

/// The findings of an audit document.
pub fn findings(doc: &Value) -> &[Value] {
    doc["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no findings in {doc:#}"))
}

/// The finding with this id in an audit document.
pub fn finding<'a>(doc: &'a Value, id: &str) -> &'a Value {
    find(findings(doc), id)
}

/// The finding with this id among `findings`.
pub fn find<'a>(findings: &'a [Value], id: &str) -> &'a Value {
    findings
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id} in {findings:#?}"))
}

/// The status of the finding with this id among `findings`.
pub fn status<'a>(findings: &'a [Value], id: &str) -> &'a str {
    field(find(findings, id), "status")
}

/// Whether no finding among `findings` has this id.
pub fn absent(findings: &[Value], id: &str) -> bool {
    findings.iter().all(|f| f["id"] != id)
}

/// A string field of a JSON object ("" when absent or not a string).
pub fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v[name].as_str().unwrap_or_default()
}

/// The string field `name` of each object in the array `items`.
pub fn column<'a>(items: &'a Value, name: &str) -> Vec<&'a str> {
    items
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {items:#}"))
        .iter()
        .map(|item| field(item, name))
        .collect()
}

/// Asserts the string field `name` of `v` contains `needle`, showing `v` when not.
pub fn assert_field_contains(v: &Value, name: &str, needle: &str) {
    assert!(
        field(v, name).contains(needle),
        "{name} lacks {needle:?}: {v:#}"
    );
}

/// The finding `id` among `findings`, asserted to have `status`; further checks chain on.
pub fn expect<'a>(findings: &'a [Value], id: &str, status: &str) -> Checked<'a> {
    let finding = find(findings, id);
    assert_eq!(finding["status"], status, "{id}: {finding:#}");
    Checked(finding)
}

/// A finding whose status was checked, for checks of its other fields.
pub struct Checked<'a>(pub &'a Value);

impl Checked<'_> {
    /// Its string field `name` is `want`.
    pub fn is(self, name: &str, want: &str) -> Self {
        assert_eq!(field(self.0, name), want, "{name}: {:#}", self.0);
        self
    }

    /// Its string field `name` contains `needle`.
    pub fn has(self, name: &str, needle: &str) -> Self {
        assert_field_contains(self.0, name, needle);
        self
    }

    /// What it found (its `actual`) contains `needle`.
    pub fn actual_has(self, needle: &str) -> Self {
        self.has("actual", needle)
    }

    /// What it found (its `actual`) starts with `prefix`.
    pub fn actual_starts(self, prefix: &str) -> Self {
        self.starts("actual", prefix)
    }

    /// Its string field `name` starts with `prefix`.
    pub fn starts(self, name: &str, prefix: &str) -> Self {
        assert!(
            field(self.0, name).starts_with(prefix),
            "{name} does not start with {prefix:?}: {:#}",
            self.0
        );
        self
    }
}

/// A child process that is killed (SIGKILL, which ends a stopped one too) and reaped when
/// dropped, so a test that fails before its wait does not leave it running. It derefs to the
/// [`Child`]; [`KillOnDrop::into_inner`] and [`KillOnDrop::wait_with_output`] take it back
/// out for a normal wait.
pub struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Starts `cmd`, guarded.
    pub fn spawn(cmd: &mut std::process::Command) -> KillOnDrop {
        KillOnDrop(Some(cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))))
    }

    /// The child, no longer killed on drop.
    pub fn into_inner(mut self) -> Child {
        self.0.take().expect("the child is taken out once")
    }

    /// [`Child::wait_with_output`] on the child taken back out.
    pub fn wait_with_output(self) -> std::io::Result<Output> {
        self.into_inner().wait_with_output()
    }
}

impl From<Child> for KillOnDrop {
    fn from(child: Child) -> KillOnDrop {
        KillOnDrop(Some(child))
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("the child was taken out")
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child was taken out")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A helper thread that runs until its stop flag is set. Dropping this sets the flag and
/// joins the thread, so a failing assertion does not leave it running; [`StopOnDrop::stop`]
/// does the same on the normal path and fails the test if the thread panicked.
pub struct StopOnDrop {
    flag: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StopOnDrop {
    /// Takes charge of `thread`, which stops once `flag` is set.
    pub fn new(flag: Arc<AtomicBool>, thread: JoinHandle<()>) -> StopOnDrop {
        StopOnDrop {
            flag,
            thread: Some(thread),
        }
    }

    /// Sets the flag and joins the thread, failing the test if it panicked.
    pub fn stop(mut self) {
        self.flag.store(true, Ordering::SeqCst);
        let thread = self.thread.take().expect("the thread is joined once");
        thread.join().expect("the helper thread panicked");
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.flag.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The real libnccl.so.2 that scripts/test installs; a clear failure without it.
pub fn real_nccl() -> String {
    std::env::var("GPUTUNE_TEST_NCCL_LIB").expect(
        "GPUTUNE_TEST_NCCL_LIB is not set: run scripts/test, which installs the real libnccl.so.2",
    )
}

/// Asserts this machine lets the test make namespaces (root) and has every tool in `tools`
/// on the system PATH: scripts/test installs them.
pub fn require(tools: &[&str]) {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !std::process::Command::new("sh")
                .args(["-c", &format!("command -v {t} >/dev/null")])
                .env("PATH", SYSTEM_PATH)
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    assert!(
        nix::unistd::geteuid().is_root() && missing.is_empty(),
        "this test needs root and {missing:?} (network namespaces, real tools): run scripts/test as root, which installs them"
    );
}

/// The PATH the firewall tools are found on, whatever the test's own environment says.
pub const SYSTEM_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

#[path = "../../src/testing/tree.rs"]
mod tree;

pub use tree::Tree;

impl Tree {
    /// The tree's directory, given to gputune as `--root`.
    pub fn root(&self) -> &Path {
        self.base()
    }
}

mod hw;
#[allow(unused_imports)]
pub use hw::*;

mod bench;
#[allow(unused_imports)]
pub use bench::*;

mod netns;
#[allow(unused_imports)]
pub use netns::*;
