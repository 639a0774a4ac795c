//! Man pages and shell completions, generated from the clap definition so they never drift.
//! Each page is clap_mangen's sections plus the ones a man page reader looks for (EXIT STATUS,
//! ENVIRONMENT, FILES, EXAMPLES), written once here; every leaf subcommand has its own page
//! (`gputune-bench-allreduce.1`), as the parent pages' SUBCOMMANDS lists promise.

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

mod environment;
pub mod reference;

/// `(file name, content)` of every man page: `gputune.1`, one per (nested) subcommand, and
/// the reference pages `gputune-profile.5` and `gputune-checks.7`.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let mut cmd = without_help_subcommands(Cli::command());
    cmd.build();
    let mut pages = Vec::new();
    collect_pages(&cmd, "gputune", &mut pages);
    pages.extend(reference::pages());
    pages
}

/// clap's generated `help` subcommand would get a page of its own and a SUBCOMMANDS entry.
fn without_help_subcommands(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help_subcommands)
}

fn collect_pages(cmd: &clap::Command, name: &str, pages: &mut Vec<(String, Vec<u8>)>) {
    let page = cmd
        .clone()
        .name(name.to_string())
        .display_name(name.to_string())
        .bin_name(name.replace('-', " "));
    pages.push((format!("{name}.1"), render_man(page, name)));
    for sub in cmd.get_subcommands() {
        collect_pages(sub, &format!("{name}-{}", sub.get_name()), pages);
    }
}

fn render_man(cmd: clap::Command, page: &str) -> Vec<u8> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_synopsis_section(&mut out);
    let _ = man.render_description_section(&mut out);
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        let _ = man.render_options_section(&mut out);
    }
    if cmd.get_subcommands().next().is_some() {
        let _ = man.render_subcommands_section(&mut out);
    }
    if let Some(sample) = sample_output(page) {
        preformatted_section(&mut out, "OUTPUT", sample);
    }
    section(&mut out, "EXIT STATUS", &exit_status(page));
    let vars = environment(page);
    let vars: Vec<(&str, &str)> = vars.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    section(&mut out, "ENVIRONMENT", &vars);
    let files = files(page);
    if !files.is_empty() {
        section(&mut out, "FILES", &files);
    }
    if page == "gputune-preflight" {
        section(&mut out, "COST PER NODE", PREFLIGHT_COST);
    }
    let examples = examples(page);
    if !examples.is_empty() {
        examples_section(&mut out, examples);
    }
    section(
        &mut out,
        "SEE ALSO",
        &[(
            "",
            "gputune(1), gputune-profile(5) for every profile key, gputune-checks(7) for every check and what it reads.",
        )],
    );
    out
}

/// What `gputune preflight` costs each node, so a site can run it before every job.
const PREFLIGHT_COST: &[(&str, &str)] = &[
    (
        "Listening",
        "3 ports sampled from the profile's [job] rendezvous range and 4 from the NCCL range (the kernel's ip_local_port_range unless the profile pins one), plus one UDP port answering path-MTU probes; all closed when the check ends.",
    ),
    (
        "Up to 256 nodes",
        "Every node probes every other: at most 255 peers x 7 TCP connects and one MTU probe each (at most 3 datagrams per size tried), and one name lookup per peer.",
    ),
    (
        "Above 256 nodes",
        "Each node probes its two ring neighbours and ceil(log2 n) others drawn at random (a 4,000-node job: 14 peers, 98 connects), and the report says so.",
    ),
    (
        "Concurrency",
        "At most 32 probes at once per node; a connect gives up after 1.5 s, and every round ends within --timeout (join by 45%, probe by 80%, report by 92% of it).",
    ),
    (
        "Rank 0",
        "One control connection, token handshake and facts frame per rank (under 1 MiB each), and the judging of the whole job.",
    ),
];

/// `(term, text)` pairs as a roff tagged list; an empty term is a plain paragraph.
fn section(out: &mut Vec<u8>, title: &str, items: &[(&str, &str)]) {
    out.extend_from_slice(format!(".SH \"{title}\"\n").as_bytes());
    for (term, text) in items {
        if term.is_empty() {
            out.extend_from_slice(b".PP\n");
        } else {
            out.extend_from_slice(format!(".TP\n\\fB{}\\fR\n", roff_escape(term)).as_bytes());
        }
        out.extend_from_slice(format!("{}\n", roff_escape(text)).as_bytes());
    }
}

/// What a command prints, where its shape is the point (the same text its `--help` ends with).
fn sample_output(page: &str) -> Option<&'static str> {
    (page == "gputune-fleet").then_some(crate::commands::fleet::SAMPLE_OUTPUT)
}

/// `text` as written: its first line a paragraph, the rest kept line for line.
fn preformatted_section(out: &mut Vec<u8>, title: &str, text: &str) {
    out.extend_from_slice(format!(".SH {title}\n").as_bytes());
    for para in text.split("\n\n") {
        if para.starts_with("  ") {
            out.extend_from_slice(
                format!(".PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n", roff_escape(para)).as_bytes(),
            );
        } else {
            out.extend_from_slice(format!(".PP\n{}\n", roff_escape(para)).as_bytes());
        }
    }
}

fn examples_section(out: &mut Vec<u8>, examples: &[(&str, &str)]) {
    out.extend_from_slice(b".SH EXAMPLES\n");
    for (what, command) in examples {
        out.extend_from_slice(format!(".PP\n{}\n", roff_escape(what)).as_bytes());
        out.extend_from_slice(
            format!(".RS 4\n.nf\n{}\n.fi\n.RE\n", roff_escape(command)).as_bytes(),
        );
    }
}

/// Escapes text for roff: backslashes and hyphens, and a leading `.` or `'` that would
/// otherwise start a request.
fn roff_escape(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.replace('\\', "\\e").replace('-', "\\-");
            if line.starts_with('.') || line.starts_with('\'') {
                format!("\\&{line}")
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn exit_status(page: &str) -> Vec<(&'static str, &'static str)> {
    let mut codes = vec![
        (
            "0",
            "Everything checked passed (warnings allowed unless --strict), or the action succeeded.",
        ),
        (
            "1",
            "At least one check failed, or a benchmark fell below its threshold.",
        ),
        (
            "2",
            "Usage or configuration error: unknown flag, bad profile (the message names file, line and key), bad size string.",
        ),
        (
            "3",
            "Runtime error that stopped the job: host unreadable, required library missing, permission denied, a rank died, a path escaping --root, an invalid journal.",
        ),
    ];
    if page == "gputune-fleet" {
        codes[1].1 = "A node fails or errs on a check, or a value that must be alike on every node of a job (kernel, gpu and nic values, host facts) differs.";
        codes[3].1 = "No audit report could be read (each file or document that could not is named on standard error and skipped).";
    }
    if page == "gputune-explain" {
        codes.push((
            "explain",
            "0: no problem and no error line left unexplained; 1: problems found (or error lines no rule explains); 2: bad flag or rules file (file:line named); 3: the log cannot be read.",
        ));
    }
    if page == "gputune-preflight" {
        codes.push((
            "preflight",
            "1 also when a rank did not join in time or cannot reach rank 0 (that rank exits 1 itself, saying which address it tried); 3 when the check itself could not run (rank 0 cannot listen at MASTER_ADDR, or vanished).",
        ));
    }
    if page == "gputune-status" {
        codes.push((
            "status",
            "For status: 0 everything gputune applied still holds, or nothing is applied; 1 a setting drifted (changed since apply, or overridden at boot), could not be read, or an apply was interrupted; 3 the journal cannot be read or is invalid (it is validated as rollback validates it), or --root is no root.",
        ));
    }
    if page == "gputune-health" {
        codes.push((
            "npd",
            "With --format npd, node-problem-detector's plugin contract instead: 0 OK, 1 problem, 2 unknown.",
        ));
    }
    codes.push((
        "",
        "A closed standard output (gputune audit | head) ends a read-only command quietly.",
    ));
    codes
}

/// The variables `page` lists, from the one declaration in [`environment::VARS`].
fn environment(page: &str) -> Vec<(String, &'static str)> {
    environment::for_page(page)
}

fn files(page: &str) -> Vec<(&'static str, &'static str)> {
    let profiles = (
        "/etc/gputune/profiles/NAME.toml",
        "Site profiles; they win over built-in profiles of the same name.",
    );
    let written = [
        (
            "/etc/sysctl.d/90-gputune.conf",
            "Persisted sysctls written by apply.",
        ),
        (
            "/etc/security/limits.d/90-gputune.conf",
            "Login limits written by apply.",
        ),
        (
            "/etc/nccl.conf",
            "NCCL settings (NCCL_SOCKET_IFNAME) written by apply; NCCL reads it.",
        ),
        (
            "/etc/default/grub.d/90-gputune.cfg",
            "Kernel command-line settings (transparent_hugepage=) written by apply for GRUB; update-grub reads it.",
        ),
        (
            "/etc/kernel/cmdline",
            "kernel-install's command line (systemd-boot, UKIs): apply edits transparent_hugepage= in place when the file exists.",
        ),
        (
            "/var/lib/gputune/journal.json",
            "The values before the last apply, written and fsynced before the first change; rollback restores them.",
        ),
        (
            "/run/gputune.lock",
            "Held while apply or rollback runs, so two never interleave.",
        ),
        (
            "/var/lib/gputune/images/KEY/",
            "The journal and lock of apply --root IMAGE, kept outside the image (KEY names the image's path); without root ~/.local/state/gputune/images/KEY/. Made 0700 on first use.",
        ),
    ];
    let site_default = (
        "/etc/gputune/default-profile",
        "The site's profile name, used when no --profile is given (an image needs it or --profile).",
    );
    let remembered = (
        "/var/lib/gputune/gpus.json",
        "The GPUs a live audit as root saw when gpu.count passed (PCI address, device id, model), so that a later audit or health run names a GPU that went missing. Delete it after removing a GPU on purpose.",
    );
    match page {
        "gputune" | "gputune-apply" | "gputune-rollback" | "gputune-status" => {
            let mut files = vec![profiles, site_default];
            files.extend(written);
            if page == "gputune" {
                files.push(remembered);
            }
            files
        }
        "gputune-explain" => vec![
            (
                "/etc/gputune/explain/*.toml",
                "Site rules for explain, read in name order; a rule replaces the built-in rule with its id.",
            ),
            profiles,
        ],
        "gputune-health" => vec![
            profiles,
            site_default,
            remembered,
            (
                "/etc/security/limits.conf, /etc/security/limits.d/*.conf",
                "The login session's limits: what a job run by slurmd takes for each limit slurm.conf propagates.",
            ),
            (
                "/etc/slurm/slurm.conf",
                "PropagateResourceLimits and PropagateResourceLimitsExcept (Include files followed), read when slurmd runs health.",
            ),
        ],
        "gputune-audit" => vec![
            profiles,
            site_default,
            remembered,
            (
                "/dev/kmsg",
                "The kernel log, read for NVIDIA Xid events (journalctl -k when it cannot be opened); under --root only a regular file at ROOT/dev/kmsg.",
            ),
        ],
        "gputune-profiles" | "gputune-profiles-list" => vec![profiles, site_default],
        "gputune-profiles-show" => vec![profiles],
        _ => Vec::new(),
    }
}

fn examples(page: &str) -> &'static [(&'static str, &'static str)] {
    match page {
        "gputune" => &[
            (
                "Audit this node against the profile chosen from its hardware:",
                "gputune audit",
            ),
            (
                "Apply a profile after reviewing the plan:",
                "gputune apply --profile ddp-10gbe --dry-run\nsudo gputune apply --profile ddp-10gbe",
            ),
        ],
        "gputune-audit" => &[
            ("Audit with the node's default profile:", "gputune audit"),
            (
                "List passing checks too, and leave out two that do not apply here:",
                "gputune audit --verbose --skip platform.acs,logind.RemoveIPC",
            ),
            (
                "Gate a golden image in CI:",
                "gputune audit --root /mnt/image --profile ddp-25gbe --strict --format junit --output audit.xml",
            ),
            (
                "Feed node_exporter's textfile collector:",
                "gputune audit --format prometheus --output /var/lib/node_exporter/textfile/gputune.prom",
            ),
        ],
        "gputune-apply" => &[
            (
                "Show the plan without changing anything:",
                "gputune apply --profile ddp-10gbe --dry-run",
            ),
            (
                "Apply network and memory settings without asking:",
                "sudo gputune apply --profile ddp-10gbe --yes --only network,memory",
            ),
        ],
        "gputune-rollback" => &[
            (
                "See what rollback would restore, changing nothing:",
                "gputune rollback --dry-run",
            ),
            (
                "Restore the node as it was before the last apply:",
                "sudo gputune rollback",
            ),
        ],
        "gputune-status" => &[
            (
                "What was applied here, when, by whom, and whether it still holds:",
                "gputune status",
            ),
            (
                "The same for a golden image, as JSON for CI (exit 1 when something drifted):",
                "gputune status --root /mnt/image --format json",
            ),
            (
                "A Slurm health check or cron job that notices drift:",
                "gputune status >/dev/null || logger -t gputune \"settings drifted since apply\"",
            ),
        ],
        "gputune-profiles" | "gputune-profiles-list" => &[(
            "List built-in and site profiles and this node's default:",
            "gputune profiles list",
        )],
        "gputune-profiles-show" => &[(
            "Print a profile fully resolved, each setting with its origin:",
            "gputune profiles show ddp-100gbe",
        )],
        "gputune-topo" => &[
            (
                "The node's GPUs, NICs, NUMA nodes and their affinity:",
                "gputune topo",
            ),
            ("The same as JSON:", "gputune topo --format json"),
        ],
        "gputune-pin" => &[
            (
                "Bind every torchrun rank to its GPU's NUMA node:",
                "torchrun --nproc-per-node 8 --no-python gputune pin -- python train.py",
            ),
            (
                "Bind one command to GPU 3's CPUs and memory:",
                "gputune pin --local-rank 3 -- ./my_rank",
            ),
        ],
        "gputune-bench-allgather" => &[
            (
                "FSDP's parameter gather over TCP between four local ranks:",
                "gputune bench allgather --backend tcp --ranks 4 -b 1M -e 256M",
            ),
            (
                "Through NCCL on every GPU, JSON for CI:",
                "gputune bench allgather --backend nccl --ranks 8 --format json",
            ),
        ],
        "gputune-bench-reducescatter" => &[
            (
                "FSDP's gradient reduce-scatter over TCP between four local ranks:",
                "gputune bench reducescatter --backend tcp --ranks 4 -b 1M -e 256M",
            ),
            (
                "Through NCCL, failing below the profile's reducescatter_min_busbw:",
                "gputune bench reducescatter --backend nccl --ranks 8 --profile ddp-100gbe",
            ),
        ],
        "gputune-bench-broadcast" => &[(
            "Broadcast from rank 0 over TCP between three local ranks:",
            "gputune bench broadcast --backend tcp --ranks 3",
        )],
        "gputune-health" => &[
            (
                "Slurm's HealthCheckProgram: drain a failing node, resume it once it passes:",
                "gputune health --slurm --profile ddp-25gbe",
            ),
            (
                "A node-problem-detector custom plugin:",
                "gputune health --format npd",
            ),
        ],
        "gputune-fleet" => &[
            (
                "Value groups per check, nodes as hostlists, from a parallel shell:",
                "clush -w gpu[01-64] -b 'gputune audit --format json' | gputune fleet -",
            ),
            (
                "From reports collected with srun, as JSON:",
                "gputune fleet reports/ --format json",
            ),
            (
                "The hostlist of the nodes that fail a check, for scontrol update nodename=... state=drain or pdsh -w:",
                "gputune fleet reports/ --failing",
            ),
            (
                "Nodes passing and failing per check, for a fleet dashboard:",
                "gputune fleet reports/ --format prometheus",
            ),
        ],
        "gputune-explain" => &[
            (
                "What went wrong in a failed job, from its NCCL_DEBUG=INFO log:",
                "gputune explain slurm-4711.out",
            ),
            (
                "The same, whether this node has the cause, and what NCCL left unused on it (TCP sockets beside an active RDMA port, GPUDirect RDMA off with nvidia_peermem loaded, GPUs over PCIe despite NVLink); run on the failing node:",
                "gputune explain --check slurm-4711.out",
            ),
            (
                "From a pipe, as JSON for a job-failure bot:",
                "kubectl logs job/train --all-containers | gputune explain --format json -",
            ),
            (
                "A log whose only error is NCCL's bare \"unhandled cuda error\" names no cause: no guess is made, the causes public reports settled for that line are listed as possible causes, and --check tests what it can of them on this node:",
                "gputune explain --check job.err",
            ),
        ],
        "gputune-preflight" => &[
            (
                "Before a Slurm job: one task per node, rank 0's report in the job's output:",
                "srun -N 64 --ntasks-per-node=1 gputune preflight",
            ),
            (
                "With torchrun's variables, on every node (node0 is rank 0):",
                "RANK=$NODE_RANK WORLD_SIZE=4 MASTER_ADDR=node0 MASTER_PORT=29500 gputune preflight --timeout 60",
            ),
            (
                "Under Open MPI, as JSON for a pipeline:",
                "mpirun -np 8 --map-by ppr:1:node -x MASTER_ADDR=node0 gputune preflight --format json",
            ),
            (
                "One HTML page with the reachability matrix and bench --pairs bandwidth as heat maps:",
                "srun -N 16 gputune preflight --format html --output preflight.html --pairs-report pairs.json",
            ),
        ],
        "gputune-bench" | "gputune-bench-allreduce" => &[
            (
                "AllReduce over TCP between two local ranks, no GPU needed:",
                "gputune bench allreduce --backend tcp --ranks 2 -b 8 -e 256M",
            ),
            (
                "The slow node out: every node paired with others, one rank per node:",
                "srun -N 16 --ntasks-per-node=1 gputune bench allreduce --backend tcp --pairs -b 64M -e 64M",
            ),
            (
                "One rank per GPU through NCCL, failing below 40 GB/s:",
                "gputune bench allreduce --backend nccl --ranks 8 --min-busbw 40",
            ),
            (
                "Two nodes, failing below 80% of the link rate of the NICs between them:",
                "srun -N 2 --ntasks-per-node=1 gputune bench allreduce --backend tcp --min-busbw 80%",
            ),
            (
                "Each size against the site profile's [bench.baseline] (expected GB/s per size, with a tolerance):",
                "gputune bench allreduce --backend nccl --ranks 8 --profile site",
            ),
        ],
        _ => &[],
    }
}

/// `(file name, content)` of the bash, zsh and fish completion scripts. clap's scripts
/// complete flags and subcommands; profile names (built-in and site, which only the node
/// knows) come from `gputune profiles list --names` at completion time, for `--profile` and
/// `profiles show`, alongside file names (a profile may be a path).
pub fn completions() -> Vec<(String, Vec<u8>)> {
    [
        (Shell::Bash, "gputune.bash"),
        (Shell::Zsh, "_gputune"),
        (Shell::Fish, "gputune.fish"),
    ]
    .into_iter()
    .map(|(shell, file)| {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "gputune", &mut out);
        let script = String::from_utf8_lossy(&out);
        (
            file.to_string(),
            with_profile_names(shell, &script).into_bytes(),
        )
    })
    .collect()
}

const PROFILE_NAMES: &str = "gputune profiles list --names 2>/dev/null";

fn with_profile_names(shell: Shell, script: &str) -> String {
    match shell {
        Shell::Bash => format!(
            "{script}
# Profile names for --profile and `profiles show`, asked of gputune itself.
_gputune_with_profiles() {{
    local cur=\"${{COMP_WORDS[COMP_CWORD]}}\" prev=\"${{COMP_WORDS[COMP_CWORD-1]}}\"
    local before=\"${{COMP_WORDS[*]:0:COMP_CWORD}}\"
    if [[ \"$prev\" == --profile || \"$before\" == *\" profiles show\" ]]; then
        COMPREPLY=($(compgen -W \"$({PROFILE_NAMES})\" -- \"$cur\") $(compgen -f -- \"$cur\"))
        return 0
    fi
    _gputune \"$@\"
}}
complete -F _gputune_with_profiles -o bashdefault -o default gputune
"
        ),
        Shell::Zsh => {
            let helper = format!(
                "#compdef gputune

# Profile names for --profile and `profiles show`, asked of gputune itself, and files.
_gputune_profiles() {{
    local -a names
    names=(${{(f)\"$({PROFILE_NAMES})\"}})
    _alternative 'profiles:profile:compadd -a names' 'files:file:_files'
}}
"
            );
            script
                .replacen("#compdef gputune\n", &helper, 1)
                .replace(":NAME|FILE:_default'", ":NAME|FILE:_gputune_profiles'")
                .replace(
                    "':name -- Profile name or TOML file:_default'",
                    "':name -- Profile name or TOML file:_gputune_profiles'",
                )
        }
        Shell::Fish => format!(
            "{script}
# Profile names for --profile and `profiles show`, asked of gputune itself.
complete -c gputune -l profile -a '({PROFILE_NAMES})'
complete -c gputune -n \"__fish_gputune_using_subcommand profiles; and __fish_seen_subcommand_from show\" -a '({PROFILE_NAMES})'
"
        ),
        _ => script.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(name: &str) -> String {
        let pages = man_pages();
        let (_, content) = pages
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no page {name}"));
        String::from_utf8_lossy(content).into_owned()
    }

    #[test]
    fn every_page_a_parent_names_exists() {
        let pages = man_pages();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for (_, content) in &pages {
            let text = String::from_utf8_lossy(content);
            for line in text
                .lines()
                .filter(|l| l.starts_with("gputune\\-") && l.ends_with("(1)"))
            {
                let target = line.replace("\\-", "-").replace("(1)", ".1");
                assert!(
                    names.contains(&target.as_str()),
                    "{target} is named but missing"
                );
            }
        }
        assert!(!names.iter().any(|n| n.ends_with("-help.1")), "{names:?}");
    }

    #[test]
    fn every_page_has_exit_status_and_environment_and_every_leaf_examples() {
        let mut cmd = Cli::command();
        cmd.build();
        // The command pages; the reference pages (sections 5 and 7) describe files and checks.
        for (name, content) in man_pages().into_iter().filter(|(n, _)| n.ends_with(".1")) {
            let text = String::from_utf8_lossy(&content);
            assert!(text.contains(".SH \"EXIT STATUS\""), "{name}");
            assert!(text.contains(".SH \"ENVIRONMENT\""), "{name}");
            assert!(text.contains("GPUTUNE_ROOT"), "{name}");
            let is_leaf = !text.contains(".SH SUBCOMMANDS");
            if is_leaf {
                assert!(text.contains(".SH EXAMPLES"), "{name} has no EXAMPLES");
            }
        }
    }

    #[test]
    fn pages_name_the_files_and_variables_of_their_command() {
        assert!(page("gputune-apply.1").contains("/var/lib/gputune/journal.json"));
        assert!(page("gputune-status.1").contains("/var/lib/gputune/journal.json"));
        assert!(page("gputune-status.1").contains("GPUTUNE_STATE_DIR"));
        assert!(page("gputune-bench-allreduce.1").contains("GPUTUNE_BENCH_TOKEN"));
        assert!(page("gputune-pin.1").contains("LOCAL_RANK"));
        let preflight = page("gputune-preflight.1");
        assert!(preflight.contains("COST PER NODE") && preflight.contains("MASTER_ADDR"));
        assert!(!page("gputune-topo.1").contains(".SH \"FILES\""));
    }

    #[test]
    fn every_profile_argument_completes_profile_names() {
        let scripts = completions();
        let script = |name: &str| {
            let (_, bytes) = scripts.iter().find(|(n, _)| n == name).unwrap();
            String::from_utf8_lossy(bytes).into_owned()
        };
        let zsh = script("_gputune");
        assert!(zsh.starts_with("#compdef gputune\n"));
        assert!(
            !zsh.contains("NAME|FILE:_default"),
            "a --profile left to files alone"
        );
        assert!(!zsh.contains("Profile name or TOML file:_default"));
        assert!(zsh.matches("_gputune_profiles'").count() >= 3);
        assert!(script("gputune.bash").contains("complete -F _gputune_with_profiles"));
        assert!(script("gputune.fish").contains("-l profile -a '(gputune profiles list --names"));
    }

    #[test]
    fn roff_requests_in_text_are_escaped() {
        assert_eq!(roff_escape(".x\n'y\\z-w"), "\\&.x\n\\&'y\\ez\\-w");
    }
}
