//! `gputune preflight`'s refusals before any network work: no launcher, bad flags, a bad
//! `--pairs-report`, `--root`; each a clear message and exit 2, from a clean environment.

use crate::common;

use common::{gputune, text};

fn preflight(args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    let mut c = gputune();
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .arg("preflight")
        .args(args);
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn refusals_name_the_flag_or_variable_and_exit_2() {
    let job = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("pairs.json");
    std::fs::write(&bad, "{\n\"pairs\": 3\n}").unwrap();
    let bad = bad.display().to_string();
    let missing = dir.path().join("none.json").display().to_string();
    let image = dir.path().display().to_string();
    for (args, vars, needle) in [
        (vec![], &[][..], "start it with srun"),
        (vec![], &[("RANK", "1")][..], "WORLD_SIZE is not set"),
        (vec!["--timeout", "0"], &job[..], "--timeout 0"),
        (vec!["--timeout", "x"], &job[..], "--timeout"),
        (vec!["--format", "xml"], &job[..], "xml"),
        (
            vec!["--pairs-report", &bad],
            &job[..],
            "--pairs-report is drawn in the HTML page",
        ),
        (
            vec!["--format", "html", "--pairs-report", &bad],
            &job[..],
            "line 2: not `bench --pairs --format json` output",
        ),
        (
            vec!["--format", "html", "--pairs-report", &missing],
            &job[..],
            "none.json",
        ),
        (
            vec!["--format", "html", "--pairs-report", "/dev"],
            &job[..],
            "not a regular file",
        ),
        (vec!["--root", &image], &job[..], "--root does not apply"),
    ] {
        let out = preflight(&args, vars);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// A rank whose rank 0 never listens gives up by its deadline, saying where it looked.
#[test]
fn a_lone_rank_gives_up_within_its_timeout_and_says_where_it_looked() {
    let start = std::time::Instant::now();
    let out = preflight(
        &["--timeout", "2"],
        &[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "9"),
        ],
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(8));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("rank 1 (")
            && stdout.contains("cannot reach rank 0 at MASTER_ADDR=127.0.0.1 port 9")
            && stdout.contains("refused"),
        "{stdout}"
    );
}

/// Rank 0 must listen where MASTER_ADDR points; an address of another host is exit 3 with
/// what to do.
#[test]
fn rank_0_that_cannot_listen_at_master_addr_exits_3() {
    let out = preflight(
        &["--timeout", "2"],
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "192.0.2.222"),
            ("MASTER_PORT", "29599"),
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("cannot open the rendezvous at MASTER_ADDR=192.0.2.222"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}
