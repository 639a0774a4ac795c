//! `gputune audit --persisted` on a golden image: a root with configuration files and no
//! running kernel, judged by what the node would have after a reboot.

use crate::common::{fixture, gputune, put, text};

/// gputune's file setting both values the profile judges.
const GPUTUNE_CONF: &str = "net.core.somaxconn = 8192\nnet.ipv4.tcp_rmem = 4096 131072 16777216\n";

/// Audits, with `--persisted`, an image holding `files` (path, content) beside its
/// os-release, against tests/fixtures/profiles/golden-image.toml: it must exit `code` and
/// print `says`.
fn assert_image(files: &[(&str, &str)], code: i32, says: &str) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files.iter().chain(&[("/etc/os-release", "ID=debian\n")]) {
        put(dir.path(), path, content);
    }
    let out = gputune()
        .args(["audit", "--persisted", "--format", "json", "--root"])
        .arg(dir.path())
        .arg("--profile")
        .arg(fixture("profiles/golden-image.toml"))
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(code), "{files:?}: {stdout}");
    assert!(stdout.contains(says), "{files:?}: {stdout}");
}

#[test]
fn an_image_whose_files_set_everything_passes() {
    let conf = ("/etc/sysctl.d/90-gputune.conf", GPUTUNE_CONF);
    assert_image(&[conf], 0, "at boot /etc/sysctl.d/90-gputune.conf:1");
}

#[test]
fn a_setting_no_file_makes_fails() {
    let conf = (
        "/usr/lib/sysctl.d/50-default.conf",
        "net.core.somaxconn = 8192\n",
    );
    assert_image(&[conf], 1, "no sysctl.d file sets net.ipv4.tcp_rmem");
}

#[test]
fn a_later_file_overriding_gputunes_fails_the_image() {
    let ours = ("/etc/sysctl.d/90-gputune.conf", GPUTUNE_CONF);
    let later = ("/etc/sysctl.d/99-sysctl.conf", "net.core.somaxconn = 128\n");
    let said = "at boot /etc/sysctl.d/99-sysctl.conf:1 sets net.core.somaxconn = 128";
    assert_image(&[ours, later], 1, said);
    // Masking: a same-named file in /etc hides the one in /usr/lib.
    let masked = ("/usr/lib/sysctl.d/90-gputune.conf", GPUTUNE_CONF);
    let empty = (
        "/etc/sysctl.d/90-gputune.conf",
        "# emptied by the image build\n",
    );
    assert_image(
        &[masked, empty],
        1,
        "no sysctl.d file sets net.ipv4.tcp_rmem",
    );
}
