//! What `--output` makes is readable by the users who need it whatever the umask, and the
//! README's `--output` examples work on a host where their directories do not exist yet.
//! gputune runs as an operator runs it: the built binary, started by a shell that set its
//! umask (the umask is process-wide, so the test process keeps its own).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{bin, fixture, gputune, text};

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `sh -c SCRIPT gputune ARGS...` with a clean environment: `$0` is gputune.
fn sh(script: &str, args: &[&Path]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin())
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap()
}

/// An audit's exit code when it ran: 0 passed, 1 findings, never 3 (it could not write).
fn audited(out: &Output) {
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(matches!(out.status.code(), Some(0 | 1)), "{said}");
}

#[test]
fn output_under_umask_077_is_world_readable_and_a_replaced_file_keeps_its_mode() {
    let top = tempfile::tempdir().unwrap();
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let report = top.path().join("reports/node01/audit.json");
    let audit = r#"umask 077; exec "$0" audit --root "$1" --format json --output "$2""#;
    let root = fixture("tuned-node");
    audited(&sh(audit, &[&root, &report]));
    assert_eq!(mode(&report), 0o644);
    for dir in ["reports", "reports/node01"] {
        assert_eq!(mode(&top.path().join(dir)), 0o755, "{dir}");
    }
    let doc: serde_json::Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    assert_eq!(doc["mode"], "live");

    fs::set_permissions(&report, fs::Permissions::from_mode(0o600)).unwrap();
    audited(&sh(audit, &[&root, &report]));
    assert_eq!(mode(&report), 0o600, "a replaced file keeps its mode");
}

/// A relative `--output` is taken from the working directory, as every tool takes it: from
/// a fresh one, `rel/dir` is made there (0755, as for an absolute path) and holds only the
/// report, and nothing else appears beside it.
#[test]
fn a_relative_output_is_written_under_the_working_directory() {
    let top = tempfile::tempdir().unwrap();
    let out = gputune()
        .args(["audit", "--root"])
        .arg(fixture("tuned-node"))
        .args(["--format", "json", "--output", "rel/dir/report.json"])
        .current_dir(top.path())
        .output()
        .unwrap();
    audited(&out);
    assert_eq!(text(&out.stdout), "", "the report went to the file only");
    let names = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(top.path()), ["rel"]);
    assert_eq!(names(&top.path().join("rel")), ["dir"]);
    assert_eq!(names(&top.path().join("rel/dir")), ["report.json"]);
    for dir in ["rel", "rel/dir"] {
        assert_eq!(mode(&top.path().join(dir)), 0o755, "{dir}");
    }
    let report = fs::read(top.path().join("rel/dir/report.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&report).unwrap();
    assert_eq!(doc["mode"], "live");
}

/// Issue 21: the README's `gputune audit --format json --output /var/lib/gputune/audit.json`,
/// verbatim, as root on a host that never ran gputune: in a private mount namespace whose
/// `/var/lib` is an empty tmpfs (the machine running the test keeps nothing of it).
#[test]
fn the_readmes_output_example_works_on_a_fresh_host() {
    let script = r#"mount -t tmpfs -o mode=0755 gputune-test /var/lib || exit 99
"$0" audit --format json --output /var/lib/gputune/audit.json
code=$?
stat -c '%a %U %n' /var/lib/gputune /var/lib/gputune/audit.json
head -c 1 /var/lib/gputune/audit.json; echo
exit $code"#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(bin())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    audited(&out);
    let said = text(&out.stdout);
    for line in [
        "755 root /var/lib/gputune\n",
        "644 root /var/lib/gputune/audit.json\n",
        "{\n",
    ] {
        assert!(said.contains(line), "no {line:?} in: {said}");
    }
}

/// `--output /dev/stdout` (redirected to a file, or a pipe) and `--output /dev/null` write
/// into what they name and leave `/dev` as it was. In a private mount namespace with a `/dev`
/// of its own, so a regression cannot replace the machine's `/dev/stdout`.
#[test]
fn output_to_dev_stdout_and_dev_null_writes_into_them() {
    let top = tempfile::tempdir().unwrap();
    let script = r#"mount -t tmpfs -o mode=0755 gputune-test /dev || exit 99
ln -s /proc/self/fd/1 /dev/stdout && mknod -m 666 /dev/null c 1 3 || exit 98
"$0" audit --root "$1" --format json --output /dev/stdout > "$2/redirected"
echo "redirected $?"
"$0" audit --root "$1" --format json --output /dev/stdout | head -c 1; echo
"$0" audit --root "$1" --format json --output /dev/null
echo "null $?"
stat -c '%F %n' /dev/stdout /dev/null"#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(bin())
        .arg(fixture("tuned-node"))
        .arg(top.path())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    for line in [
        "redirected 0\n",
        "{\n",
        "null 0\n",
        "symbolic link /dev/stdout\n",
        "character special file /dev/null\n",
    ] {
        assert!(said.contains(line), "no {line:?} in: {said}");
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&fs::read(top.path().join("redirected")).unwrap()).unwrap();
    assert_eq!(doc["mode"], "live");
}

/// Issue 20: node_exporter's textfile directory belongs to its service user (here `nobody`),
/// who plants `gputune.prom` as a link to a FIFO nobody reads, or to a character device (the
/// stand-in for `/dev/kmsg` is a null device of the test's own). Root's audit replaces the
/// link with its report instead of blocking on the FIFO or writing into the device.
#[test]
fn a_link_planted_in_a_service_users_textfile_directory_is_replaced() {
    let top = tempfile::tempdir().unwrap();
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let textfile = top.path().join("textfile");
    fs::create_dir(&textfile).unwrap();
    let fifo = top.path().join("fifo");
    let device = top.path().join("kmsg");
    let setup = r#"mkfifo "$1" && mknod -m 666 "$2" c 1 3 && chown nobody "$3""#;
    let made = sh(setup, &[&fifo, &device, &textfile]);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let prom = textfile.join("gputune.prom");
    let plant_and_audit = r#"setpriv --reuid=nobody --regid=nogroup --clear-groups ln -sfn "$2" "$1" || exit 98
exec timeout 30 "$0" audit --root "$3" --format prometheus --output "$1""#;
    for target in [&fifo, &device] {
        let out = sh(plant_and_audit, &[&prom, target, &fixture("tuned-node")]);
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{}: {said}", target.display());
        let meta = fs::symlink_metadata(&prom).unwrap();
        assert!(meta.is_file(), "{}: still {meta:?}", target.display());
        let report = fs::read_to_string(&prom).unwrap();
        assert!(report.contains("gputune_check_status{"), "{report}");
        assert_eq!(mode(&prom), 0o644);
    }
}
