//! Sysctls the kernel will not let gputune change here, for real: inside a new network
//! namespace (`unshare -n`: `net.core.rmem_max` and the other init-namespace-only limits are
//! read-only there) and with `/proc/sys` bind-mounted read-only in a mount namespace (what a
//! container sees). Audit reports them as `skip` with the reason; apply leaves them out of
//! its plan and changes the rest instead of failing with "Permission denied".
//!
//! Every apply runs in its own mount namespace with tmpfs over `/run` and `/var/lib`, so its
//! lock and journal stay there, and with `--no-persist`, so nothing under `/etc` is written.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{bin, text};

/// The current value of a sysctl of the init namespace, as a number.
fn current(key: &str) -> i64 {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `sh -c SCRIPT` under `unshare ARGS`, with gputune as `$G`, the profile as `$P`, a fresh
/// HOME and a clean environment for gputune's own variables.
fn in_namespaces(unshare: &[&str], script: &str, profile: &Path, home: &Path) -> Output {
    Command::new("unshare")
        .args(unshare)
        .args(["sh", "-c", script])
        .env("G", bin())
        .env("P", profile)
        .env("HOME", home)
        .env_remove("GPUTUNE_ROOT")
        .env_remove("GPUTUNE_STATE_DIR")
        .output()
        .unwrap()
}

/// Private `/run` and `/var/lib` for apply's lock and journal, inside the mount namespace.
const PRIVATE_STATE: &str = "mount -t tmpfs none /run && mount -t tmpfs none /var/lib";

fn finding<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}: {doc}"))
}

#[test]
fn in_a_network_namespace_the_global_net_core_limits_are_skipped_and_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("netns.toml");
    // rmem_max is global (read-only in another namespace); tcp_fin_timeout is the
    // namespace's own and stays changeable.
    let rmem = current("net.core.rmem_max") + 4096;
    std::fs::write(
        &profile,
        format!(
            "[network]\n\"net.core.rmem_max\" = {{ min = {rmem} }}\n\"net.ipv4.tcp_fin_timeout\" = {{ max = 17 }}\n"
        ),
    )
    .unwrap();

    let out = in_namespaces(
        &["-n"],
        "exec \"$G\" audit --profile \"$P\" --only network --format json",
        &profile,
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rmem_max = finding(&doc, "net.core.rmem_max");
    assert_eq!(rmem_max["status"], "skip", "{rmem_max}");
    let message = rmem_max["message"].as_str().unwrap();
    assert!(message.contains("read-only here"), "{message}");
    assert!(message.contains("init network namespace"), "{message}");
    assert_eq!(finding(&doc, "net.ipv4.tcp_fin_timeout")["status"], "fail");

    // The plan leaves rmem_max out, says why, and the rest applies.
    let script = format!(
        "{PRIVATE_STATE} && \"$G\" apply --profile \"$P\" --only network --no-persist --dry-run && echo '--- apply' && \"$G\" apply --profile \"$P\" --only network --no-persist --yes && echo '--- after' && cat /proc/sys/net/ipv4/tcp_fin_timeout"
    );
    let out = in_namespaces(&["-n", "-m"], &script, &profile, dir.path());
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    let (dry, rest) = said.split_once("--- apply").unwrap();
    assert!(dry.contains("left out net.core.rmem_max"), "{dry}");
    assert!(dry.contains("init network namespace"), "{dry}");
    assert!(
        dry.contains("net.ipv4.tcp_fin_timeout: ") && dry.contains(" -> 17"),
        "{dry}"
    );
    assert!(!dry.contains("net.core.rmem_max:"), "planned anyway: {dry}");
    let (applied, after) = rest.split_once("--- after").unwrap();
    assert!(
        applied.contains("applied and verified 1 changes"),
        "{applied}"
    );
    assert_eq!(after.trim(), "17");
    // The host's own value was never touched.
    assert_eq!(current("net.core.rmem_max"), rmem - 4096);
}

#[test]
fn with_proc_sys_mounted_read_only_nothing_is_planned_or_failed() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("ro.toml");
    // A value other than the node's, so the check fails whatever the machine is tuned to.
    let want = if current("vm.swappiness") == 10 {
        11
    } else {
        10
    };
    std::fs::write(
        &profile,
        format!("[memory]\n\"vm.swappiness\" = {{ equals = {want} }}\n"),
    )
    .unwrap();
    let read_only = "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && grep ' /proc/sys ' /proc/mounts >&2";

    let out = in_namespaces(
        &["-m"],
        &format!("{read_only} && exec \"$G\" audit --profile \"$P\" --only memory --format json"),
        &profile,
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let swappiness = finding(&doc, "vm.swappiness");
    assert_eq!(swappiness["status"], "skip", "{swappiness}");
    assert!(
        swappiness["message"]
            .as_str()
            .unwrap()
            .contains("/proc/sys is mounted read-only"),
        "{swappiness}"
    );
    // What was read is still shown.
    assert_eq!(
        swappiness["actual"],
        current("vm.swappiness").to_string(),
        "{swappiness}"
    );

    let before = current("vm.swappiness");
    let out = in_namespaces(
        &["-m"],
        &format!(
            "{read_only} && {PRIVATE_STATE} && exec \"$G\" apply --profile \"$P\" --only memory --no-persist --yes"
        ),
        &profile,
        dir.path(),
    );
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    assert!(said.contains("plan for profile"), "{said}");
    assert!(said.contains("0 changes"), "{said}");
    assert!(said.contains("left out vm.swappiness"), "{said}");
    assert!(
        !said.contains("nothing to change: the node already matches"),
        "{said}"
    );
    assert_eq!(current("vm.swappiness"), before);
}
