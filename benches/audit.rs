//! How long a full audit takes and how much memory it needs, against references measured in
//! the same run: reading the same files with no judging (the I/O floor), and starting a
//! process that does nothing (the exec floor). Run with `cargo bench --bench audit`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gputune::checks::{self, AuditOptions, Context};
use gputune::host::{Root, sysctl};
use gputune::profile::Loader;

const IN_PROCESS_RUNS: u32 = 2000;
const PROCESS_RUNS: u32 = 100;

fn main() {
    // `cargo test --all-targets` runs bench binaries too, without `--bench`: measure only
    // under `cargo bench`, where timings of an optimised build mean something.
    if !std::env::args().any(|a| a == "--bench") {
        println!("audit benchmark: run it with `cargo bench --bench audit`");
        return;
    }
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/untuned-node");
    println!(
        "gputune audit benchmark ({} CPUs)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:<56} {:>12} {:>12} {:>8}",
        "what", "per run", "reference", "ratio"
    );
    for (label, root) in [
        ("live node", Root::live()),
        ("fixture untuned-node", Root::new(&fixture)),
    ] {
        in_process(label, &root);
    }
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_gputune"));
    whole_process(
        &binary,
        &["audit", "--format", "json"],
        "gputune audit (live, all areas)",
    );
    let root_arg = fixture.display().to_string();
    whole_process(
        &binary,
        &["audit", "--format", "json", "--root", &root_arg],
        "gputune audit --root fixture",
    );
}

/// The audit inside this process, against reading the same files without judging them.
fn in_process(label: &str, root: &Root) {
    let profile = Loader::new(root, &checks::keys)
        .load("ddp-25gbe")
        .expect("built-in profile loads");
    let options = AuditOptions::default();
    let ctx = Context::new(root, &profile, &options);
    let findings = checks::run(&ctx, &[]);
    // The files the kernel-setting checks read: every sysctl the profile names, swap and THP.
    let mut files: Vec<PathBuf> = profile
        .settings
        .values()
        .flat_map(|s| s.keys())
        .map(|key| root.path(&sysctl::host_path(sysctl::sysctl_of(key))))
        .filter(|path| path.exists())
        .collect();
    files.extend(
        ["/proc/swaps", "/sys/kernel/mm/transparent_hugepage/enabled"].map(|p| root.path(p)),
    );

    let audit = time(IN_PROCESS_RUNS, || {
        black_box(checks::run(&ctx, &[]));
    });
    let reads = time(IN_PROCESS_RUNS, || {
        for f in &files {
            black_box(std::fs::read(f).ok());
        }
    });
    row(
        &format!("in-process audit, {label} ({} findings)", findings.len()),
        audit,
        reads,
        "raw reads",
    );
}

/// The whole binary, start to exit, against a process that does nothing; with peak memory.
fn whole_process(binary: &Path, args: &[&str], label: &str) {
    let (run, rss) = spawn_many(binary, args);
    let (floor, floor_rss) = spawn_many(Path::new("/bin/true"), &[]);
    row(label, run, floor, "/bin/true");
    println!(
        "{:<56} {:>9} KiB {:>8} KiB {:>7.1}x",
        format!("  peak RSS ({label})"),
        rss,
        floor_rss,
        rss as f64 / floor_rss.max(1) as f64
    );
}

// wait4 reaps each child (std's wait cannot report ru_maxrss).
#[allow(clippy::zombie_processes)]
fn spawn_many(binary: &Path, args: &[&str]) -> (Duration, i64) {
    let mut peak = 0;
    let per_run = time(PROCESS_RUNS, || {
        let child = Command::new(binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        peak = peak.max(wait_rss(child.id() as libc::pid_t));
    });
    (per_run, peak)
}

/// Waits for the child and returns its peak resident set in KiB (`ru_maxrss`).
fn wait_rss(pid: libc::pid_t) -> i64 {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; both pointers are valid for the call.
    unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    usage.ru_maxrss
}

fn time(runs: u32, mut f: impl FnMut()) -> Duration {
    f();
    let start = Instant::now();
    for _ in 0..runs {
        f();
    }
    start.elapsed() / runs
}

fn row(label: &str, value: Duration, reference: Duration, reference_name: &str) {
    println!(
        "{:<56} {:>9.3} ms {:>9.3} ms {:>7.1}x  (reference: {reference_name})",
        label,
        value.as_secs_f64() * 1e3,
        reference.as_secs_f64() * 1e3,
        value.as_secs_f64() / reference.as_secs_f64().max(1e-12)
    );
}
