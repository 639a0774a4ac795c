//! Integration tests of the node-facing commands (audit, apply, rollback, profiles, topo, pin,
//! health, fleet, monitoring, man pages and completions) through the built binary, one
//! binary for all of them (ripgrep's pattern: each area is a module).

mod common;

mod apply_cli;
mod apply_confirm;
mod audit_cli;
mod audit_hw;
mod audit_limits_cgroup_firewall;
mod audit_persisted;
mod audit_skip;
mod audit_table;
mod docs_examples;
mod explain;
mod file_modes;
mod fleet;
mod fuzz_parsers;
mod generated_docs;
mod gpu_health;
mod health_cli;
mod health_fleet;
mod hostile_root;
mod image_bake;
mod image_journey;
mod monitoring;
mod pin;
mod profiles_cli;
mod slurm;
mod status_cli;
mod topo;
