//! `gputune status` and `gputune rollback --dry-run` end to end: a real apply inside a
//! network namespace of its own (its `net.*` sysctls are per namespace), a value changed by
//! hand, a package's sysctl.d file that wins at boot; and the same on a copy of the Debian
//! test image, whose journal is kept outside it.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{Namespaces, fixture, require, text};

const JOURNAL: &str = "var/lib/gputune/journal.json";

/// A root whose `/proc` is a fresh network namespace's (bind-mounted for each command), as
/// tests/apply_cli.rs makes them; no etc, var or run in advance.
struct Node {
    dir: tempfile::TempDir,
    ns: String,
    _ns: Namespaces,
}

impl Node {
    fn new() -> Node {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        require(&["ip", "nsenter", "unshare"]);
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["proc", "sys/kernel/mm/transparent_hugepage"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let profile = fs::read(fixture("profiles").join("netns-network.toml")).unwrap();
        fs::write(dir.path().join("netns-network.toml"), profile).unwrap();
        let ns = format!(
            "gputune-status-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::SeqCst)
        );
        Node {
            _ns: Namespaces::add(vec![ns.clone()]),
            dir,
            ns,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `gputune ARGS --root DIR` in the namespace, with its /proc bind-mounted at DIR/proc.
    fn gputune(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.ns))
            .args(["--", "unshare", "--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", "mount --bind /proc \"$0/proc\" && exec \"$@\""])
            .arg(self.dir.path())
            .arg(crate::common::bin())
            .args(args)
            .arg("--root")
            .arg(self.dir.path())
            .env_remove("GPUTUNE_ROOT")
            .env_remove("GPUTUNE_STATE_DIR")
            .env_remove("COLUMNS");
        cmd.output().unwrap()
    }

    fn exits(&self, args: &[&str], code: i32) -> String {
        let out = self.gputune(args);
        let said = both(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {said}");
        said
    }

    /// A sysctl's raw bytes inside the namespace.
    fn sysctl(&self, key: &str) -> String {
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .args(["--", "cat"])
            .arg(format!("/proc/sys/{key}"))
            .output()
            .unwrap();
        text(&out.stdout)
    }

    /// Sets a sysctl inside the namespace, as an administrator would by hand.
    fn set_by_hand(&self, key: &str, value: &str) {
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .args(["--", "sh", "-c", "echo \"$1\" > \"$0\""])
            .arg(format!("/proc/sys/{}", key.replace('.', "/")))
            .arg(value)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", both(&out));
    }

    /// The namespaced sysctls the profile judges, and every file under the root but proc.
    fn snapshot(&self) -> (Vec<String>, BTreeMap<String, Vec<u8>>) {
        let keys = [
            "net/core/somaxconn",
            "net/ipv4/tcp_rmem",
            "net/ipv4/tcp_wmem",
            "net/ipv4/tcp_fin_timeout",
            "net/ipv4/tcp_slow_start_after_idle",
        ];
        let values = keys.iter().map(|k| self.sysctl(k)).collect();
        let mut files = tree(self.dir.path());
        files.retain(|k, _| !k.starts_with("proc/"));
        (values, files)
    }
}

fn both(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

fn json(said: &str) -> serde_json::Value {
    serde_json::from_str(said).unwrap_or_else(|e| panic!("not JSON ({e}): {said}"))
}

/// Every regular file and link under `dir` with its bytes (a link: its target), by path.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            if meta.file_type().is_symlink() {
                let dest = fs::read_link(&path).unwrap();
                out.insert(rel, dest.display().to_string().into_bytes());
            } else if meta.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                stack.push(path);
            } else if meta.is_file() {
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Fails naming the sysctls and paths that differ (not dumping every byte).
fn assert_same(
    after: &(Vec<String>, BTreeMap<String, Vec<u8>>),
    before: &(Vec<String>, BTreeMap<String, Vec<u8>>),
) {
    assert_eq!(after.0, before.0, "rollback --dry-run changed a sysctl");
    let changed: Vec<&String> = before
        .1
        .keys()
        .chain(after.1.keys())
        .filter(|k| before.1.get(*k) != after.1.get(*k))
        .collect();
    assert!(changed.is_empty(), "rollback --dry-run changed {changed:?}");
}

fn item<'a>(doc: &'a serde_json::Value, setting: &str) -> &'a serde_json::Value {
    doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["setting"] == setting)
        .unwrap_or_else(|| panic!("no item {setting}: {doc:#}"))
}

#[test]
fn status_names_drift_by_hand_and_a_package_file_that_wins_at_boot() {
    let node = Node::new();
    let profile = node.path("netns-network.toml");
    let profile = profile.to_str().unwrap();

    let said = node.exits(&["status"], 0);
    assert!(said.contains("nothing was ever applied here"), "{said}");
    assert!(!node.path("var").exists(), "status writes nothing");

    node.exits(&["apply", "--profile", profile, "--yes", "--live"], 0);
    let said = node.exits(&["status"], 0);
    for needle in [
        "state: applied",
        "applied profile netns-network at ",
        " by root (uid 0",
        &format!("with gputune {}", env!("CARGO_PKG_VERSION")),
        "command: ",
        "HOLDS    net.core.somaxconn: applied 8192, now 8192",
        "HOLDS    net.core.somaxconn at boot: applied 8192, now 8192",
        "everything gputune applied still holds",
    ] {
        assert!(said.contains(needle), "no {needle:?} in:\n{said}");
    }
    let doc = json(&node.exits(&["status", "--format", "json"], 0));
    assert_eq!(doc["applied"], true);
    assert_eq!(doc["phase"], "applied");
    assert_eq!(doc["applies"][0]["profile"], "netns-network");
    assert_eq!(doc["applies"][0]["uid"], 0);
    let command: Vec<&str> = doc["applies"][0]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        command.contains(&"apply") && command.contains(&"--yes"),
        "{command:?}"
    );
    assert_eq!(doc["summary"]["drifted"], 0);

    // By hand: the live value drifts, and gputune's file brings its value back at boot.
    node.set_by_hand("net.core.somaxconn", "1024");
    let said = node.exits(&["status"], 1);
    for needle in [
        "DRIFTED  net.core.somaxconn: applied 8192, now 1024",
        "changed since apply (by hand or by another tool); at boot /etc/sysctl.d/90-gputune.conf:",
        "sets net.core.somaxconn = 8192, so gputune's value comes back at reboot",
    ] {
        assert!(said.contains(needle), "no {needle:?} in:\n{said}");
    }

    // A package's file that sorts after gputune's wins at boot: named, with its line.
    fs::create_dir_all(node.path("usr/lib/sysctl.d")).unwrap();
    fs::write(
        node.path("usr/lib/sysctl.d/99-pkg.conf"),
        "# a package\nnet.ipv4.tcp_fin_timeout = 45\n",
    )
    .unwrap();
    let doc = json(&node.exits(&["status", "--format", "json"], 1));
    let boot = item(&doc, "net.ipv4.tcp_fin_timeout at boot");
    assert_eq!(boot["status"], "drifted", "{boot}");
    assert_eq!(boot["now"], "45");
    let message = boot["message"].as_str().unwrap();
    assert!(
        message.starts_with("/usr/lib/sysctl.d/99-pkg.conf:2 sets net.ipv4.tcp_fin_timeout = 45 and wins at boot over /etc/sysctl.d/90-gputune.conf"),
        "{message}"
    );
    assert_eq!(item(&doc, "net.ipv4.tcp_fin_timeout")["status"], "holds");
    assert_eq!(item(&doc, "net.core.somaxconn")["status"], "drifted");
    assert_eq!(doc["summary"]["drifted"], 2);

    // rollback --dry-run lists every target and changes nothing, byte for byte.
    let journal: serde_json::Value =
        serde_json::from_slice(&fs::read(node.path(JOURNAL)).unwrap()).unwrap();
    let before = node.snapshot();
    let said = node.exits(&["rollback", "--dry-run"], 0);
    assert_same(&node.snapshot(), &before);
    for step in journal["steps"].as_array().unwrap() {
        let path = step["target"]["path"].as_str().unwrap();
        assert!(
            said.contains(&format!(" {path}: ")),
            "{path} not listed in:\n{said}"
        );
    }
    for needle in [
        "rollback plan for profile netns-network",
        "  restore /proc/sys/net/core/somaxconn: 1024 -> 4096\n",
        "  restore /proc/sys/net/ipv4/tcp_fin_timeout: 20 -> 60\n",
        "  remove /etc/sysctl.d/90-gputune.conf: ",
        "    -net.core.somaxconn = 8192\n",
        "dry run: nothing was changed",
    ] {
        assert!(said.contains(needle), "no {needle:?} in:\n{said}");
    }

    node.exits(&["rollback"], 0);
    assert_eq!(node.sysctl("net/core/somaxconn"), "4096\n");
    let said = node.exits(&["status"], 0);
    for needle in ["state: rolled back", "rolled back at ", "by root (uid 0"] {
        assert!(said.contains(needle), "no {needle:?} in:\n{said}");
    }
    let doc = json(&node.exits(&["status", "--format", "json"], 0));
    assert_eq!(doc["applied"], false);
    assert_eq!(doc["items"].as_array().unwrap().len(), 0);
}

#[test]
fn journals_status_cannot_trust_exit_3_and_old_ones_still_read() {
    let node = Node::new();
    let profile = node.path("netns-network.toml");
    let profile = profile.to_str().unwrap();
    node.exits(&["apply", "--profile", profile, "--yes", "--live"], 0);
    let good = fs::read_to_string(node.path(JOURNAL)).unwrap();

    // A journal written before who/when were recorded: status says so, rollback still reads it.
    let mut old: serde_json::Value = serde_json::from_str(&good).unwrap();
    old.as_object_mut().unwrap().remove("applies");
    fs::write(node.path(JOURNAL), old.to_string()).unwrap();
    let said = node.exits(&["status"], 0);
    assert!(
        said.contains("applied profile netns-network: when and by whom not recorded"),
        "{said}"
    );
    node.exits(&["rollback", "--dry-run"], 0);

    for (journal, says) in [
        ("{ not json".to_string(), "not a gputune journal"),
        (
            good.replace("/proc/sys/net/core/somaxconn", "/../../etc/shadow"),
            "invalid journal",
        ),
    ] {
        fs::write(node.path(JOURNAL), &journal).unwrap();
        for args in [&["status"][..], &["rollback", "--dry-run"]] {
            let said = node.exits(args, 3);
            assert!(
                said.contains(says) && said.contains("journal.json"),
                "{said}"
            );
        }
    }
    fs::write(node.path(JOURNAL), good).unwrap();
    node.exits(&["rollback"], 0);
}

/// The cached Debian image (see tests/image_journey.rs).
fn pristine() -> PathBuf {
    let dir = std::env::var("GPUTUNE_TEST_IMAGE").expect(
        "GPUTUNE_TEST_IMAGE is not set: run scripts/test, which builds the Debian test image with debootstrap",
    );
    PathBuf::from(dir)
}

#[test]
fn status_of_an_image_after_apply_and_rollback_dry_run() {
    let work = tempfile::tempdir().unwrap();
    let image = work.path().join("image");
    let out = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(pristine())
        .arg(&image)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", both(&out));
    let state = work.path().join("state");
    let root = image.to_str().unwrap();
    let gputune = |args: &[&str], code: i32| -> String {
        let out = Command::new(crate::common::bin())
            .args(args)
            .args(["--root", root])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("GPUTUNE_STATE_DIR", &state)
            .output()
            .unwrap();
        let said = both(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {said}");
        said
    };

    let said = gputune(&["status"], 0);
    assert!(
        said.contains("mode image") && said.contains("nothing was ever applied"),
        "{said}"
    );
    assert!(!state.exists(), "status makes no state directory");

    gputune(&["apply", "--profile", "ddp-10gbe", "--yes"], 0);
    let doc = json(&gputune(&["status", "--format", "json"], 0));
    assert_eq!(doc["mode"], "image");
    assert_eq!(doc["applies"][0]["profile"], "ddp-10gbe");
    let items = doc["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["status"] == "holds"), "{doc:#}");
    assert!(
        items.iter().all(|i| i["kind"] != "live"),
        "an image has no live values"
    );
    assert_eq!(item(&doc, "vm.swappiness at boot")["now"], "10");
    assert_eq!(
        item(&doc, "/etc/systemd/logind.conf.d/90-gputune.conf")["kind"],
        "file"
    );

    // A package installed into the image later ships a sysctl.d file that sorts last.
    fs::write(
        image.join("usr/lib/sysctl.d/99-zz-package.conf"),
        "vm.swappiness = 60\n",
    )
    .unwrap();
    let said = gputune(&["status"], 1);
    assert!(
        said.contains("DRIFTED  vm.swappiness at boot: applied 10, now 60")
            && said.contains(
                "/usr/lib/sysctl.d/99-zz-package.conf:1 sets vm.swappiness = 60 and wins at boot"
            ),
        "{said}"
    );

    // rollback --dry-run changes neither the image nor the journal.
    let before = (tree(&image), tree(&state));
    let said = gputune(&["rollback", "--dry-run"], 0);
    assert_same(&(Vec::new(), tree(&image)), &(Vec::new(), before.0));
    assert_same(&(Vec::new(), tree(&state)), &(Vec::new(), before.1));
    for file in [
        "/etc/sysctl.d/90-gputune.conf",
        "/etc/security/limits.d/90-gputune.conf",
        "/etc/systemd/logind.conf.d/90-gputune.conf",
    ] {
        assert!(
            said.contains(&format!("  remove {file}: ")),
            "{file}: {said}"
        );
    }
    assert!(
        said.contains("  remove directory /etc/systemd/logind.conf.d: apply created it"),
        "{said}"
    );

    gputune(&["rollback"], 0);
    let said = gputune(&["status"], 0);
    assert!(said.contains("state: rolled back"), "{said}");
}
