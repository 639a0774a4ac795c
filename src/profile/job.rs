//! The `[job]` section: facts about how training jobs run on the node that are not a
//! judged setting: the TCP ports they accept connections on and the systemd slice they run
//! in. The firewall and cgroup checks read it.

use serde::Deserialize;
use toml::Spanned;

/// Inclusive TCP port ranges, e.g. `29500-29550,50000-51000`.
pub(crate) type PortRanges = Vec<(u16, u16)>;

/// Where NCCL's socket transport listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclPorts {
    /// Ephemeral ports: whatever the kernel's `net.ipv4.ip_local_port_range` is.
    LocalPortRange,
    /// A range the site pins (and so also pins `ip_local_port_range` to).
    Fixed(PortRanges),
}

/// The resolved `[job]` section; each field is inherited unless the child sets it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    /// PyTorch rendezvous ports (MASTER_PORT, TCPStore); 29500 is PyTorch's default.
    pub rendezvous_ports: Option<PortRanges>,
    pub nccl_ports: Option<NcclPorts>,
    /// The systemd slice jobs are started in (`training.slice`), judged by the cgroup checks.
    pub slice: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    rendezvous_ports: Option<Spanned<String>>,
    nccl_ports: Option<Spanned<String>>,
    slice: Option<Spanned<String>>,
}

/// Parses `22`, `29500-29550`, `29500-29550,50000-51000` (also `:` as the range separator).
pub(crate) fn parse_ports(text: &str) -> Result<PortRanges, BadPorts> {
    let mut ranges = Vec::new();
    for part in text.split(',').map(str::trim) {
        let bad = || BadPorts(part.to_string());
        let (lo, hi) = part.split_once(['-', ':']).unwrap_or((part, part));
        let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
        let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
        if lo == 0 || lo > hi {
            return Err(bad());
        }
        ranges.push((lo, hi));
    }
    Ok(ranges)
}

/// A comma-separated part (trimmed) that is not a port, or a range from a lower port to a
/// higher one, within 1-65535.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a port or range of ports 1-65535 (e.g. 29500-29550)")]
pub(crate) struct BadPorts(String);

/// What is wrong in a `[job]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum BadJob {
    /// `rendezvous_ports` is not a list of ports and ranges.
    #[error(transparent)]
    Ports(BadPorts),
    /// `nccl_ports` is neither ports nor `ip_local_port_range`.
    #[error("{0}, or \"ip_local_port_range\"")]
    NcclPorts(BadPorts),
    /// Not `NAME.slice`, or a name systemd refuses: characters other than letters, digits
    /// and `-_.:`, a dash at either end of NAME, or two dashes in a row (dashes nest slices).
    #[error("`{0}` is not a systemd slice name such as training.slice")]
    Slice(String),
    /// `-.slice` is the root cgroup, which holds every unit and has no limit files of its
    /// own, so there is nothing to judge or apply there.
    #[error(
        "`-.slice` is systemd's root slice (the whole node), not one jobs are started in; \
         name that slice, such as training.slice"
    )]
    RootSlice,
}

/// Refuses a `[job] slice` that is not a slice systemd would start jobs in; everything that
/// reads the slice afterwards (its cgroup path, its parent slices) relies on this.
fn check_slice(name: &str) -> Result<(), BadJob> {
    if name == "-.slice" {
        return Err(BadJob::RootSlice);
    }
    let valid = name.strip_suffix(".slice").is_some_and(|stem| {
        !stem.is_empty()
            && stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
            && !stem.starts_with('-')
            && !stem.ends_with('-')
            && !stem.contains("--")
    });
    if valid {
        Ok(())
    } else {
        Err(BadJob::Slice(name.into()))
    }
}

/// Ranges as written in profiles and messages: `29500-29550, 50000`.
pub(crate) fn format_ports(ranges: &[(u16, u16)]) -> String {
    ranges
        .iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Job {
    /// Validates a raw section; errors are (byte offset, key, problem) for file:line:key.
    pub(super) fn from_raw(raw: RawJob) -> Result<Job, (usize, &'static str, BadJob)> {
        let mut job = Job::default();
        if let Some(text) = raw.rendezvous_ports {
            job.rendezvous_ports = Some(
                parse_ports(text.get_ref())
                    .map_err(|e| (text.span().start, "rendezvous_ports", BadJob::Ports(e)))?,
            );
        }
        if let Some(text) = raw.nccl_ports {
            job.nccl_ports = Some(if text.get_ref() == "ip_local_port_range" {
                NcclPorts::LocalPortRange
            } else {
                NcclPorts::Fixed(
                    parse_ports(text.get_ref())
                        .map_err(|e| (text.span().start, "nccl_ports", BadJob::NcclPorts(e)))?,
                )
            });
        }
        if let Some(text) = raw.slice {
            check_slice(text.get_ref()).map_err(|e| (text.span().start, "slice", e))?;
            job.slice = Some(text.into_inner());
        }
        Ok(job)
    }

    /// The child's fields win; unset ones keep the parent's.
    pub(super) fn absorb(&mut self, child: Job) {
        if child.rendezvous_ports.is_some() {
            self.rendezvous_ports = child.rendezvous_ports;
        }
        if child.nccl_ports.is_some() {
            self.nccl_ports = child.nccl_ports;
        }
        if child.slice.is_some() {
            self.slice = child.slice;
        }
    }

    /// The section as TOML, for `gputune profiles show` (empty when nothing is set).
    pub(crate) fn to_toml(&self) -> String {
        let mut out = String::new();
        let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
        if let Some(ports) = &self.rendezvous_ports {
            out.push_str(&format!(
                "rendezvous_ports = {}\n",
                quote(&format_ports(ports).replace(' ', ""))
            ));
        }
        match &self.nccl_ports {
            Some(NcclPorts::LocalPortRange) => {
                out.push_str("nccl_ports = \"ip_local_port_range\"\n")
            }
            Some(NcclPorts::Fixed(ports)) => out.push_str(&format!(
                "nccl_ports = {}\n",
                quote(&format_ports(ports).replace(' ', ""))
            )),
            None => {}
        }
        if let Some(slice) = &self.slice {
            out.push_str(&format!("slice = {}\n", quote(slice)));
        }
        if out.is_empty() {
            out
        } else {
            format!("\n[job]\n{out}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_cases;

    #[test]
    fn ports() {
        let cases = [
            ("29500-29550", Ok(vec![(29500, 29550)])),
            ("22", Ok(vec![(22, 22)])),
            (
                "29500-29550, 50000:51000",
                Ok(vec![(29500, 29550), (50000, 51000)]),
            ),
            ("0", Err(())),
            ("29550-29500", Err(())),
            ("70000", Err(())),
            ("", Err(())),
            ("a-b", Err(())),
            ("1,", Err(())),
        ];
        assert_cases(cases, |text| parse_ports(text).map_err(|_| ()));
        assert_eq!(format_ports(&[(29500, 29550), (22, 22)]), "29500-29550, 22");
    }

    #[test]
    fn slices() {
        let bad = |name: &str| Err(BadJob::Slice(name.into()));
        let cases = [
            ("training.slice", Ok(())),
            ("gpu-jobs.slice", Ok(())),
            ("a_b:c.d.slice", Ok(())),
            ("-.slice", Err(BadJob::RootSlice)),
            ("training", bad("training")),
            (".slice", bad(".slice")),
            ("-a.slice", bad("-a.slice")),
            ("a-.slice", bad("a-.slice")),
            ("a--b.slice", bad("a--b.slice")),
            ("a/b.slice", bad("a/b.slice")),
        ];
        assert_cases(cases, check_slice);
    }
}
