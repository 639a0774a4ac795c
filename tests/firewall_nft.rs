//! The firewall executor against the real `nft`, inside a network namespace of its own:
//! the test binary re-runs itself under `unshare --net`, so this machine's ruleset is
//! never touched.

use std::path::Path;
use std::process::Command;

use gputune::apply::io::{HostIo, Io, has_live_kernel};
use gputune::apply::nft::{Nft, NftCommand, accepted_ports};
use gputune::apply::plan::{self, PlanOptions};
use gputune::apply::target::{State, Target};
use gputune::apply::{firewall, transaction};
use gputune::finding::Change;
use gputune::host::Root;

const INSIDE: &str = "GPUTUNE_TEST_IN_NETNS";

/// `test`'s name as the test harness knows it: with its module path inside the binary.
fn test_path(test: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}

/// Runs `test` in a fresh network namespace; true when this process is the one inside.
fn in_own_netns(test: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    crate::common::require(&["unshare", "nft"]);
    let status = Command::new("unshare")
        .args(["--net", "--mount", "--propagation", "private"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &test_path(test),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INSIDE, "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{test} failed inside its network namespace"
    );
    false
}

/// The temp dir of [`live_root`]: its /proc is unmounted before the dir is removed, which
/// removing it with the live /proc still mounted there could not do.
struct LiveDir(tempfile::TempDir);

impl LiveDir {
    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for LiveDir {
    fn drop(&mut self) {
        let proc = self.0.path().join("proc");
        let _ = Command::new("umount").arg(&proc).status();
    }
}

/// A temp root with the namespace's /proc bind-mounted at DIR/proc (in the test's own mount
/// namespace), so the tree has the live kernel: a link to /proc would resolve inside DIR, as
/// --root does.
fn live_root() -> (LiveDir, Root) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("proc")).unwrap();
    let ok = Command::new("mount")
        .args(["--bind", "/proc"])
        .arg(dir.path().join("proc"))
        .status()
        .unwrap();
    assert!(ok.success(), "mount --bind /proc failed");
    let root = Root::new(dir.path());
    (LiveDir(dir), root)
}

/// Plan options for the live kernel, persisting or not.
fn live(persist: bool) -> PlanOptions {
    PlanOptions {
        persist,
        live_kernel: true,
        image: false,
    }
}

fn accept(ports: &[(u16, u16)]) -> Change {
    Change::FirewallAccept {
        ports: ports.to_vec(),
    }
}

#[test]
fn the_table_is_applied_verified_persisted_and_removed_with_the_real_nft() {
    if !in_own_netns("the_table_is_applied_verified_persisted_and_removed_with_the_real_nft") {
        return;
    }
    let (dir, root) = live_root();
    assert!(has_live_kernel(&root));
    let nft = NftCommand;
    let io = HostIo {
        root: &root,
        nft: Some(&nft),
    };
    let options = live(true);
    assert_eq!(io.read(&Target::NftTable).unwrap(), State::Absent);

    let changes = [accept(&[(29500, 29550)]), accept(&[(50000, 51000)])];
    let first = plan::build(&changes, &root, &io, options).unwrap();
    transaction::execute(&first.steps, &io).unwrap();
    let listing = nft.list_table().unwrap().unwrap();
    assert_eq!(
        accepted_ports(&listing).unwrap(),
        vec![(29500, 29550), (50000, 51000)],
        "{listing}"
    );
    assert!(
        plan::build(&changes, &root, &io, options)
            .unwrap()
            .steps
            .is_empty(),
        "idempotent"
    );

    // The rules file the boot unit loads is valid for the real nft and recreates the table.
    nft.run_script("delete table inet gputune\n").unwrap();
    let rules = dir
        .path()
        .join(firewall::RULES_FILE.trim_start_matches('/'));
    let loaded = Command::new("nft").arg("-f").arg(&rules).status().unwrap();
    assert!(loaded.success());
    let reloaded = nft.list_table().unwrap().unwrap();
    assert_eq!(
        accepted_ports(&reloaded).unwrap(),
        vec![(29500, 29550), (50000, 51000)]
    );
    // Loading it again replaces the table rather than failing or doubling rules.
    assert!(
        Command::new("nft")
            .arg("-f")
            .arg(&rules)
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(nft.list_table().unwrap().unwrap(), reloaded);

    // A later apply adds its ports to those already open.
    let second = plan::build(&[accept(&[(22, 22)])], &root, &io, options).unwrap();
    transaction::execute(&second.steps, &io).unwrap();
    let listing = nft.list_table().unwrap().unwrap();
    assert_eq!(
        accepted_ports(&listing).unwrap(),
        vec![(22, 22), (29500, 29550), (50000, 51000)]
    );

    // Restoring both applies, newest first, removes the table and every file.
    for steps in [&second.steps, &first.steps] {
        assert!(transaction::restore(steps, &io).iter().all(Result::is_ok));
    }
    assert_eq!(nft.list_table().unwrap(), None);
    for path in [
        firewall::RULES_FILE,
        firewall::UNIT_FILE,
        firewall::UNIT_LINK,
    ] {
        assert!(!Path::new(&root.path(path)).exists(), "{path} removed");
        assert!(
            std::fs::symlink_metadata(root.path(path)).is_err(),
            "{path} removed"
        );
    }
}

#[test]
fn a_table_nft_rejects_is_restored() {
    if !in_own_netns("a_table_nft_rejects_is_restored") {
        return;
    }
    let (_dir, root) = live_root();
    let nft = NftCommand;
    let io = HostIo {
        root: &root,
        nft: Some(&nft),
    };
    let options = live(false);
    let good = plan::build(&[accept(&[(29500, 29550)])], &root, &io, options).unwrap();
    transaction::execute(&good.steps, &io).unwrap();
    let before = nft.list_table().unwrap();

    // A step whose table the real nft refuses: the earlier state comes back.
    let mut bad = plan::build(&[accept(&[(8080, 8080)])], &root, &io, options).unwrap();
    bad.steps[0].after = State::Present("table inet gputune { chain input { nonsense } }\n".into());
    let failure = transaction::execute(&bad.steps, &io).unwrap_err();
    assert!(
        failure.error.to_string().contains("nft -f - failed"),
        "{}",
        failure.error
    );
    assert_eq!(nft.list_table().unwrap(), before);
}
