//! NCCL's effective configuration, read the way NCCL reads it (`initEnv` in NCCL's
//! `src/misc/param.cc`): the process environment first, then `NCCL_CONF_FILE` (or
//! `~/.nccl.conf` when it is unset), then `/etc/nccl.conf`, each file filling only names
//! not already set. Every value is validated against NCCL's documented names, types and
//! ranges (NCCL user guide, "Environment Variables"), so a typo or an out-of-range value
//! is a finding that names where it came from.

use std::collections::BTreeMap;

use crate::finding::{Area, Check, Finding};
use crate::host::Root;

use super::ncclconf::parse_nccl_conf;

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Environment,
    /// A configuration file (host path) and its line.
    File(String, usize),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Environment => f.write_str("the environment of the audit"),
            Source::File(path, line) => write!(f, "{path}:{line}"),
        }
    }
}

/// One effective setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub value: String,
    pub source: Source,
}

/// NCCL's effective settings by name, and the files that were read (for messages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NcclConfig {
    pub settings: BTreeMap<String, Setting>,
    pub files: Vec<String>,
}

impl NcclConfig {
    pub fn get(&self, name: &str) -> Option<&Setting> {
        self.settings.get(name)
    }

    /// Builds the configuration from an environment and the files' texts, in NCCL's order.
    pub fn build(env: &[(String, String)], files: &[(String, Option<String>)]) -> NcclConfig {
        let mut settings = BTreeMap::new();
        for (k, v) in env {
            if is_nccl_name(k) {
                settings.insert(
                    k.clone(),
                    Setting {
                        value: v.clone(),
                        source: Source::Environment,
                    },
                );
            }
        }
        let mut read = Vec::new();
        for (path, text) in files {
            let Some(text) = text else { continue };
            read.push(path.clone());
            for (line, (k, v)) in numbered(text) {
                settings.entry(k).or_insert(Setting {
                    value: v,
                    source: Source::File(path.clone(), line),
                });
            }
        }
        NcclConfig {
            settings,
            files: read,
        }
    }

    /// The live configuration: this process's environment and the files under `root`.
    /// `$HOME` is the audit's (NCCL reads the user's file of the process it runs in).
    pub fn read(root: &Root) -> NcclConfig {
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let user_file = env
            .iter()
            .find(|(k, _)| k == "NCCL_CONF_FILE")
            .map(|(_, v)| v.clone())
            .or_else(|| {
                std::env::var("HOME")
                    .ok()
                    .filter(|h| h.starts_with('/'))
                    .map(|h| format!("{}/.nccl.conf", h.trim_end_matches('/')))
            });
        let mut files = Vec::new();
        for path in user_file
            .into_iter()
            .chain(std::iter::once("/etc/nccl.conf".to_string()))
        {
            let text = root.read_optional(&path).ok().flatten();
            files.push((path, text));
        }
        NcclConfig::build(&env, &files)
    }
}

/// `KEY=VALUE` lines with their 1-based line numbers (comments and blanks skipped).
fn numbered(text: &str) -> Vec<(usize, (String, String))> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| parse_nccl_conf(l).into_iter().next().map(|kv| (i + 1, kv)))
        .collect()
}

fn is_nccl_name(name: &str) -> bool {
    name.starts_with("NCCL_")
}

/// The type and range NCCL documents for a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An integer in `min..=max`.
    Int(i64, i64),
    /// 0 or 1 (NCCL reads any integer, but documents these two).
    Bool,
    /// One of these words (case-insensitive).
    OneOf(&'static [&'static str]),
    /// A topology level name or its number (`NCCL_P2P_LEVEL`, `NCCL_NET_GDR_LEVEL`).
    Level(&'static [&'static str]),
    /// Free text (interface lists, device lists, paths, plugin names).
    Text,
}

/// NCCL's documented variables (NCCL 2.2x user guide, "Environment Variables").
pub const KNOWN: &[(&str, Kind)] = &[
    ("NCCL_SOCKET_IFNAME", Kind::Text),
    ("NCCL_SOCKET_FAMILY", Kind::OneOf(&["AF_INET", "AF_INET6"])),
    ("NCCL_SOCKET_RETRY_CNT", Kind::Int(0, 1 << 20)),
    ("NCCL_SOCKET_RETRY_SLEEP_MSEC", Kind::Int(0, 1 << 20)),
    ("NCCL_SOCKET_NTHREADS", Kind::Int(1, 16)),
    ("NCCL_NSOCKS_PERTHREAD", Kind::Int(1, 64)),
    ("NCCL_CROSS_NIC", Kind::Int(0, 2)),
    ("NCCL_IB_HCA", Kind::Text),
    ("NCCL_IB_TIMEOUT", Kind::Int(1, 31)),
    ("NCCL_IB_RETRY_CNT", Kind::Int(0, 7)),
    ("NCCL_IB_GID_INDEX", Kind::Int(-1, 255)),
    ("NCCL_IB_ADDR_FAMILY", Kind::OneOf(&["AF_INET", "AF_INET6"])),
    ("NCCL_IB_ADDR_RANGE", Kind::Text),
    ("NCCL_IB_ROCE_VERSION_NUM", Kind::Int(1, 2)),
    ("NCCL_IB_SL", Kind::Int(0, 15)),
    ("NCCL_IB_TC", Kind::Int(0, 255)),
    ("NCCL_IB_FIFO_TC", Kind::Int(0, 255)),
    ("NCCL_IB_RETURN_ASYNC_EVENTS", Kind::Bool),
    ("NCCL_IB_DISABLE", Kind::Bool),
    ("NCCL_IB_AR_THRESHOLD", Kind::Int(0, i64::MAX)),
    ("NCCL_IB_QPS_PER_CONNECTION", Kind::Int(1, 128)),
    ("NCCL_IB_SPLIT_DATA_ON_QPS", Kind::Bool),
    ("NCCL_IB_PCI_RELAXED_ORDERING", Kind::Int(0, 2)),
    ("NCCL_IB_ADAPTIVE_ROUTING", Kind::Bool),
    ("NCCL_IB_ECE_ENABLE", Kind::Bool),
    ("NCCL_IB_MERGE_NICS", Kind::Bool),
    ("NCCL_IB_MERGE_VFS", Kind::Bool),
    ("NCCL_IB_USE_INLINE", Kind::Bool),
    ("NCCL_IB_MQP_RETRY_ALL", Kind::Bool),
    ("NCCL_IB_MQP_RETRY_CNT", Kind::Int(0, 1 << 20)),
    ("NCCL_IB_MQP_RETRY_SLEEP_MSEC", Kind::Int(0, 1 << 20)),
    ("NCCL_OOB_NET_ENABLE", Kind::Bool),
    ("NCCL_OOB_NET_IFNAME", Kind::Text),
    ("NCCL_UID_STAGGER_THRESHOLD", Kind::Int(0, i64::MAX)),
    ("NCCL_UID_STAGGER_RATE", Kind::Int(0, i64::MAX)),
    (
        "NCCL_NET_GDR_LEVEL",
        Kind::Level(&["LOC", "PIX", "PXB", "PHB", "SYS"]),
    ),
    ("NCCL_NET_GDR_READ", Kind::Bool),
    ("NCCL_NET_GDR_C2C", Kind::Bool),
    ("NCCL_NET_SHARED_BUFFERS", Kind::Bool),
    ("NCCL_NET_SHARED_COMMS", Kind::Bool),
    ("NCCL_NET", Kind::Text),
    ("NCCL_NET_PLUGIN", Kind::Text),
    ("NCCL_NET_DISABLE_INTRA", Kind::Bool),
    ("NCCL_NET_FORCE_FLUSH", Kind::Bool),
    ("NCCL_NET_OPTIONAL_RECV_COMPLETION", Kind::Bool),
    ("NCCL_TUNER_PLUGIN", Kind::Text),
    ("NCCL_PROFILER_PLUGIN", Kind::Text),
    ("NCCL_ENV_PLUGIN", Kind::Text),
    (
        "NCCL_P2P_LEVEL",
        Kind::Level(&["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"]),
    ),
    ("NCCL_P2P_DISABLE", Kind::Bool),
    ("NCCL_P2P_DIRECT_DISABLE", Kind::Bool),
    ("NCCL_P2P_USE_CUDA_MEMCPY", Kind::Bool),
    ("NCCL_P2P_NET_CHUNKSIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_P2P_NVL_CHUNKSIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_P2P_PCI_CHUNKSIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_P2P_PXN_LEVEL", Kind::Int(0, 2)),
    ("NCCL_PXN_DISABLE", Kind::Bool),
    ("NCCL_PXN_C2C", Kind::Bool),
    ("NCCL_SHM_DISABLE", Kind::Bool),
    ("NCCL_SHM_USE_CUDA_MEMCPY", Kind::Bool),
    ("NCCL_SHM_MEMCPY_MODE", Kind::Int(0, 3)),
    ("NCCL_SHM_LOCALITY", Kind::Int(1, 2)),
    ("NCCL_BUFFSIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_NTHREADS", Kind::OneOf(&["64", "128", "256", "512"])),
    ("NCCL_MAX_NCHANNELS", Kind::Int(1, 64)),
    ("NCCL_MIN_NCHANNELS", Kind::Int(1, 64)),
    ("NCCL_MAX_CTAS", Kind::Int(1, 64)),
    ("NCCL_MIN_CTAS", Kind::Int(1, 64)),
    ("NCCL_CGA_CLUSTER_SIZE", Kind::Int(0, 8)),
    ("NCCL_CHECK_POINTERS", Kind::Bool),
    ("NCCL_LAUNCH_MODE", Kind::OneOf(&["PARALLEL", "GROUP"])),
    (
        "NCCL_DEBUG",
        Kind::OneOf(&["VERSION", "WARN", "INFO", "TRACE", "ABORT"]),
    ),
    ("NCCL_DEBUG_FILE", Kind::Text),
    ("NCCL_DEBUG_SUBSYS", Kind::Text),
    ("NCCL_DEBUG_TIMESTAMP_FORMAT", Kind::Text),
    ("NCCL_DEBUG_TIMESTAMP_LEVELS", Kind::Text),
    ("NCCL_COLLNET_ENABLE", Kind::Bool),
    ("NCCL_COLLNET_NODE_THRESHOLD", Kind::Int(0, i64::MAX)),
    ("NCCL_TOPO_FILE", Kind::Text),
    ("NCCL_TOPO_DUMP_FILE", Kind::Text),
    ("NCCL_TOPO_DUMP_FILE_RANK", Kind::Int(0, i64::MAX)),
    ("NCCL_ALGO", Kind::Text),
    ("NCCL_PROTO", Kind::Text),
    ("NCCL_IGNORE_CPU_AFFINITY", Kind::Bool),
    ("NCCL_IGNORE_DISABLED_P2P", Kind::Bool),
    ("NCCL_CONF_FILE", Kind::Text),
    ("NCCL_HOSTID", Kind::Text),
    ("NCCL_CUMEM_ENABLE", Kind::Bool),
    ("NCCL_CUMEM_HOST_ENABLE", Kind::Bool),
    ("NCCL_NVLS_ENABLE", Kind::Int(0, 2)),
    ("NCCL_NVLS_CHUNKSIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_NVLSTREE_MAX_CHUNKSIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_NVB_DISABLE", Kind::Bool),
    ("NCCL_MNNVL_ENABLE", Kind::Int(0, 2)),
    ("NCCL_MNNVL_UUID", Kind::Text),
    ("NCCL_MNNVL_CLIQUE_ID", Kind::Text),
    ("NCCL_GRAPH_MIXING_SUPPORT", Kind::Bool),
    ("NCCL_GRAPH_REGISTER", Kind::Bool),
    ("NCCL_LOCAL_REGISTER", Kind::Bool),
    ("NCCL_LEGACY_CUDA_REGISTER", Kind::Bool),
    ("NCCL_DMABUF_ENABLE", Kind::Bool),
    ("NCCL_SET_THREAD_NAME", Kind::Bool),
    ("NCCL_SET_STACK_SIZE", Kind::Bool),
    ("NCCL_RUNTIME_CONNECT", Kind::Bool),
    ("NCCL_COMM_BLOCKING", Kind::Bool),
    ("NCCL_COMM_SPLIT_SHARE_RESOURCES", Kind::Bool),
    ("NCCL_WORK_FIFO_BYTES", Kind::Int(1, i64::MAX)),
    ("NCCL_WIN_ENABLE", Kind::Bool),
    ("NCCL_RAS_ENABLE", Kind::Bool),
    ("NCCL_RAS_ADDR", Kind::Text),
    ("NCCL_RAS_TIMEOUT_FACTOR", Kind::Int(1, i64::MAX)),
    ("NCCL_CTA_POLICY", Kind::Int(0, 2)),
    ("NCCL_SYM_CTAS", Kind::Int(1, 64)),
    ("NCCL_NCHANNELS_PER_NET_PEER", Kind::Int(1, 64)),
    ("NCCL_MAX_P2P_NCHANNELS", Kind::Int(1, 64)),
    ("NCCL_MIN_P2P_NCHANNELS", Kind::Int(1, 64)),
    ("NCCL_NVLS_NCHANNELS", Kind::Int(1, 64)),
    ("NCCL_ALLOC_P2P_NET_LL_BUFFERS", Kind::Bool),
    ("NCCL_CREATE_THREAD_CONTEXT", Kind::Bool),
    ("NCCL_PROGRESS_APPENDOP_FREQ", Kind::Int(1, i64::MAX)),
    ("NCCL_PROXY_APPEND_BATCH_SIZE", Kind::Int(1, i64::MAX)),
    ("NCCL_PROXY_DUMP_SIGNAL", Kind::Int(-1, 64)),
    ("NCCL_ABORT_ON_ERROR", Kind::Bool),
];

/// Names that are not NCCL's but are commonly set with an `NCCL_` prefix by other tools:
/// recognised, not judged.
const OTHERS: &[&str] = &[
    "NCCL_VERSION",
    "NCCL_HOME",
    "NCCL_ROOT",
    "NCCL_ROOT_DIR",
    "NCCL_INCLUDE_DIR",
    "NCCL_LIB_DIR",
    "NCCL_LIBRARY",
    "NCCL_TESTS_MIN_BW",
    "NCCL_TESTS_SPLIT",
    "NCCL_TESTS_SPLIT_MASK",
    "NCCL_TESTS_DEVICE",
];

/// Names NCCL (or PyTorch) once read and no longer does, and what replaced them.
pub const DEPRECATED: &[(&str, &str)] = &[
    (
        "NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING (PyTorch 2.2 renamed it)",
    ),
    (
        "NCCL_BLOCKING_WAIT",
        "TORCH_NCCL_BLOCKING_WAIT (PyTorch 2.2 renamed it)",
    ),
    (
        "NCCL_DESYNC_DEBUG",
        "TORCH_NCCL_DESYNC_DEBUG (PyTorch 2.2 renamed it)",
    ),
    (
        "NCCL_IB_CUDA_SUPPORT",
        "NCCL_NET_GDR_LEVEL (NCCL 2.4.0 removed it)",
    ),
    (
        "NCCL_P2P_LEVEL_DISABLE",
        "NCCL_P2P_LEVEL / NCCL_P2P_DISABLE",
    ),
    (
        "NCCL_MAX_NRINGS",
        "NCCL_MAX_NCHANNELS (NCCL 2.5 renamed it)",
    ),
    (
        "NCCL_MIN_NRINGS",
        "NCCL_MIN_NCHANNELS (NCCL 2.5 renamed it)",
    ),
    (
        "NCCL_CHECKS_DISABLE",
        "NCCL_CHECK_POINTERS (NCCL 2.2.12 replaced it)",
    ),
    ("NCCL_LL_THRESHOLD", "NCCL_PROTO (NCCL 2.5 removed it)"),
    ("NCCL_TREE_THRESHOLD", "NCCL_ALGO (NCCL 2.5 removed it)"),
    (
        "NCCL_SINGLE_RING_THRESHOLD",
        "nothing (NCCL 2.5 removed it)",
    ),
    ("NCCL_GDR_FLUSH_DISABLE", "NCCL_NET_FORCE_FLUSH"),
];

/// What is wrong with one value on its own, or `None`.
pub fn value_problem(kind: Kind, value: &str) -> Option<String> {
    let v = value.trim();
    let int = || parse_int(v);
    match kind {
        Kind::Int(min, max) => match int() {
            Some(n) if (min..=max).contains(&n) => None,
            Some(n) => Some(format!(
                "{n} is outside NCCL's documented range {min}..={max}"
            )),
            None => Some(format!("`{v}` is not an integer")),
        },
        Kind::Bool => match int() {
            Some(0 | 1) => None,
            _ => Some(format!("`{v}` is not 0 or 1")),
        },
        Kind::OneOf(words) => (!words.iter().any(|w| w.eq_ignore_ascii_case(v)))
            .then(|| format!("`{v}` is not one of {}", words.join(", "))),
        Kind::Level(words) => {
            let named = words.iter().any(|w| w.eq_ignore_ascii_case(v));
            let numbered = int().is_some_and(|n| n >= 0);
            (!named && !numbered)
                .then(|| format!("`{v}` is not a level ({}) or a number", words.join(", ")))
        }
        Kind::Text => None,
    }
}

fn parse_int(v: &str) -> Option<i64> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// The known name closest to a misspelt one (edit distance at most 3).
pub fn closest(name: &str) -> Option<&'static str> {
    KNOWN
        .iter()
        .map(|(k, _)| (*k, crate::profile::suggest::distance(name, k)))
        .filter(|(_, d)| *d <= 3)
        .min_by_key(|(_, d)| *d)
        .map(|(k, _)| k)
}

/// The fix for a setting, by where it came from.
fn fix_for(name: &str, setting: &Setting, what: &str) -> String {
    match &setting.source {
        Source::Environment => format!("{what} `{name}` in the job's environment"),
        Source::File(path, line) => format!("{what} `{name}` at {path}:{line}"),
    }
}

/// One finding per problem in the configuration on its own (names, types, ranges,
/// deprecated names, the socket thread product); a pass when there is none.
pub fn validate(config: &NcclConfig) -> Vec<Finding> {
    let mut out = Vec::new();
    for (name, setting) in &config.settings {
        let id = format!("nccl.env.{name}");
        let at = &setting.source;
        if let Some((_, instead)) = DEPRECATED.iter().find(|(d, _)| d == name) {
            out.push(
                Check::new(id, Area::Nic)
                    .expected(format!("not {name}"))
                    .why(format!("{name} is no longer read; use {instead}"))
                    .warn(
                        format!("{name}={} ({at})", setting.value),
                        format!(
                            "set {} instead of `{name}` ({at})",
                            instead.split(' ').next().unwrap_or(instead)
                        ),
                    ),
            );
            continue;
        }
        if OTHERS.contains(&name.as_str()) {
            continue;
        }
        let Some((_, kind)) = KNOWN.iter().find(|(k, _)| k == name) else {
            let hint = closest(name).map_or(String::new(), |c| format!(" (did you mean {c}?)"));
            out.push(
                Check::new(id, Area::Nic)
                    .expected("a variable NCCL reads")
                    .why(format!(
                        "NCCL does not read {name}{hint}: the setting has no effect"
                    ))
                    .warn(
                        format!("{name}={} ({at})", setting.value),
                        fix_for(name, setting, "correct or remove"),
                    ),
            );
            continue;
        };
        if let Some(problem) = value_problem(*kind, &setting.value) {
            out.push(
                Check::new(id, Area::Nic)
                    .expected(describe(*kind))
                    .why(format!("{name}: {problem}; NCCL ignores or rejects it"))
                    .fail(
                        format!("{} ({at})", setting.value),
                        fix_for(name, setting, "correct"),
                    ),
            );
        }
    }
    let get_int = |n: &str| config.get(n).and_then(|s| parse_int(s.value.trim()));
    if let (Some(threads), Some(socks)) = (
        get_int("NCCL_SOCKET_NTHREADS").or(Some(1)),
        get_int("NCCL_NSOCKS_PERTHREAD").or(Some(1)),
    ) && threads.saturating_mul(socks) > 64
    {
        out.push(
            Check::new("nccl.env.sockets", Area::Nic)
                .expected("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD <= 64")
                .why("NCCL caps the sockets per connection at 64 and rejects larger products")
                .fail(
                    format!("{threads} x {socks} = {}", threads * socks),
                    "lower NCCL_NSOCKS_PERTHREAD or NCCL_SOCKET_NTHREADS (4 x 4 suits 100 Gb/s)",
                ),
        );
    }
    if out.is_empty() {
        let shown: Vec<String> = config
            .settings
            .iter()
            .map(|(k, s)| format!("{k}={} ({})", s.value, s.source))
            .collect();
        out.push(
            Check::new("nccl.env", Area::Nic)
                .expected("known NCCL names, values in range")
                .why(format!(
                    "read as NCCL reads it: the environment, then {}",
                    if config.files.is_empty() {
                        "no configuration file (none present)".to_string()
                    } else {
                        config.files.join(", then ")
                    }
                ))
                .pass(if shown.is_empty() {
                    "none set".to_string()
                } else {
                    shown.join("; ")
                }),
        );
    }
    out
}

fn describe(kind: Kind) -> String {
    match kind {
        Kind::Int(min, max) if max == i64::MAX => format!("an integer >= {min}"),
        Kind::Int(min, max) => format!("an integer {min}..={max}"),
        Kind::Bool => "0 or 1".into(),
        Kind::OneOf(w) => format!("one of {}", w.join(", ")),
        Kind::Level(w) => format!("a level ({}) or a number", w.join(", ")),
        Kind::Text => "text".into(),
    }
}

/// Checks of the configuration against this node: `NCCL_SOCKET_IFNAME` naming interfaces
/// that exist and are up, `NCCL_IB_HCA` naming RDMA devices that exist, `NCCL_IB_DISABLE`
/// on a node whose fabric is RDMA, `NCCL_TOPO_FILE` present.
pub fn against_node(
    root: &Root,
    config: &NcclConfig,
    inv: &crate::inventory::Inventory,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(s) = config.get("NCCL_SOCKET_IFNAME") {
        let value = s.value.trim();
        let exclude = value.starts_with('^');
        let mut names: Vec<(&str, Option<bool>)> = inv
            .nics
            .iter()
            .map(|n| (n.name.as_str(), Some(n.is_up())))
            .collect();
        names.extend(inv.skipped_nics.iter().map(|n| (n.name.as_str(), None)));
        let chosen: Vec<&(&str, Option<bool>)> = names
            .iter()
            .filter(|(n, _)| super::ncclconf::ifname_selects(value, n))
            .collect();
        let up = chosen.iter().any(|(_, u)| *u != Some(false));
        let id = "nccl.env.NCCL_SOCKET_IFNAME.present";
        let listed: Vec<&str> = chosen.iter().map(|(n, _)| *n).collect();
        if chosen.is_empty() || (!up && !exclude) {
            out.push(Check::new(id, Area::Nic)
                .expected("an interface that exists and is up")
                .why("NCCL finds no usable interface and fails at bootstrap (\"no socket interface found\")")
                .fail(if chosen.is_empty() {
                    format!("{value} ({}) selects no interface", s.source)
                } else {
                    format!("{value} ({}) selects only {} (down)", s.source, listed.join(", "))
                }, fix_for("NCCL_SOCKET_IFNAME", s, "correct")));
        } else {
            out.push(
                Check::new(id, Area::Nic)
                    .expected("an interface that exists and is up")
                    .why(format!("from {}", s.source))
                    .pass(format!("{value} selects {}", listed.join(", "))),
            );
        }
    }
    if let Some(s) = config.get("NCCL_IB_HCA") {
        let value = s.value.trim();
        let (exclude, list) = value
            .strip_prefix('^')
            .map_or((false, value), |r| (true, r));
        let (exact, list) = list.strip_prefix('=').map_or((false, list), |r| (true, r));
        let missing: Vec<&str> = list
            .split(',')
            .map(|e| e.split(':').next().unwrap_or(e).trim())
            .filter(|d| !d.is_empty())
            .filter(|d| {
                !inv.rdma.iter().any(|r| {
                    if exact {
                        r.name == *d
                    } else {
                        r.name.starts_with(d)
                    }
                })
            })
            .collect();
        if !exclude && !missing.is_empty() {
            let have: Vec<&str> = inv.rdma.iter().map(|r| r.name.as_str()).collect();
            out.push(Check::new("nccl.env.NCCL_IB_HCA.present", Area::Nic).expected(format!(
                    "RDMA devices of this node ({})",
                    if have.is_empty() {
                        "none".to_string()
                    } else {
                        have.join(", ")
                    }
                )).why(format!(
                    "NCCL_IB_HCA names {} which this node does not have: NCCL skips it, and with no device left falls back to sockets",
                    missing.join(", ")
                )).fail(format!("{value} ({})", s.source), fix_for("NCCL_IB_HCA", s, "correct")));
        }
    }
    if let Some(s) = config.get("NCCL_IB_DISABLE")
        && parse_int(s.value.trim()) == Some(1)
        && inv
            .rdma
            .iter()
            .any(|r| r.ports.iter().any(|p| p.is_active()))
    {
        out.push(Check::new("nccl.env.NCCL_IB_DISABLE", Area::Nic)
            .expected("0 on a node with active RDMA ports")
            .why("NCCL_IB_DISABLE=1 makes NCCL send over TCP sockets although this node has active InfiniBand/RoCE ports: a fraction of the fabric's bandwidth")
            .fail(format!("1 ({})", s.source), fix_for("NCCL_IB_DISABLE", s, "remove")));
    }
    if let Some(s) = config.get("NCCL_TOPO_FILE")
        && !root.exists(s.value.trim())
    {
        out.push(Check::new("nccl.env.NCCL_TOPO_FILE.present", Area::Nic)
            .expected("a file that exists")
            .why("NCCL warns and ignores a topology file it cannot read; on VMs whose PCI tree is virtual, it then misplaces GPUs and NICs")
            .fail(format!("{} ({})", s.value, s.source), fix_for("NCCL_TOPO_FILE", s, "correct")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::Status;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn order_is_environment_then_user_file_then_etc() {
        let c = NcclConfig::build(
            &env(&[("NCCL_IB_TIMEOUT", "22"), ("PATH", "/bin")]),
            &[
                (
                    "/root/.nccl.conf".into(),
                    Some("NCCL_IB_TIMEOUT=10\nNCCL_DEBUG=INFO\n".into()),
                ),
                (
                    "/etc/nccl.conf".into(),
                    Some("# site\nNCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME=ens1\n".into()),
                ),
            ],
        );
        assert_eq!(c.get("NCCL_IB_TIMEOUT").unwrap().value, "22");
        assert_eq!(
            c.get("NCCL_IB_TIMEOUT").unwrap().source,
            Source::Environment
        );
        assert_eq!(c.get("NCCL_DEBUG").unwrap().value, "INFO");
        assert_eq!(
            c.get("NCCL_SOCKET_IFNAME").unwrap().source,
            Source::File("/etc/nccl.conf".into(), 3)
        );
        assert!(c.get("PATH").is_none());
        assert_eq!(c.files, ["/root/.nccl.conf", "/etc/nccl.conf"]);
    }

    #[test]
    fn values_against_kinds() {
        let cases: &[(Kind, &str, bool)] = &[
            (Kind::Int(1, 16), "4", true),
            (Kind::Int(1, 16), "32", false),
            (Kind::Int(1, 16), "0", false),
            (Kind::Int(1, 16), "four", false),
            (Kind::Int(-1, 255), "-1", true),
            (Kind::Int(0, 255), "0x10", true),
            (Kind::Bool, "1", true),
            (Kind::Bool, "yes", false),
            (Kind::Bool, "2", false),
            (Kind::OneOf(&["AF_INET", "AF_INET6"]), "af_inet6", true),
            (Kind::OneOf(&["AF_INET", "AF_INET6"]), "inet", false),
            (Kind::Level(&["PIX", "SYS"]), "SYS", true),
            (Kind::Level(&["PIX", "SYS"]), "3", true),
            (Kind::Level(&["PIX", "SYS"]), "far", false),
            (Kind::Text, "anything", true),
        ];
        for (kind, value, ok) in cases {
            assert_eq!(
                value_problem(*kind, value).is_none(),
                *ok,
                "{kind:?} {value}"
            );
        }
    }

    #[test]
    fn findings_name_their_source() {
        let c = NcclConfig::build(
            &env(&[
                ("NCCL_SOCKET_NTHREADS", "32"),
                ("NCCL_ASYNC_ERROR_HANDLING", "1"),
                ("NCCL_VERSION", "2.21.5"),
            ]),
            &[(
                "/etc/nccl.conf".into(),
                Some("NCCL_SOCKET_IFNAM=eth0\nNCCL_NSOCKS_PERTHREAD=8\n".into()),
            )],
        );
        let f = validate(&c);
        let get = |id: &str| {
            f.iter()
                .find(|f| f.id == id)
                .unwrap_or_else(|| panic!("{id}: {f:?}"))
        };
        let threads = get("nccl.env.NCCL_SOCKET_NTHREADS");
        assert_eq!(threads.status, Status::Fail);
        assert!(threads.actual.contains("environment"), "{}", threads.actual);
        let typo = get("nccl.env.NCCL_SOCKET_IFNAM");
        assert_eq!(typo.status, Status::Warn);
        assert!(
            typo.message.contains("did you mean NCCL_SOCKET_IFNAME"),
            "{}",
            typo.message
        );
        assert!(typo.actual.contains("/etc/nccl.conf:1"), "{}", typo.actual);
        let old = get("nccl.env.NCCL_ASYNC_ERROR_HANDLING");
        assert_eq!(old.status, Status::Warn);
        assert!(old.message.contains("TORCH_NCCL_ASYNC_ERROR_HANDLING"));
        assert_eq!(get("nccl.env.sockets").actual, "32 x 8 = 256");
        assert!(f.iter().all(|f| f.id != "nccl.env.NCCL_VERSION"));
        assert!(f.iter().all(|f| f.id != "nccl.env"));

        let clean = validate(&NcclConfig::build(&env(&[("NCCL_IB_TIMEOUT", "22")]), &[]));
        assert_eq!(clean.len(), 1);
        assert_eq!(clean[0].status, Status::Pass);
    }
}
