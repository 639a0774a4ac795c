//! The command line, defined once: `--help`, the man pages in `man/` and the completions in
//! `completions/` are all generated from these types.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands::{
    apply, audit, bench, explain, fleet, health, pin, preflight, profiles, status, topo,
};

/// Tune and validate Linux GPU training nodes for distributed PyTorch (DDP/FSDP over NCCL).
#[derive(Debug, Parser)]
#[command(name = "gputune", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    /// Resolve every host path (/proc, /sys, /etc, /dev, /run, /var/lib) under DIR, e.g. a
    /// fixture tree or a mounted golden image.
    #[arg(long, global = true, value_name = "DIR", env = "GPUTUNE_ROOT")]
    pub root: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

/// Exit codes, shown under `--help` and in the man pages.
pub(crate) const EXIT_CODES: &str = "Exit codes:
  0  everything checked passed (warnings allowed unless --strict), or the action succeeded
  1  at least one check failed, or a benchmark fell below its threshold
  2  usage or configuration error (unknown flag, bad profile, bad size string)
  3  runtime error that stopped the job (host unreadable, library missing, permission denied)";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the node against a profile and report every finding with its fix.
    Audit(audit::AuditArgs),
    /// Apply a profile: preview, journal, apply, verify and persist.
    Apply(apply::ApplyArgs),
    /// Restore the values saved by the last apply.
    Rollback(apply::RollbackArgs),
    /// What gputune applied here, when and by whom, and whether it still holds (exit 1 when
    /// something drifted).
    Status(status::StatusArgs),
    /// List profiles, or show one fully resolved.
    Profiles(profiles::ProfilesArgs),
    /// Show GPUs, NICs, NUMA nodes, CPU lists, PCIe links and their affinity.
    Topo(topo::TopoArgs),
    /// Run a command bound to the CPUs and memory local to its GPU.
    Pin(pin::PinArgs),
    /// Benchmark collectives across the node's GPUs and between nodes.
    Bench(bench::BenchArgs),
    /// Audit as a Slurm health check or node-problem-detector plugin; drain/resume with --slurm.
    Health(health::HealthArgs),
    /// Compare many nodes' audit reports: value groups per check and fact, nodes as hostlists.
    Fleet(fleet::FleetArgs),
    /// Explain an NCCL/PyTorch log: what NCCL did, each problem's cause, fix and checks.
    Explain(explain::ExplainArgs),
    /// Run by the job's launcher on every node: will this job start? Names, MASTER_ADDR,
    /// NCCL's interface, versions that must agree, every pair's ports.
    Preflight(preflight::PreflightArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
