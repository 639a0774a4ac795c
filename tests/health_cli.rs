//! `gputune health` as an operator meets it: an image whose files carry terminal escapes, a
//! closed or full standard output, and the resource limits judged the way slurmd runs it
//! (the job's) or the way a job runs it (its own).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{fixture, gputune, gputune_process, text};

/// An image (no proc, no sys) whose sysctl.d value carries escape sequences that would
/// clear the screen and print a fake verdict.
fn planted_image(dir: &Path) {
    std::fs::create_dir_all(dir.join("etc/sysctl.d")).unwrap();
    std::fs::write(dir.join("etc/os-release"), "ID=debian\n").unwrap();
    std::fs::write(
        dir.join("etc/sysctl.d/99-planted.conf"),
        "net.core.rmem_max = 4096\u{1b}[2J\u{1b}[H\u{1b}]0;pwned\u{7}\u{9b}32m all checks passed\r\n",
    )
    .unwrap();
}

#[test]
fn an_images_escape_sequences_never_reach_the_terminal() {
    let image = tempfile::tempdir().unwrap();
    planted_image(image.path());
    for format in ["text", "npd"] {
        let out = gputune()
            .arg("--root")
            .arg(image.path())
            .args(["health", "--profile", "ddp-10gbe", "--format", format])
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{format}: {stdout}");
        assert!(stdout.contains("net.core.rmem_max"), "{format}: {stdout}");
        assert!(stdout.contains("4096"), "{format}: {stdout}");
        let control: Vec<char> = stdout
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(control.is_empty(), "{format}: {control:?} in {stdout:?}");
        // One line per finding: no carriage return or newline of the file splits one.
        assert!(
            stdout.lines().all(|l| l.starts_with("ERROR: gputune: ")
                || (format == "npd" && l.starts_with("gputune: "))),
            "{format}: {stdout:?}"
        );
    }
}

#[test]
fn a_closed_or_full_stdout_never_panics() {
    // The reader went away (`gputune health | head -0`): quiet, and the verdict still stands.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = gputune_process()
        .args(["health", "--profile", "ddp-10gbe", "--root"])
        .arg(fixture("untuned-node"))
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr, "");
    // A full disk is not a closed pipe: nobody saw the verdict, exit 3 saying why.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = gputune_process()
        .args(["health", "--profile", "ddp-10gbe", "--root"])
        .arg(fixture("untuned-node"))
        .stdout(full)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("cannot write to standard output"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The hard nofile limit the runs get: this process's, at most 16384 (lowering it needs no
/// privilege, raising it would).
fn nofile_hard() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("/proc/self/limits has Max open files");
    // `Max open files  <soft>  <hard>  files`
    let hard = line.split_whitespace().nth(4).expect("a hard limit");
    let hard = hard.parse::<u64>().unwrap_or(u64::MAX).min(16384);
    assert!(
        hard >= 8192,
        "the test needs a hard nofile limit of 8192 or more, not {hard}"
    );
    hard
}

/// `gputune health` on the live node with only `ulimit.nofile` (at least 4096) to judge, in a
/// private mount namespace where `limits.conf` is `limits` and limits.d is empty, with the
/// process's nofile limit soft 1024 (systemd's default soft limit for services), hard
/// [`nofile_hard`], `env` added, and `SLURM_CONF` naming a file holding `slurm_conf` when given.
fn limits_health(
    limits: &str,
    slurm_conf: Option<&str>,
    env: &[(&str, &str)],
    extra: &[&str],
) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("limits.conf"), limits).unwrap();
    std::fs::create_dir(d.join("limits.d")).unwrap();
    std::fs::write(
        d.join("profile.toml"),
        "description = \"nofile only\"\n[limits]\n\"ulimit.nofile\" = { min = 4096 }\n",
    )
    .unwrap();
    let mut script = format!(
        "set -e; mount --bind {d}/limits.conf /etc/security/limits.conf; ",
        d = d.display()
    );
    if Path::new("/etc/security/limits.d").is_dir() {
        script.push_str(&format!(
            "mount --bind {}/limits.d /etc/security/limits.d; ",
            d.display()
        ));
    }
    script.push_str(&format!(
        "exec prlimit --nofile=1024:{} {} health --profile {}/profile.toml {}",
        nofile_hard(),
        common::bin(),
        d.display(),
        extra.join(" ")
    ));
    let mut command = Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    for var in [
        "SLURMD_NODENAME",
        "SLURM_PROCID",
        "SLURM_CONF",
        "GPUTUNE_ROOT",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    if let Some(conf) = slurm_conf {
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        command.env("SLURM_CONF", d.join("slurm.conf"));
    }
    let out = command.output().unwrap();
    (
        out.status.code(),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

#[test]
fn health_run_by_slurmd_judges_the_limits_a_job_gets() {
    let sessions = "* - nofile 131072\n";
    let hard = nofile_hard();
    // A person's shell outside Slurm: this process's soft 1024 is what is judged.
    let (code, out) = limits_health(sessions, None, &[], &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "ERROR: gputune: ulimit.nofile: soft 1024, hard {hard} (this process)"
        )),
        "{out}"
    );
    // slurmd's health check (SLURMD_NODENAME set, as slurmd sets it and nothing else): a
    // job takes the submitting session's 131072 (Slurm propagates every limit by default),
    // lowered to slurmd's hard limit: it passes, and the node is not drained for slurmd's
    // own soft limit.
    let slurmd = [("SLURMD_NODENAME", "n1")];
    let conf = Some("ClusterName=test\n");
    let (code, out) = limits_health(sessions, conf, &slurmd, &[]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(out, "");
    // slurm.conf keeps NOFILE from propagating: a job keeps slurmd's soft 1024.
    let except = Some("PropagateResourceLimitsExcept=NOFILE,MEMLOCK\n");
    let (code, out) = limits_health(sessions, except, &slurmd, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "ERROR: gputune: ulimit.nofile: soft 1024, hard {hard} (slurmd's, which a job keeps: NOFILE is not propagated)"
        )),
        "{out}"
    );
    // The job's own session is too low: the job would get it, so it fails.
    let (code, out) = limits_health("* - nofile 2048\n", conf, &slurmd, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("ERROR: gputune: ulimit.nofile: soft 2048 (the submitting session's"),
        "{out}"
    );
    // --as-job (a prolog that runs as the job) and a task of a job judge themselves.
    let (code, out) = limits_health(sessions, conf, &slurmd, &["--as-job"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("(this process)"), "{out}");
    let task = [("SLURMD_NODENAME", "n1"), ("SLURM_PROCID", "0")];
    let (code, out) = limits_health(sessions, conf, &task, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("(this process)"), "{out}");
}
