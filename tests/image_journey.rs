//! The golden-image journey on a real Debian bookworm image (`debootstrap --variant=minbase
//! --include=systemd,procps`, built once by scripts/test and cached under target/): audit the
//! untuned image (fails), apply as the tree's unprivileged owner, audit again (passes), the
//! image's own systemd-sysctl agrees, rollback restores it byte for byte, and nothing of
//! gputune's state is left inside it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{expect, finding, findings, stdout_json};

/// The cached pristine image; each test works on its own copy.
fn pristine() -> PathBuf {
    let dir = std::env::var("GPUTUNE_TEST_IMAGE").expect(
        "GPUTUNE_TEST_IMAGE is not set: run scripts/test, which builds the Debian test image with debootstrap",
    );
    let dir = PathBuf::from(dir);
    assert!(dir.join("etc/os-release").is_file(), "{}", dir.display());
    dir
}

/// A work directory every user can enter. gputune runs from where cargo built it (as in
/// apply_cli's unprivileged test): a copy per test would race other tests' forks (ETXTBSY).
struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    fn new() -> Work {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        Work { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        if name == "gputune" {
            return PathBuf::from(crate::common::bin());
        }
        self.dir.path().join(name)
    }

    /// A copy of the image owned by `nobody`, and a fresh home of theirs beside it: empty, as
    /// on a host where they never ran gputune (no state directory made in advance).
    fn image_owned_by_nobody(&self) -> (PathBuf, PathBuf) {
        let image = self.path("image");
        run_ok(
            Command::new("cp")
                .args(["-a", "--reflink=auto"])
                .arg(pristine())
                .arg(&image),
        );
        let home = self.path("home");
        fs::create_dir(&home).unwrap();
        run_ok(
            Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(&image)
                .arg(&home),
        );
        (image, home)
    }

    /// gputune run as `nobody` (no capabilities, no supplementary groups) with `args`, each
    /// one argument (a path with a space stays whole), in a clean environment whose only
    /// variables are `HOME` and `PATH`.
    fn as_nobody(&self, home: &Path, args: &[&str]) -> Output {
        let mut home_var = OsString::from("HOME=");
        home_var.push(home);
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .args(["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"])
            .arg(home_var)
            .arg(self.path("gputune"))
            .args(args)
            .output()
            .unwrap()
    }

    /// gputune run as root with `args`, each one argument.
    fn as_root(&self, args: &[&str]) -> Output {
        Command::new(self.path("gputune"))
            .args(args)
            .env_remove("GPUTUNE_STATE_DIR")
            .output()
            .unwrap()
    }

    /// `gputune ARGS` as root must exit `code`: its output.
    fn as_root_exits(&self, args: &[&str], code: i32) -> Output {
        let out = self.as_root(args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        out
    }

    /// `gputune ARGS` as nobody must exit `code`: its output.
    fn as_nobody_exits(&self, home: &Path, args: &[&str], code: i32) -> Output {
        let out = self.as_nobody(home, args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        out
    }
}

/// `audit --root ROOT --profile ddp-10gbe --format json`, the journeys' audit.
fn json_audit(root: &str) -> Vec<&str> {
    let profile = ["--profile", "ddp-10gbe", "--format", "json"];
    [["audit", "--root", root].as_slice(), &profile].concat()
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", text(&out));
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every entry of a tree: type, mode, owner, size, modification time, link target, and the
/// content of every regular file under etc/ (where apply writes).
fn manifest(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            // A directory's size and time change with its entries; its entries are listed.
            let mut line = if meta.is_dir() {
                format!("{:o} {}:{} dir", meta.mode(), meta.uid(), meta.gid())
            } else {
                format!(
                    "{:o} {}:{} {} {}.{}",
                    meta.mode(),
                    meta.uid(),
                    meta.gid(),
                    meta.size(),
                    meta.mtime(),
                    meta.mtime_nsec()
                )
            };
            if meta.file_type().is_symlink() {
                line.push_str(&format!(" -> {}", fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                stack.push(path.clone());
            } else if meta.is_file() && rel.starts_with("etc/") {
                line.push_str(&format!(" {:?}", fs::read(&path).unwrap()));
            }
            out.insert(rel, line);
        }
    }
    out
}

/// Asserts no entry of the tree changed between the manifests `before` and `after`.
fn assert_same_tree(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(
        changed.is_empty(),
        "changed by apply + rollback: {changed:?}"
    );
}

/// `systemd-analyze verify` of `unit` in the image passes without a word about gputune's
/// drop-in (it exits 0 even for unknown keys; its warnings on stderr are what fail).
fn assert_verified(image: &Path, unit: &str) {
    let out = Command::new("chroot")
        .arg(image)
        .args(["systemd-analyze", "verify", "--man=no", unit])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{unit}: {said}");
    assert!(
        !said.contains("90-gputune.conf"),
        "{unit}: systemd-analyze complains about gputune's drop-in: {said}"
    );
}

/// The value of each key as systemd-sysctl would apply it: the last assignment wins.
fn effective(cat_config: &str) -> BTreeMap<String, String> {
    cat_config
        .lines()
        .filter(|l| !l.trim_start().starts_with(['#', ';']))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            (
                k.trim().trim_start_matches('-').to_string(),
                v.trim().to_string(),
            )
        })
        .collect()
}

#[test]
fn audit_apply_audit_rollback_on_a_debian_image() {
    let work = Work::new();
    let (image, home) = work.image_owned_by_nobody();
    let root = image.to_str().unwrap();
    let before = manifest(&image);

    // The README's CI line on the untuned image fails, naming the image mode.
    let junit = work.as_root_exits(
        &[
            "audit",
            "--root",
            root,
            "--profile",
            "ddp-25gbe",
            "--strict",
            "--format",
            "junit",
        ],
        1,
    );
    assert!(text(&junit).contains("<property name=\"mode\" value=\"image\"/>"));
    let audit = json_audit(root);
    let doc = stdout_json(&work.as_root_exits(&audit, 1));
    assert_eq!(doc["mode"], "image");
    for id in [
        "net.core.rmem_max",
        "net.core.wmem_max",
        "vm.swappiness",
        "logind.RemoveIPC",
    ] {
        expect(findings(&doc), id, "fail");
    }
    // Every failing finding apply would change carries its change.
    for f in findings(&doc) {
        if f["status"] == "fail" {
            assert!(f.get("change").is_some(), "{f}");
        }
        assert!(
            !f["message"].as_str().unwrap().contains("this kernel"),
            "{f}"
        );
    }

    // Nothing to roll back yet, and asking makes no state directory.
    let out = work.as_nobody_exits(&home, &["rollback", "--root", root], 0);
    assert!(
        text(&out).contains("nothing to roll back"),
        "{}",
        text(&out)
    );
    assert!(!home.join(".local").exists());

    // Apply as the image's unprivileged owner: persisted files only.
    let apply = ["apply", "--root", root, "--profile", "ddp-10gbe", "--yes"];
    let applied = work.as_nobody_exits(&home, &apply, 0);
    for file in [
        "etc/sysctl.d/90-gputune.conf",
        "etc/security/limits.d/90-gputune.conf",
        "etc/systemd/logind.conf.d/90-gputune.conf",
    ] {
        assert!(image.join(file).is_file(), "{file}: {}", text(&applied));
    }
    // gputune's own state is with the invoking user, never in the image: in their state
    // directory, made by apply (private, theirs) on a host where they never ran it.
    let state = home
        .join(".local/state/gputune/images")
        .join(gputune::image::key_of(&image));
    assert!(state.join("var/lib/gputune/journal.json").is_file());
    for dir in [
        home.join(".local"),
        home.join(".local/state"),
        home.join(".local/state/gputune"),
        home.join(".local/state/gputune/images"),
        state.clone(),
    ] {
        let meta = fs::metadata(&dir).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o700, "{}", dir.display());
        assert_eq!(meta.uid(), 65534, "{}", dir.display());
    }
    for inside in ["var/lib/gputune", "run/gputune.lock"] {
        assert!(!image.join(inside).exists(), "{inside} left in the image");
    }

    // The gate passes every check apply can fix, THP included (GRUB's drop-in; image_bake
    // tests it in depth).
    let doc = stdout_json(&work.as_root_exits(&audit, 0));
    assert_eq!(doc["summary"]["failed"], 0);
    for f in findings(&doc) {
        if f["status"] == "warn" {
            assert!(
                f.get("change").is_none(),
                "apply left a fixable warning: {f}"
            );
        }
    }
    expect(findings(&doc), "transparent_hugepage.enabled", "pass");
    let persisted = doc["persisted"].as_array().unwrap();
    assert!(persisted.iter().any(|p| p["key"] == "net.core.rmem_max"
        && p["file"] == "/etc/sysctl.d/90-gputune.conf"
        && p["line"].as_u64().is_some()));

    // The image's own systemd-sysctl lets gputune's values win.
    let cat = run_ok(
        Command::new("chroot")
            .arg(&image)
            .args(["/lib/systemd/systemd-sysctl", "--cat-config"]),
    );
    let values = effective(&String::from_utf8_lossy(&cat.stdout));
    for (key, want) in [
        ("net.core.rmem_max", "16777216"),
        ("net.core.wmem_max", "16777216"),
        ("vm.swappiness", "10"),
        ("net.ipv4.tcp_rmem", "4096 131072 16777216"),
    ] {
        assert_eq!(values.get(key).map(String::as_str), Some(want), "{key}");
    }
    let logind = run_ok(Command::new("chroot").arg(&image).args([
        "systemd-analyze",
        "cat-config",
        "systemd/logind.conf",
    ]));
    let remove_ipc = String::from_utf8_lossy(&logind.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("RemoveIPC="))
        .next_back()
        .map(str::to_string);
    assert_eq!(remove_ipc.as_deref(), Some("no"));

    // Rollback restores the image byte for byte.
    work.as_nobody_exits(&home, &["rollback", "--root", root], 0);
    assert_same_tree(&before, &manifest(&image));
}

/// The README's image workflow as root on a host that never ran gputune: apply makes
/// `/var/lib/gputune/images/KEY` (0700) for its journal and lock, and rollback finds them
/// there. It runs in a private mount namespace whose `/var/lib` is an empty tmpfs, so the
/// machine running the test need not be fresh and keeps nothing of it.
#[test]
fn apply_and_rollback_as_root_on_a_fresh_host() {
    let work = Work::new();
    let image = work.path("image");
    run_ok(
        Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(pristine())
            .arg(&image),
    );
    let before = manifest(&image);
    let script = r#"mount -t tmpfs -o mode=0755 gputune-test /var/lib || exit 99
"$0" apply --root "$1" --profile ddp-10gbe --yes || exit 10
find /var/lib -printf '%m %u %p\n'
"$0" rollback --root "$1" || exit 11"#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(work.path("gputune"))
        .arg(&image)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    let state = format!("/var/lib/gputune/images/{}", gputune::image::key_of(&image));
    for line in [
        "700 root /var/lib/gputune\n".to_string(),
        "700 root /var/lib/gputune/images\n".to_string(),
        format!("700 root {state}\n"),
        format!("644 root {state}/var/lib/gputune/journal.json\n"),
        format!("644 root {state}/run/gputune.lock\n"),
    ] {
        assert!(said.contains(&line), "no {line:?} in: {said}");
    }
    assert!(said.contains("rolled back"), "{said}");
    assert!(!image.join("var/lib/gputune").exists());
    assert_same_tree(&before, &manifest(&image));
}

#[test]
fn roots_that_are_no_image_exit_3() {
    let work = Work::new();
    let empty = work.path("empty");
    fs::create_dir(&empty).unwrap();
    let junk = work.path("junk");
    fs::create_dir_all(junk.join("home")).unwrap();
    for dir in [work.path("missing"), empty, junk] {
        let dir = dir.to_str().unwrap();
        let out = work.as_root_exits(&["audit", "--root", dir, "--profile", "ddp-25gbe"], 3);
        assert!(text(&out).contains(dir), "{}", text(&out));
    }
}

#[test]
fn apply_refuses_an_image_of_another_user_and_a_mounted_proc() {
    let work = Work::new();
    let tree = work.path("tree");
    fs::create_dir_all(tree.join("etc")).unwrap();
    fs::create_dir_all(tree.join("proc")).unwrap();
    fs::write(tree.join("etc/os-release"), "ID=debian\n").unwrap();
    let home = work.path("home");
    fs::create_dir(&home).unwrap();
    let root = tree.to_str().unwrap();
    let apply = ["apply", "--root", root, "--profile", "ddp-10gbe", "--yes"];
    // An image has no live values to write.
    let out = work.as_root_exits(&[&apply[..], &["--no-persist"]].concat(), 2);
    assert!(text(&out).contains("--no-persist"), "{}", text(&out));
    // root owns it: nobody may not write it.
    let out = work.as_nobody_exits(&home, &apply, 3);
    assert!(
        text(&out).contains("owned by another user"),
        "{}",
        text(&out)
    );
    assert!(!tree.join("etc/sysctl.d").exists());

    // The host's /proc bind-mounted into the tree (a chroot build) is refused, in a private
    // mount namespace so nothing leaks.
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind /proc \"$0/proc\" && exec \"$1\" apply --root \"$0\" --profile ddp-10gbe --yes")
        .arg(&tree)
        .arg(work.path("gputune"))
        .env("GPUTUNE_STATE_DIR", work.path("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("mounted procfs"), "{}", text(&out));
    assert!(!tree.join("etc/sysctl.d").exists());
    assert!(
        !work.path("state").exists(),
        "a refused apply makes no state"
    );

    // A state directory another user owns, or a link, is refused before anything is written.
    let theirs = work.path("theirs");
    fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
    let real = work.path("real");
    fs::create_dir(&real).unwrap();
    let link = work.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for (state, says) in [(&theirs, "belongs to uid 65534"), (&link, "symbolic link")] {
        let out = Command::new(work.path("gputune"))
            .args(apply)
            .env("GPUTUNE_STATE_DIR", state)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert!(text(&out).contains(says), "{}", text(&out));
        assert!(!tree.join("etc/sysctl.d").exists());
    }
    assert_eq!(fs::read_dir(&real).unwrap().count(), 0);
}

#[test]
fn tuned_enabled_in_an_image_is_judged_and_apply_says_it_wins() {
    let work = Work::new();
    let tree = work.path("tuned");
    for (path, text) in [
        ("etc/os-release", "ID=rocky\n"),
        (
            "etc/kernel/cmdline",
            "root=/dev/vda1 transparent_hugepage=madvise\n",
        ),
        ("etc/tuned/active_profile", "throughput-performance\n"),
        (
            "usr/lib/tuned/throughput-performance/tuned.conf",
            "[main]\nsummary=Broadly applicable tuning\n[sysctl]\nnet.core.rmem_max=4194304\nvm.swappiness=10\n",
        ),
        (
            "etc/systemd/system/multi-user.target.wants/tuned.service",
            "",
        ),
    ] {
        crate::common::put(&tree, path, text);
    }
    // $GPUTUNE_STATE_DIR names a directory that does not exist yet: apply makes it.
    let state = work.path("state/of/images");
    let root = tree.to_str().unwrap();
    let mut args = json_audit(root);
    args.extend(["--only", "network,memory"]);
    let out = work.as_root(&args);
    let doc = stdout_json(&out);
    expect(findings(&doc), "tuned.net.core.rmem_max", "fail")
        .has("message", "tuned profile `throughput-performance`")
        .has(
            "message",
            "/usr/lib/tuned/throughput-performance/tuned.conf",
        );
    // THP as the boot loader's command line sets it.
    expect(findings(&doc), "transparent_hugepage.enabled", "pass");
    // tuned's swappiness agrees with the profile: no finding for it.
    assert!(crate::common::absent(findings(&doc), "tuned.vm.swappiness"));

    // apply writes sysctl.d but says tuned wins at boot, and exits 1 while it does.
    let out = Command::new(work.path("gputune"))
        .args(["apply", "--root", root, "--profile", "ddp-10gbe", "--yes"])
        .args(["--only", "network,memory"])
        .env("GPUTUNE_STATE_DIR", &state)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    for said in ["tuned.net.core.rmem_max", "wins at boot"] {
        assert!(text(&out).contains(said), "{}", text(&out));
    }
    assert!(tree.join("etc/sysctl.d/90-gputune.conf").is_file());
    assert!(state.join("var/lib/gputune/journal.json").is_file());
    assert_eq!(fs::metadata(&state).unwrap().mode() & 0o7777, 0o700);
}

#[test]
fn slice_and_service_drop_ins_in_an_image_pass_systemd_analyze_verify() {
    use gputune::apply::io::HostIo;
    use gputune::apply::plan::{self, PlanOptions};
    use gputune::apply::transaction;
    use gputune::finding::Change;
    use gputune::host::Root;

    let work = Work::new();
    let (image, _) = work.image_owned_by_nobody();
    let root = Root::new(&image);
    let io = HostIo {
        root: &root,
        nft: None,
    };
    let options = PlanOptions {
        persist: true,
        live_kernel: false,
        image: true,
    };
    let change = |slice: &str, key: &str, value: &str| Change::Cgroup {
        slice: slice.into(),
        key: key.into(),
        value: value.into(),
    };
    let changes = [
        change("training.slice", "memory.high", "max"),
        change("training.slice", "pids.max", "max"),
        change("training.slice", "cpu.max", "max 100000"),
        change("training.slice", "cpuset.cpus", "0-3"),
        change("nccl-job.service", "memory.max", "68719476736"),
        change("job-1.scope", "memory.high", "max"),
    ];
    // The site's own job service, which gputune's drop-in extends.
    fs::write(
        image.join("etc/systemd/system/nccl-job.service"),
        "[Unit]\nDescription=training job\n[Service]\nExecStart=/bin/true\n",
    )
    .unwrap();
    let plan = plan::build(&changes, &root, &io, options).unwrap();
    transaction::execute(&plan.steps, &io).unwrap();
    assert!(
        !image
            .join("etc/systemd/system/job-1.scope.slice.d")
            .exists()
    );
    assert!(!image.join("etc/systemd/system/job-1.scope.d").exists());
    for unit in ["training.slice", "nccl-job.service"] {
        let drop_in = image.join(format!("etc/systemd/system/{unit}.d/90-gputune.conf"));
        assert!(drop_in.is_file(), "{unit}: {:?}", plan);
        assert_verified(&image, unit);
    }
}

#[test]
fn a_profiles_slice_is_judged_applied_and_rolled_back_in_an_image() {
    let work = Work::new();
    let (image, home) = work.image_owned_by_nobody();
    let root = image.to_str().unwrap();
    // The site's own slice, with limits a training job cannot live with.
    fs::write(
        image.join("etc/systemd/system/training.slice"),
        "[Unit]\nDescription=training jobs\n\n[Slice]\nMemoryMax=16G\nMemoryHigh=8G\nCPUQuota=400%\nTasksMax=1024\n",
    )
    .unwrap();
    let profile = work.path("slice.toml");
    fs::write(
        &profile,
        "[cgroup]\n\"memory.max\" = { min = \"32G\" }\n\"memory.high\" = { equals = \"unlimited\" }\n\"cpu.max\" = { equals = \"unlimited\" }\n\"pids.max\" = { min = 8192 }\n\n[job]\nslice = \"training.slice\"\n",
    )
    .unwrap();
    let profile = profile.to_str().unwrap();
    let before = manifest(&image);
    let audit = [
        "audit",
        "--root",
        root,
        "--profile",
        profile,
        "--format",
        "json",
    ];
    let ids = [
        "memory.max@training.slice",
        "memory.high@training.slice",
        "cpu.max@training.slice",
        "pids.max@training.slice",
    ];

    let doc = stdout_json(&work.as_root_exits(&audit, 1));
    for id in ids {
        let f = expect(findings(&doc), id, "fail")
            .has("actual", "/etc/systemd/system/training.slice:")
            .0;
        assert_eq!(f["change"]["type"], "cgroup", "{f}");
        assert_eq!(f["change"]["slice"], "training.slice", "{f}");
    }
    // The process's cgroup does not exist in an image.
    expect(findings(&doc), "memory.max", "skip");

    let apply = ["apply", "--root", root, "--profile", profile, "--yes"];
    let applied = work.as_nobody_exits(&home, &apply, 0);
    let drop_in = image.join("etc/systemd/system/training.slice.d/90-gputune.conf");
    assert!(drop_in.is_file(), "{}", text(&applied));
    // Only the drop-in: an image has no cgroupfs to write.
    assert!(!image.join("sys/fs/cgroup/training.slice").exists());
    assert_verified(&image, "training.slice");

    let doc = stdout_json(&work.as_root_exits(&audit, 0));
    for id in ids {
        assert_eq!(finding(&doc, id)["status"], "pass", "{id}: {doc}");
    }

    work.as_nobody_exits(&home, &["rollback", "--root", root], 0);
    let mut after = manifest(&image);
    // systemd-analyze (run by this test, not gputune) leaves its unit-load stamp behind.
    after.remove("run/systemd/systemd-units-load");
    assert_same_tree(&before, &after);
}
