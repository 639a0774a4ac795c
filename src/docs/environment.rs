//! Every environment variable the gputune binary reads, declared once: the man pages'
//! ENVIRONMENT sections are made from this list (`gputune(1)` has all of it, each command's
//! page what that command reads), and a test reads the source to fail when a variable is read
//! but not listed here, or listed but no longer read.

/// Variables read together, the pages that list them, and what they do.
pub(crate) struct Var {
    pub names: &'static [&'static str],
    /// The commands whose pages list it (`bench` covers `bench allreduce` and the others);
    /// empty for every page. `gputune(1)` lists every variable.
    pub pages: &'static [&'static str],
    pub text: &'static str,
}

/// The checks a command runs read the NCCL library's and NCCL's own variables.
const CHECKS: &[&str] = &["audit", "apply", "health"];
const LIBRARIES: &[&str] = &["audit", "apply", "health", "bench"];

pub(crate) const VARS: &[Var] = &[
    Var {
        names: &["GPUTUNE_ROOT"],
        pages: &[],
        text: "Sets --root: resolve every host path under this directory. Empty means unset.",
    },
    Var {
        names: &["NO_COLOR"],
        pages: &[],
        text: "When set and not empty, tables are never coloured (they are coloured only on a terminal).",
    },
    Var {
        names: &["COLUMNS"],
        pages: &[],
        text: "The width the audit report is wrapped to when standard output is not a terminal; without it, a piped report is plain lines, wrapped by nothing.",
    },
    Var {
        names: &["LC_ALL", "LC_CTYPE", "LANG"],
        pages: &[],
        text: "Tables use box-drawing characters only when the locale is UTF-8, ASCII otherwise.",
    },
    Var {
        names: &["GPUTUNE_NCCL_LIB"],
        pages: LIBRARIES,
        text: "The libnccl.so.2 to use, searched before LD_LIBRARY_PATH, ld.so.cache and Python site-packages.",
    },
    Var {
        names: &["LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX"],
        pages: LIBRARIES,
        text: "Where libnccl.so.2 and NCCL's network plugins are searched, as the dynamic linker and Python find them.",
    },
    Var {
        names: &["HOME"],
        pages: &["audit", "apply", "rollback", "status", "health", "bench"],
        text: "~/.nccl.conf is judged as NCCL reads it, ~/.local is searched for NCCL's Python wheel, and ~/.local/state/gputune keeps the journal of an image applied without root (where status and rollback look for it).",
    },
    Var {
        names: &["NCCL_CONF_FILE", "NCCL_*"],
        pages: CHECKS,
        text: "NCCL's variables in gputune's environment are judged as NCCL would read them (nccl.env.NAME checks); NCCL_CONF_FILE names the file read instead of ~/.nccl.conf.",
    },
    Var {
        names: &["PATH"],
        pages: CHECKS,
        text: "Where nft and iptables are found for the firewall checks (then /usr/sbin, /sbin and /usr/local/sbin).",
    },
    Var {
        names: &["GPUTUNE_STATE_DIR"],
        pages: &["apply", "rollback", "status"],
        text: "The directory for an image's journal and lock (apply --root IMAGE), instead of /var/lib/gputune/images/KEY as root or the user's state directory. Made on first use, 0700; refused when it is a link, another user's, or writable by others.",
    },
    Var {
        names: &["XDG_STATE_HOME"],
        pages: &["apply", "rollback", "status"],
        text: "Without root, an image's journal and lock are kept in $XDG_STATE_HOME/gputune/images/KEY (default ~/.local/state).",
    },
    Var {
        names: &["NCCL_IB_HCA", "NCCL_IB_DISABLE"],
        pages: &["bench"],
        text: "A multi-node NCCL run is put against the active RDMA ports NCCL_IB_HCA selects (as NCCL reads it: prefixes, =exact, ^exclude, :port), or against the NIC the route to the other hosts takes when there are none or NCCL_IB_DISABLE=1.",
    },
    Var {
        names: &["GPUTUNE_CUDA_LIB"],
        pages: &["bench"],
        text: "The CUDA driver library (libcuda.so.1) the NCCL backend opens, instead of the dynamic linker's.",
    },
    Var {
        names: &["GPUTUNE_BENCH_TOKEN"],
        pages: &["bench", "preflight"],
        text: "The secret every rank of a benchmark job proves to the others (never sent). Set it on networks you do not trust.",
    },
    Var {
        names: &["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"],
        pages: &["bench", "preflight"],
        text: "torchrun's launcher variables: each rank joins rank 0 at MASTER_ADDR:MASTER_PORT (default port 29500).",
    },
    Var {
        names: &[
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_STEP_NODELIST",
            "SLURM_JOB_NODELIST",
            "SLURM_NODELIST",
        ],
        pages: &["bench", "health", "preflight"],
        text: "Slurm's launcher variables (srun); rank 0 is the first node of the step's node list. In health, SLURM_PROCID set means gputune runs as the job and judges its own resource limits (as --as-job does).",
    },
    Var {
        names: &["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"],
        pages: &["bench", "preflight"],
        text: "Open MPI's launcher variables (mpirun).",
    },
    Var {
        names: &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"],
        pages: &["bench", "pin", "preflight"],
        text: "A rank's GPU on its node: the GPU bench uses, and the one pin binds to when --local-rank is not given.",
    },
    Var {
        names: &[
            "TORCHELASTIC_RUN_ID",
            "SLURM_JOB_ID",
            "SLURM_STEP_ID",
            "OMPI_MCA_ess_base_jobid",
            "PMIX_NAMESPACE",
        ],
        pages: &["bench", "preflight"],
        text: "The launcher's job ids: without GPUTUNE_BENCH_TOKEN they go into the token the ranks derive, so a rank of another job is kept out.",
    },
    Var {
        names: &["GPUTUNE_BENCH_CHILD"],
        pages: &["bench"],
        text: "Set by bench for the ranks it starts itself; not for users.",
    },
    Var {
        names: &["SLURMD_NODENAME"],
        pages: &["health"],
        text: "The Slurm node to drain or resume with --slurm; else the short host name. Set (slurmd sets it for HealthCheckProgram and Prolog) while SLURM_PROCID is not: the limits checks judge what a job will get, not this process's (slurmd's) limits.",
    },
    Var {
        names: &["SLURM_CONF"],
        pages: &["health"],
        text: "The slurm.conf whose PropagateResourceLimits or PropagateResourceLimitsExcept say which limits a job takes from the submitting session; else /etc/slurm/slurm.conf, /etc/slurm-llnl/slurm.conf or configless slurmd's /run/slurm/conf/slurm.conf. None: Slurm's default, every limit propagated.",
    },
];

/// `(names, text)` of the variables the man page `page` (`gputune-bench-allreduce`) lists.
pub(crate) fn for_page(page: &str) -> Vec<(String, &'static str)> {
    let command = page.strip_prefix("gputune-");
    VARS.iter()
        .filter(|v| match command {
            None => true,
            Some(command) => {
                v.pages.is_empty()
                    || v.pages.iter().any(|p| {
                        command == *p
                            || command
                                .strip_prefix(p)
                                .is_some_and(|rest| rest.starts_with('-'))
                    })
            }
        })
        .map(|v| (v.names.join(", "), v.text))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// Files that read the environment through a variable or all of it at once
    /// (`env::var(name)`, `env::vars()`), and the variables each reads that way (whatever
    /// file spells the names). A new such reader fails the test until it is listed here.
    /// What bench and preflight read through the launcher's variables (`bench::launch`).
    const LAUNCHER: &[&str] = &[
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "TORCHELASTIC_RUN_ID",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "OMPI_MCA_ess_base_jobid",
        "PMIX_NAMESPACE",
        "GPUTUNE_BENCH_TOKEN",
    ];

    const INDIRECT: &[(&str, &[&str])] = &[
        (
            "src/report/terminal.rs",
            &["NO_COLOR", "COLUMNS", "LC_ALL", "LC_CTYPE", "LANG"],
        ),
        (
            "src/host/libsearch.rs",
            &["LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "HOME"],
        ),
        ("src/checks/nic/ncclenv.rs", &["NCCL_CONF_FILE", "NCCL_*"]),
        (
            "src/commands/health.rs",
            &["SLURM_PROCID", "SLURMD_NODENAME", "SLURM_CONF"],
        ),
        (
            "src/commands/pin.rs",
            &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"],
        ),
        (
            "src/preflight/meet.rs",
            &["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"],
        ),
        // bench::launch judges the map preflight reads, as for job.rs below.
        ("src/preflight/mod.rs", LAUNCHER),
        // bench::launch judges the map job.rs reads; GPUTUNE_BENCH_CHILD is job.rs's own.
        ("src/bench/job.rs", LAUNCHER),
        ("src/bench/job.rs", &["GPUTUNE_BENCH_CHILD"]),
        // env_is("NCCL_IB_DISABLE", ..) picks the reference's ports.
        ("src/bench/job.rs", &["NCCL_IB_DISABLE"]),
    ];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The source without the items only test builds compile (`#[cfg(test)]`, the
    /// `test-hooks` feature): what the released binary is made of. rustfmt's layout marks
    /// where an item ends: a one-line item ends with `;` or closes its braces, a longer one
    /// at its closing bracket, indented as its attribute (its body is indented deeper).
    fn release_code(text: &str) -> String {
        let mut out = String::new();
        // The attribute's indentation while its item is skipped, and whether the item's
        // first line is still to come.
        let mut skipping: Option<(usize, bool)> = None;
        for line in text.lines() {
            let trimmed = line.trim();
            let indent = line.len() - line.trim_start().len();
            match skipping {
                None if trimmed == "#[cfg(test)]"
                    || trimmed == "#[cfg(feature = \"test-hooks\")]" =>
                {
                    skipping = Some((indent, true));
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
                Some((_, true)) if trimmed.starts_with("#[") => {}
                Some((_, true)) => {
                    let closed = trimmed.matches('{').count() == trimmed.matches('}').count();
                    let one_line = trimmed.ends_with(';') || (trimmed.ends_with('}') && closed);
                    skipping = (!one_line).then_some((indent, false));
                }
                Some((at, false)) => {
                    let closes = trimmed.starts_with('}')
                        || (trimmed.starts_with([')', ']']) && trimmed.ends_with(';'));
                    if indent == at && closes {
                        skipping = None;
                    }
                }
            }
        }
        out
    }

    /// The string literal right after each occurrence of `before` in `code`.
    fn literals_after(code: &str, before: &str) -> Vec<String> {
        code.match_indices(before)
            .filter_map(|(at, _)| {
                let rest = &code[at + before.len()..];
                rest.find('"').map(|end| rest[..end].to_string())
            })
            .collect()
    }

    /// Whether `code` reads the environment other than by a literal name.
    fn reads_indirectly(code: &str) -> bool {
        let by_name = |call: &str| {
            code.match_indices(call)
                .any(|(at, _)| !code[at + call.len()..].starts_with('"'))
        };
        by_name("env::var(")
            || by_name("env::var_os(")
            || code.contains("env::vars()")
            || code.contains("env::vars_os()")
    }

    fn documented(name: &str) -> bool {
        VARS.iter().flat_map(|v| v.names).any(|d| {
            *d == name
                || d.strip_suffix('*')
                    .is_some_and(|prefix| name.starts_with(prefix) && name.ends_with('*'))
        })
    }

    /// `GPUTUNE_CUDA_LIB` and `GPUTUNE_STATE_DIR` were read but in no man page (issue 20).
    #[test]
    fn every_variable_the_binary_reads_is_documented_once_and_only_those() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        rust_files(&root.join("src"), &mut files);
        // Variable -> the files that read it.
        let mut read: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut indirect_readers = BTreeSet::new();
        for file in &files {
            let rel = file.strip_prefix(root).unwrap().display().to_string();
            let code = release_code(&std::fs::read_to_string(file).unwrap());
            for before in [
                "env::var(\"",
                "env::var_os(\"",
                "env = \"",
                "_VAR: &str = \"",
            ] {
                for name in literals_after(&code, before) {
                    read.entry(name).or_default().insert(rel.clone());
                }
            }
            if reads_indirectly(&code) {
                indirect_readers.insert(rel);
            }
        }
        let listed: BTreeSet<String> = INDIRECT.iter().map(|(f, _)| f.to_string()).collect();
        assert_eq!(
            indirect_readers, listed,
            "files reading the environment through a variable: list the names each reads in INDIRECT"
        );
        for (file, names) in INDIRECT {
            for name in *names {
                read.entry(name.to_string())
                    .or_default()
                    .insert(file.to_string());
            }
        }
        let undocumented: Vec<_> = read.iter().filter(|(n, _)| !documented(n)).collect();
        assert!(
            undocumented.is_empty(),
            "read but in no man page's ENVIRONMENT (add them to docs::environment::VARS): {undocumented:?}"
        );
        let mut seen = BTreeSet::new();
        for name in VARS.iter().flat_map(|v| v.names) {
            assert!(seen.insert(*name), "{name} is documented twice");
            assert!(
                read.contains_key(*name),
                "{name} is documented but nothing in src/ reads it"
            );
        }
        for name in ["GPUTUNE_CUDA_LIB", "GPUTUNE_STATE_DIR"] {
            assert!(read.contains_key(name) && documented(name), "{name}");
        }
        assert!(
            !read.contains_key("GPUTUNE_TEST_STOP_BEFORE"),
            "a test hook read by the release build"
        );
    }

    #[test]
    fn test_only_code_is_left_out() {
        let code = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() { x(\"{\"); }\n}\n#[cfg(feature = \"test-hooks\")]\nuse x::y;\nfn c() {\n    #[cfg(feature = \"test-hooks\")]\n    if x {\n        y();\n    }\n    z();\n}\n";
        assert_eq!(release_code(code), "fn a() {}\nfn c() {\n    z();\n}\n");
    }

    #[test]
    fn pages_list_their_commands_variables() {
        let names =
            |page: &str| -> Vec<String> { for_page(page).into_iter().map(|(n, _)| n).collect() };
        assert_eq!(names("gputune").len(), VARS.len());
        let bench = names("gputune-bench-allreduce");
        assert!(bench.iter().any(|n| n == "GPUTUNE_CUDA_LIB"), "{bench:?}");
        assert!(!bench.iter().any(|n| n == "GPUTUNE_STATE_DIR"), "{bench:?}");
        assert!(
            names("gputune-apply")
                .iter()
                .any(|n| n == "GPUTUNE_STATE_DIR")
        );
        assert!(
            names("gputune-rollback")
                .iter()
                .any(|n| n == "GPUTUNE_STATE_DIR")
        );
        assert!(
            names("gputune-status")
                .iter()
                .any(|n| n == "GPUTUNE_STATE_DIR")
        );
        assert!(!names("gputune-profiles-list").iter().any(|n| n == "PATH"));
    }
}
