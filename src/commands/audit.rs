//! `gputune audit`: judge the node against a profile.

use std::path::PathBuf;

use clap::Args;

use crate::checks::{self, AuditOptions};
use crate::error::{ExitCode, Result};
use crate::finding::Area;
use crate::host::Root;
use crate::image::Mode;
use crate::report::{Format, HostFacts, PersistedValue, Report};

pub(crate) use crate::checks::chosen::{load_profile, warn_unmatched_skips};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Profile name or TOML file [default: chosen from the node, see `gputune profiles list`]
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Write the report to FILE (atomically: temp file + rename; missing directories are
    /// created) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Check only these areas.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "AREA,...")]
    pub only: Vec<Area>,
    /// Treat warnings as failures (exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Judge what the node would have after a reboot, from its configuration files alone.
    #[arg(long)]
    pub persisted: bool,
    /// Judge the limits of this cgroup [default: the current process's].
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Judge the NIC that routes to this peer node [default: the default route's], and
    /// connect to its rendezvous PORT [default: the profile's first rendezvous port].
    #[arg(long, value_name = "HOST[:PORT]", value_parser = parse_peer)]
    pub peer: Option<String>,
    /// Report these checks as skipped, whatever they find (an ID covers its subjects:
    /// `ulimit.nofile` skips `ulimit.nofile.login` too).
    #[arg(long, value_delimiter = ',', value_name = "ID,...", value_parser = checks::parse_skip_id)]
    pub skip: Vec<String>,
    /// Table: list passing checks too (by default only what needs attention, skips and the
    /// counts are shown).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Judge NVIDIA Xid events in the kernel log from TIME instead of boot: @SECONDS, a
    /// duration ago (30m, 2h, 1d) or a UTC time (2026-11-25 14:00).
    #[arg(long, value_name = "TIME", value_parser = crate::host::kmsg::parse_since)]
    pub since: Option<u64>,
}

/// Why `--peer` is refused (clap says which value).
#[derive(Debug, thiserror::Error)]
enum BadPeer {
    #[error("port 0 is not a port")]
    PortZero,
    #[error("expected an IP address or a host name, optionally with :PORT")]
    NotAHost,
}

/// `--peer`: an IP address or a host name (resolved later, on the node), with an optional
/// `:PORT` (`[v6]:PORT` for IPv6).
fn parse_peer(text: &str) -> Result<String, BadPeer> {
    let (host, port) = crate::checks::nic::select::split_peer(text);
    if let Some(port) = port
        && port == 0
    {
        return Err(BadPeer::PortZero);
    }
    let full = text;
    let text = host.as_str();
    let hostname = !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if text.parse::<std::net::IpAddr>().is_ok() || hostname {
        Ok(full.to_string())
    } else {
        Err(BadPeer::NotAHost)
    }
}

/// How long an audit's areas may take. A wedged GPU driver can hang NVML, a stuck netlink or
/// nft socket a tool: the area becomes an `error` finding naming it, and the audit still
/// reports the rest instead of hanging a cron job or a CI gate.
const AUDIT_LIMITS: checks::TimeLimits = checks::TimeLimits {
    per_area: std::time::Duration::from_secs(60),
    total: std::time::Duration::from_secs(300),
};

pub(crate) fn run(args: &AuditArgs, root: &Root) -> Result<ExitCode> {
    crate::image::check_root(root)?;
    let mode = Mode::detect(root, args.persisted);
    let (profile, chosen_by) = load_profile(args.profile.as_deref(), root)?;
    if let Some(reason) = &chosen_by
        && args.format != Format::Table
    {
        eprintln!("gputune: using profile {} ({reason})", profile.name);
    }
    let options = AuditOptions {
        cgroup: args.cgroup.clone(),
        peer: args.peer.clone(),
        persisted: mode != Mode::Live,
        mode,
        skip: args.skip.clone(),
        since: args.since,
        ..AuditOptions::default()
    };
    let (findings, boot_sysctls) =
        checks::run_limited_with_boot(root, &profile, &options, &args.only, AUDIT_LIMITS);
    warn_unmatched_skips(&args.skip, &findings);
    remember_gpus(root, mode, &findings);
    let persisted = if mode == Mode::Live {
        Vec::new()
    } else {
        // Read again only when no area of the last worker read them.
        let boot = boot_sysctls.unwrap_or_else(|| checks::read_boot_sysctls(root));
        persisted_values(&boot, &findings)
    };
    let report = Report {
        profile: &profile,
        chosen_by,
        host: HostFacts::read(root, mode),
        mode,
        persisted,
        findings,
        strict: args.strict,
        verbose: args.verbose,
    };
    let text = match (args.format, &args.output) {
        // A report written to a file is laid out for no terminal, even when run from one.
        (Format::Table, Some(_)) => crate::report::table::render_with(
            &report,
            &crate::report::terminal::TableStyle::for_file(),
        ),
        (format, _) => report.render(format),
    };
    super::emit(&text, args.output.as_deref())?;
    Ok(if report.failed() {
        ExitCode::Findings
    } else {
        ExitCode::Ok
    })
}

/// After a live audit as root whose `gpu.count` passed, remembers the GPUs on the bus
/// (`/var/lib/gputune/gpus.json`), so that a later audit that misses one names its address.
/// Only a healthy count is remembered: a node that lost a GPU must keep failing until the
/// GPU is back or someone deletes the file. Rewritten only when the GPUs changed.
fn remember_gpus(root: &Root, mode: Mode, findings: &[crate::finding::Finding]) {
    use crate::inventory::gpu;
    if !should_remember(root, mode, nix::unistd::geteuid().is_root(), findings) {
        return;
    }
    let Ok(gpus) = gpu::present(root) else {
        return;
    };
    if gpus.is_empty() {
        return;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Ok(Some(old)) = gpu::read_remembered(root)
        && old.gpus == gpu::Remembered::of(&gpus, now).gpus
    {
        return;
    }
    if let Err(e) = gpu::remember(root, &gpus, now) {
        eprintln!("gputune: cannot remember this node's GPUs: {e}");
    }
}

/// Whether this audit may remember the GPUs: the running node itself (never a `--root`),
/// judged live, by root, with a `gpu.count` that passed.
fn should_remember(
    root: &Root,
    mode: Mode,
    is_root: bool,
    findings: &[crate::finding::Finding],
) -> bool {
    root.is_live()
        && mode == Mode::Live
        && is_root
        && findings
            .iter()
            .any(|f| f.id == "gpu.count" && f.status == crate::finding::Status::Pass)
}

/// The sysctl.d file and line behind each sysctl finding, for the JSON report.
fn persisted_values(
    boot: &checks::BootSysctls,
    findings: &[crate::finding::Finding],
) -> Vec<PersistedValue> {
    let Ok(boot) = boot else {
        return Vec::new();
    };
    findings
        .iter()
        .filter_map(|f| {
            let key = crate::host::sysctl::sysctl_of(&f.id);
            boot.get(key).map(|a| PersistedValue {
                id: f.id.clone(),
                key: key.to_string(),
                value: a.value.clone(),
                file: a.file.clone(),
                line: a.line,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finding::{Area, Check};

    #[test]
    fn only_a_healthy_live_count_as_root_is_remembered() {
        let pass = vec![Check::new("gpu.count", Area::Gpu).pass("8")];
        let fail = vec![Check::new("gpu.count", Area::Gpu).fail("7", "reseat")];
        let skip = vec![Check::new("gpu.count", Area::Gpu).skip("no GPU")];
        let live = Root::live();
        assert!(should_remember(&live, Mode::Live, true, &pass));
        assert!(!should_remember(&live, Mode::Live, false, &pass));
        assert!(!should_remember(&live, Mode::Persisted, true, &pass));
        assert!(!should_remember(&live, Mode::Live, true, &fail));
        assert!(!should_remember(&live, Mode::Live, true, &skip));
        assert!(!should_remember(&live, Mode::Live, true, &[]));
        let snapshot = Root::new("/tmp/snapshot");
        assert!(!should_remember(&snapshot, Mode::Live, true, &pass));
    }

    #[test]
    fn peers() {
        for ok in [
            "10.0.0.2",
            "fe80::1",
            "node-07",
            "node07.cluster.local",
            "10.0.0.2:29500",
            "[fe80::1]:29500",
            "node-07:29501",
        ] {
            assert!(super::parse_peer(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "10.0.0.2:0",
            "node:port",
            "node 7",
            "-node",
            "a..b",
            "http://node",
        ] {
            assert!(super::parse_peer(bad).is_err(), "{bad}");
        }
    }
}
