//! Who may apply and how they confirm, through `apply_with` and a stand-in operator, on a
//! fixture root holding global settings (vm.swappiness, fs.file-max) that tests must never
//! change on this machine.

use std::cell::RefCell;
use std::fs;
use std::path::Path;

use gputune::ExitCode;
use gputune::apply::nft::NftCommand;
use gputune::apply::operator::Operator;
use gputune::commands::apply::{ApplyArgs, RollbackArgs, apply_with, rollback_with};
use gputune::host::Root;

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

fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let put = |p: &str, t: &str| {
        let full = dir.path().join(p);
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, t).unwrap();
    };
    put("proc/sys/vm/swappiness", "60\n");
    put("proc/sys/fs/file-max", "9223372036854775807\n");
    put("proc/sys/kernel/numa_balancing", "1\n");
    put("profile.toml", PROFILE);
    dir
}

fn args(dir: &Path, yes: bool, dry_run: bool) -> ApplyArgs {
    ApplyArgs {
        profile: dir.join("profile.toml").display().to_string(),
        dry_run,
        yes,
        no_persist: false,
        only: vec![],
        live: false,
    }
}

fn swappiness(dir: &Path) -> String {
    fs::read_to_string(dir.join("proc/sys/vm/swappiness")).unwrap()
}

#[test]
fn not_root_exits_3_before_anything_is_touched() {
    let dir = fixture();
    let root = Root::new(dir.path());
    let err = apply_with(
        &args(dir.path(), true, false),
        &root,
        &person(false, true, true),
        &NftCommand,
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), ExitCode::Runtime);
    assert!(err.to_string().contains("run it as root"));
    assert!(!dir.path().join("run").exists() && !dir.path().join("var").exists());
    // A dry run shows the plan without root.
    let ok = apply_with(
        &args(dir.path(), false, true),
        &root,
        &person(false, false, false),
        &NftCommand,
    );
    assert_eq!(ok.unwrap(), ExitCode::Ok);
    assert_eq!(swappiness(dir.path()), "60\n");
}

#[test]
fn a_script_without_yes_exits_2_and_a_terminal_is_asked() {
    let dir = fixture();
    let root = Root::new(dir.path());
    let err = apply_with(
        &args(dir.path(), false, false),
        &root,
        &person(true, false, true),
        &NftCommand,
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), ExitCode::Usage);
    assert_eq!(swappiness(dir.path()), "60\n");

    let declines = person(true, true, false);
    assert_eq!(
        apply_with(
            &args(dir.path(), false, false),
            &root,
            &declines,
            &NftCommand
        )
        .unwrap(),
        ExitCode::Ok
    );
    assert_eq!(
        declines.asked.borrow().as_slice(),
        ["Apply these 2 changes?"]
    );
    assert_eq!(swappiness(dir.path()), "60\n");
    assert!(!dir.path().join("var/lib/gputune/journal.json").exists());

    let accepts = person(true, true, true);
    assert_eq!(
        apply_with(
            &args(dir.path(), false, false),
            &root,
            &accepts,
            &NftCommand
        )
        .unwrap(),
        ExitCode::Ok
    );
    assert_eq!(swappiness(dir.path()), "10");
    let conf = fs::read_to_string(dir.path().join("etc/sysctl.d/90-gputune.conf")).unwrap();
    // fs.file-max passes live and its default depends on the machine, so it is left alone.
    assert!(
        conf.contains("\nvm.swappiness = 10\n") && !conf.contains("fs.file-max"),
        "{conf}"
    );
}

#[test]
fn global_settings_roll_back_byte_for_byte_on_a_fixture_root() {
    let dir = fixture();
    let root = Root::new(dir.path());
    let me = person(true, false, false);
    apply_with(&args(dir.path(), true, false), &root, &me, &NftCommand).unwrap();
    assert_eq!(swappiness(dir.path()), "10");
    assert_eq!(
        rollback_with(&root, &me, &NftCommand).unwrap(),
        ExitCode::Ok
    );
    assert_eq!(swappiness(dir.path()), "60\n");
    assert_eq!(
        fs::read_to_string(dir.path().join("proc/sys/fs/file-max")).unwrap(),
        "9223372036854775807\n"
    );
    assert!(!dir.path().join("etc/sysctl.d/90-gputune.conf").exists());
    let _ = RollbackArgs {};
}

#[test]
fn a_check_that_cannot_be_read_stops_apply_before_any_change() {
    let dir = fixture();
    // fs.file-max unreadable (a directory where the file should be).
    fs::remove_file(dir.path().join("proc/sys/fs/file-max")).unwrap();
    fs::create_dir(dir.path().join("proc/sys/fs/file-max")).unwrap();
    let root = Root::new(dir.path());
    let err = apply_with(
        &args(dir.path(), true, false),
        &root,
        &person(true, false, false),
        &NftCommand,
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), ExitCode::Runtime);
    assert!(err.to_string().contains("fs.file-max"), "{err}");
    assert_eq!(swappiness(dir.path()), "60\n", "nothing may change");
    assert!(!dir.path().join("var/lib/gputune/journal.json").exists());
}

#[test]
fn what_apply_cannot_fix_still_fails_after_it() {
    let dir = fixture();
    fs::write(
        dir.path().join("profile.toml"),
        format!("{PROFILE}\"swap.devices\" = {{ max = 0 }}\n"),
    )
    .unwrap();
    fs::write(
        dir.path().join("proc/swaps"),
        "Filename Type Size Used Priority\n/swapfile file 1048572 0 -2\n",
    )
    .unwrap();
    let root = Root::new(dir.path());
    let me = person(true, false, false);
    // swappiness is fixed, the active swap is not: exit 1, as audit would say.
    let code = apply_with(&args(dir.path(), true, false), &root, &me, &NftCommand).unwrap();
    assert_eq!(code, ExitCode::Findings);
    assert_eq!(swappiness(dir.path()), "10");
    // Nothing left that apply can change, but the failure remains.
    let again = apply_with(&args(dir.path(), true, false), &root, &me, &NftCommand).unwrap();
    assert_eq!(again, ExitCode::Findings);
}

#[test]
fn rollback_leaves_a_file_that_is_no_longer_gputunes_alone() {
    let dir = fixture();
    let root = Root::new(dir.path());
    let me = person(true, false, false);
    apply_with(&args(dir.path(), true, false), &root, &me, &NftCommand).unwrap();
    // The operator replaces gputune's file with one of their own.
    let conf = dir.path().join("etc/sysctl.d/90-gputune.conf");
    fs::write(&conf, "vm.swappiness = 1\nkernel.pid_max = 4194304\n").unwrap();
    assert_eq!(
        rollback_with(&root, &me, &NftCommand).unwrap(),
        ExitCode::Ok
    );
    assert_eq!(
        swappiness(dir.path()),
        "60\n",
        "the live value is still restored"
    );
    assert_eq!(
        fs::read_to_string(&conf).unwrap(),
        "vm.swappiness = 1\nkernel.pid_max = 4194304\n",
        "their file is neither deleted nor overwritten"
    );
}
