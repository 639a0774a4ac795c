//! `gputune pin`: the real affinity and memory-policy syscalls on this machine, with the
//! topology from a fixture root whose GPU-local CPUs exist here.

use crate::common;

use common::pin;

fn status_field(status: &str, field: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim_start_matches(':').trim().to_string())
        .unwrap_or_default()
}

fn require_two_cpus() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert!(
        online.trim() != "0",
        "the pin test needs CPUs 0 and 1 (this machine has {online})"
    );
}

#[test]
fn child_runs_on_the_cpus_and_memory_of_its_gpus_node() {
    require_two_cpus();
    let t = common::pin_fixture();
    // GPU0 sits on node 0, whose only CPU is 1 and which has memory: CPUs and memory bound.
    let out = pin(t.root())
        .args([
            "--local-rank",
            "0",
            "--",
            "sh",
            "-c",
            "cat /proc/self/status; cat /proc/self/numa_maps",
        ])
        .output()
        .unwrap();
    common::assert_success(&out);
    assert!(out.stderr.is_empty(), "pin prints nothing without -v");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(status_field(&text, "Cpus_allowed_list"), "1");
    assert!(
        text.contains("bind:0"),
        "memory policy bound to node 0:\n{text}"
    );

    // GPU1 via LOCAL_RANK: node 1, CPU 0, no memory of its own (so memory is not bound).
    let out = pin(t.root())
        .env("LOCAL_RANK", "1")
        .args(["-v", "--", "cat", "/proc/self/status"])
        .output()
        .unwrap();
    common::assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(status_field(&text, "Cpus_allowed_list"), "0");
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("GPU1") && said.contains("CPUs 0"), "{said}");
}

#[test]
fn slurm_and_open_mpi_variables_pick_the_gpu() {
    require_two_cpus();
    let t = common::pin_fixture();
    for var in ["SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"] {
        let out = pin(t.root())
            .env(var, "0")
            .args(["--", "cat", "/proc/self/status"])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            status_field(&String::from_utf8(out.stdout).unwrap(), "Cpus_allowed_list"),
            "1",
            "{var}"
        );
    }
}

#[test]
fn bad_ranks_are_usage_errors() {
    let t = common::pin_fixture();
    pin(t.root())
        .args(["--local-rank", "7", "--", "true"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "local rank 7 has no GPU: this node has 2",
        ));
    pin(t.root())
        .env("LOCAL_RANK", "first")
        .args(["--", "true"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("$LOCAL_RANK"));
    pin(t.root())
        .args(["--", "true"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no --local-rank given"));
}

#[test]
fn no_gpus_unknown_numa_and_missing_commands_are_runtime_errors() {
    let empty = common::Tree::new();
    let unknown = common::unknown_numa_fixture();
    let good = common::pin_fixture();
    let cases = [
        (&empty, "true", "no NVIDIA GPU found"),
        (&unknown, "true", "numa_node = -1"),
        (
            &good,
            "gputune-no-such-command",
            "cannot run gputune-no-such-command",
        ),
    ];
    for (tree, command, said) in cases {
        pin(tree.root())
            .args(["--local-rank", "0", "--", command])
            .assert()
            .code(3)
            .stderr(predicates::str::contains(said));
    }
}

#[test]
fn offline_cpus_of_the_gpus_node_are_never_bound() {
    require_two_cpus();
    let t = common::pin_fixture();
    // Node 0 and GPU0 list CPUs 0-1, but CPU 0 is offline: only CPU 1 is local.
    t.numa_node(0, "0-1", Some(4_000_000));
    t.file(
        "/sys/devices/pci0000:00/0000:00:04.0/local_cpulist",
        "0-1\n",
    );
    t.file("/sys/devices/system/cpu/online", "1\n");
    let out = pin(t.root())
        .args(["--local-rank", "0", "--", "cat", "/proc/self/status"])
        .output()
        .unwrap();
    common::assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(status_field(&text, "Cpus_allowed_list"), "1");
}
