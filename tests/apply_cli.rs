//! `gputune apply` and `gputune rollback` end to end, against the real kernel inside a
//! network namespace made for each test (its `net.*` sysctls are per namespace, so this
//! machine's own settings are never touched). Each test's root is a temp dir whose `proc`
//! links to the real `/proc` (showing the namespace gputune runs in) and whose `etc`,
//! `var`, `run` and `sys` are temp dirs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use predicates::prelude::*;

/// The namespace sysctls the test profiles judge, and whose bytes must come back.
const KEYS: &[&str] = &[
    "net/core/somaxconn",
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem",
    "net/ipv4/tcp_fin_timeout",
    "net/ipv4/tcp_slow_start_after_idle",
    "net/ipv4/ip_local_port_range",
];

const NETWORK_PROFILE: &str = r#"
description = "end-to-end test: namespaced network sysctls only"
[network]
"net.core.somaxconn" = { min = 8192 }
"net.ipv4.tcp_rmem.max" = { min = 16777216 }
"net.ipv4.tcp_wmem.max" = { min = 16777216 }
"net.ipv4.tcp_fin_timeout" = { max = 20 }
"net.ipv4.tcp_slow_start_after_idle" = { equals = 0 }
"#;

fn require(tool: &str) {
    let found = StdCommand::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{tool}` is missing: run scripts/test, which installs what these tests need"
    );
}

fn binary() -> PathBuf {
    PathBuf::from(crate::common::bin())
}

/// A named network namespace, deleted when dropped.
struct Netns {
    name: String,
}

impl Netns {
    fn new() -> Netns {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        require("ip");
        require("nsenter");
        let name = format!(
            "gputune-test-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        );
        let ok = StdCommand::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(ok.success(), "ip netns add {name} failed (tests need root)");
        Netns { name }
    }

    fn command(&self, program: &Path) -> StdCommand {
        let mut cmd = StdCommand::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.name))
            .arg("--")
            .arg(program);
        cmd
    }

    /// The raw bytes of a sysctl as a process in the namespace reads them.
    fn sysctl(&self, key: &str) -> String {
        let out = self
            .command(Path::new("cat"))
            .arg(format!("/proc/sys/{key}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cat {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn sysctls(&self) -> Vec<String> {
        KEYS.iter().map(|k| self.sysctl(k)).collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = StdCommand::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// A root for one test, and the namespace its gputune runs in.
struct Node {
    dir: tempfile::TempDir,
    ns: Netns,
}

impl Node {
    fn new(profile: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // The live /proc is bind-mounted at DIR/proc for each command (see `gputune_std`):
        // a link to /proc would resolve inside DIR, as --root requires.
        for sub in [
            "proc",
            "etc",
            "var",
            "run",
            "sys/kernel/mm/transparent_hugepage",
        ] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        fs::write(dir.path().join("profile.toml"), profile).unwrap();
        Node {
            dir,
            ns: Netns::new(),
        }
    }

    fn path(&self, host_path: &str) -> PathBuf {
        self.dir.path().join(host_path.trim_start_matches('/'))
    }

    /// `gputune ARGS --root DIR [--profile FILE]` inside the namespace.
    fn gputune(&self, args: &[&str]) -> Command {
        Command::from_std(self.gputune_std(args))
    }

    fn gputune_std(&self, args: &[&str]) -> StdCommand {
        // In a mount namespace of its own, so the bind mount of the namespace's /proc at
        // DIR/proc ends with the command.
        let mut cmd = self.ns.command(Path::new("unshare"));
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "mount --bind /proc \"$0/proc\" && exec \"$@\"",
        ])
        .arg(self.dir.path())
        .arg(binary());
        cmd.args(args).arg("--root").arg(self.dir.path());
        if matches!(args.first(), Some(&"apply") | Some(&"audit")) {
            cmd.arg("--profile").arg(self.path("/profile.toml"));
        }
        if args.first() == Some(&"apply") {
            // The namespace's /proc is bind-mounted on purpose: live writes are the point.
            cmd.arg("--live");
        }
        cmd
    }

    /// Every file under the root's etc, with its content.
    fn etc(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![self.path("/etc")];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push((
                        path.display().to_string(),
                        fs::read_to_string(&path).unwrap_or_default(),
                    ));
                }
            }
        }
        out.sort();
        out
    }

    fn journal(&self) -> Option<serde_json::Value> {
        fs::read_to_string(self.path("/var/lib/gputune/journal.json"))
            .ok()
            .map(|t| serde_json::from_str(&t).unwrap())
    }
}

#[test]
fn apply_verifies_persists_is_idempotent_and_rolls_back_byte_for_byte() {
    let node = Node::new(NETWORK_PROFILE);
    let start = node.ns.sysctls();
    assert_eq!(
        start[0], "4096\n",
        "a fresh namespace has the default somaxconn"
    );

    node.gputune(&["apply", "--yes"])
        .assert()
        .success()
        .stdout(predicate::str::contains("plan for profile"))
        .stdout(predicate::str::contains(
            "  net.core.somaxconn: 4096 -> 8192\n",
        ))
        .stdout(predicate::str::contains("applied and verified"));
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "8192\n");
    assert_eq!(
        node.ns.sysctl("net/ipv4/tcp_wmem"),
        "4096\t16384\t16777216\n"
    );
    assert_eq!(node.ns.sysctl("net/ipv4/tcp_fin_timeout"), "20\n");
    let conf = fs::read_to_string(node.path("/etc/sysctl.d/90-gputune.conf")).unwrap();
    assert!(conf.starts_with("# Written by gputune"));
    assert!(
        conf.contains("net.ipv4.tcp_wmem = 4096 16384 16777216\n"),
        "{conf}"
    );
    assert_eq!(node.journal().unwrap()["phase"], "applied");

    // The node now passes, live and at boot.
    node.gputune(&["audit"]).assert().success();
    node.gputune(&["audit", "--persisted"]).assert().success();

    // A second apply plans nothing and writes nothing.
    let journal_before = fs::read(node.path("/var/lib/gputune/journal.json")).unwrap();
    let etc_before = node.etc();
    node.gputune(&["apply", "--yes"])
        .assert()
        .success()
        .stdout(predicate::str::contains("nothing to change"));
    assert_eq!(
        fs::read(node.path("/var/lib/gputune/journal.json")).unwrap(),
        journal_before
    );
    assert_eq!(node.etc(), etc_before);

    node.gputune(&["rollback"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "restored /proc/sys/net/core/somaxconn: 8192 -> 4096",
        ))
        .stdout(predicate::str::contains(
            "restored /etc/sysctl.d/90-gputune.conf",
        ));
    assert_eq!(
        node.ns.sysctls(),
        start,
        "every value byte for byte as before"
    );
    assert!(!node.path("/etc/sysctl.d/90-gputune.conf").exists());
    assert_eq!(node.journal().unwrap()["phase"], "rolled_back");
    node.gputune(&["rollback"])
        .assert()
        .success()
        .stdout(predicate::str::contains("nothing to roll back"));
}

#[test]
fn dry_run_and_no_persist() {
    let node = Node::new(NETWORK_PROFILE);
    let start = node.ns.sysctls();
    node.gputune(&["apply", "--dry-run"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "  net.ipv4.tcp_fin_timeout: 60 -> 20\n",
        ))
        .stdout(predicate::str::contains(
            "  persist in /etc/sysctl.d/90-gputune.conf: (absent) -> ",
        ))
        .stdout(predicate::str::contains("dry run: nothing was changed"));
    assert_eq!(node.ns.sysctls(), start);
    assert_eq!(node.etc(), vec![]);
    assert!(node.journal().is_none());
    assert!(
        !node.path("/run/gputune.lock").exists(),
        "a dry run takes no lock"
    );

    node.gputune(&["apply", "--yes", "--no-persist"])
        .assert()
        .success();
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "8192\n");
    assert_eq!(
        node.etc(),
        vec![],
        "--no-persist writes no configuration file"
    );
    node.gputune(&["audit"])
        .assert()
        .success()
        .stdout(predicate::str::contains("no sysctl.d file sets"));
    node.gputune(&["rollback"]).assert().success();
    assert_eq!(node.ns.sysctls(), start);
}

#[test]
fn only_limits_the_areas() {
    let node = Node::new(NETWORK_PROFILE);
    node.gputune(&["apply", "--yes", "--only", "memory"])
        .assert()
        .success()
        .stdout(predicate::str::contains("nothing to change"));
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "4096\n");
}

#[test]
fn without_yes_a_script_is_refused_and_nothing_changes() {
    let node = Node::new(NETWORK_PROFILE);
    let start = node.ns.sysctls();
    node.gputune(&["apply"])
        .write_stdin("y\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("pass --yes"));
    assert_eq!(node.ns.sysctls(), start);
    assert!(node.journal().is_none());
}

#[test]
fn not_root_is_refused_before_anything_is_touched() {
    require("setpriv");
    let node = Node::new(NETWORK_PROFILE);
    // The same live tree as the other tests (its /proc bind-mounted), run as nobody.
    let as_nobody = |args: &[&str]| {
        let mut cmd = node.ns.command(Path::new("unshare"));
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "mount --bind /proc \"$0/proc\" && exec \"$@\"",
        ])
        .arg(node.dir.path())
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .arg(binary())
        .args(args)
        .arg("--root")
        .arg(node.dir.path());
        Command::from_std(cmd)
    };
    let profile = node.path("/profile.toml");
    let profile = profile.to_str().unwrap();
    as_nobody(&["apply", "--yes", "--live", "--profile", profile])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("run it as root"));
    assert!(!node.path("/run/gputune.lock").exists());
    assert!(node.journal().is_none());
    as_nobody(&["rollback"]).assert().code(3);
}

#[test]
fn a_value_the_kernel_rejects_restores_every_earlier_change() {
    // low above high: the kernel refuses the port range with EINVAL, after somaxconn
    // (planned first) was already written.
    let profile = r#"
description = "end-to-end test: a change the kernel rejects"
[network]
"net.core.somaxconn" = { min = 8192 }
"net.ipv4.ip_local_port_range.low" = { min = 61000 }
"net.ipv4.ip_local_port_range.high" = { max = 60000 }
"net.ipv4.tcp_fin_timeout" = { max = 20 }
"#;
    let node = Node::new(profile);
    let start = node.ns.sysctls();
    node.gputune(&["apply", "--yes"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("apply failed at change 2 of 4"))
        .stderr(predicate::str::contains("ip_local_port_range"))
        .stderr(predicate::str::contains("the node is as it started"));
    assert_eq!(node.ns.sysctls(), start, "byte for byte as before");
    assert_eq!(node.etc(), vec![]);
    assert!(
        node.journal().is_none(),
        "a restored failure leaves no journal to roll back"
    );
}

#[test]
fn a_broken_profile_is_a_usage_error() {
    let node = Node::new("[network]\n\"net.core.nonsense\" = { min = 1 }\n");
    node.gputune(&["apply", "--yes"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("profile.toml"));
}

/// Waits until `pid` is stopped (apply stops itself before the target named in
/// `GPUTUNE_TEST_STOP_BEFORE`, which is how these tests hold it in the middle of its plan).
fn wait_stopped(pid: u32) {
    wait_for("apply to stop before the knob", || {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    });
}

const BLOCKING_PROFILE: &str = r#"
description = "end-to-end test: network sysctls, then a knob apply stops before"
[network]
"net.core.somaxconn" = { min = 8192 }
"net.ipv4.tcp_fin_timeout" = { max = 20 }
[memory]
"transparent_hugepage.enabled" = { one_of = ["madvise"] }
"#;

const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_kill_during_apply_leaves_a_journal_rollback_restores_from() {
    let node = Node::new(BLOCKING_PROFILE);
    let start = node.ns.sysctls();
    fs::write(node.path(THP), "[always] madvise never\n").unwrap();
    let mut apply = node
        .gputune_std(&["apply", "--yes"])
        .env("GPUTUNE_TEST_STOP_BEFORE", THP)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The two sysctls come first in the plan; apply then stops before the knob.
    wait_stopped(apply.id());
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "8192\n");
    assert_eq!(node.ns.sysctl("net/ipv4/tcp_fin_timeout"), "20\n");
    apply.kill().unwrap(); // SIGKILL
    apply.wait().unwrap();
    assert_eq!(node.journal().unwrap()["phase"], "applying");

    node.gputune(&["apply", "--yes"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("run `gputune rollback` first"));
    node.gputune(&["rollback"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "restored /proc/sys/net/core/somaxconn: 8192 -> 4096",
        ))
        .stdout(predicate::str::contains(
            "unchanged /etc/sysctl.d/90-gputune.conf",
        ));
    assert_eq!(
        node.ns.sysctls(),
        start,
        "every value byte for byte as before"
    );
    assert_eq!(node.etc(), vec![]);
}

#[test]
fn two_applies_never_interleave() {
    let node = Node::new(BLOCKING_PROFILE);
    let start = node.ns.sysctls();
    fs::write(node.path(THP), "[always] madvise never\n").unwrap();
    let first = node
        .gputune_std(&["apply", "--yes"])
        .env("GPUTUNE_TEST_STOP_BEFORE", THP)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_stopped(first.id());
    assert_eq!(node.ns.sysctl("net/ipv4/tcp_fin_timeout"), "20\n");
    let journal = fs::read(node.path("/var/lib/gputune/journal.json")).unwrap();

    // The second waits for the lock, gives up with exit 3 and writes nothing.
    let waited = Instant::now();
    node.gputune(&["apply", "--yes"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("gputune.lock"));
    assert!(
        waited.elapsed() >= Duration::from_secs(4),
        "it waited for the lock first"
    );
    assert_eq!(
        fs::read(node.path("/var/lib/gputune/journal.json")).unwrap(),
        journal
    );
    node.gputune(&["rollback"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("gputune.lock"));

    // Let the first finish.
    // SAFETY: kill sends SIGCONT to the child this test spawned.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGCONT) }, 0);
    let out = first.wait_with_output().unwrap();
    crate::common::assert_success(&out);
    assert_eq!(node.journal().unwrap()["phase"], "applied");
    assert!(node.path("/etc/sysctl.d/90-gputune.conf").exists());
    assert_eq!(fs::read_to_string(node.path(THP)).unwrap(), "madvise");

    node.gputune(&["rollback"]).assert().success();
    assert_eq!(node.ns.sysctls(), start);
    assert_eq!(fs::read_to_string(node.path(THP)).unwrap(), "always");
}

#[test]
fn two_applies_started_together_run_one_after_the_other() {
    let node = Node::new(NETWORK_PROFILE);
    let start = node.ns.sysctls();
    let spawn = || {
        node.gputune_std(&["apply", "--yes"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let outputs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    for out in &outputs {
        crate::common::assert_success(out);
    }
    let stdouts: Vec<String> = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .collect();
    // Had they interleaved, both would have planned the changes and the journal would
    // record the first one's new values as the second one's "before".
    assert_eq!(
        stdouts
            .iter()
            .filter(|s| s.contains("applied and verified"))
            .count(),
        1,
        "{stdouts:?}"
    );
    assert_eq!(
        stdouts
            .iter()
            .filter(|s| s.contains("nothing to change"))
            .count(),
        1,
        "{stdouts:?}"
    );
    let journal = node.journal().unwrap();
    assert_eq!(journal["profiles"].as_array().unwrap().len(), 1);
    node.gputune(&["rollback"]).assert().success();
    assert_eq!(node.ns.sysctls(), start);
}
