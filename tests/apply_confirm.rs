//! Who may apply and how they confirm, through `apply::run::apply_with` and a stand-in
//! operator, on a fixture root holding global settings (vm.swappiness, fs.file-max) that
//! tests must never change on this machine.

use std::cell::RefCell;
use std::fs;

use gputune::apply::nft::NftCommand;
use gputune::apply::operator::Operator;
use gputune::apply::run::{Request, apply_with, rollback_with};
use gputune::host::Root;
use gputune::{ExitCode, Result};

struct Person {
    root: bool,
    terminal: bool,
    answer: bool,
    asked: RefCell<Vec<String>>,
}

impl Operator for Person {
    fn is_root(&self) -> bool {
        self.root
    }
    fn can_ask(&self) -> bool {
        self.terminal
    }
    fn confirm(&self, question: &str) -> std::io::Result<bool> {
        self.asked.borrow_mut().push(question.to_string());
        Ok(self.answer)
    }
}

fn person(root: bool, terminal: bool, answer: bool) -> Person {
    Person {
        root,
        terminal,
        answer,
        asked: RefCell::new(Vec::new()),
    }
}

const PROFILE: &str = r#"
description = "global memory sysctls on a fixture root"
[memory]
"vm.swappiness" = { max = 10 }
"fs.file-max" = { min = 1048576, severity = "warn" }
"#;

/// How the operator confirms an apply.
#[derive(Clone, Copy)]
enum Confirm {
    /// `--yes`.
    Yes,
    /// `--dry-run`.
    DryRun,
    /// Neither: ask, where there is someone to ask.
    Ask,
}

/// A fixture root holding global settings, on which apply and rollback run.
struct Node {
    dir: tempfile::TempDir,
    root: Root,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in [
            ("proc/sys/vm/swappiness", "60\n"),
            ("proc/sys/fs/file-max", "9223372036854775807\n"),
            ("proc/sys/kernel/numa_balancing", "1\n"),
            ("profile.toml", PROFILE),
        ] {
            crate::common::put(dir.path(), path, text);
        }
        let root = Root::new(dir.path());
        Node { dir, root }
    }

    fn path(&self, path: &str) -> std::path::PathBuf {
        self.dir.path().join(path)
    }

    /// `gputune apply` of the node's profile, confirmed as `confirm` says, by `who`.
    fn apply(&self, confirm: Confirm, who: &Person) -> Result<ExitCode> {
        let args = Request {
            profile: self.path("profile.toml").display().to_string(),
            dry_run: matches!(confirm, Confirm::DryRun),
            yes: matches!(confirm, Confirm::Yes),
            ..Request::default()
        };
        apply_with(&args, &self.root, who, &NftCommand)
    }

    /// [`Node::apply`] that fails with `code`: the error.
    fn refused(&self, confirm: Confirm, who: &Person, code: ExitCode) -> gputune::Error {
        let err = self.apply(confirm, who).unwrap_err();
        assert_eq!(err.exit_code(), code, "{err}");
        err
    }

    fn rollback(&self, who: &Person) -> Result<ExitCode> {
        rollback_with(&self.root, who, &NftCommand)
    }

    fn swappiness(&self) -> String {
        fs::read_to_string(self.path("proc/sys/vm/swappiness")).unwrap()
    }

    fn journal_exists(&self) -> bool {
        self.path("var/lib/gputune/journal.json").exists()
    }
}

#[test]
fn not_root_exits_3_before_anything_is_touched() {
    let node = Node::new();
    let err = node.refused(Confirm::Yes, &person(false, true, true), ExitCode::Runtime);
    assert!(err.to_string().contains("run it as root"));
    assert!(!node.path("run").exists() && !node.path("var").exists());
    // A dry run shows the plan without root.
    let ok = node.apply(Confirm::DryRun, &person(false, false, false));
    assert_eq!(ok.unwrap(), ExitCode::Ok);
    assert_eq!(node.swappiness(), "60\n");
}

#[test]
fn a_script_without_yes_exits_2_and_a_terminal_is_asked() {
    let node = Node::new();
    node.refused(Confirm::Ask, &person(true, false, true), ExitCode::Usage);
    assert_eq!(node.swappiness(), "60\n");

    let declines = person(true, true, false);
    assert_eq!(node.apply(Confirm::Ask, &declines).unwrap(), ExitCode::Ok);
    assert_eq!(
        declines.asked.borrow().as_slice(),
        ["Apply these 2 changes?"]
    );
    assert_eq!(node.swappiness(), "60\n");
    assert!(!node.journal_exists());

    let accepts = person(true, true, true);
    assert_eq!(node.apply(Confirm::Ask, &accepts).unwrap(), ExitCode::Ok);
    assert_eq!(node.swappiness(), "10");
    let conf = fs::read_to_string(node.path("etc/sysctl.d/90-gputune.conf")).unwrap();
    // fs.file-max passes live and its default depends on the machine, so it is left alone.
    assert!(
        conf.contains("\nvm.swappiness = 10\n") && !conf.contains("fs.file-max"),
        "{conf}"
    );
}

#[test]
fn global_settings_roll_back_byte_for_byte_on_a_fixture_root() {
    let node = Node::new();
    let me = person(true, false, false);
    node.apply(Confirm::Yes, &me).unwrap();
    assert_eq!(node.swappiness(), "10");
    assert_eq!(node.rollback(&me).unwrap(), ExitCode::Ok);
    assert_eq!(node.swappiness(), "60\n");
    assert_eq!(
        fs::read_to_string(node.path("proc/sys/fs/file-max")).unwrap(),
        "9223372036854775807\n"
    );
    assert!(!node.path("etc/sysctl.d/90-gputune.conf").exists());
}

#[test]
fn a_check_that_cannot_be_read_stops_apply_before_any_change() {
    let node = Node::new();
    // fs.file-max unreadable (a directory where the file should be).
    fs::remove_file(node.path("proc/sys/fs/file-max")).unwrap();
    fs::create_dir(node.path("proc/sys/fs/file-max")).unwrap();
    let err = node.refused(Confirm::Yes, &person(true, false, false), ExitCode::Runtime);
    assert!(err.to_string().contains("fs.file-max"), "{err}");
    assert_eq!(node.swappiness(), "60\n", "nothing may change");
    assert!(!node.journal_exists());
}

#[test]
fn what_apply_cannot_fix_still_fails_after_it() {
    let node = Node::new();
    fs::write(
        node.path("profile.toml"),
        format!("{PROFILE}\"swap.devices\" = {{ max = 0 }}\n"),
    )
    .unwrap();
    fs::write(
        node.path("proc/swaps"),
        "Filename Type Size Used Priority\n/swapfile file 1048572 0 -2\n",
    )
    .unwrap();
    let me = person(true, false, false);
    // swappiness is fixed, the active swap is not: exit 1, as audit would say.
    assert_eq!(node.apply(Confirm::Yes, &me).unwrap(), ExitCode::Findings);
    assert_eq!(node.swappiness(), "10");
    // Nothing left that apply can change, but the failure remains.
    assert_eq!(node.apply(Confirm::Yes, &me).unwrap(), ExitCode::Findings);
}

#[test]
fn rollback_leaves_a_file_that_is_no_longer_gputunes_alone() {
    let node = Node::new();
    let me = person(true, false, false);
    node.apply(Confirm::Yes, &me).unwrap();
    // The operator replaces gputune's file with one of their own.
    let conf = node.path("etc/sysctl.d/90-gputune.conf");
    fs::write(&conf, "vm.swappiness = 1\nkernel.pid_max = 4194304\n").unwrap();
    assert_eq!(node.rollback(&me).unwrap(), ExitCode::Ok);
    assert_eq!(
        node.swappiness(),
        "60\n",
        "the live value is still restored"
    );
    assert_eq!(
        fs::read_to_string(&conf).unwrap(),
        "vm.swappiness = 1\nkernel.pid_max = 4194304\n",
        "their file is neither deleted nor overwritten"
    );
}
