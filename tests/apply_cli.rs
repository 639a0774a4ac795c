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
use assert_cmd::assert::Assert;
use predicates::prelude::*;

use crate::common::{KillOnDrop, Namespaces, assert_success, fixture, require, text};

/// The namespace sysctls the test profiles judge, and whose bytes must come back.
const KEYS: &[&str] = &[
    "net/core/somaxconn",
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem",
    "net/ipv4/tcp_fin_timeout",
    "net/ipv4/tcp_slow_start_after_idle",
    "net/ipv4/ip_local_port_range",
];

const THP: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const JOURNAL: &str = "/var/lib/gputune/journal.json";
const CONF: &str = "/etc/sysctl.d/90-gputune.conf";

/// A test profile under tests/fixtures/profiles.
fn profile(name: &str) -> String {
    fs::read_to_string(fixture("profiles").join(format!("{name}.toml"))).unwrap()
}

/// A named network namespace (deleted when dropped) and commands run inside it.
struct Netns {
    name: String,
    _ns: Namespaces,
}

impl Netns {
    fn new() -> Netns {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        require(&["ip", "nsenter"]);
        let name = format!(
            "gputune-test-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        );
        Netns {
            _ns: Namespaces::add(vec![name.clone()]),
            name,
        }
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
        assert!(out.status.success(), "cat {key}: {}", text(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn sysctls(&self) -> Vec<String> {
        KEYS.iter().map(|k| self.sysctl(k)).collect()
    }
}

/// A root for one test, the namespace its gputune runs in, and that namespace's judged
/// sysctls as they were before the test.
struct Node {
    dir: tempfile::TempDir,
    ns: Netns,
    start: Vec<String>,
}

impl Node {
    /// A node judged by the test profile `name` (under tests/fixtures/profiles).
    fn new(name: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // The live /proc is bind-mounted at DIR/proc for each command (see `gputune_std`):
        // a link to /proc would resolve inside DIR, as --root requires. No etc, var or run:
        // apply makes what it needs (the journal's /var/lib/gputune, the lock's /run), as on
        // a host that never ran gputune.
        for sub in ["proc", "sys/kernel/mm/transparent_hugepage"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        fs::write(dir.path().join("profile.toml"), profile(name)).unwrap();
        let ns = Netns::new();
        Node {
            dir,
            start: ns.sysctls(),
            ns,
        }
    }

    fn path(&self, host_path: &str) -> PathBuf {
        self.dir.path().join(host_path.trim_start_matches('/'))
    }

    /// `gputune ARGS --root DIR [--profile FILE]` inside the namespace.
    fn gputune(&self, args: &str) -> Command {
        Command::from_std(self.gputune_std(args))
    }

    /// Runs `gputune ARGS` in the node: it must succeed and print each of `says`.
    fn ok(&self, args: &str, says: &[&str]) {
        let mut assert = self.gputune(args).assert().success();
        for needle in says {
            assert = assert.stdout(predicate::str::contains(*needle));
        }
    }

    /// Runs `gputune ARGS` in the node: it must exit `code` and say each of `says` on
    /// stderr.
    fn refused(&self, args: &str, code: i32, says: &[&str]) -> Assert {
        let mut assert = self.gputune(args).assert().code(code);
        for needle in says {
            assert = assert.stderr(predicate::str::contains(*needle));
        }
        assert
    }

    /// Bind-mounts the namespace's /proc at DIR/proc in a mount namespace of its own (so
    /// the mount ends with the command), then runs `prefix...` and gputune with `args`.
    fn in_node(&self, prefix: &[&str], args: &str) -> StdCommand {
        let mut cmd = self.ns.command(Path::new("unshare"));
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind /proc \"$0/proc\" && exec \"$@\"")
            .arg(self.dir.path())
            .args(prefix)
            .arg(crate::common::bin())
            .args(args.split_whitespace())
            .arg("--root")
            .arg(self.dir.path());
        cmd
    }

    fn gputune_std(&self, args: &str) -> StdCommand {
        let mut cmd = self.in_node(&[], args);
        let command = args.split_whitespace().next();
        if matches!(command, Some("apply") | Some("audit")) {
            cmd.arg("--profile").arg(self.path("/profile.toml"));
        }
        if command == Some("apply") {
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
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
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
        fs::read_to_string(self.path(JOURNAL))
            .ok()
            .map(|t| serde_json::from_str(&t).unwrap())
    }

    /// Every judged sysctl is byte for byte as it was before the test.
    fn assert_restored(&self) {
        assert_eq!(
            self.ns.sysctls(),
            self.start,
            "every value byte for byte as before"
        );
    }
}

#[test]
fn apply_verifies_persists_is_idempotent_and_rolls_back_byte_for_byte() {
    let node = Node::new("netns-network");
    assert_eq!(
        node.start[0], "4096\n",
        "a fresh namespace has the default somaxconn"
    );

    node.ok(
        "apply --yes",
        &[
            "plan for profile",
            "  net.core.somaxconn: 4096 -> 8192\n",
            "applied and verified",
        ],
    );
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "8192\n");
    assert_eq!(
        node.ns.sysctl("net/ipv4/tcp_wmem"),
        "4096\t16384\t16777216\n"
    );
    assert_eq!(node.ns.sysctl("net/ipv4/tcp_fin_timeout"), "20\n");
    let conf = fs::read_to_string(node.path(CONF)).unwrap();
    assert!(conf.starts_with("# Written by gputune"));
    assert!(
        conf.contains("net.ipv4.tcp_wmem = 4096 16384 16777216\n"),
        "{conf}"
    );
    assert_eq!(node.journal().unwrap()["phase"], "applied");
    // Made by apply: the journal's directory and the lock's.
    assert!(node.path("/var/lib/gputune").is_dir());
    assert!(node.path("/run/gputune.lock").is_file());

    // The node now passes, live and at boot.
    node.ok("audit", &[]);
    node.ok("audit --persisted", &[]);

    // A second apply plans nothing and writes nothing.
    let journal_before = fs::read(node.path(JOURNAL)).unwrap();
    let etc_before = node.etc();
    node.ok("apply --yes", &["nothing to change"]);
    assert_eq!(fs::read(node.path(JOURNAL)).unwrap(), journal_before);
    assert_eq!(node.etc(), etc_before);

    node.ok(
        "rollback",
        &[
            "restored /proc/sys/net/core/somaxconn: 8192 -> 4096",
            "restored /etc/sysctl.d/90-gputune.conf",
        ],
    );
    node.assert_restored();
    assert!(!node.path(CONF).exists());
    assert_eq!(node.journal().unwrap()["phase"], "rolled_back");
    node.ok("rollback", &["nothing to roll back"]);
}

#[test]
fn dry_run_and_no_persist() {
    let node = Node::new("netns-network");
    node.ok(
        "apply --dry-run",
        &[
            "  net.ipv4.tcp_fin_timeout: 60 -> 20\n",
            "  persist in /etc/sysctl.d/90-gputune.conf: (absent) -> ",
            "dry run: nothing was changed",
        ],
    );
    node.assert_restored();
    assert_eq!(node.etc(), vec![]);
    assert!(node.journal().is_none());
    assert!(
        !node.path("/run/gputune.lock").exists(),
        "a dry run takes no lock"
    );

    node.ok("apply --yes --no-persist", &[]);
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "8192\n");
    assert_eq!(
        node.etc(),
        vec![],
        "--no-persist writes no configuration file"
    );
    node.ok("audit", &["no sysctl.d file sets"]);
    node.ok("rollback", &[]);
    node.assert_restored();
}

#[test]
fn only_limits_the_areas() {
    let node = Node::new("netns-network");
    node.ok("apply --yes --only memory", &["nothing to change"]);
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "4096\n");
}

#[test]
fn without_yes_a_script_is_refused_and_nothing_changes() {
    let node = Node::new("netns-network");
    node.gputune("apply")
        .write_stdin("y\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("pass --yes"));
    node.assert_restored();
    assert!(node.journal().is_none());
}

#[test]
fn not_root_is_refused_before_anything_is_touched() {
    require(&["setpriv"]);
    let node = Node::new("netns-network");
    // The same live tree as the other tests (its /proc bind-mounted), run as nobody.
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
    ];
    let as_nobody = |args: &str| Command::from_std(node.in_node(&nobody, args));
    // The profile's path is an argument of its own (after `--root DIR`), whatever it holds.
    as_nobody("apply --yes --live")
        .arg("--profile")
        .arg(node.path("/profile.toml"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("run it as root"));
    assert!(!node.path("/run/gputune.lock").exists());
    assert!(node.journal().is_none());
    as_nobody("rollback").assert().code(3);
}

#[test]
fn a_value_the_kernel_rejects_restores_every_earlier_change() {
    let node = Node::new("netns-rejected");
    node.refused(
        "apply --yes",
        3,
        &[
            "apply failed at change 2 of 4",
            "ip_local_port_range",
            "the node is as it started",
        ],
    );
    node.assert_restored();
    assert_eq!(node.etc(), vec![]);
    assert!(
        node.journal().is_none(),
        "a restored failure leaves no journal to roll back"
    );
}

#[test]
fn a_broken_profile_is_a_usage_error() {
    let node = Node::new("broken-key");
    node.refused("apply --yes", 2, &["profile.toml"]);
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

/// A node of the blocking profile whose THP knob says `always`, and an `apply --yes`
/// started there and stopped before that knob, its output going to `output`.
/// The apply is killed (stopped or not) if the test fails before it is waited for.
fn stopped_apply(output: fn() -> Stdio) -> (Node, KillOnDrop) {
    let node = Node::new("netns-blocking");
    fs::write(node.path(THP), "[always] madvise never\n").unwrap();
    let apply = KillOnDrop::spawn(
        node.gputune_std("apply --yes")
            .env("GPUTUNE_TEST_STOP_BEFORE", THP)
            .stdout(output())
            .stderr(output()),
    );
    // The two sysctls come first in the plan; apply then stops before the knob.
    wait_stopped(apply.id());
    (node, apply)
}

#[test]
fn a_kill_during_apply_leaves_a_journal_rollback_restores_from() {
    let (node, mut apply) = stopped_apply(Stdio::null);
    assert_eq!(node.ns.sysctl("net/core/somaxconn"), "8192\n");
    assert_eq!(node.ns.sysctl("net/ipv4/tcp_fin_timeout"), "20\n");
    apply.kill().unwrap(); // SIGKILL
    apply.wait().unwrap();
    assert_eq!(node.journal().unwrap()["phase"], "applying");

    node.refused("apply --yes", 3, &["run `gputune rollback` first"]);
    node.ok(
        "rollback",
        &[
            "restored /proc/sys/net/core/somaxconn: 8192 -> 4096",
            "unchanged /etc/sysctl.d/90-gputune.conf",
        ],
    );
    node.assert_restored();
    assert_eq!(node.etc(), vec![]);
}

#[test]
fn two_applies_never_interleave() {
    let (node, first) = stopped_apply(Stdio::piped);
    assert_eq!(node.ns.sysctl("net/ipv4/tcp_fin_timeout"), "20\n");
    let journal = fs::read(node.path(JOURNAL)).unwrap();

    // The second waits for the lock, gives up with exit 3 and writes nothing.
    let waited = Instant::now();
    node.refused("apply --yes", 3, &["gputune.lock"]);
    assert!(
        waited.elapsed() >= Duration::from_secs(4),
        "it waited for the lock first"
    );
    assert_eq!(fs::read(node.path(JOURNAL)).unwrap(), journal);
    node.refused("rollback", 3, &["gputune.lock"]);

    // Let the first finish.
    let pid = nix::unistd::Pid::from_raw(first.id() as i32);
    assert!(nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).is_ok());
    let out = first.wait_with_output().unwrap();
    assert_success(&out);
    assert_eq!(node.journal().unwrap()["phase"], "applied");
    assert!(node.path(CONF).exists());
    assert_eq!(fs::read_to_string(node.path(THP)).unwrap(), "madvise");

    node.ok("rollback", &[]);
    node.assert_restored();
    assert_eq!(fs::read_to_string(node.path(THP)).unwrap(), "always");
}

#[test]
fn two_applies_started_together_run_one_after_the_other() {
    let node = Node::new("netns-network");
    let spawn = || {
        node.gputune_std("apply --yes")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let outputs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    for out in &outputs {
        assert_success(out);
    }
    let stdouts: Vec<String> = outputs.iter().map(|o| text(&o.stdout)).collect();
    // Had they interleaved, both would have planned the changes and the journal would
    // record the first one's new values as the second one's "before".
    for said in ["applied and verified", "nothing to change"] {
        assert_eq!(
            stdouts.iter().filter(|s| s.contains(said)).count(),
            1,
            "{said}: {stdouts:?}"
        );
    }
    let journal = node.journal().unwrap();
    assert_eq!(journal["profiles"].as_array().unwrap().len(), 1);
    node.ok("rollback", &[]);
    node.assert_restored();
}
