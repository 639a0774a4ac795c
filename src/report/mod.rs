//! Rendering an audit: a table for people, JSON, JUnit XML and Prometheus text for machines.

pub(crate) mod json;
pub(crate) mod junit;
pub(crate) mod prometheus;
pub(crate) mod table;
pub(crate) mod terminal;

use serde::Serialize;

use crate::finding::{Finding, Status};
use crate::host::Root;
use crate::image::Mode;
use crate::profile::Profile;

/// The output formats of `gputune audit --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Junit,
    Prometheus,
}

/// Facts identifying the node an audit ran on.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HostFacts {
    pub hostname: String,
    pub kernel: String,
    pub root: String,
    /// When the audit ran, in seconds since the epoch (an image's report is kept as evidence).
    pub audited_at: f64,
    /// What must be alike across a job's nodes (NICs, HCAs, driver, nccl.conf), for `fleet`.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub facts: std::collections::BTreeMap<String, String>,
}

impl HostFacts {
    /// The running kernel's names live; an image's own `/etc/hostname` and the kernel it ships
    /// (`/usr/lib/modules`, else `/lib/modules`) otherwise.
    pub(crate) fn read(root: &Root, mode: Mode) -> Self {
        let read = |path: &str| {
            root.read_optional(path)
                .ok()
                .flatten()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into())
        };
        let (hostname, kernel) = if mode == Mode::Image {
            let modules = ["/usr/lib/modules", "/lib/modules"]
                .iter()
                .find_map(|d| root.list_dir(d).ok().flatten().filter(|l| !l.is_empty()))
                .map_or_else(|| "none installed".to_string(), |l| l.join(", "));
            (read("/etc/hostname"), modules)
        } else {
            let mut hostname = read("/proc/sys/kernel/hostname");
            if hostname == "unknown" {
                hostname = read("/etc/hostname");
            }
            (hostname, read("/proc/sys/kernel/osrelease"))
        };
        HostFacts {
            hostname,
            kernel,
            root: root.dir().display().to_string(),
            audited_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            facts: crate::fleet::facts::read(root),
        }
    }
}

/// Where a persisted value a finding judged comes from, as structured fields for machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PersistedValue {
    /// The finding's id (`net.ipv4.tcp_rmem.max`).
    pub id: String,
    /// The setting the file sets (`net.ipv4.tcp_rmem`).
    pub key: String,
    pub value: String,
    /// Host path of the file that wins at boot, and its 1-based line.
    pub file: String,
    pub line: usize,
}

/// Counts of findings by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Summary {
    pub passed: usize,
    pub warned: usize,
    pub failed: usize,
    pub skipped: usize,
    pub errors: usize,
}

impl Summary {
    pub(crate) fn of<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Self {
        let mut s = Summary::default();
        for f in findings {
            match f.status {
                Status::Pass => s.passed += 1,
                Status::Warn => s.warned += 1,
                Status::Fail => s.failed += 1,
                Status::Skip => s.skipped += 1,
                Status::Error => s.errors += 1,
            }
        }
        s
    }

    /// `N passed, N warned, N failed, N skipped` (and `, N errors` when there are any).
    pub(crate) fn line(&self) -> String {
        let mut line = format!(
            "{} passed, {} warned, {} failed, {} skipped",
            self.passed, self.warned, self.failed, self.skipped
        );
        if self.errors > 0 {
            line.push_str(&format!(", {} errors", self.errors));
        }
        line
    }
}

/// Everything a renderer needs.
pub(crate) struct Report<'a> {
    pub profile: &'a Profile,
    /// Why the profile was chosen, when the user did not name one.
    pub chosen_by: Option<String>,
    pub host: HostFacts,
    /// What was judged: live, persisted or image.
    pub mode: Mode,
    /// Outside live mode: the file and line behind each persisted value judged.
    pub persisted: Vec<PersistedValue>,
    pub findings: Vec<Finding>,
    /// `--strict`: warnings count as failures.
    pub strict: bool,
    /// `--verbose`: the table shows passing checks too.
    pub verbose: bool,
}

impl Report<'_> {
    pub(crate) fn summary(&self) -> Summary {
        Summary::of(&self.findings)
    }

    /// True when the audit should exit 1: a failure, an error, or a warning under `--strict`.
    pub(crate) fn failed(&self) -> bool {
        let s = self.summary();
        s.failed > 0 || s.errors > 0 || (self.strict && s.warned > 0)
    }

    pub(crate) fn render(&self, format: Format) -> String {
        match format {
            Format::Table => table::render(self),
            Format::Json => json::render(self),
            Format::Junit => junit::render(self),
            Format::Prometheus => prometheus::render(self),
        }
    }

    /// Findings grouped by area, in area order, keeping check order inside each area.
    pub(crate) fn by_area(&self) -> Vec<(crate::finding::Area, Vec<&Finding>)> {
        let mut groups: Vec<(crate::finding::Area, Vec<&Finding>)> = Vec::new();
        for &area in crate::finding::Area::ALL {
            let group: Vec<&Finding> = self.findings.iter().filter(|f| f.area == area).collect();
            if !group.is_empty() {
                groups.push((area, group));
            }
        }
        groups
    }
}
