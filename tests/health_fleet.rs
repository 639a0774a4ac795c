//! `gputune health` on fixture roots and on the live node with a hung `nft` (`gputune fleet`
//! has its own module, tests/fleet.rs).

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{fixture, gputune, text};

#[test]
fn health_prints_one_greppable_line_per_failing_check() {
    let out = gputune()
        .args(["health", "--profile", "ddp-10gbe", "--root"])
        .arg(fixture("untuned-node"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ERROR: gputune: net.core.rmem_max: ")
                && l.contains("(want >= 16777216)")),
        "{stdout}"
    );
    assert!(
        stdout.lines().all(|l| l.starts_with("ERROR: gputune: ")),
        "{stdout}"
    );

    // A tuned node is silent, like NHC.
    let out = gputune()
        .args(["health", "--profile", "ddp-10gbe", "--root"])
        .arg(fixture("tuned-node"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");
}

#[test]
fn health_speaks_node_problem_detector() {
    let npd = |root: &str, profile: &str| {
        let out = gputune()
            .args(["health", "--format", "npd", "--profile", profile, "--root"])
            .arg(fixture(root))
            .output()
            .unwrap();
        (out.status.code(), text(&out.stdout))
    };
    let (code, message) = npd("untuned-node", "ddp-10gbe");
    assert_eq!(code, Some(1), "{message}");
    assert!(message.starts_with("gputune: ") && message.trim_end().chars().count() <= 80);
    assert_eq!(message.lines().count(), 1);
    let (code, message) = npd("tuned-node", "ddp-10gbe");
    assert_eq!(code, Some(0), "{message}");
    // Could not tell (here: an unknown profile) is "unknown", 2, with a message.
    let (code, message) = npd("tuned-node", "no-such-profile");
    assert_eq!(code, Some(2), "{message}");
    assert!(message.contains("no-such-profile"), "{message}");
}

/// A `nft` (and `iptables-*-save`) that never returns: the firewall area is abandoned at the
/// health limit with an error naming it, the program is killed, and health still answers.
#[test]
fn a_hung_nft_becomes_an_error_naming_the_firewall_check() {
    let stubs = tempfile::tempdir().unwrap();
    let pids = stubs.path().join("pids");
    for tool in [
        "nft",
        "iptables-save",
        "iptables-legacy-save",
        "iptables-nft-save",
        "ip6tables-save",
    ] {
        let path = stubs.path().join(tool);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho $$ >> {}\nexec sleep 1000\n",
                pids.display()
            ),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    let path = format!(
        "{}:{}",
        stubs.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let start = Instant::now();
    let out = gputune()
        .args(["health", "--timeout", "5"])
        .env("PATH", path)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ERROR: gputune: firewall: ")
                && l.contains("did not finish within ")
                && l.contains("(hung)")),
        "{stdout}"
    );
    // The stub really ran and was killed, not left behind.
    let started = std::fs::read_to_string(&pids).unwrap_or_default();
    assert!(!started.trim().is_empty(), "the stub nft never ran");
    for pid in started.split_whitespace() {
        let proc_dir = Path::new("/proc").join(pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        while proc_dir.exists()
            && !std::fs::read_to_string(proc_dir.join("stat"))
                .unwrap_or_default()
                .contains(") Z")
        {
            assert!(Instant::now() < deadline, "stub {pid} still runs");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
