//! Every command the README's `sh` blocks and the man pages' EXAMPLES show, run verbatim as a
//! user would: a clean environment (no `GPUTUNE_*` variable, a fresh `HOME`, no directory made
//! in advance) inside a sandbox that fits the command, asserting the documented exit code.
//!
//! The sandbox is this machine seen through a network namespace of the journey's own and a
//! fresh mount namespace for each command: `/etc` is an overlay whose writes stay in the
//! sandbox; `/var/lib`, `/run` and `/mnt` are directories of the journey's, empty at its
//! start; the kernel knobs that are global to the machine (`vm.swappiness`, THP, ...) are
//! regular files bind-mounted over the real ones; and an image journey finds a fresh copy of
//! the Debian test image where the example names it. `sudo` is the identity (the suite runs
//! as root). Commands of one block run in order in one sandbox, as a user types them. The
//! binary is the release build users install (`GPUTUNE_TEST_RELEASE_BIN`, which
//! `scripts/test` builds): the README's benchmark sizes are too slow for a debug build.
//!
//! A documented command without a case here fails the suite, and so does a case whose
//! command is no longer documented: the examples cannot drift from what is tested.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{KillOnDrop, fixture, require, text};

/// Where a documented command runs.
#[derive(Clone, Copy, Debug)]
enum Sandbox {
    /// This machine through the namespaces described above; commands of one journey share it.
    Host(&'static str),
    /// As `Host`, with a fresh copy of the Debian test image mounted at the path.
    Image(&'static str, &'static str),
    /// Not runnable here; the reason names what it needs and the test that covers it. The
    /// command (if any) stands in for it inside the journey, so the next step finds what it
    /// would have left.
    Elsewhere(&'static str, &'static str, Option<&'static str>),
}

/// One documented command: where it runs and the exit codes its documentation promises.
struct Case {
    command: &'static str,
    sandbox: Sandbox,
    exit: &'static [i32],
}

use Sandbox::{Elsewhere, Host, Image};

const PASS_OR_FINDINGS: &[i32] = &[0, 1];

/// The documented commands, in the order a reader meets them.
const CASES: &[Case] = &[
    // README: install and the two commands.
    Case {
        command: "cargo install --path .",
        sandbox: Elsewhere(
            "install",
            "builds and installs the release binary; the suite runs the binary cargo built for it",
            None,
        ),
        exit: &[0],
    },
    Case {
        command: "cargo run --release -- audit",
        sandbox: Elsewhere(
            "first",
            "a release build inside the test run; `gputune audit` below runs the same command line",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "./scripts/test",
        sandbox: Elsewhere("tests", "this is the suite itself", None),
        exit: &[0],
    },
    // gputune audit
    Case {
        command: "gputune audit",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --profile ddp-25gbe",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --profile ./my-cluster.toml",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --only network,memory --strict",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --format json --output /var/lib/gputune/audit.json",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --format junit > gputune-junit.xml",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --format prometheus --output /var/lib/node_exporter/textfile/gputune.prom",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --root /mnt/golden-image --profile ddp-25gbe",
        sandbox: Image("golden", "/mnt/golden-image"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --peer node02:29500",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --skip platform.acs,ulimit.nofile",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --verbose",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --verbose --skip platform.acs,logind.RemoveIPC",
        sandbox: Host("audit"),
        exit: &[1],
    },
    Case {
        command: "gputune audit --only gpu --since 2h",
        sandbox: Host("audit"),
        // No GPU here: the gpu area skips, and nothing fails.
        exit: &[0],
    },
    // profiles
    Case {
        command: "gputune profiles list",
        sandbox: Host("profiles"),
        exit: &[0],
    },
    Case {
        command: "gputune profiles show ddp-100gbe",
        sandbox: Host("profiles"),
        exit: &[0],
    },
    // apply and rollback, live, in the order the README gives them.
    Case {
        command: "gputune apply --profile ddp-10gbe --dry-run",
        sandbox: Host("apply"),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "sudo gputune apply --profile ddp-10gbe",
        sandbox: Host("apply"),
        // No terminal to ask: a script is refused.
        exit: &[2],
    },
    Case {
        command: "sudo gputune apply --profile ddp-10gbe --yes --only network,memory",
        sandbox: Host("apply"),
        exit: &[0],
    },
    Case {
        command: "sudo gputune apply --profile ddp-10gbe --yes --no-persist",
        sandbox: Host("apply"),
        // What has no mechanical fix (the cgroup hierarchy) still fails, as audit would.
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "sudo gputune apply --profile ddp-10gbe --skip vm.swappiness",
        sandbox: Host("apply"),
        // No terminal to ask: a script is refused (tests/apply_confirm.rs answers a terminal).
        exit: &[2],
    },
    Case {
        command: "gputune status",
        sandbox: Host("apply"),
        // Everything apply changed still holds.
        exit: &[0],
    },
    Case {
        command: "gputune status >/dev/null || logger -t gputune \"settings drifted since apply\"",
        sandbox: Host("apply"),
        exit: &[0],
    },
    Case {
        command: "gputune rollback --dry-run",
        sandbox: Host("apply"),
        exit: &[0],
    },
    Case {
        command: "sudo gputune rollback",
        sandbox: Host("apply"),
        exit: &[0],
    },
    // topo
    Case {
        command: "gputune topo",
        sandbox: Host("topo"),
        exit: &[0],
    },
    Case {
        command: "gputune topo --format json",
        sandbox: Host("topo"),
        exit: &[0],
    },
    Case {
        command: "gputune --root /mnt/image topo",
        sandbox: Image("topo-image", "/mnt/image"),
        exit: &[0],
    },
    // pin
    Case {
        command: "torchrun --nproc-per-node 8 --no-python gputune pin -- python train.py",
        sandbox: Elsewhere(
            "pin",
            "needs 8 GPUs and torchrun; tests/pin.rs pins ranks by LOCAL_RANK on GPU fixture trees",
            None,
        ),
        exit: &[0],
    },
    Case {
        command: "srun --gpus-per-node 8 gputune pin -v -- python train.py",
        sandbox: Elsewhere(
            "pin",
            "needs a Slurm node with 8 GPUs; tests/slurm.rs runs gputune under srun",
            None,
        ),
        exit: &[0],
    },
    Case {
        command: "gputune pin --local-rank 3 -- ./my_rank",
        sandbox: Host("pin"),
        // No GPU on this machine: exit 3, saying so.
        exit: &[3],
    },
    // bench
    Case {
        command: "gputune bench allreduce --backend tcp --ranks 2 -b 8 -e 256M",
        sandbox: Host("bench"),
        exit: &[0],
    },
    Case {
        command: "gputune bench allreduce --backend nccl --ranks 8",
        sandbox: Host("bench"),
        // No CUDA driver here: exit 3 naming --backend tcp.
        exit: &[3],
    },
    Case {
        command: "gputune bench allreduce --min-busbw 2.0 --format json",
        sandbox: Host("bench"),
        // The threshold decides: 0 at or above 2 GB/s, 1 below.
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune bench allreduce --profile ddp-10gbe",
        sandbox: Host("bench"),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "srun -N 2 --ntasks-per-node=1 gputune bench allreduce --backend tcp --min-busbw 80%",
        sandbox: Elsewhere(
            "launchers",
            "needs two nodes under Slurm; tests/bench_context.rs runs two hosts in network namespaces over a shaped link with --min-busbw 80%",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune bench allreduce --backend nccl --ranks 8 --profile site",
        sandbox: Elsewhere(
            "baselines",
            "needs GPUs and a site profile with [bench.baseline]; tests/bench_context.rs judges a profile's baselines over TCP",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune bench allgather --ranks 4 --format json",
        sandbox: Host("bench"),
        exit: &[0],
    },
    Case {
        command: "gputune bench allreduce --backend tcp --algo ring",
        sandbox: Host("bench"),
        exit: &[0],
    },
    Case {
        command: "torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend static --master-addr n01 --master-port 29500 --node-rank $NODE --no-python gputune bench allreduce",
        sandbox: Elsewhere(
            "launchers",
            "needs two nodes and torchrun; tests/bench_allreduce.rs starts ranks with torchrun's variables",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "srun --ntasks-per-node=8 gputune bench allreduce --min-busbw 40",
        sandbox: Elsewhere(
            "launchers",
            "needs nodes with GPUs under Slurm; tests/slurm.rs runs gputune under srun",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "mpirun -np 16 -x MASTER_ADDR=n01 -x MASTER_PORT=29500 gputune bench allreduce",
        sandbox: Elsewhere(
            "launchers",
            "needs 16 ranks on two nodes; tests/bench_allreduce.rs starts ranks with Open MPI's variables",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "srun -N 16 --ntasks-per-node=1 gputune bench allreduce --backend tcp --pairs -b 64M -e 64M",
        sandbox: Elsewhere(
            "pairs",
            "needs 16 nodes; tests/pairs_netns.rs runs --pairs across network namespaces",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune bench allgather --backend tcp --ranks 4 -b 1M -e 256M",
        sandbox: Host("bench"),
        exit: &[0],
    },
    Case {
        command: "gputune bench allgather --backend nccl --ranks 8 --format json",
        sandbox: Host("bench"),
        exit: &[3],
    },
    Case {
        command: "gputune bench reducescatter --backend tcp --ranks 4 -b 1M -e 256M",
        sandbox: Host("bench"),
        exit: &[0],
    },
    Case {
        command: "gputune bench reducescatter --backend nccl --ranks 8 --profile ddp-100gbe",
        sandbox: Host("bench"),
        exit: &[3],
    },
    Case {
        command: "gputune bench broadcast --backend tcp --ranks 3",
        sandbox: Host("bench"),
        exit: &[0],
    },
    Case {
        command: "gputune bench allreduce --backend nccl --ranks 8 --min-busbw 40",
        sandbox: Host("bench"),
        exit: &[3],
    },
    // health
    Case {
        command: "exec gputune health --slurm --profile ddp-25gbe",
        sandbox: Elsewhere(
            "health",
            "slurmd runs it as HealthCheckProgram; tests/slurm.rs runs health --slurm under a real Slurm",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune health --slurm --profile ddp-25gbe",
        sandbox: Elsewhere(
            "health",
            "needs slurmctld; tests/slurm.rs runs health --slurm under a real Slurm",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune health --format npd",
        sandbox: Host("health"),
        // This machine fails the default profile: a problem.
        exit: &[1],
    },
    // fleet
    Case {
        command: "clush -w gpu[01-64] -b 'gputune audit --format json' | gputune fleet -",
        sandbox: Elsewhere(
            "fleet",
            "needs 64 nodes over ssh; the fleet tests feed clush -b output to `gputune fleet -`",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "pdsh -w gpu[01-64] 'gputune audit --format json' | gputune fleet -",
        sandbox: Elsewhere(
            "fleet",
            "needs 64 nodes over ssh; the fleet tests feed pdsh output to `gputune fleet -`",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "srun -N 64 --ntasks-per-node=1 --output='reports/%N.json' gputune audit --format json",
        sandbox: Elsewhere(
            "fleet",
            "needs 64 Slurm nodes; here this node writes its own report where srun would",
            Some(
                "mkdir -p reports && gputune audit --format json > \"reports/$(hostname -s).json\"",
            ),
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune fleet reports/ --format json",
        sandbox: Host("fleet"),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune fleet reports/ --failing",
        sandbox: Host("fleet"),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "gputune fleet reports/ --format prometheus",
        sandbox: Host("fleet"),
        exit: PASS_OR_FINDINGS,
    },
    // explain, on the log a failed job left (see WORLD).
    Case {
        command: "gputune explain slurm-4711.out",
        sandbox: Host("explain"),
        exit: &[1],
    },
    Case {
        command: "gputune explain --check slurm-4711.out",
        sandbox: Host("explain"),
        exit: &[1],
    },
    Case {
        command: "gputune explain --check job.err",
        sandbox: Host("explain"),
        exit: &[1],
    },
    // preflight: every node of a job.
    Case {
        command: "srun -N 64 --ntasks-per-node=1 gputune preflight",
        sandbox: Elsewhere(
            "preflight",
            "needs 64 Slurm nodes; tests/preflight_netns.rs runs srun-style ranks in network namespaces",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "RANK=$NODE_RANK WORLD_SIZE=4 MASTER_ADDR=node0 gputune preflight --timeout 60",
        sandbox: Elsewhere(
            "preflight",
            "needs 4 nodes; tests/preflight_netns.rs starts ranks with these variables in network namespaces",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "RANK=$NODE_RANK WORLD_SIZE=4 MASTER_ADDR=node0 MASTER_PORT=29500 gputune preflight --timeout 60",
        sandbox: Elsewhere(
            "preflight",
            "needs 4 nodes; tests/preflight_netns.rs starts ranks with these variables in network namespaces",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "mpirun -np 8 --map-by ppr:1:node -x MASTER_ADDR=node0 gputune preflight --format json",
        sandbox: Elsewhere(
            "preflight",
            "needs 8 nodes and Open MPI; tests/preflight_netns.rs covers the launchers' variables",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "srun -N 16 gputune preflight --format html --output preflight.html --pairs-report pairs.json",
        sandbox: Elsewhere(
            "preflight",
            "needs 16 nodes; tests/preflight_html.rs renders the page with a real bench --pairs report in Chromium",
            None,
        ),
        exit: PASS_OR_FINDINGS,
    },
    Case {
        command: "kubectl logs job/train | gputune explain --format json -",
        sandbox: Elsewhere(
            "explain",
            "needs a Kubernetes job; tests/explain.rs reads logs from standard input",
            None,
        ),
        exit: &[1],
    },
    Case {
        command: "kubectl logs job/train --all-containers | gputune explain --format json -",
        sandbox: Elsewhere(
            "explain",
            "needs a Kubernetes job; tests/explain.rs reads logs from standard input",
            None,
        ),
        exit: &[1],
    },
    // The golden-image bake, in order.
    Case {
        command: "debootstrap --variant=minbase --include=systemd,procps bookworm /mnt/image",
        sandbox: Elsewhere(
            "bake",
            "scripts/test runs this debootstrap once and caches the image; the journey starts from a fresh copy of it",
            None,
        ),
        exit: &[0],
    },
    Case {
        command: "gputune apply --root /mnt/image --profile ddp-25gbe --yes",
        sandbox: Image("bake", "/mnt/image"),
        exit: &[0],
    },
    Case {
        command: "gputune audit --root /mnt/image --profile ddp-25gbe --strict --format junit --output audit.xml",
        sandbox: Image("bake", "/mnt/image"),
        exit: &[0],
    },
    Case {
        command: "gputune status --root /mnt/image --format json",
        sandbox: Image("bake", "/mnt/image"),
        exit: &[0],
    },
    Case {
        command: "gputune rollback --root /mnt/image",
        sandbox: Image("bake", "/mnt/image"),
        exit: &[0],
    },
    // Man page examples not in the README.
    Case {
        command: "gputune audit --root /mnt/image --profile ddp-25gbe --strict --format junit --output audit.xml",
        sandbox: Image("gate", "/mnt/image"),
        // The untuned image fails the gate.
        exit: &[1],
    },
];

/// What a user's world holds before a journey's first command, which no documented command
/// makes: `(journey, shell command, why)`, run in the journey's work directory with the
/// fixtures at `$FIXTURES`.
const WORLD: &[(&str, &str, &str)] = &[
    (
        "explain",
        "cp \"$FIXTURES/explain/nccl-1837.log\" slurm-4711.out",
        "a job failed and Slurm kept its output: a real NCCL log from NVIDIA/nccl#1837",
    ),
    (
        "explain",
        "cp \"$FIXTURES/explain/nccl-tests-6.log\" job.err",
        "a job's error output holding only NCCL's bare wrapper: a real line from NVIDIA/nccl-tests#6",
    ),
];

/// Every documented command with where it is documented: the README's `sh` blocks (comment
/// lines skipped, trailing comments cut, continuation lines joined) and the man pages'
/// EXAMPLES (section 1, the commands).
fn documented() -> BTreeMap<String, Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    for (line, command) in readme_commands(&readme) {
        found
            .entry(command)
            .or_default()
            .push(format!("README.md:{line}"));
    }
    let mut pages: Vec<_> = fs::read_dir(root.join("man"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pages.sort();
    // Section 1 pages are commands; the others' examples are files (a profile in
    // gputune-profile(5)).
    pages.retain(|p| p.extension().is_some_and(|e| e == "1"));
    for page in pages {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        for command in man_examples(&fs::read_to_string(&page).unwrap()) {
            found.entry(command).or_default().push(name.clone());
        }
    }
    found
}

/// `(line number, command)` of every command in the README's `sh` code blocks.
fn readme_commands(readme: &str) -> Vec<(usize, String)> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in readme.lines().enumerate() {
        let line = raw.trim();
        if let Some(lang) = line.strip_prefix("```") {
            in_sh = !in_sh && lang.trim() == "sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = strip_comment(line);
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        if let Some(head) = code.strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(&code);
        let command = normalise(&joined);
        if !command.is_empty() {
            commands.push((start, command));
        }
    }
    commands
}

/// The line without a shell comment: from a `#` at the start or after a blank, outside
/// quotes.
fn strip_comment(line: &str) -> String {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return line[..i].trim_end().to_string(),
            _ => {}
        }
        prev = c;
    }
    line.trim_end().to_string()
}

fn normalise(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The commands of a man page's EXAMPLES section (`.nf` … `.fi` blocks, roff unescaped).
fn man_examples(page: &str) -> Vec<String> {
    let Some((_, examples)) = page.split_once(".SH EXAMPLES\n") else {
        return Vec::new();
    };
    let examples = examples.split("\n.SH").next().unwrap_or_default();
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in examples.lines() {
        match line {
            ".nf" => in_block = true,
            ".fi" => in_block = false,
            _ if in_block => {
                let line = line
                    .trim_start_matches("\\&")
                    .replace("\\-", "-")
                    .replace("\\e", "\\");
                let command = normalise(&strip_comment(&line));
                if !command.is_empty() {
                    commands.push(command);
                }
            }
            _ => {}
        }
    }
    commands
}

#[test]
fn every_documented_command_has_a_case_and_every_case_is_documented() {
    let documented = documented();
    let cases: Vec<String> = CASES.iter().map(|c| normalise(c.command)).collect();
    let missing: Vec<String> = documented
        .iter()
        .filter(|(command, _)| !cases.contains(command))
        .map(|(command, at)| format!("{command}   ({})", at.join(", ")))
        .collect();
    let stale: Vec<&String> = cases
        .iter()
        .filter(|c| !documented.contains_key(*c))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "documented commands without a case in tests/docs_examples.rs:\n  {}\ncases whose command is no longer documented:\n  {}",
        missing.join("\n  "),
        stale
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

#[test]
fn the_readme_parser_reads_blocks_comments_and_continuations() {
    let readme = "text\n```sh\ngputune a   # why\n# only a comment\n  gputune b \\\n     --c d\necho '#x' # y\n```\n```toml\nx = 1\n```\n  ```sh\n  gputune e\n  ```\n";
    let commands: Vec<String> = readme_commands(readme).into_iter().map(|c| c.1).collect();
    assert_eq!(
        commands,
        ["gputune a", "gputune b --c d", "echo '#x'", "gputune e"]
    );
    let page = ".SH EXAMPLES\n.PP\nWhy:\n.RS 4\n.nf\ngputune apply \\-\\-dry\\-run\nsudo gputune x\n.fi\n.RE\n.SH \"SEE ALSO\"\n.nf\nnot me\n.fi\n";
    assert_eq!(
        man_examples(page),
        ["gputune apply --dry-run", "sudo gputune x"]
    );
}

/// A sandbox for one journey: its directory holds the commands' cwd (`work`, with `HOME`
/// inside), what the journey's commands write to `/etc` (an overlay's upper layer), `/var/lib`,
/// `/run` and `/mnt` (empty at the start, kept from one command to the next), and the global
/// knobs' stand-ins.
struct Journey {
    dir: tempfile::TempDir,
    /// The journey's network namespace: what apply changes in it, the next command sees.
    netns: String,
}

impl Drop for Journey {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// The kernel knobs global to the machine that apply may write: inside the sandbox each is a
/// regular file holding the real value, bind-mounted over the knob.
const GLOBAL_KNOBS: &[&str] = &[
    "/proc/sys/vm/swappiness",
    "/proc/sys/vm/zone_reclaim_mode",
    "/proc/sys/kernel/numa_balancing",
    "/proc/sys/fs/file-max",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/sys/kernel/mm/transparent_hugepage/defrag",
];

/// The directories a journey's commands see empty at first, each backed by one of its own.
const FRESH_DIRS: &[&str] = &["/var/lib", "/run", "/mnt"];

impl Journey {
    fn new(image_at: Option<&'static str>) -> Journey {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["bin", "work/home", "etc-upper", "etc-work", "knobs", "out"] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        for (i, _) in FRESH_DIRS.iter().enumerate() {
            fs::create_dir_all(d.join(format!("fresh/{i}"))).unwrap();
        }
        let release = std::env::var("GPUTUNE_TEST_RELEASE_BIN").expect(
            "GPUTUNE_TEST_RELEASE_BIN names the release binary users install (scripts/test builds it)",
        );
        std::os::unix::fs::symlink(release, d.join("bin/gputune")).unwrap();
        let sudo = d.join("bin/sudo");
        fs::write(
            &sudo,
            "#!/bin/sh\n# The suite runs as root: sudo changes nothing.\nexec \"$@\"\n",
        )
        .unwrap();
        fs::set_permissions(&sudo, fs::Permissions::from_mode(0o755)).unwrap();
        // The README's profile example, where the README's command looks for it.
        fs::write(d.join("work/my-cluster.toml"), readme_profile()).unwrap();
        for (i, knob) in GLOBAL_KNOBS.iter().enumerate() {
            if let Ok(value) = fs::read(knob) {
                fs::write(d.join(format!("knobs/{i}")), value).unwrap();
            }
        }
        if let Some(at) = image_at {
            let name = at
                .strip_prefix("/mnt/")
                .expect("documented images are under /mnt");
            let image = std::env::var("GPUTUNE_TEST_IMAGE")
                .expect("GPUTUNE_TEST_IMAGE names the Debian test image (scripts/test builds it)");
            let mnt = FRESH_DIRS.iter().position(|f| *f == "/mnt").unwrap();
            let status = Command::new("cp")
                .args(["-a", &image])
                .arg(d.join(format!("fresh/{mnt}/{name}")))
                .status()
                .unwrap();
            assert!(status.success(), "copying the test image failed");
        }
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let netns = format!(
            "gputune-docs-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        for args in [
            vec!["netns", "add", netns.as_str()],
            vec!["-n", netns.as_str(), "link", "set", "lo", "up"],
        ] {
            let status = Command::new("ip").args(&args).status().unwrap();
            assert!(status.success(), "ip {args:?}");
        }
        Journey { dir, netns }
    }

    /// The shell script that enters the sandbox and runs `command` in it.
    fn script(&self, command: &str) -> String {
        let d = self.dir.path().display();
        let mut s = String::from("set -e\nmount --make-rprivate /\n");
        s += &format!(
            "mount -t overlay gputune-docs -o lowerdir=/etc,upperdir={d}/etc-upper,workdir={d}/etc-work /etc\n"
        );
        for (i, dir) in FRESH_DIRS.iter().enumerate() {
            s += &format!("mount --bind {d}/fresh/{i} {dir}\n");
        }
        for (i, knob) in GLOBAL_KNOBS.iter().enumerate() {
            s += &format!("if [ -f {d}/knobs/{i} ]; then mount --bind {d}/knobs/{i} {knob}; fi\n");
        }
        s += &format!("cd {d}/work\nset +e\n{command}\n");
        s
    }

    /// Runs `command` in the sandbox (killed with everything it started after 300 s).
    fn run(&self, command: &str) -> (i32, String, String) {
        let d = self.dir.path();
        let (out, err) = (d.join("out/stdout"), d.join("out/stderr"));
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.netns))
            .args(["--", "unshare", "--mount", "--uts", "--", "sh", "-c"])
            .arg(self.script(command))
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    d.join("bin").display()
                ),
            )
            .env("HOME", d.join("work/home"))
            .env("FIXTURES", fixture(""))
            .env("LANG", "C.UTF-8")
            .env("USER", "root")
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .process_group(0);
        let mut child = KillOnDrop::spawn(&mut cmd);
        let start = Instant::now();
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code().unwrap_or(-1);
            }
            if start.elapsed() > Duration::from_secs(300) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                break -1;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let read = |p: &Path| text(&fs::read(p).unwrap_or_default());
        (code, read(&out), read(&err))
    }
}

/// The profile the README shows under "Writing profiles" (its first `toml` block).
fn readme_profile() -> String {
    let readme =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("```toml\n")
        .expect("the README shows a profile")
        + 8;
    let end = start + readme[start..].find("```").unwrap();
    readme[start..end].to_string()
}

/// Runs every case of the journeys `select` picks, each journey in its own sandbox, and
/// reports every command whose exit code is not the documented one.
fn run_journeys(select: impl Fn(&Sandbox) -> bool) {
    require(&["unshare", "nsenter", "ip", "mount"]);
    let mut journeys: BTreeMap<&str, (Option<&'static str>, Vec<&Case>)> = BTreeMap::new();
    for case in CASES.iter().filter(|c| select(&c.sandbox)) {
        let (name, image) = match case.sandbox {
            Host(name) => (name, None),
            Image(name, at) => (name, Some(at)),
            Elsewhere(name, _, _) => (name, None),
        };
        let entry = journeys.entry(name).or_insert((image, Vec::new()));
        entry.0 = entry.0.or(image);
        entry.1.push(case);
    }
    let mut wrong = Vec::new();
    for (name, (image, cases)) in journeys {
        if cases.iter().all(|c| matches!(c.sandbox, Elsewhere(..))) {
            continue;
        }
        let journey = Journey::new(image);
        for (_, setup, why) in WORLD.iter().filter(|w| w.0 == name) {
            let (code, _, stderr) = journey.run(setup);
            assert_eq!(code, 0, "[{name}] setting up ({why}): {setup}: {stderr}");
        }
        for case in cases {
            let command = match case.sandbox {
                Elsewhere(_, why, stand_in) => {
                    eprintln!("[{name}] not run here: {} ({why})", case.command);
                    match stand_in {
                        Some(stand_in) => stand_in,
                        None => continue,
                    }
                }
                _ => case.command,
            };
            let (code, stdout, stderr) = journey.run(command);
            if !case.exit.contains(&code) || stderr.contains("panicked") {
                wrong.push(format!(
                    "[{name}] {command}\n    exit {code}, documented {:?}\n    stderr: {}\n    stdout (tail): {}",
                    case.exit,
                    tail(&stderr, 1500),
                    tail(&stdout, 600)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    s[start..].trim()
}

#[test]
fn the_documented_node_commands_run_as_documented() {
    run_journeys(|s| match s {
        Host(name) | Elsewhere(name, _, _) => *name != "bench",
        Image(..) => false,
    });
}

#[test]
fn the_documented_image_commands_run_as_documented() {
    run_journeys(|s| matches!(s, Image(..)));
}

#[test]
fn the_documented_bench_commands_run_as_documented() {
    run_journeys(|s| matches!(s, Host("bench")));
}
