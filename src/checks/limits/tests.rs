//! The limits audit against a fixture node (files) and a fixed probe (live facts).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use super::*;
use crate::checks::AuditOptions;
use crate::host::Root;
use crate::probe::Probes;
use crate::probe::limits::{LimitsProbe, Resource, Rlimit, Space};
use crate::testing::{Tree, assert_contains, assert_starts, expect, fixture};

/// Live facts chosen by the test.
struct Fixed {
    memlock: Rlimit,
    nofile: Rlimit,
    stack: Rlimit,
    shm: io::Result<Space>,
}

impl LimitsProbe for Fixed {
    fn rlimit(&self, resource: Resource) -> io::Result<Rlimit> {
        Ok(match resource {
            Resource::Memlock => self.memlock,
            Resource::Nofile => self.nofile,
            Resource::Stack => self.stack,
        })
    }

    fn space(&self, path: &Path) -> io::Result<Space> {
        assert!(path.ends_with("dev/shm"), "{}", path.display());
        match &self.shm {
            Ok(space) => Ok(*space),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }
}

fn limit(soft: Amount, hard: Amount) -> Rlimit {
    Rlimit { soft, hard }
}

fn run(root: &Root, probe: Fixed, options: AuditOptions) -> BTreeMap<String, Finding> {
    let mut probes = Probes::absent("in a test");
    probes.limits = Box::new(probe);
    crate::testing::audit(root, "ddp-infiniband", &options, probes, Area::Limits)
}

const MIB: i128 = 1 << 20;

fn container_like() -> Fixed {
    Fixed {
        memlock: limit(Amount::Finite(8 * MIB), Amount::Finite(8 * MIB)),
        nofile: limit(Amount::Finite(1024), Amount::Finite(524288)),
        stack: limit(Amount::Unlimited, Amount::Unlimited),
        shm: Ok(Space {
            size: 64 << 20,
            free: 10 << 20,
        }),
    }
}

#[test]
fn live_limits_fail_with_the_limits_d_change() {
    let f = run(&Root::live(), container_like(), AuditOptions::default());
    let memlock = expect(&f, "ulimit.memlock", Status::Fail);
    assert_eq!(memlock.actual, "soft 8 MiB, hard 8 MiB (this process)");
    assert_eq!(
        memlock.change,
        Some(Change::Limit {
            domain: "*".into(),
            kind: "-".into(),
            item: "memlock".into(),
            value: "unlimited".into()
        })
    );
    assert_starts(
        &memlock.fix,
        "add `* - memlock unlimited` to /etc/security/limits.d/90-gputune.conf",
    );
    assert_contains(&memlock.fix, "LimitMEMLOCK=infinity");
    let nofile = expect(&f, "ulimit.nofile", Status::Fail);
    assert_contains(&nofile.fix, "`* - nofile 131072`");
    assert_contains(&nofile.fix, "LimitNOFILE=131072");
    // An unlimited stack is over the 8 MiB ceiling; the fix writes it in KiB.
    let stack = expect(&f, "ulimit.stack", Status::Fail);
    assert_eq!(
        stack.change,
        Some(Change::Limit {
            domain: "*".into(),
            kind: "-".into(),
            item: "stack".into(),
            value: "8192".into()
        })
    );
    assert_contains(&stack.fix, "LimitSTACK=8192K");
    expect(&f, "dev_shm.size", Status::Fail);
    assert_starts(&f["dev_shm.size"].fix, "mount -o remount,size=1G /dev/shm");
    assert_contains(&f["dev_shm.size"].fix, "--shm-size=1G");
    expect(&f, "dev_shm.free", Status::Warn);
    assert_eq!(f["dev_shm.free"].actual, "10 MiB free of 64 MiB");
}

#[test]
fn live_limits_that_meet_the_profile_pass() {
    let good = || Fixed {
        memlock: limit(Amount::Unlimited, Amount::Unlimited),
        nofile: limit(Amount::Finite(1048576), Amount::Finite(1048576)),
        stack: limit(Amount::Finite(8 * MIB), Amount::Unlimited),
        shm: Ok(Space {
            size: 16 << 30,
            free: 15 << 30,
        }),
    };
    let f = run(&Root::live(), good(), AuditOptions::default());
    for id in [
        "ulimit.memlock",
        "ulimit.nofile",
        "ulimit.stack",
        "dev_shm.size",
        "dev_shm.free",
    ] {
        expect(&f, id, Status::Pass);
        assert_eq!(f[id].fix, "");
        assert_eq!(f[id].change, None);
    }
    // --persisted judges files only.
    let f = run(
        &Root::live(),
        good(),
        AuditOptions {
            persisted: true,
            ..AuditOptions::default()
        },
    );
    expect(&f, "ulimit.memlock", Status::Skip);
    expect(&f, "dev_shm.free", Status::Skip);
}

#[test]
fn persisted_shm_comes_from_fstab_or_the_tmpfs_default() {
    let tree = Tree::new();
    tree.file("/proc/meminfo", "MemTotal:       1048576 kB\n");
    let persisted = || AuditOptions {
        persisted: true,
        ..AuditOptions::default()
    };
    let root = tree.root();
    // 1 GiB of RAM and no fstab entry: half of it, 512 MiB, too small.
    let f = run(&root, container_like(), persisted());
    expect(&f, "dev_shm.size", Status::Fail);
    assert_eq!(
        f["dev_shm.size"].actual,
        "512 MiB after reboot (no /etc/fstab size: tmpfs default, half of RAM)"
    );
    tree.file("/etc/fstab", "tmpfs /dev/shm tmpfs defaults,size=4g 0 0\n");
    let f = run(&root, container_like(), persisted());
    expect(&f, "dev_shm.size", Status::Pass);
    assert_eq!(
        f["dev_shm.size"].actual,
        "4 GiB after reboot (size=4g in /etc/fstab)"
    );
}

#[test]
fn fixture_node_files_decide_and_live_facts_are_skipped() {
    // The probe would fail every live check: under --root it must not be consulted.
    let f = run(
        &Root::new(fixture("node")),
        container_like(),
        AuditOptions::default(),
    );
    for id in [
        "ulimit.memlock",
        "ulimit.nofile",
        "ulimit.stack",
        "dev_shm.free",
    ] {
        expect(&f, id, Status::Skip);
        assert_contains(&f[id].message, "--root");
    }
    // limits.d (read after limits.conf) raises nofile for everyone.
    let nofile = expect(&f, "ulimit.nofile.login", Status::Pass);
    assert_eq!(
        nofile.actual,
        "soft 131072 (/etc/security/limits.d/90-nccl.conf:2), hard 131072 (/etc/security/limits.d/90-nccl.conf:2)"
    );
    assert_contains(
        &nofile.message,
        "/etc/security/limits.d/90-nccl.conf:4: unknown item `bogus`",
    );
    // memlock is set only for @gpu: an ordinary user keeps the service's limit.
    let memlock = expect(&f, "ulimit.memlock.login", Status::Warn);
    assert_contains(&memlock.message, "/etc/security/limits.conf:5 (unlimited)");
    let stack = expect(&f, "ulimit.stack.login", Status::Fail);
    assert_starts(
        &stack.actual,
        "soft unlimited (/etc/security/limits.d/90-nccl.conf:3)",
    );
    // /dev/shm from the root's /proc/mounts: size=65536k.
    expect(&f, "dev_shm.size", Status::Fail);
    assert_eq!(
        f["dev_shm.size"].actual,
        "64 MiB (tmpfs size=65536k in /proc/mounts)"
    );
    expect(&f, "logind.RemoveIPC", Status::Pass);
    assert_eq!(
        f["logind.RemoveIPC"].actual,
        "no (/etc/systemd/logind.conf.d/50-nccl.conf)"
    );
}

#[test]
fn an_empty_root_skips_or_warns_but_never_errors() {
    let f = run(
        &Tree::new().root(),
        container_like(),
        AuditOptions::default(),
    );
    expect(&f, "logind.RemoveIPC", Status::Skip);
    expect(&f, "dev_shm.size", Status::Skip);
    expect(&f, "ulimit.nofile.login", Status::Warn);
    expect(&f, "ulimit.stack.login", Status::Pass);
    for finding in f.values() {
        assert_ne!(finding.status, Status::Error, "{finding:#?}");
    }
}

#[test]
fn human_sizes() {
    assert_eq!(human(Amount::Finite(8 << 20)), "8 MiB");
    assert_eq!(human(Amount::Finite(25_275_990_016)), "23.5 GiB");
    assert_eq!(human(Amount::Finite(1536)), "1.5 KiB");
    assert_eq!(human(Amount::Finite(100)), "100 B");
    assert_eq!(human(Amount::Unlimited), "unlimited");
}

/// `ulimit.nofile.login` (min 131072) for a node whose only limits file is `conf`.
fn login_nofile(conf: &str) -> Finding {
    let tree = Tree::new();
    tree.file("/etc/security/limits.conf", conf);
    let mut f = run(&tree.root(), container_like(), AuditOptions::default());
    f.remove("ulimit.nofile.login").unwrap()
}

#[test]
fn a_login_session_is_judged_by_the_soft_limit_pam_limits_really_sets() {
    // (limits.conf, status, words in `actual`, words in the message, words in the fix)
    let cases: &[(&str, Status, &str, &str, &str)] = &[
        // Soft above hard: pam_limits lowers the soft limit to the hard one.
        (
            "* soft nofile 1048576\n* hard nofile 4096\n",
            Status::Fail,
            "a session gets soft 4096",
            "lowers a soft limit above the hard limit",
            "`* - nofile 131072`",
        ),
        // No hard line: the inherited hard limit caps the soft one; not a pass.
        (
            "* soft nofile 131072\n",
            Status::Warn,
            "soft 131072 (/etc/security/limits.conf:1), hard not set",
            "inherited hard limit",
            "`* - nofile 131072`",
        ),
        // Values with a suffix are read up to the first non-digit, as pam_limits does.
        (
            "* - nofile 128k\n",
            Status::Fail,
            "soft 128 (/etc/security/limits.conf:1)",
            "limits.conf:1: value `128k` is read as 128",
            "`* - nofile 131072`",
        ),
        (
            "* soft nofile 9000x\n* hard nofile 200000\n",
            Status::Fail,
            "soft 9000",
            "ignores `x`",
            "`* - nofile 131072`",
        ),
        // Both sides meet the floor: a pass, and the judged value is the lower one.
        (
            "* soft nofile 131072\n* hard nofile unlimited\n",
            Status::Pass,
            "soft 131072 (/etc/security/limits.conf:1), hard unlimited",
            "",
            "",
        ),
        ("* - nofile 1048576\n", Status::Pass, "soft 1048576", "", ""),
    ];
    for (conf, status, actual, message, fix) in cases {
        let f = login_nofile(conf);
        assert_eq!(f.status, *status, "{conf:?}: {f:#?}");
        assert!(f.actual.contains(actual), "{conf:?}: {}", f.actual);
        assert!(f.message.contains(message), "{conf:?}: {}", f.message);
        assert!(f.fix.contains(fix), "{conf:?}: {}", f.fix);
        if *status == Status::Pass {
            assert!(!f.message.contains("Note:"), "{conf:?}: {}", f.message);
        } else {
            assert!(
                !f.message.contains("skips these bad lines"),
                "{}",
                f.message
            );
        }
    }
}

/// `ulimit.<resource>` as a Slurm job gets it on a node whose limits.conf is `limits` and
/// whose slurm.conf is `slurm` (none when `None`), slurmd's own limits being `own`.
fn job_limit(limits: &str, slurm: Option<&str>, own: Rlimit, resource: Resource) -> Finding {
    let tree = Tree::with(&[("/etc/security/limits.conf", limits)]);
    if let Some(slurm) = slurm {
        tree.file("/etc/slurm/slurm.conf", slurm);
    }
    let root = tree.root();
    let profile = crate::testing::profile(&root, "ddp-infiniband");
    let options = AuditOptions {
        limits_of: LimitsOf::SlurmJob { slurm_conf: None },
        ..AuditOptions::default()
    };
    let fixed = Fixed {
        memlock: own,
        nofile: own,
        stack: own,
        shm: Err(io::Error::other("unused")),
    };
    let ctx =
        crate::checks::Context::with_probes(&root, &profile, &options, Probes::absent("test"));
    let key = format!("ulimit.{}", resource.name());
    let setting = profile
        .get(Area::Limits, &key)
        .expect("the profile sets it");
    let files = read_limits_files(&ctx);
    let propagation = slurm_conf::read(&root, None);
    job::rlimit(&ctx, &fixed, &files, &propagation, resource, &key, setting)
}

#[test]
fn slurmd_judges_what_a_job_gets_not_its_own_limits() {
    let slurmd = limit(Amount::Finite(1024), Amount::Finite(524288));
    // slurmd's soft nofile is 1024 (systemd's default for services), but a job takes the
    // submitting session's 131072 (Slurm propagates every limit by default): a pass.
    let f = job_limit("* - nofile 131072\n", None, slurmd, Resource::Nofile);
    assert_eq!(f.status, Status::Pass, "{f:#?}");
    assert_eq!(
        f.actual,
        "soft 131072 (the submitting session's, /etc/security/limits.conf:1)"
    );
    assert_contains(
        &f.message,
        "PropagateResourceLimits=ALL (Slurm's default; no slurm.conf found)",
    );
    // The session asks for more than slurmd's hard limit: the job gets slurmd's hard limit,
    // and the fix is slurmd's unit, not limits.d.
    let low_hard = limit(Amount::Finite(1024), Amount::Finite(4096));
    let f = job_limit("* - nofile 131072\n", None, low_hard, Resource::Nofile);
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert_contains(&f.actual, "soft 4096: the submitting session's 131072");
    assert_contains(&f.fix, "LimitNOFILE=131072");
    assert_contains(&f.fix, "systemctl restart slurmd");
    assert_eq!(f.change, None);
    // The session's own limit is too low: limits.d is the fix, as for a login.
    let f = job_limit("* - nofile 1024\n", None, slurmd, Resource::Nofile);
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert_contains(&f.fix, "`* - nofile 131072`");
    assert!(f.change.is_some());
}

#[test]
fn a_limit_slurm_does_not_propagate_is_slurmds() {
    let conf = "PropagateResourceLimitsExcept=MEMLOCK\n";
    let small = limit(Amount::Finite(8 * MIB), Amount::Finite(8 * MIB));
    // limits.conf says unlimited, but the job keeps slurmd's 8 MiB: the classic RDMA trap.
    let f = job_limit(
        "* - memlock unlimited\n",
        Some(conf),
        small,
        Resource::Memlock,
    );
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert_eq!(
        f.actual,
        "soft 8 MiB, hard 8 MiB (slurmd's, which a job keeps: MEMLOCK is not propagated)"
    );
    assert_contains(
        &f.message,
        "PropagateResourceLimitsExcept=MEMLOCK (/etc/slurm/slurm.conf:1)",
    );
    assert_contains(&f.fix, "LimitMEMLOCK=infinity");
    let unlimited = limit(Amount::Unlimited, Amount::Unlimited);
    let f = job_limit("", Some(conf), unlimited, Resource::Memlock);
    assert_eq!(f.status, Status::Pass, "{f:#?}");
    // NONE: nothing comes from the session, whatever limits.conf says.
    let f = job_limit(
        "* - nofile 1048576\n",
        Some("PropagateResourceLimits=NONE\n"),
        limit(Amount::Finite(1024), Amount::Finite(1024)),
        Resource::Nofile,
    );
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert_contains(&f.actual, "slurmd's");
}

#[test]
fn a_session_limit_nobody_sets_is_left_to_the_login_check() {
    let slurmd = limit(Amount::Finite(1024), Amount::Finite(524288));
    let f = job_limit("", None, slurmd, Resource::Nofile);
    assert_eq!(f.status, Status::Skip, "{f:#?}");
    assert_contains(&f.message, "see the .login check");
    // ...unless slurmd's hard limit alone already keeps every job below the profile.
    let f = job_limit(
        "",
        None,
        limit(Amount::Finite(1024), Amount::Finite(4096)),
        Resource::Nofile,
    );
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    assert_eq!(
        f.actual,
        "at most 4096 (slurmd's hard limit caps every job's soft limit)"
    );
    // A slurm.conf Slurm itself refuses is an error naming its lines, never a guess.
    let f = job_limit(
        "",
        Some("PropagateResourceLimits=ALL\nPropagateResourceLimitsExcept=CORE\n"),
        slurmd,
        Resource::Nofile,
    );
    assert_eq!(f.status, Status::Error, "{f:#?}");
    assert_contains(&f.message, "/etc/slurm/slurm.conf:2");
}

#[test]
fn under_root_a_slurm_run_judges_files_only() {
    // slurmd running `health --root IMAGE`: no process of that node to read, and SLURM_CONF
    // names a file of the live node, not of the image: skipped, never an error.
    let tree = Tree::with(&[("/etc/security/limits.conf", "* - nofile 131072\n")]);
    let options = AuditOptions {
        limits_of: LimitsOf::SlurmJob {
            slurm_conf: Some("/etc/slurm/elsewhere.conf".into()),
        },
        ..AuditOptions::default()
    };
    let f = run(&tree.root(), container_like(), options);
    expect(&f, "ulimit.nofile", Status::Skip);
    expect(&f, "ulimit.nofile.login", Status::Pass);
}
