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
pub trait Runner {
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
pub struct LiveRunner<'a>(pub &'a Root);

impl Runner for LiveRunner<'_> {
    fn run(&self, program: &str, args: &[&str]) -> io::Result<Option<Output>> {
        let path = std::env::var("PATH").unwrap_or_default();
        let path = format!("{path}:/usr/sbin:/sbin:/usr/local/sbin");
        match Command::new(program).args(args).env("PATH", path).output() {
            Ok(out) => Ok(Some(Output {
                success: out.status.success(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
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
