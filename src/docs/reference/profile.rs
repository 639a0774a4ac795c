//! `gputune-profile(5)`: every key of every area with its type, unit, default and meaning,
//! and what each built-in profile (as the loader resolves it) sets for it.

use crate::finding::Area;
use crate::profile::setting::{KeySpec, ValueKind};
use crate::profile::{BUILTIN, Loader, Profile};

use super::{area_is_sysctl, header, para, roff_escape, term};

/// The unit of each number key (by key, or a family's prefix). A number key missing here
/// fails `every_number_key_has_a_unit`, so a new key cannot reach the page without one.
const UNITS: &[(&str, &str)] = &[
    ("net.core.rmem_max", "bytes"),
    ("net.core.wmem_max", "bytes"),
    ("net.core.rmem_default", "bytes"),
    ("net.core.wmem_default", "bytes"),
    ("net.core.netdev_max_backlog", "packets per CPU"),
    ("net.core.somaxconn", "connections"),
    ("net.ipv4.tcp_rmem.", "bytes"),
    ("net.ipv4.tcp_wmem.", "bytes"),
    ("net.ipv4.tcp_window_scaling", "0 or 1"),
    ("net.ipv4.tcp_timestamps", "0, 1 or 2"),
    ("net.ipv4.tcp_sack", "0 or 1"),
    ("net.ipv4.tcp_fin_timeout", "seconds"),
    ("net.ipv4.tcp_slow_start_after_idle", "0 or 1"),
    ("net.ipv4.tcp_mtu_probing", "0, 1 or 2"),
    ("net.ipv4.ip_local_port_range.", "TCP port"),
    ("vm.swappiness", "0 to 200"),
    ("swap.devices", "active swap areas"),
    ("kernel.numa_balancing", "mode, 0 is off"),
    ("vm.zone_reclaim_mode", "bit mask, 0 is off"),
    ("fs.file-max", "open files"),
    ("ulimit.memlock", "bytes, or unlimited"),
    ("ulimit.nofile", "open files"),
    ("ulimit.stack", "bytes, or unlimited"),
    ("dev_shm.size", "bytes"),
    ("dev_shm.free", "bytes"),
    ("link.speed_mbps", "Mb/s"),
    ("link.mtu", "bytes"),
    ("irq.numa_local", "1 asks for it"),
    ("offload.", "1 on, 0 off"),
    ("coalesce.adaptive_rx", "1 on, 0 off"),
    ("coalesce.adaptive_tx", "1 on, 0 off"),
    ("coalesce.rx_usecs", "microseconds"),
    ("pause.", "1 on, 0 off"),
    ("rdma.rate_mbps", "Mb/s"),
    ("rdma.hca_count", "RDMA devices"),
    ("gpu.count", "GPUs"),
    ("gpu.memory_mib", "MiB"),
    ("gpu.nvlink_count", "active NVLinks"),
    ("rdma.active_mtu", "bytes"),
    ("peer.rtt_ms", "milliseconds"),
    ("peer.path_mtu", "bytes"),
    ("memory.max", "bytes, or unlimited"),
    ("memory.high", "bytes, or unlimited"),
    ("cpu.max", "thousandths of a CPU, or unlimited"),
    ("pids.max", "tasks, or unlimited"),
    ("cpuset.gpus_without_local_cpus", "GPUs"),
    ("cpuset.gpus_without_local_memory", "GPUs"),
    ("nvidia_peermem.loaded", "0 or 1"),
];

/// The unit of `key`, `None` for a number key nobody described.
fn unit(key: &str, kind: ValueKind) -> Option<&'static str> {
    match kind {
        ValueKind::Text => Some("word"),
        ValueKind::Version => Some("dotted version"),
        ValueKind::Number => UNITS.iter().find_map(|(k, u)| {
            let hit = if k.ends_with('.') {
                key.starts_with(k)
            } else {
                key == *k
            };
            hit.then_some(*u)
        }),
    }
}

fn kind_name(kind: ValueKind) -> &'static str {
    match kind {
        ValueKind::Number => "number or size (K, M, G, T are powers of two; `unlimited`)",
        ValueKind::Text => "text",
        ValueKind::Version => "version requirement",
    }
}

/// Every built-in profile, resolved as `--profile NAME` resolves it. The loader finds no
/// site profile under a root that does not exist, so only the embedded files count and the
/// host is never read.
fn builtins() -> Vec<Profile> {
    let root = crate::host::Root::new("/nonexistent/gputune-docs");
    let loader = Loader::new(&root, &crate::checks::keys);
    BUILTIN
        .iter()
        .filter_map(|(name, _)| loader.load(name).ok())
        .collect()
}

/// What the built-in profiles set for `key`: profiles with the same rule grouped.
fn set_by(profiles: &[Profile], area: Area, key: &KeySpec) -> Vec<String> {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for p in profiles {
        for (k, s) in p.area(area).filter(|(k, _)| key.matches(k)) {
            let rule = format!(
                "{}{} ({})",
                if k == key.key {
                    String::new()
                } else {
                    format!("{k}: ")
                },
                s.rule.describe(),
                match s.severity {
                    crate::profile::setting::Severity::Fail => "fail",
                    crate::profile::setting::Severity::Warn => "warn",
                    crate::profile::setting::Severity::Off => "off",
                }
            );
            match groups.iter_mut().find(|(r, _)| *r == rule) {
                Some((_, names)) => names.push(&p.name),
                None => groups.push((rule, vec![&p.name])),
            }
        }
    }
    groups
        .into_iter()
        .map(|(rule, names)| format!("{}: {rule}", names.join(", ")))
        .collect()
}

pub(super) fn page() -> String {
    let profiles = builtins();
    let mut out = String::new();
    header(&mut out, "gputune-profile", 5, "gputune profile files");
    out.push_str(".SH SYNOPSIS\n");
    para(
        &mut out,
        "/etc/gputune/profiles/NAME.toml, a file named with --profile FILE, the built-in profiles, and /etc/gputune/default-profile.",
    );
    out.push_str(".SH DESCRIPTION\n");
    para(
        &mut out,
        "A profile says how a node must be configured: for each setting, how the fact is judged and how much a mismatch matters. It is a TOML file. Site profiles in /etc/gputune/profiles/NAME.toml win over built-in profiles of the same name; --profile also takes a path. Unknown keys, wrong types, a missing include and include cycles are errors naming the file, line and key (exit 2).",
    );
    para(
        &mut out,
        "Top-level keys: description (text shown by gputune profiles list), include (a list of profile names or paths; the child overrides its parents key by key), one table per area (network, memory, numa, nic, gpu, platform, limits, cgroup, firewall) holding settings, [bench] and [job].",
    );
    para(
        &mut out,
        "A setting is KEY = { RULE..., severity = \"fail\"|\"warn\", why = \"...\" }. Rules: equals, min, max (min and max together are a range), one_of (a list), version (\">=2.14\", \">=11.8, <13\"). Every rule present must hold. severity is fail (the default) or warn; why replaces the check's own reason in findings. A key a profile does not set is not judged.",
    );
    out.push_str(".SH \"SITE DEFAULT\"\n");
    para(
        &mut out,
        "/etc/gputune/default-profile (under --root for an image) holds one profile name, built-in or site; # starts a comment. audit and health use it when no --profile is given, before the rule that chooses from the node's links. An image without it needs --profile (exit 2): it has no links to choose from.",
    );
    out.push_str(".SH KEYS\n");
    para(
        &mut out,
        "Each key with its type, unit, default and meaning, then what the built-in profiles set for it (profiles whose rule is the same are listed together). A key ending in .* is a family: firmware.* takes firmware.mlx5_core.",
    );
    for &area in Area::ALL {
        let keys = crate::checks::keys(area);
        if keys.is_empty() {
            continue;
        }
        out.push_str(&format!(".SS \"[{}]\"\n", area.name()));
        for key in keys {
            let mut lines = vec![format!(
                "Type: {}. Unit: {}.",
                kind_name(key.kind),
                unit(key.key, key.kind).unwrap_or("-")
            )];
            let default = match kernel_default(key.key) {
                Some(d) if area_is_sysctl(area, key.key) => {
                    format!("Default: not judged unless set; the kernel's default is {d}.")
                }
                _ => "Default: not judged unless set.".to_string(),
            };
            lines.push(default);
            lines.push(key.why.to_string());
            let set = set_by(&profiles, area, key);
            if set.is_empty() {
                lines.push("Built-in profiles: none sets it.".into());
            } else {
                lines.push(format!("Built-in profiles: {}.", set.join("; ")));
            }
            term(&mut out, key.key, &lines);
        }
    }
    out.push_str(".SS \"[bench]\"\n");
    for (key, _) in crate::profile::Bench::<()>::default().thresholds() {
        let set: Vec<String> = profiles
            .iter()
            .filter_map(|p| {
                let (_, v) = p.bench.thresholds().into_iter().find(|(k, _)| *k == key)?;
                v.map(|v| format!("{} {v}", p.name))
            })
            .collect();
        term(
            &mut out,
            key,
            &[
                "Type: number or string. Unit: GB/s (1e9 bytes per second), the bus bandwidth of nccl-tests; or a percentage (\"80%\") of what the path can carry: the link rate of the NICs across hosts, the GPUs' NVLink or PCIe rate for NCCL on one host, the memory copy rate for TCP over loopback (see gputune-bench(1)). A percentage with no rate to resolve it against is a usage error (exit 2)."
                    .into(),
                format!(
                    "The threshold below which gputune bench {} fails (exit 1); --min-busbw overrides it. Default: no threshold.",
                    bench_of(key)
                ),
                if set.is_empty() {
                    "Built-in profiles: none sets it.".into()
                } else {
                    format!("Built-in profiles: {}.", set.join(", "))
                },
            ],
        );
    }
    for (key, _) in crate::profile::Bench::<(), ()>::default().baselines() {
        term(
            &mut out,
            &format!("[bench.{key}]"),
            &[
                "Type: table. A key tolerance = \"10%\" (required: how far below its baseline a size may fall) and one key per message size (\"1M\", \"128M\", \"131072\"; K/M/G are powers of two) whose value is the bus bandwidth expected at that size, in GB/s.".into(),
                format!(
                    "gputune bench {} --profile judges each measured size that has a baseline by its out-of-place busbw: below baseline × (1 − tolerance) fails (exit 1) naming the size and both figures; sizes without a baseline, and baseline sizes not measured, are not judged. A child profile's table replaces an included one's whole. These are the figures Azure's node health checks keep per VM SKU and nccl-tests users keep by hand (nccl-tests issue 293): measure a known-good node once and write them down.",
                    bench_of(key)
                ),
            ],
        );
    }
    out.push_str(".SS \"[job]\"\n");
    for (key, text) in JOB_KEYS {
        let set: Vec<String> = profiles
            .iter()
            .filter_map(|p| job_value(p, key).map(|v| format!("{} {v}", p.name)))
            .collect();
        term(
            &mut out,
            key,
            &[
                text.to_string(),
                if set.is_empty() {
                    "Built-in profiles: none sets it.".into()
                } else {
                    format!("Built-in profiles: {}.", set.join(", "))
                },
            ],
        );
    }
    out.push_str(".SH \"BUILT-IN PROFILES\"\n");
    for p in &profiles {
        term(
            &mut out,
            &p.name,
            &[format!(
                "{} (merged from {})",
                p.description,
                p.chain.join(" -> ")
            )],
        );
    }
    out.push_str(".SH EXAMPLES\n");
    out.push_str(&format!(
        ".PP\nA site profile on top of a built-in one:\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
        roff_escape(
            "description = \"Our 25 GbE cluster\"\ninclude = [\"ddp-25gbe\"]\n\n[network]\n\"net.core.rmem_max\" = { min = \"64M\" }\n\"net.ipv4.tcp_rmem.max\" = { min = 67108864, severity = \"warn\", why = \"our RTT is 2 ms\" }\n\n[job]\nslice = \"training.slice\""
        )
    ));
    out.push_str(".SH \"SEE ALSO\"\n");
    para(
        &mut out,
        "gputune(1), gputune-audit(1), gputune-apply(1), gputune-profiles-show(1) (a profile fully resolved, each setting with the file and line it came from), gputune-checks(7).",
    );
    out
}

/// The kernel's default of the value a sysctl key judges: the part it names of a vector.
fn kernel_default(key: &str) -> Option<String> {
    use crate::host::sysctl;
    let whole = sysctl::kernel_default(sysctl::sysctl_of(key))?;
    match sysctl::split_part(key) {
        Some((_, index)) => whole.split_whitespace().nth(index).map(str::to_string),
        None => Some(whole.to_string()),
    }
}

fn bench_of(key: &str) -> &'static str {
    match key {
        "allgather_min_busbw" | "allgather_baseline" => "allgather",
        "reducescatter_min_busbw" | "reducescatter_baseline" => "reducescatter",
        "broadcast_min_busbw" | "broadcast_baseline" => "broadcast",
        _ => "allreduce",
    }
}

/// The keys of `[job]` (profile::job::RawJob, which refuses any other).
const JOB_KEYS: &[(&str, &str)] = &[
    (
        "rendezvous_ports",
        "Ports or port ranges (\"29500-29550\") of PyTorch's rendezvous (MASTER_PORT, TCPStore): the firewall must let them through and the ephemeral range must start above them.",
    ),
    (
        "nccl_ports",
        "The ports NCCL's sockets use: \"ip_local_port_range\" (the kernel's ephemeral range) or a range; the firewall must let them through between nodes.",
    ),
    (
        "slice",
        "The systemd slice jobs run in (\"training.slice\"): the cgroup checks judge its limits, and apply writes its drop-in.",
    ),
];

/// A `[job]` key's value as `profiles show` writes it.
fn job_value(p: &Profile, key: &str) -> Option<String> {
    let prefix = format!("{key} = ");
    p.job
        .to_toml()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_key_has_a_unit() {
        for &area in Area::ALL {
            for key in crate::checks::keys(area) {
                assert!(unit(key.key, key.kind).is_some(), "{}: no unit", key.key);
            }
        }
    }

    #[test]
    fn every_built_in_profile_loads_for_the_page() {
        assert_eq!(builtins().len(), BUILTIN.len());
    }
}
