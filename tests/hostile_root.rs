//! Trees built the way an attacker would build an image or a directory root owns: links
//! out of the root, FIFOs and devices where files belong, huge files, tampered journals,
//! planted temporary links, a library with a constructor. Each case keeps a sentinel file
//! outside the root and asserts it is byte-identical afterwards (and that nothing new
//! appeared beside it), runs every command under a time limit, and checks the exit code.

use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SENTINEL: &str = "sentinel: must never change\n";

/// An outer directory holding a sentinel and the hostile root `root/`, built with the one
/// fixture builder ([`crate::common::Tree`]) as its outer directory.
struct Tree {
    outer: crate::common::Tree,
}

impl Tree {
    fn new() -> Tree {
        let outer = crate::common::Tree::new();
        outer
            .file("sentinel", SENTINEL)
            .dir("root/etc/sysctl.d")
            .dir("root/proc/sys/vm")
            .file("root/proc/sys/kernel/hostname", "node\n")
            .file("root/proc/sys/kernel/osrelease", "6.1.0\n");
        Tree { outer }
    }

    fn outer(&self) -> &Path {
        self.outer.base()
    }

    fn sentinel(&self) -> PathBuf {
        self.outer.path("sentinel")
    }

    fn root(&self) -> PathBuf {
        self.outer.path("root")
    }

    /// A path inside the root (its directories made).
    fn at(&self, host_path: &str) -> PathBuf {
        let p = self.root().join(host_path.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        p
    }

    fn write(&self, host_path: &str, text: &str) {
        self.outer
            .file(&format!("root/{}", host_path.trim_start_matches('/')), text);
    }

    fn fifo(&self, host_path: &str) {
        let c = std::ffi::CString::new(self.at(host_path).as_os_str().as_bytes()).unwrap();
        // SAFETY: NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    /// Names in the outer directory other than the root itself.
    fn outside(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.outer())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "root")
            .collect();
        v.sort();
        v
    }

    /// The sentinel is byte for byte as written, and nothing appeared beside it.
    fn assert_untouched(&self, extra: &[&str]) {
        assert_eq!(fs::read_to_string(self.sentinel()).unwrap(), SENTINEL);
        let mut want: Vec<String> = ["sentinel"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        want.sort();
        assert_eq!(self.outside(), want, "nothing new outside the root");
    }
}

/// The outcome of one bounded run.
struct Run {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs gputune with `args` under a hard limit; a run past it is killed and fails the
/// test as a hang. Exit 101 (a panic) always fails.
fn run(args: &[&str], limit: Duration) -> Run {
    run_with(gputune(args), limit)
}

fn gputune(args: &[&str]) -> Command {
    let mut cmd = crate::common::gputune_process();
    cmd.args(args).env_remove("GPUTUNE_NCCL_LIB");
    cmd
}

fn run_with(mut cmd: Command, limit: Duration) -> Run {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung: killed after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    };
    assert_ne!(run.code, 101, "{cmd:?} panicked: {}", run.stderr);
    assert_ne!(run.code, -1, "{cmd:?} died of a signal: {}", run.stderr);
    run
}

const LIMIT: Duration = Duration::from_secs(60);

fn root_arg(tree: &Tree) -> String {
    tree.root().display().to_string()
}

const SWAPPINESS_PROFILE: &str =
    "description = \"t\"\n[memory]\n\"vm.swappiness\" = { max = 10 }\n";

#[test]
fn output_never_follows_planted_links_nor_replaces_special_files() {
    let tree = Tree::new();
    tree.write("/proc/sys/vm/swappiness", "60\n");
    let out_dir = tree.outer().join("textfile");
    fs::create_dir(&out_dir).unwrap();
    // Links for every PID the next processes could get, as the old `.NAME.PID.tmp` allowed.
    let last: u32 = fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1000);
    for pid in last..last + 300 {
        symlink(
            tree.sentinel(),
            out_dir.join(format!(".gputune.prom.{pid}.tmp")),
        )
        .unwrap();
    }
    let out = out_dir.join("gputune.prom");
    let root = root_arg(&tree);
    let args = |o: &Path| {
        vec![
            "audit".to_string(),
            "--root".into(),
            root.clone(),
            "--only".into(),
            "memory".into(),
            "--format".into(),
            "prometheus".into(),
            "--output".into(),
            o.display().to_string(),
        ]
    };
    let a = args(&out);
    let r = run(&a.iter().map(String::as_str).collect::<Vec<_>>(), LIMIT);
    assert!(matches!(r.code, 0 | 1), "{}", r.stderr);
    assert!(fs::symlink_metadata(&out).unwrap().file_type().is_file());
    assert!(
        fs::read_to_string(&out)
            .unwrap()
            .contains("gputune_check_status")
    );

    // A null device (our own, so a regression cannot break the host's /dev/null) is
    // written into, never replaced by a regular file.
    let null = tree.outer().join("null");
    let c = std::ffi::CString::new(null.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated path; makedev(1, 3) is the null device.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(made, 0, "mknod needs root");
    let a = args(&null);
    let r = run(&a.iter().map(String::as_str).collect::<Vec<_>>(), LIMIT);
    assert!(matches!(r.code, 0 | 1), "{}", r.stderr);
    assert!(
        fs::symlink_metadata(&null)
            .unwrap()
            .file_type()
            .is_char_device()
    );

    // A directory is refused, exit 3, naming it.
    let a = args(&out_dir);
    let r = run(&a.iter().map(String::as_str).collect::<Vec<_>>(), LIMIT);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("textfile"), "{}", r.stderr);
    tree.assert_untouched(&["null", "textfile"]);
}

#[test]
fn absolute_links_in_an_image_are_read_inside_it() {
    let tree = Tree::new();
    // The host file the link names says swappiness 1 (a pass); inside the image the link
    // names a file that says 90 (a fail).
    let host_conf = tree.outer().join("host.conf");
    fs::write(&host_conf, "vm.swappiness = 1\n").unwrap();
    tree.write(&host_conf.display().to_string(), "vm.swappiness = 90\n");
    symlink(&host_conf, tree.at("/etc/sysctl.d/60-x.conf")).unwrap();
    let profile = tree.outer().join("p.toml");
    fs::write(&profile, SWAPPINESS_PROFILE).unwrap();
    let root = root_arg(&tree);
    let r = run(
        &[
            "audit",
            "--persisted",
            "--root",
            &root,
            "--only",
            "memory",
            "--format",
            "json",
            "--profile",
            &profile.display().to_string(),
        ],
        LIMIT,
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let finding = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "vm.swappiness")
        .unwrap()
        .clone();
    assert_eq!(finding["status"], "fail", "{finding}");
    assert_eq!(finding["actual"], "90", "{finding}");
    tree.assert_untouched(&["host.conf", "p.toml"]);
}

#[test]
fn apply_never_writes_through_links_out_of_the_root() {
    let tree = Tree::new();
    let outside = tree.outer().join("out");
    fs::create_dir(&outside).unwrap();
    symlink(tree.sentinel(), tree.at("/proc/sys/vm/swappiness")).unwrap();
    fs::remove_dir_all(tree.at("/etc/sysctl.d")).unwrap();
    symlink(&outside, tree.at("/etc/sysctl.d")).unwrap();
    fs::create_dir_all(tree.at("/var")).unwrap();
    symlink(&outside, tree.at("/var/lib")).unwrap();
    let profile = tree.outer().join("p.toml");
    fs::write(&profile, SWAPPINESS_PROFILE).unwrap();
    let root = root_arg(&tree);
    let apply = || {
        run(
            &[
                "apply",
                "--yes",
                "--root",
                &root,
                "--profile",
                &profile.display().to_string(),
            ],
            LIMIT,
        )
    };
    // Inside the root the links dangle: the knob does not exist, so there is nothing to do.
    let r = apply();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(String::from_utf8_lossy(&r.stdout).contains("0 changes"));
    // Give the links their targets inside the root: the knob is read there, but a write
    // never goes through a final link (exit 3 naming it, every change restored).
    let mirror = |p: &Path| tree.root().join(p.strip_prefix("/").unwrap());
    fs::create_dir_all(mirror(&outside)).unwrap();
    fs::write(mirror(&tree.sentinel()), "60\n").unwrap();
    let r = apply();
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("swappiness: "), "{}", r.stderr);
    assert!(r.stderr.contains("never writes through"), "{}", r.stderr);
    assert_eq!(
        fs::read_to_string(mirror(&tree.sentinel())).unwrap(),
        "60\n"
    );
    // The directory links resolve inside the root: the journal landed there, then went.
    assert!(!mirror(&outside).join("gputune/journal.json").exists());
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    tree.assert_untouched(&["out", "p.toml"]);
}

#[test]
fn a_tampered_journal_is_refused_before_anything_is_touched() {
    let escape = |kind: &str, path: &str| {
        format!(
            "{{\"what\":\"x\",\"target\":{{\"kind\":\"{kind}\",\"path\":\"{path}\"}},\"before\":{{\"state\":\"present\",\"value\":\"pwned\\n\"}},\"after\":{{\"state\":\"absent\"}}}}"
        )
    };
    for (kind, path) in [
        ("knob", "/../../../../tmp/x"),
        ("file", "/../../../../tmp/x"),
        ("link", "/../../../../tmp/x"),
        ("knob", "/proc/sys/kernel/core_pattern"),
        ("file", "/etc/shadow"),
    ] {
        let tree = Tree::new();
        let sentinel = tree.sentinel().display().to_string();
        let path = path.replace("/tmp/x", &sentinel);
        // A valid first entry that would be restored if validation came late.
        tree.write("/proc/sys/vm/swappiness", "10\n");
        let good = "{\"what\":\"vm.swappiness\",\"target\":{\"kind\":\"knob\",\"path\":\"/proc/sys/vm/swappiness\"},\"before\":{\"state\":\"present\",\"value\":\"60\\n\"},\"after\":{\"state\":\"present\",\"value\":\"10\"}}";
        tree.write(
            "/var/lib/gputune/journal.json",
            &format!(
                "{{\"version\":1,\"phase\":\"applied\",\"profiles\":[\"base\"],\"steps\":[{good},{}]}}",
                escape(kind, &path)
            ),
        );
        let r = run(&["rollback", "--root", &root_arg(&tree)], LIMIT);
        assert_eq!(r.code, 3, "{kind} {path}: {}", r.stderr);
        assert!(r.stderr.contains("invalid journal"), "{}", r.stderr);
        assert_eq!(
            fs::read_to_string(tree.at("/proc/sys/vm/swappiness")).unwrap(),
            "10\n",
            "nothing touched"
        );
        tree.assert_untouched(&[]);
    }
}

#[test]
fn a_library_in_an_image_is_read_never_loaded() {
    let tree = Tree::new();
    let marker = tree.outer().join("constructor-ran");
    let src = tree.outer().join("evil.c");
    fs::write(
        &src,
        format!(
            "#include <stdio.h>\n\
             const char version[] = \"NCCL version 2.18.1+cuda12.2\";\n\
             __attribute__((constructor)) static void evil(void) {{\n\
               FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\", f); fclose(f); }}\n\
             }}\n\
             int ncclGetVersion(int *v) {{ *v = 29900; return 0; }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let lib = tree.at("/usr/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2");
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("`cc` is missing: run scripts/test, which installs gcc");
    assert!(ok.success());
    let root = root_arg(&tree);
    let r = run(
        &[
            "audit", "--root", &root, "--only", "gpu", "--format", "json",
        ],
        LIMIT,
    );
    assert!(matches!(r.code, 0 | 1), "{}", r.stderr);
    assert!(
        !marker.exists(),
        "the image's constructor ran inside gputune"
    );
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("2.18.1"), "version read from the file: {out}");
    assert!(!out.contains("2.99.0"), "the library was called: {out}");
    tree.assert_untouched(&["evil.c"]);
}

#[test]
fn fifos_devices_and_huge_files_are_errors_not_hangs() {
    let tree = Tree::new();
    tree.fifo("/proc/sys/vm/swappiness");
    tree.fifo("/etc/sysctl.d/10-fifo.conf");
    tree.fifo("/etc/gputune/profiles/fifo.toml");
    tree.fifo("/etc/nccl.conf");
    tree.fifo("/etc/security/limits.d/fifo.conf");
    symlink("/dev/zero", tree.at("/etc/sysctl.d/20-zero.conf")).unwrap();
    // A real /dev/zero inside the root too (mknod works as root).
    let zero = std::ffi::CString::new(tree.at("/dev/zero").as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated path; makedev(1, 5) is /dev/zero.
    let made = unsafe { libc::mknod(zero.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 5)) };
    // A 100 MB knob (sparse, so cheap to make).
    let big = fs::File::create(tree.at("/proc/sys/vm/zone_reclaim_mode")).unwrap();
    big.set_len(100 << 20).unwrap();
    let root = root_arg(&tree);
    for persisted in [false, true] {
        let mut args = vec![
            "audit",
            "--root",
            &root,
            "--format",
            "json",
            "--profile",
            "base",
        ];
        if persisted {
            args.push("--persisted");
        }
        let r = run(&args, LIMIT);
        assert!(matches!(r.code, 1 | 3), "{}", r.stderr);
        assert!(
            r.stdout.len() < 1 << 20,
            "report of {} bytes",
            r.stdout.len()
        );
        if r.code == 1 {
            let out = String::from_utf8_lossy(&r.stdout);
            assert!(out.contains("not a regular file"), "{out}");
        }
    }
    let r = run(
        &[
            "audit", "--root", &root, "--only", "memory", "--format", "json",
        ],
        LIMIT,
    );
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("is a FIFO, not a regular file"), "{out}");
    assert!(out.contains("is larger than"), "{out}");
    if made == 0 {
        assert!(out.contains("20-zero.conf") || r.code != 0, "{out}");
    }
    let r = run(&["profiles", "show", "fifo", "--root", &root], LIMIT);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("FIFO"), "{}", r.stderr);
    tree.assert_untouched(&[]);
}

#[test]
fn hostile_includes_end_with_exit_2() {
    let tree = Tree::new();
    let dir = tree.outer().join("profiles");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("zero.toml"), "include = [\"/dev/zero\"]\n").unwrap();
    let c = std::ffi::CString::new(dir.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    fs::write(dir.join("f.toml"), "include = [\"./fifo\"]\n").unwrap();
    for i in 0..3000 {
        fs::write(
            dir.join(format!("c{i}.toml")),
            format!("include = [\"./c{}.toml\"]\n", i + 1),
        )
        .unwrap();
    }
    for i in 0..25 {
        let next = format!("./d{}.toml", i + 1);
        fs::write(
            dir.join(format!("d{i}.toml")),
            format!("include = [\"{next}\", \"{next}\"]\n"),
        )
        .unwrap();
    }
    fs::write(dir.join("d25.toml"), "description = \"leaf\"\n").unwrap();
    // What stderr says, or None where it must say nothing.
    for (name, code, needle) in [
        ("zero.toml", 2, Some("not a regular file")),
        ("f.toml", 2, Some("FIFO")),
        ("c0.toml", 2, Some("deeper than")),
        ("d0.toml", 0, None),
    ] {
        let start = Instant::now();
        let r = run(
            &[
                "profiles",
                "show",
                &dir.join(name).display().to_string(),
                "--root",
                &root_arg(&tree),
            ],
            LIMIT,
        );
        assert_eq!(r.code, code, "{name}: {}", r.stderr);
        match needle {
            Some(needle) => assert!(r.stderr.contains(needle), "{name}: {}", r.stderr),
            None => assert!(r.stderr.is_empty(), "{name}: {}", r.stderr),
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{name} took {:?}",
            start.elapsed()
        );
    }
    tree.assert_untouched(&["profiles"]);
}

#[test]
fn a_cpulist_of_millions_is_refused_quickly() {
    let tree = Tree::new();
    let ranges: Vec<String> = (0..60)
        .map(|i| format!("{}-{}", i * 1_000_000, i * 1_000_000 + 999_999))
        .collect();
    tree.write(
        "/sys/devices/system/node/node0/cpulist",
        &format!("{}\n", ranges.join(",")),
    );
    tree.write("/sys/devices/system/node/online", "0\n");
    let start = Instant::now();
    let r = run(
        &["topo", "--root", &root_arg(&tree), "--format", "json"],
        LIMIT,
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    assert!(r.stdout.len() < 1 << 20);
    let _ = r.code;
    tree.assert_untouched(&[]);
}

/// A root whose swappiness knob apply can write and roll back (a regular file).
fn writable_node(tree: &Tree) -> PathBuf {
    tree.write("/proc/sys/vm/swappiness", "60\n");
    let profile = tree.outer().join("p.toml");
    fs::write(&profile, SWAPPINESS_PROFILE).unwrap();
    profile
}

fn journal_phase(tree: &Tree) -> String {
    let text = fs::read_to_string(tree.at("/var/lib/gputune/journal.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["phase"].as_str().unwrap().to_string()
}

#[test]
fn a_closed_or_full_stdout_is_exit_3_after_the_transaction() {
    let tree = Tree::new();
    let profile = writable_node(&tree).display().to_string();
    let root = root_arg(&tree);
    let full = || {
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };

    let mut cmd = gputune(&["apply", "--dry-run", "--root", &root, "--profile", &profile]);
    cmd.stdout(full());
    let status = cmd.status().unwrap();
    assert_eq!(status.code(), Some(3));

    // `apply --yes | head -0`: the reader is gone before apply prints.
    let mut cmd = gputune(&["apply", "--yes", "--root", &root, "--profile", &profile]);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("journal"));
    assert_eq!(journal_phase(&tree), "applied");
    assert_eq!(
        fs::read_to_string(tree.at("/proc/sys/vm/swappiness")).unwrap(),
        "10"
    );

    let mut cmd = gputune(&["rollback", "--root", &root]);
    cmd.stdout(full());
    assert_eq!(cmd.status().unwrap().code(), Some(3));
    assert_eq!(journal_phase(&tree), "rolled_back");
    assert_eq!(
        fs::read_to_string(tree.at("/proc/sys/vm/swappiness")).unwrap(),
        "60\n"
    );
    tree.assert_untouched(&["p.toml"]);
}

#[test]
fn planted_temp_links_are_removed_not_followed() {
    let tree = Tree::new();
    let profile = writable_node(&tree).display().to_string();
    let last: u32 = fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1000);
    for pid in last..last + 200 {
        for dir_name in [
            "/etc/sysctl.d/.90-gputune.conf",
            "/var/lib/gputune/.journal.json",
        ] {
            symlink(tree.sentinel(), tree.at(&format!("{dir_name}.{pid}.tmp"))).unwrap();
        }
    }
    let r = run(
        &[
            "apply",
            "--yes",
            "--root",
            &root_arg(&tree),
            "--profile",
            &profile,
        ],
        LIMIT,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let names = |dir: &str| -> Vec<String> {
        fs::read_dir(tree.root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names("etc/sysctl.d"), ["90-gputune.conf"]);
    assert_eq!(names("var/lib/gputune"), ["journal.json"]);
    tree.assert_untouched(&["p.toml"]);
}

#[test]
fn host_strings_cannot_break_junit_or_the_terminal() {
    let tree = Tree::new();
    tree.write(
        "/proc/sys/kernel/hostname",
        "node\u{FFFF}\u{1b}[31mred\u{7}\n",
    );
    tree.write("/proc/sys/vm/swappiness", "60\n");
    let root = root_arg(&tree);
    let r = run(
        &[
            "audit", "--root", &root, "--only", "memory", "--format", "junit",
        ],
        LIMIT,
    );
    let xml = String::from_utf8(r.stdout).unwrap();
    roxmltree::Document::parse(&xml).expect("well-formed JUnit");
    let r = run(&["audit", "--root", &root, "--only", "memory"], LIMIT);
    let table = String::from_utf8(r.stdout).unwrap();
    assert!(table.contains("node"));
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{7}'),
        "{table:?}"
    );
}

#[test]
fn an_empty_gputune_root_means_unset() {
    let mut cmd = gputune(&["profiles", "list"]);
    cmd.env("GPUTUNE_ROOT", "");
    let r = run_with(cmd, LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A cgroup knob is any `NAME.KEY` file under `/sys/fs/cgroup/`, so for these entries the
/// path check is the only check: `..`, `//` and `.` must each stop rollback before it
/// writes, though every file named exists inside the root and would take the write.
#[test]
fn a_journal_cgroup_path_that_is_not_clean_is_refused() {
    for (path, lands_at, why) in [
        (
            "/sys/fs/cgroup/../../../etc/cron.d/memory.max",
            "/etc/cron.d/memory.max",
            "`.` or `..` components",
        ),
        (
            "/sys/fs/cgroup/a//cpuset.cpus",
            "/sys/fs/cgroup/a/cpuset.cpus",
            "not a clean path",
        ),
        (
            "/sys/fs/cgroup/./x/memory.max",
            "/sys/fs/cgroup/x/memory.max",
            "`.` or `..` components",
        ),
    ] {
        let tree = Tree::new();
        tree.write(lands_at, "max\n");
        // The cgroup directories exist, so the `..` resolves and the write could land.
        fs::create_dir_all(tree.at("/sys/fs/cgroup/a")).unwrap();
        tree.write("/proc/sys/vm/swappiness", "10\n");
        let good = "{\"what\":\"vm.swappiness\",\"target\":{\"kind\":\"knob\",\"path\":\"/proc/sys/vm/swappiness\"},\"before\":{\"state\":\"present\",\"value\":\"60\\n\"},\"after\":{\"state\":\"present\",\"value\":\"10\"}}";
        let bad = format!(
            "{{\"what\":\"x\",\"target\":{{\"kind\":\"knob\",\"path\":\"{path}\"}},\"before\":{{\"state\":\"present\",\"value\":\"* * * * * root sh\\n\"}},\"after\":{{\"state\":\"present\",\"value\":\"max\\n\"}}}}"
        );
        tree.write(
            "/var/lib/gputune/journal.json",
            &format!(
                "{{\"version\":1,\"phase\":\"applied\",\"profiles\":[\"base\"],\"steps\":[{good},{bad}]}}"
            ),
        );
        let r = run(&["rollback", "--root", &root_arg(&tree)], LIMIT);
        assert_eq!(r.code, 3, "{path}: {}", r.stderr);
        assert!(r.stderr.contains("invalid journal"), "{path}: {}", r.stderr);
        assert!(r.stderr.contains("entry 2"), "{path}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{path}: {}", r.stderr);
        assert_eq!(fs::read_to_string(tree.at(lands_at)).unwrap(), "max\n");
        assert_eq!(
            fs::read_to_string(tree.at("/proc/sys/vm/swappiness")).unwrap(),
            "10\n",
            "nothing touched"
        );
        tree.assert_untouched(&[]);
    }
}

/// A `--profile FILE` over the 1 MiB cap is refused whole (exit 2, the file and the cap
/// named), never cut at the cap and parsed: the first MiB alone is a valid profile here.
/// One exactly at the cap is read.
#[test]
fn an_oversized_profile_file_is_refused_not_truncated() {
    const CAP: usize = 1 << 20;
    let tree = Tree::new();
    let head = "description = \"big\"\n[memory]\n\"vm.swappiness\" = { max = 10 }\n#";
    for (len, code) in [(CAP, 0), (CAP + 1, 2)] {
        let p = tree.outer().join("big.toml");
        let text = format!("{head}{}\n", "x".repeat(len - head.len() - 1));
        assert_eq!(text.len(), len);
        fs::write(&p, text).unwrap();
        let r = run(&["profiles", "show", &p.display().to_string()], LIMIT);
        assert_eq!(r.code, code, "{len} bytes: {}", r.stderr);
        if code == 2 {
            assert!(r.stderr.contains("big.toml"), "{}", r.stderr);
            assert!(
                r.stderr.contains("larger than 1048576 bytes"),
                "{}",
                r.stderr
            );
        } else {
            assert!(String::from_utf8_lossy(&r.stdout).contains("vm.swappiness"));
        }
        fs::remove_file(&p).unwrap();
    }
    tree.assert_untouched(&[]);
}
