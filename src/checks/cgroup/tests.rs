//! The cgroup checks against v1, v2 and hybrid fixture trees and this machine.

use std::collections::BTreeMap;

use crate::checks::AuditOptions;
use crate::finding::{Area, Finding, Status};
use crate::host::Root;
use crate::probe::Probes;
use crate::testing::{Tree, assert_contains, assert_starts, audit, expect, fixture};

/// The cgroup findings of `root` under a profile setting every cgroup key.
fn run(root: &Root, cgroup: Option<&str>) -> BTreeMap<String, Finding> {
    let options = AuditOptions {
        cgroup: cgroup.map(str::to_string),
        ..AuditOptions::default()
    };
    let profile = fixture("profiles/cgroup-all.toml");
    let profile = profile.display().to_string();
    audit(
        root,
        &profile,
        &options,
        Probes::for_root(root),
        Area::Cgroup,
    )
}

#[test]
fn v2_tightest_limit_wins_and_fixes_name_the_unit() {
    let f = run(&Root::new(fixture("cgroup-v2")), None);
    expect(&f, "cgroup.hierarchy", Status::Pass);
    assert_eq!(f["cgroup.hierarchy"].actual, "v2 at /sys/fs/cgroup");
    expect(&f, "memory.max", Status::Pass);
    assert_starts(
        &f["memory.max"].actual,
        "64 GiB (set on /training.slice/job-1.scope)",
    );
    expect(&f, "memory.high", Status::Warn);
    // A scope cannot be persisted: the fix is runtime only and apply has no change for it.
    assert_starts(
        &f["memory.high"].fix,
        "systemctl set-property --runtime job-1.scope MemoryHigh=infinity",
    );
    assert_eq!(f["memory.high"].change, None);
    expect(&f, "cpu.max", Status::Warn);
    assert_starts(&f["cpu.max"].actual, "8000 (= 8.00 CPUs)");
    assert_starts(
        &f["cpu.max"].fix,
        "systemctl set-property --runtime job-1.scope CPUQuota= ",
    );
    // pids.max is limited on the parent slice; the scope says max.
    expect(&f, "pids.max", Status::Warn);
    assert_contains(&f["pids.max"].actual, "set on ancestor /training.slice");
    assert_eq!(
        f["pids.max"].fix,
        "systemctl set-property training.slice TasksMax=8192"
    );
    // GPU 0000:d8:00.0 is local to CPUs 12-23, all outside the scope's cpuset 0-11.
    expect(&f, "cpuset.gpus_without_local_cpus", Status::Warn);
    assert_contains(
        &f["cpuset.gpus_without_local_cpus"].actual,
        "0000:d8:00.0 (local CPUs 12-23)",
    );
    assert_eq!(
        f["cpuset.gpus_without_local_cpus"].fix,
        "systemctl set-property --runtime job-1.scope AllowedCPUs=0-23 (a scope lives only as long as its job and cannot be persisted: set the limit on its slice or in the job's launcher)"
    );
    // GPU 0000:d8:00.0 sits on NUMA node 1; the scope may only use memory of node 0.
    let mems = expect(&f, "cpuset.gpus_without_local_memory", Status::Warn);
    assert_starts(
        &mems.actual,
        "1: cpuset 0 excludes the local NUMA memory nodes of 0000:d8:00.0 (local NUMA memory nodes 1)",
    );
    assert_starts(
        &mems.fix,
        "systemctl set-property --runtime job-1.scope AllowedMemoryNodes=0-1",
    );
    assert_eq!(mems.change, None);
    // The profile's slice is judged too, under its own ids.
    expect(&f, "pids.max@training.slice", Status::Warn);
    expect(&f, "memory.high@training.slice", Status::Pass);
    expect(
        &f,
        "cpuset.gpus_without_local_cpus@training.slice",
        Status::Pass,
    );
}

#[test]
fn v2_cgroup_option_picks_another_cgroup() {
    let root = Root::new(fixture("cgroup-v2"));
    let f = run(&root, Some("/sys/fs/cgroup/training.slice"));
    expect(&f, "memory.high", Status::Pass);
    assert!(
        f["memory.high"]
            .actual
            .ends_with("--cgroup /sys/fs/cgroup/training.slice")
    );
    let f = run(&root, Some("/no/such"));
    expect(&f, "pids.max", Status::Error);
    assert_contains(&f["pids.max"].message, "no such cgroup: /no/such");
}

#[test]
fn v1_reads_the_legacy_files() {
    let f = run(&Root::new(fixture("cgroup-v1")), None);
    expect(&f, "cgroup.hierarchy", Status::Warn);
    assert!(f["cgroup.hierarchy"].actual.starts_with("v1 ("));
    expect(&f, "memory.max", Status::Fail);
    assert_starts(
        &f["memory.max"].actual,
        "16 GiB (set on /slurm/uid_1000/job_7)",
    );
    assert_eq!(
        f["memory.max"].fix.split(" (").next(),
        Some(
            "echo '34359738368' > /sys/fs/cgroup/memory/slurm/uid_1000/job_7/memory.limit_in_bytes"
        )
    );
    assert_eq!(f["memory.max"].change, None);
    expect(&f, "memory.high", Status::Skip);
    expect(&f, "cpu.max", Status::Pass);
    expect(&f, "pids.max", Status::Pass);
    expect(&f, "cpuset.gpus_without_local_cpus", Status::Pass);
    expect(&f, "cpuset.gpus_without_local_memory", Status::Warn);
    assert_eq!(
        f["cpuset.gpus_without_local_memory"].fix.split(" (").next(),
        Some("echo '0-1' > /sys/fs/cgroup/cpuset/slurm/uid_1000/job_7/cpuset.mems")
    );
    // The profile's slice does not exist on this node: skipped, not an error.
    expect(&f, "pids.max@training.slice", Status::Skip);
    expect(
        &f,
        "cpuset.gpus_without_local_cpus@training.slice",
        Status::Skip,
    );
}

#[test]
fn hybrid_uses_v1_controllers() {
    let f = run(&Root::new(fixture("cgroup-hybrid")), None);
    expect(&f, "cgroup.hierarchy", Status::Warn);
    assert_contains(
        &f["cgroup.hierarchy"].actual,
        "unified at /sys/fs/cgroup/unified",
    );
    expect(&f, "memory.max", Status::Pass);
    expect(&f, "cpu.max", Status::Warn);
    assert_eq!(
        f["cpu.max"].fix.split(" (").next(),
        Some("echo '-1' > /sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us")
    );
    expect(&f, "pids.max", Status::Warn);
    // No cpuset controller is mounted: nothing restricts the CPUs or memory nodes.
    expect(&f, "cpuset.gpus_without_local_cpus", Status::Pass);
    expect(&f, "cpuset.gpus_without_local_memory", Status::Pass);
}

#[test]
fn this_machine_live() {
    // Whatever this machine runs, every check reaches a verdict from the real files; none
    // errors, and the hierarchy matches what /proc/mounts says.
    let f = run(&Root::live(), None);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let want = match (mounts.contains(" cgroup2 "), mounts.contains(" cgroup ")) {
        (true, false) => "v2",
        (false, true) => "v1",
        (true, true) => "hybrid",
        (false, false) => panic!("no cgroup mounted here"),
    };
    assert_starts(&f["cgroup.hierarchy"].actual, want);
    for finding in f.values() {
        assert_ne!(finding.status, Status::Error, "{finding:#?}");
    }
}

/// Audits an image tree (no `proc/`) holding `files` with a profile of every cgroup key whose
/// `[job] slice` is `slice`.
fn run_image(slice: &str, files: &[(&str, &str)]) -> BTreeMap<String, Finding> {
    let tree = Tree::new();
    tree.file("/etc/os-release", "ID=debian\n");
    let profile = tree.profile(
        "/p.toml",
        &format!(
            "include = [\"base\"]\n[cgroup]\n\"memory.max\" = {{ min = \"32G\" }}\n[job]\nslice = \"{slice}\"\n"
        ),
    );
    for (path, text) in files {
        tree.file(path, text);
    }
    let root = tree.root();
    let options = AuditOptions {
        mode: crate::image::Mode::Image,
        ..AuditOptions::default()
    };
    audit(
        &root,
        &profile,
        &options,
        Probes::for_root(&root),
        Area::Cgroup,
    )
}

#[test]
fn image_judges_the_slice_from_its_unit_files() {
    let f = run_image(
        "training.slice",
        &[
            (
                "usr/lib/systemd/system/training.slice",
                "[Unit]\nDescription=jobs\n[Slice]\nMemoryMax=16G\nMemoryHigh=8G\n",
            ),
            (
                "etc/systemd/system/training.slice.d/10-site.conf",
                "[Slice]\nMemoryHigh=50%\nCPUQuota=800%\n",
            ),
        ],
    );
    // Nothing about a running process exists in an image.
    for id in ["cgroup.hierarchy", "memory.max", "pids.max", "cpu.max"] {
        expect(&f, id, Status::Skip);
        assert!(f[id].message.starts_with(crate::image::NO_KERNEL), "{id}");
    }
    expect(
        &f,
        "cpuset.gpus_without_local_cpus@training.slice",
        Status::Skip,
    );

    let mem = expect(&f, "memory.max@training.slice", Status::Fail);
    assert_contains(
        &mem.actual,
        "MemoryMax=16G at /usr/lib/systemd/system/training.slice:4",
    );
    assert_eq!(
        mem.change,
        Some(crate::finding::Change::Cgroup {
            slice: "training.slice".into(),
            key: "memory.max".into(),
            value: (32u64 << 30).to_string(),
        })
    );
    assert_contains(
        &mem.fix,
        "/etc/systemd/system/training.slice.d/90-gputune.conf",
    );
    // A percentage of RAM cannot be judged without the node.
    let high = expect(&f, "memory.high@training.slice", Status::Warn);
    assert_starts(&high.message, "cannot tell");
    assert_contains(&high.actual, "10-site.conf:2");
    assert_eq!(high.change, None);
    // CPUQuota=800% is 8000 thousandths of a CPU; the base profile wants no quota.
    let cpu = expect(&f, "cpu.max@training.slice", Status::Warn);
    assert_starts(&cpu.actual, "8000 (= 8.00 CPUs)");
    assert_contains(&cpu.fix, "CPUQuota=");
    assert_eq!(
        cpu.change,
        Some(crate::finding::Change::Cgroup {
            slice: "training.slice".into(),
            key: "cpu.max".into(),
            value: "max 100000".into(),
        })
    );
    // No file sets TasksMax: a slice has no default limit (DefaultTasksMax spares slices).
    let pids = expect(&f, "pids.max@training.slice", Status::Pass);
    assert_contains(&pids.actual, "systemd's default");
}

#[test]
fn image_slice_parents_late_drop_ins_and_bad_values() {
    let f = run_image(
        "training-big.slice",
        &[
            (
                "lib/systemd/system/training.slice",
                "[Slice]\nTasksMax=1024\n",
            ),
            (
                "etc/systemd/system/training-big.slice.d/99-site.conf",
                "[Slice]\nMemoryMax=1G\nCPUQuota=lots\n",
            ),
            (
                "etc/systemd/system/training-big.slice.d/10-site.conf",
                "[Slice]\nTasksMax=infinity\nMemoryHigh=15%\nMemoryHigh=infinity\n",
            ),
        ],
    );
    // The parent slice's limit holds for the child; the change goes to the parent.
    let pids = expect(&f, "pids.max@training-big.slice", Status::Warn);
    assert_contains(&pids.actual, "on parent slice training.slice");
    assert!(
        matches!(&pids.change, Some(crate::finding::Change::Cgroup { slice, value, .. })
            if slice == "training.slice" && value == "8192"),
        "{:?}",
        pids.change
    );
    // A drop-in sorting after gputune's would win over it: the fix edits that one.
    let mem = expect(&f, "memory.max@training-big.slice", Status::Fail);
    assert_eq!(mem.change, None);
    assert_contains(&mem.fix, "99-site.conf:2");
    // The last assignment wins.
    expect(&f, "memory.high@training-big.slice", Status::Pass);
    let cpu = expect(&f, "cpu.max@training-big.slice", Status::Error);
    assert_contains(
        &cpu.message,
        "/etc/systemd/system/training-big.slice.d/99-site.conf:3: CPUQuota=lots",
    );
}

#[test]
fn each_key_reaches_its_judge() {
    crate::checks::judged::assert_each_key_reaches_its_judge(super::JUDGED);
}

#[test]
fn a_malformed_memory_node_list_is_named_as_one() {
    let tree = Tree::new();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture("cgroup-v2").join("."))
        .arg(tree.base())
        .status()
        .unwrap();
    assert!(status.success());
    tree.file(
        "/sys/fs/cgroup/training.slice/job-1.scope/cpuset.mems.effective",
        "1,,",
    );
    let f = run(&tree.root(), None);
    expect(&f, "cpuset.gpus_without_local_memory", Status::Error);
    assert_contains(
        &f["cpuset.gpus_without_local_memory"].message,
        "cpuset.mems.effective: `1,,` is not a NUMA node list (example: 0-1)",
    );
}
