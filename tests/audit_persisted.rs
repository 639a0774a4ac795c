//! `gputune audit --persisted` on a golden image: a root with configuration files and no
//! running kernel, judged by what the node would have after a reboot.

use std::fs;
use std::path::Path;

use predicates::prelude::*;

const PROFILE: &str = r#"
description = "golden image test"
[network]
"net.core.somaxconn" = { min = 8192 }
"net.ipv4.tcp_rmem.max" = { min = 16777216 }
"#;

fn image(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let base = [
        ("/profile.toml", PROFILE),
        ("/etc/os-release", "ID=debian\n"),
    ];
    for (path, text) in files.iter().chain(&base) {
        let full = dir.path().join(path.trim_start_matches('/'));
        fs::create_dir_all(full.parent().unwrap()).unwrap();
        fs::write(full, text).unwrap();
    }
    dir
}

fn audit(dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    crate::common::gputune()
        .args(["audit", "--persisted", "--format", "json", "--root"])
        .arg(dir)
        .arg("--profile")
        .arg(dir.join("profile.toml"))
        .args(extra)
        .assert()
}

#[test]
fn an_image_whose_files_set_everything_passes() {
    let dir = image(&[(
        "/etc/sysctl.d/90-gputune.conf",
        "net.core.somaxconn = 8192\nnet.ipv4.tcp_rmem = 4096 131072 16777216\n",
    )]);
    audit(dir.path(), &[])
        .success()
        .stdout(predicate::str::contains(
            "at boot /etc/sysctl.d/90-gputune.conf:1",
        ));
}

#[test]
fn a_setting_no_file_makes_fails() {
    let dir = image(&[(
        "/usr/lib/sysctl.d/50-default.conf",
        "net.core.somaxconn = 8192\n",
    )]);
    audit(dir.path(), &[])
        .code(1)
        .stdout(predicate::str::contains(
            "no sysctl.d file sets net.ipv4.tcp_rmem",
        ));
}

#[test]
fn a_later_file_overriding_gputunes_fails_the_image() {
    let dir = image(&[
        (
            "/etc/sysctl.d/90-gputune.conf",
            "net.core.somaxconn = 8192\nnet.ipv4.tcp_rmem = 4096 131072 16777216\n",
        ),
        ("/etc/sysctl.d/99-sysctl.conf", "net.core.somaxconn = 128\n"),
    ]);
    audit(dir.path(), &[])
        .code(1)
        .stdout(predicate::str::contains(
            "at boot /etc/sysctl.d/99-sysctl.conf:1 sets net.core.somaxconn = 128",
        ));
    // Masking: a same-named file in /etc hides the one in /usr/lib.
    let dir = image(&[
        (
            "/usr/lib/sysctl.d/90-gputune.conf",
            "net.core.somaxconn = 8192\nnet.ipv4.tcp_rmem = 4096 131072 16777216\n",
        ),
        (
            "/etc/sysctl.d/90-gputune.conf",
            "# emptied by the image build\n",
        ),
    ]);
    audit(dir.path(), &[]).code(1);
}
