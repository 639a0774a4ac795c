//! `gputune audit`'s table as a person meets it: in a real 80×24 terminal (tmux), piped, and
//! with `COLUMNS`. What fails comes first, each fix alone on its line, and no check id or
//! fix is ever broken across lines.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{audit_json, bin, fixture, gputune, text};
use serde_json::Value;

const FIXTURE: &str = "untuned-node";

/// Every finding of the fixture's audit, from its JSON report: (id, status, fix).
fn findings() -> Vec<(String, String, String)> {
    let (_, doc) = audit_json(FIXTURE, &[]);
    common::findings(&doc)
        .iter()
        .map(|f: &Value| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("status"), s("fix"))
        })
        .collect()
}

/// `gputune audit --root FIXTURE ARGS` with stdout piped and `env` set: its stdout.
fn piped(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = gputune();
    cmd.env_remove("COLUMNS").env_remove("NO_COLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .arg("audit")
        .arg("--root")
        .arg(fixture(FIXTURE))
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// Asserts the parts a person copies are whole: every id of a finding shown on one line,
/// every fix of a failure or warning whole on a line of its own after `fix: `.
fn assert_nothing_split(report: &str, findings: &[(String, String, String)], shown: &[&str]) {
    let lines: Vec<&str> = report.lines().collect();
    for (id, status, fix) in findings {
        if !shown.contains(&status.as_str()) {
            continue;
        }
        assert!(
            lines.iter().any(|l| l.contains(id.as_str())),
            "{id} is split or missing:\n{report}"
        );
        if !fix.is_empty() {
            let whole = format!("       fix: {fix}");
            assert!(
                lines.contains(&whole.as_str()),
                "the fix of {id} is not whole on its own line ({fix}):\n{report}"
            );
        }
    }
}

/// The attention list comes first, worst first: errors, then failures, then warnings; no
/// passing check in it.
fn assert_worst_first(report: &str) {
    let start = report
        .find("Needs attention (")
        .unwrap_or_else(|| panic!("no attention list:\n{report}"));
    let list = &report[start..];
    let list = &list[..list.find("\n\n").unwrap_or(list.len())];
    let ranks: Vec<u8> = list
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .map(|l| match l.split_whitespace().next() {
            Some("ERROR") => 0,
            Some("FAIL") => 1,
            Some("WARN") => 2,
            other => panic!("{other:?} in the attention list:\n{list}"),
        })
        .collect();
    assert!(ranks.len() >= 10, "{list}");
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{list}");
    let first_area = report.find("\nnetwork: ").expect("network detail");
    assert!(start < first_area, "{report}");
}

#[test]
fn piped_it_is_plain_lines_failures_first_and_passes_left_out() {
    let report = piped(&[], &[("LANG", "C.UTF-8")]);
    let all = findings();
    assert_worst_first(&report);
    assert_nothing_split(&report, &all, &["fail", "warn", "error", "skip"]);
    assert!(
        !report.contains(['│', '┆', '═', '+', '|']),
        "boxes in a pipe:\n{report}"
    );
    // Each shown finding's detail is one unwrapped line, whatever its length.
    assert!(report.contains(
        "  FAIL  net.core.rmem_max: expected >= 33554432, found 212992\n        Caps the receive buffer a socket may ask for; NCCL's socket transport and Gloo cannot reach line rate when it is small.\n"
    ), "{report}");
    let passing: Vec<&String> = all
        .iter()
        .filter(|(_, s, _)| s == "pass")
        .map(|(id, _, _)| id)
        .collect();
    assert!(!passing.is_empty());
    for id in &passing {
        assert!(
            !report.contains(&format!(" {id}: ")),
            "{id} passes and is shown:\n{report}"
        );
    }
    assert!(
        report.contains(&format!(
            "{} passing checks not shown (--verbose shows them)\n",
            passing.len()
        )),
        "{report}"
    );
    let last = report.lines().last().unwrap();
    assert!(
        last.starts_with("10 passed, 12 warned, 4 failed, "),
        "{last}"
    );

    let verbose = piped(&["--verbose"], &[]);
    for id in &passing {
        assert!(
            verbose.contains(&format!("  PASS  {id}: expected ")),
            "--verbose leaves out {id}:\n{verbose}"
        );
    }
    assert!(!verbose.contains("not shown"), "{verbose}");
}

/// Whether a line fits `width`; only a fix (copied whole) or one word longer than the
/// width (a path, never split) may run past it.
fn fits(line: &str, width: usize) -> bool {
    line.chars().count() <= width
        || line.starts_with("       fix: ")
        || !line.trim_start().contains(' ')
}

#[test]
fn columns_sets_the_width_and_wide_enough_gets_a_table() {
    let all = findings();
    for width in [80usize, 120] {
        let columns = width.to_string();
        let report = piped(&[], &[("COLUMNS", &columns), ("LANG", "C.UTF-8")]);
        assert_worst_first(&report);
        assert_nothing_split(&report, &all, &["fail", "warn", "error", "skip"]);
        for line in report.lines() {
            assert!(fits(line, width), "a line over {width} columns: {line:?}");
        }
        let table = report.contains('┆');
        assert_eq!(table, width >= 100, "table at {width} columns:\n{report}");
    }
}

/// Runs `shell_line` in a detached tmux session of 80×24 on a private server and returns the
/// whole pane (history included), soft-wrapped lines joined as a copy would join them.
fn in_tmux(shell_line: &str) -> (String, String) {
    let server = format!("gputune-glance-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &server, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux runs")
    };
    let done = "::gputune-test-done::";
    let script = format!("{shell_line}; echo {done}; sleep 120");
    let started = tmux(&[
        "new-session",
        "-d",
        "-x",
        "80",
        "-y",
        "24",
        "-s",
        "audit",
        "sh",
        "-c",
        &script,
    ]);
    assert!(started.status.success(), "{}", text(&started.stderr));
    let _ = tmux(&["set-option", "-g", "history-limit", "10000"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let capture = |join: bool| {
        let mut args = vec!["capture-pane", "-p", "-S", "-", "-t", "audit"];
        if join {
            args.push("-J");
        }
        text(&tmux(&args).stdout)
    };
    let (joined, rows) = loop {
        let joined = capture(true);
        if joined.contains(done) {
            break (joined, capture(false));
        }
        if Instant::now() > deadline {
            let _ = tmux(&["kill-server"]);
            panic!("the audit did not finish in the terminal:\n{joined}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = tmux(&["kill-server"]);
    (joined, rows)
}

#[test]
fn in_an_80_column_terminal_nothing_a_person_copies_is_split() {
    common::require(&["tmux"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.txt");
    let audit = format!(
        "env -u COLUMNS -u NO_COLOR LANG=C.UTF-8 TERM=xterm {} audit --root {}",
        bin(),
        fixture(FIXTURE).display()
    );
    let line = format!("{audit}; {audit} --output {}", file.display());
    let (joined, rows) = in_tmux(&line);
    // The copy written to a file from the same terminal is laid out for no terminal.
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("\n        Caps the receive buffer a socket may ask for; NCCL's socket transport and Gloo cannot reach line rate when it is small.\n"), "{written}");
    let all = findings();
    assert_worst_first(&joined);
    assert_nothing_split(&joined, &all, &["fail", "warn", "error", "skip"]);
    // gputune wrapped everything itself at the terminal's 80 columns: the terminal had to
    // fold only fixes, which are never broken (joined above, whole).
    for line in joined.lines() {
        assert!(fits(line, 80), "the terminal folded {line:?}");
    }
    assert!(rows.lines().all(|l| l.chars().count() <= 80));
    // The 80-column report is short: 566 lines before for 49 checks.
    let length = joined.lines().count();
    assert!(length < 200, "{length} lines:\n{joined}");
}
