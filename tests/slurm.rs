//! gputune under a real single-node Slurm (Debian's slurmctld, slurmd, slurm-client and
//! munge, installed by scripts/test): `srun` with nothing exported (bench and preflight),
//! `health --slurm` as the `HealthCheckProgram` draining and resuming the node, and every
//! node state an administrator (or Slurm) can set left exactly as it was by failing and
//! passing runs. One test function runs the scenarios in order, as the daemons are one per
//! machine. Every daemon is stopped by its pid when the test ends, passing or not.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A daemon started by this test: killed and waited for on drop.
struct Daemon {
    name: &'static str,
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of our own child, not yet waited for.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{} did not stop on SIGTERM; killing it", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(name: &'static str, command: &mut Command) -> Daemon {
    let child = command
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {e} (scripts/test installs Slurm and munge)"));
    Daemon { name, child }
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn output(command: &mut Command) -> (bool, String, String) {
    let out = command.output().expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `(State, Reason)` of the node, from `scontrol show node -o`.
fn node_state(conf: &Path, node: &str) -> (String, String) {
    let (_, text, _) = output(
        Command::new("scontrol")
            .env("SLURM_CONF", conf)
            .args(["--future", "show", "node", "-o", node]),
    );
    let state = text
        .split_whitespace()
        .find_map(|f| f.strip_prefix("State="))
        .unwrap_or("")
        .to_string();
    let reason = text
        .split_once(" Reason=")
        .map(|(_, r)| r.trim().to_string())
        .unwrap_or_default();
    (state, reason)
}

/// The words of a state, without the not-responding mark that comes and goes by itself.
fn words(state: &str) -> BTreeSet<String> {
    state
        .split('+')
        .map(|w| w.trim_end_matches('*'))
        .filter(|w| !w.is_empty() && *w != "NOT_RESPONDING")
        .map(String::from)
        .collect()
}

/// Runs `scontrol ARGS` and fails the test when it does not succeed.
fn scontrol(conf: &Path, args: &[&str]) {
    let (ok, stdout, stderr) = output(Command::new("scontrol").env("SLURM_CONF", conf).args(args));
    assert!(ok, "scontrol {args:?}: {stdout}{stderr}");
}

fn short_hostname() -> String {
    let (_, name, _) = output(Command::new("hostname").arg("-s"));
    name.trim().to_string()
}

/// Points `link` at `target` atomically (the health check may be reading it).
fn repoint(link: &Path, target: &Path) {
    let tmp = link.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

fn copy_fixture(name: &str, to: &Path) -> PathBuf {
    let status = Command::new("cp")
        .arg("-a")
        .arg(common::fixture(name))
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
    to.to_path_buf()
}

#[test]
fn gputune_under_a_real_slurm() {
    let node = short_hostname();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    for dir in ["state", "spool", "log"] {
        std::fs::create_dir(w.join(dir)).unwrap();
    }
    let gputune = std::path::PathBuf::from(crate::common::bin());
    let untuned = copy_fixture("untuned-node", &w.join("untuned"));
    let tuned = copy_fixture("tuned-node", &w.join("tuned"));
    let root = w.join("root");
    repoint(&root, &untuned);
    let conf = w.join("slurm.conf");
    let health = w.join("health.sh");
    std::fs::write(
        &health,
        format!(
            "#!/bin/sh\necho run >> {runs}\nenv > {env}\nexport SLURM_CONF={conf}\n\
             if [ -e {live} ]; then exec {gputune} health --slurm --profile {limits} --timeout 20 >>{log} 2>&1; fi\n\
             exec {gputune} --root {root} health --slurm --profile ddp-10gbe --timeout 20 >>{log} 2>&1\n",
            conf = conf.display(),
            gputune = gputune.display(),
            root = root.display(),
            log = w.join("log/health.log").display(),
            runs = w.join("log/runs").display(),
            env = w.join("log/env").display(),
            live = w.join("live-limits").display(),
            limits = w.join("limits.toml").display(),
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&health).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&health, perms).unwrap();
    let d = w.display();
    std::fs::write(
        &conf,
        format!(
            "ClusterName=gputune-test\nSlurmctldHost={node}\nSlurmUser=root\nSlurmdUser=root\n\
             SlurmctldPort=16817\nSlurmdPort=16818\n\
             AuthType=auth/munge\nCredType=cred/munge\nMpiDefault=none\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSwitchType=switch/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\n\
             MailProg=/bin/true\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
             HealthCheckProgram={health}\nHealthCheckInterval=3\nHealthCheckNodeState=ANY\n\
             RebootProgram=/bin/true\nResumeTimeout=300\n\
             NodeName={node} CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            health = health.display(),
        ),
    )
    .unwrap();

    // munge, as the munge user, on its usual socket.
    std::fs::create_dir_all("/run/munge").unwrap();
    let _ = Command::new("chown")
        .args(["munge:munge", "/run/munge"])
        .status();
    let _munged = start(
        "munged",
        Command::new("setpriv")
            .args([
                "--reuid=munge",
                "--regid=munge",
                "--init-groups",
                "/usr/sbin/munged",
                "-F",
            ])
            .stderr(Stdio::null()),
    );
    wait_for("munged", Duration::from_secs(20), || {
        Command::new("sh")
            .args(["-c", "munge -n 2>/dev/null | unmunge >/dev/null 2>&1"])
            .status()
            .is_ok_and(|s| s.success())
    });
    let ctld = start(
        "slurmctld",
        Command::new("slurmctld")
            .args(["-D", "-i"])
            .env("SLURM_CONF", &conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    // slurmd with the stack limit some sites give it (LimitSTACK=infinity), in a mount
    // namespace of its own where limits.conf (what a login session, so a submitting one,
    // gets) is the test's: every health check and job it starts sees the same.
    assert!(
        Path::new("/etc/security/limits.conf").is_file(),
        "the test binds its own file over /etc/security/limits.conf (pam's limits.conf)"
    );
    let limits_conf = w.join("limits.conf");
    std::fs::write(&limits_conf, "* - stack 8192\n").unwrap();
    std::fs::create_dir(w.join("limits.d")).unwrap();
    let mut slurmd_script = format!(
        "set -e; mount --bind {} /etc/security/limits.conf; ",
        limits_conf.display()
    );
    if Path::new("/etc/security/limits.d").is_dir() {
        slurmd_script.push_str(&format!(
            "mount --bind {}/limits.d /etc/security/limits.d; ",
            w.display()
        ));
    }
    // unshare and sh exec, so the pid is slurmd's; only the soft limit is raised (to the
    // hard one), which needs no privilege.
    slurmd_script.push_str("exec prlimit --stack=unlimited: slurmd -D");
    let slurmd = start(
        "slurmd",
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(&slurmd_script)
            .env("SLURM_CONF", &conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let logs = || {
        let read = |f: &str| std::fs::read_to_string(w.join("log").join(f)).unwrap_or_default();
        format!(
            "health.log:\n{}\nslurmd.log (tail):\n{}",
            read("health.log"),
            read("slurmd.log")
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        )
    };

    // 1. The untuned root: the health check drains the node with a gputune: reason.
    let mut last: (String, String);
    let drained = Instant::now() + Duration::from_secs(60);
    loop {
        last = node_state(&conf, &node);
        if last.0.contains("DRAIN") && last.1.starts_with("gputune: ") {
            break;
        }
        assert!(
            Instant::now() < drained,
            "not drained: {last:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(last.1.contains("(want "), "{last:?}");
    eprintln!("drained: {last:?}");

    // 2. Tuned: the health check lifts its own drain.
    repoint(&root, &tuned);
    wait_for("resume", Duration::from_secs(60), || {
        let (state, _) = node_state(&conf, &node);
        state == "IDLE"
    });

    // 3. srun with nothing exported: ranks find rank 0 from Slurm's own variables.
    let (ok, stdout, stderr) = output(
        Command::new("srun")
            .env("SLURM_CONF", &conf)
            .env_remove("MASTER_ADDR")
            .env_remove("MASTER_PORT")
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .args(["-N1", "-n2", "--time=2"])
            .arg(&gputune)
            .args([
                "bench",
                "allreduce",
                "--backend",
                "tcp",
                "-b",
                "1K",
                "-e",
                "64K",
            ]),
    );
    assert!(ok, "srun bench failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("# Avg bus bandwidth"), "{stdout}\n{stderr}");
    eprintln!("srun bench:\n{stdout}");

    // 3b. preflight as srun starts it, nothing exported: both ranks join rank 0 from Slurm's
    // variables; rank 0 prints the report, rank 1 its one-line verdict.
    let (ok, stdout, stderr) = output(
        Command::new("srun")
            .env("SLURM_CONF", &conf)
            .env_remove("MASTER_ADDR")
            .env_remove("MASTER_PORT")
            .env_remove("RANK")
            .env_remove("WORLD_SIZE")
            .args(["-N1", "-n2", "--time=2", "--label"])
            .arg(&gputune)
            .args(["preflight", "--timeout", "20", "--format", "json"]),
    );
    assert!(ok, "srun preflight failed:\n{stdout}\n{stderr}");
    let report: String = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("0: "))
        .collect::<Vec<_>>()
        .join("\n");
    let report: serde_json::Value = serde_json::from_str(&report)
        .unwrap_or_else(|e| panic!("rank 0's preflight JSON: {e}\n{stdout}\n{stderr}"));
    assert_eq!(report["world"], 2, "{report:#}");
    assert_eq!(report["joined"], 2, "{report:#}");
    assert_eq!(
        report["problems"].as_array().map(Vec::len),
        Some(0),
        "{report:#}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("1: ")
            && l.contains("preflight: rank 1")
            && l.contains("ok here")),
        "rank 1's verdict:\n{stdout}\n{stderr}"
    );

    // 4. A drain someone else set is never lifted, though the node passes.
    let (ok, _, stderr) = output(Command::new("scontrol").env("SLURM_CONF", &conf).args([
        "update",
        &format!("nodename={node}"),
        "state=drain",
        "reason=admin: bad dimm",
    ]));
    assert!(ok, "{stderr}");
    let runs = || {
        std::fs::read_to_string(w.join("log/runs"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = runs();
    wait_for("two more health checks", Duration::from_secs(60), || {
        runs() >= before + 2
    });
    // The second run may still be talking to slurmctld; give it its limit.
    std::thread::sleep(Duration::from_secs(2));
    let (state, reason) = node_state(&conf, &node);
    assert!(
        state.contains("DRAIN") && reason.starts_with("admin: bad dimm"),
        "{state} {reason}\n{}",
        logs()
    );

    // slurmd runs its health check with SLURMD_NODENAME and no SLURM_PROCID: what
    // `health` reads to judge a job's limits rather than its own (slurmd's).
    let env = std::fs::read_to_string(w.join("log/env")).unwrap();
    assert!(
        env.lines().any(|l| l.starts_with("SLURMD_NODENAME=")),
        "{env}"
    );
    assert!(!env.contains("SLURM_PROCID="), "{env}");

    // 5. Every state an administrator (or Slurm) can set survives a failing and a passing
    // run as it was set: never drained over, never resumed. slurmd keeps running the
    // passing check meanwhile; the test runs both itself, as slurmd runs them.
    let run_health = |root: &Path| {
        let out = common::gputune()
            .env("SLURM_CONF", &conf)
            .env("SLURMD_NODENAME", &node)
            .arg("--root")
            .arg(root)
            .args([
                "health",
                "--slurm",
                "--profile",
                "ddp-10gbe",
                "--timeout",
                "20",
            ])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let back_to_idle = |why: &str| {
        wait_for(why, Duration::from_secs(60), || {
            let (state, reason) = node_state(&conf, &node);
            words(&state) == BTreeSet::from(["IDLE".to_string()]) && reason.is_empty()
        });
    };
    let name = format!("nodename={node}");
    scontrol(&conf, &["update", &name, "state=resume"]);
    back_to_idle("the admin's resume");
    let held: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "down",
            vec![
                "update".into(),
                name.clone(),
                "state=down".into(),
                "reason=RMA gpu3".into(),
            ],
            "it is DOWN",
        ),
        (
            "fail",
            vec![
                "update".into(),
                name.clone(),
                "state=fail".into(),
                "reason=bad psu".into(),
            ],
            "it is FAIL",
        ),
        (
            "drain",
            vec![
                "update".into(),
                name.clone(),
                "state=drain".into(),
                "reason=admin: bad dimm".into(),
            ],
            "not gputune's",
        ),
        (
            "maint",
            vec![
                "create".into(),
                "reservation".into(),
                "reservationname=gputune_maint".into(),
                "starttime=now".into(),
                "duration=10".into(),
                format!("nodes={node}"),
                "flags=maint".into(),
                "users=root".into(),
            ],
            "maintenance reservation",
        ),
        (
            "reboot",
            vec!["reboot".into(), "reason=fw upgrade".into(), node.clone()],
            "reboot",
        ),
        (
            "future",
            vec!["update".into(), name.clone(), "state=future".into()],
            "FUTURE",
        ),
    ];
    for (what, set, said) in &held {
        let args: Vec<&str> = set.iter().map(String::as_str).collect();
        scontrol(&conf, &args);
        // The state this admin action settles in (a maintenance reservation shows on the
        // node within seconds; a reboot turns from requested to issued).
        wait_for(what, Duration::from_secs(60), || {
            let (state, _) = node_state(&conf, &node);
            match *what {
                "down" => state.starts_with("DOWN"),
                "fail" => state.contains("FAIL"),
                "drain" => state.contains("DRAIN"),
                "maint" => state.contains("MAINTENANCE"),
                "reboot" => state.contains("REBOOT_ISSUED"),
                _ => state.starts_with("FUTURE"),
            }
        });
        let before = node_state(&conf, &node);
        for root in [&untuned, &tuned] {
            let (code, stderr) = run_health(root);
            let after = node_state(&conf, &node);
            assert_eq!(
                (words(&after.0), &after.1),
                (words(&before.0), &before.1),
                "{what}: health on {} changed the node\n{stderr}\n{}",
                root.display(),
                logs()
            );
            let want = if root == &untuned { 1 } else { 0 };
            assert_eq!(code, Some(want), "{what}: {stderr}");
            assert!(
                stderr.contains("left alone") && stderr.contains(said),
                "{what}: {stderr}"
            );
        }
        eprintln!("{what}: left as {before:?}");
        match *what {
            "maint" => scontrol(&conf, &["delete", "reservationname=gputune_maint"]),
            _ => scontrol(&conf, &["update", &name, "state=resume"]),
        }
        back_to_idle(&format!("the admin's end of {what}"));
    }

    // 6. An image's escape sequences never reach slurmctld's drain reason.
    let planted = w.join("planted");
    std::fs::create_dir_all(planted.join("etc/sysctl.d")).unwrap();
    std::fs::write(planted.join("etc/os-release"), "ID=debian\n").unwrap();
    std::fs::write(
        planted.join("etc/sysctl.d/99-planted.conf"),
        "net.core.rmem_max = 4096\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m all good\r\n",
    )
    .unwrap();
    repoint(&root, &planted);
    let (code, stderr) = run_health(&planted);
    assert_eq!(code, Some(1), "{stderr}");
    let (state, reason) = node_state(&conf, &node);
    assert!(state.contains("DRAIN"), "{state} {reason}\n{stderr}");
    assert!(
        reason.starts_with("gputune: net.core.rmem_max: 4096"),
        "{reason:?}"
    );
    assert!(!reason.chars().any(char::is_control), "{reason:?}");
    assert!(
        !stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{stderr:?}"
    );
    // ...and the drain is gputune's, so the passing node is resumed by slurmd's own runs.
    repoint(&root, &tuned);
    back_to_idle("gputune's resume of its own drain");

    // 7. The live node's stack limit, judged by slurmd's health check: slurmd's own soft
    // limit is unlimited, but a job gets the submitting session's 8 MiB (Slurm propagates
    // every limit by default), so the node is not drained for a limit no job has. When the
    // sessions' limit itself is wrong, the job would get it: drained, and resumed once fixed.
    let slurmd_limits =
        std::fs::read_to_string(format!("/proc/{}/limits", slurmd.child.id())).unwrap();
    // `Max stack size <soft> <hard> bytes`
    let stack: Vec<&str> = slurmd_limits
        .lines()
        .find(|l| l.starts_with("Max stack size"))
        .map(|l| l.split_whitespace().skip(3).take(2).collect())
        .unwrap_or_default();
    assert_eq!(stack, ["unlimited", "unlimited"], "{slurmd_limits}");
    std::fs::write(
        w.join("limits.toml"),
        "description = \"stack only\"\n[limits]\n\"ulimit.stack\" = { max = \"8M\" }\n",
    )
    .unwrap();
    let log_len = || {
        std::fs::read_to_string(w.join("log/health.log"))
            .unwrap_or_default()
            .len()
    };
    // A run counted after the switch reads it; the one under way may be the fixture's.
    let switched = runs();
    let logged = log_len();
    std::fs::write(w.join("live-limits"), "").unwrap();
    wait_for("two live health checks", Duration::from_secs(60), || {
        runs() >= switched + 2
    });
    std::thread::sleep(Duration::from_secs(2));
    let new_log: String = std::fs::read_to_string(w.join("log/health.log"))
        .unwrap()
        .chars()
        .skip(logged)
        .collect();
    let (state, reason) = node_state(&conf, &node);
    assert!(
        words(&state) == BTreeSet::from(["IDLE".to_string()]) && reason.is_empty(),
        "slurmd's own stack limit drained the node: {state} {reason}\n{new_log}"
    );
    assert!(!new_log.contains("ERROR"), "{new_log}");
    std::fs::write(&limits_conf, "* - stack unlimited\n").unwrap();
    wait_for(
        "the drain for the sessions' stack",
        Duration::from_secs(60),
        || node_state(&conf, &node).0.contains("DRAIN"),
    );
    let (_, reason) = node_state(&conf, &node);
    assert!(
        reason.starts_with("gputune: ulimit.stack: soft unlimited (the submitting session's, /etc/security/limits.conf:1)"),
        "{reason}\n{}",
        logs()
    );
    std::fs::write(&limits_conf, "* - stack 8192\n").unwrap();
    back_to_idle("gputune's resume once the sessions' stack is fixed");
    std::fs::remove_file(w.join("live-limits")).unwrap();

    // 8. slurmctld unreachable: exit 3 with the reason, never a silent pass.
    drop(ctld);
    let out = common::gputune()
        .env("SLURM_CONF", &conf)
        .arg("--root")
        .arg(&tuned)
        .args(["health", "--slurm", "--profile", "ddp-10gbe"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    eprintln!("slurmctld stopped: {stderr}");
    assert!(stderr.contains("slurm: node"), "{stderr}");
}
