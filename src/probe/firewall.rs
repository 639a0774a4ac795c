//! Running the firewall tools: behind a trait so tests can hand in captured output, and so
//! the real commands run only on a live node.

use std::io;
use std::process::Command;

use crate::host::Root;

/// What a tool printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a firewall tool; `Ok(None)` when it is not installed.
pub trait FirewallProbe {
    fn run(&self, program: &str, args: &[&str]) -> io::Result<Option<Output>>;

    /// The kernel's legacy iptables tables (`/proc/net/ip_tables_names` of this network
    /// namespace): `Some("")` when there are none, `None` when that cannot be told, in which
    /// case `iptables-legacy-save` is simply run.
    fn legacy_tables(&self) -> Option<String> {
        None
    }
}

/// Runs the real tools from `PATH` (plus the sbin directories, which a non-root `PATH` may
/// lack) on the live node, whose root it holds.
pub(crate) struct LiveFirewall(pub Root);

/// How long one firewall tool may run: dumping a large ruleset takes well under a second, so
/// anything near this is hung.
pub(crate) const TOOL_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

impl FirewallProbe for LiveFirewall {
    fn run(&self, program: &str, args: &[&str]) -> io::Result<Option<Output>> {
        use crate::host::exec::{self, ExecError};
        let path = std::env::var("PATH").unwrap_or_default();
        let path = format!("{path}:/usr/sbin:/sbin:/usr/local/sbin");
        let mut command = Command::new(program);
        command.args(args).env("PATH", path);
        match exec::run(command, TOOL_LIMIT) {
            Ok(out) => Ok(Some(Output {
                success: out.success,
                stdout: out.stdout,
                stderr: out.stderr,
            })),
            Err(ExecError::NotInstalled { .. }) => Ok(None),
            // A hung nft (a stuck netlink socket, a lock) becomes an error finding naming
            // it, not a hung audit.
            Err(e @ ExecError::TimedOut { .. }) => {
                Err(io::Error::new(io::ErrorKind::TimedOut, e.to_string()))
            }
            Err(ExecError::Io { source, .. }) => Err(source),
        }
    }

    fn legacy_tables(&self) -> Option<String> {
        // Absent when the ip_tables module is not loaded: then no legacy table exists.
        match self.0.read_optional("/proc/net/ip_tables_names") {
            Ok(names) => Some(names.unwrap_or_default()),
            Err(_) => None,
        }
    }
}

/// No firewall tools to run: every question answers why (`--root` is not the running node).
pub(crate) struct NoFirewall(pub String);

impl FirewallProbe for NoFirewall {
    fn run(&self, _: &str, _: &[&str]) -> io::Result<Option<Output>> {
        Err(io::Error::other(self.0.clone()))
    }
}
