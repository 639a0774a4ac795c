//! What NCCL did, read from its INFO lines: versions per host, hosts and GPUs, the network
//! chosen, interfaces and HCAs, GPUDirect RDMA, transports, channels and algorithms. Every
//! collection is bounded, so a log of millions of ranks' lines costs the same memory as one
//! of ten.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::Evidence;
use super::collectives::Collectives;
use super::gpu_paths::GpuPaths;
use super::hangs::Hangs;
use super::progress::Progress;

/// NCCL loaded an external net plugin: its path (2.19+), its name, aws-ofi-nccl's own line.
const NET_PLUGIN_LOADED: [&str; 3] = ["Plugin Path :", "Loaded net plugin", "NET/OFI Using"];

/// On a `NET/Plugin` line, NCCL found no external net plugin (2.12-2.18: `No plugin found
/// (libnccl-net.so), using internal implementation`; 2.19+: `Could not find: libnccl-net.so`,
/// 2.23+ with NCCL_NET_PLUGIN: `Could not find: ofi libnccl-net-ofi.so`).
const NET_PLUGIN_MISSING: [&str; 3] = [
    "Could not find:",
    "No plugin found",
    "Plugin load (libnccl-net.so) returned",
];

/// The most distinct values kept per fact (hosts, interfaces, versions...).
const MAX_VALUES: usize = 256;

/// The most evidence lines kept per fact.
const MAX_EVIDENCE: usize = 5;

/// A set that stops growing at [`MAX_VALUES`] and says so.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Bounded {
    pub values: BTreeSet<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl Bounded {
    pub(super) fn insert(&mut self, value: &str) {
        if self.values.contains(value) {
            return;
        }
        if self.values.len() >= MAX_VALUES {
            self.truncated = true;
        } else {
            self.values.insert(value.to_string());
        }
    }
}

/// One interface NCCL named, with the address it showed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Interface {
    pub name: String,
    pub address: String,
}

/// One silent performance killer and the line that shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slowdown {
    pub what: String,
    pub line: u64,
}

/// Environment settings that slow NCCL down, with what each does.
const SLOW_SETTINGS: &[(&str, &str, &str)] = &[
    (
        "NCCL_P2P_DISABLE",
        "1",
        "GPU peer-to-peer is off: GPUs on a node exchange data through host memory",
    ),
    (
        "NCCL_IB_DISABLE",
        "1",
        "InfiniBand/RoCE is off: inter-node traffic uses TCP sockets",
    ),
    (
        "NCCL_SHM_DISABLE",
        "1",
        "the shared-memory transport is off",
    ),
    (
        "NCCL_P2P_LEVEL",
        "LOC",
        "GPU peer-to-peer is limited to nothing (LOC)",
    ),
    (
        "NCCL_NET_GDR_LEVEL",
        "",
        "GPUDirect RDMA is limited by NCCL_NET_GDR_LEVEL",
    ),
];

const MAX_SLOWDOWNS: usize = 16;

/// Everything the INFO lines said.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Facts {
    /// NCCL version -> hosts that reported it (`?` when the line named no host).
    pub nccl_versions: BTreeMap<String, Bounded>,
    /// CUDA runtime versions NCCL was built for (`+cuda12.4`).
    pub cuda_runtimes: Bounded,
    /// CUDA driver versions (`cudaDriverVersion 12080` -> `12.8`).
    pub cuda_drivers: Bounded,
    pub hosts: Bounded,
    /// Lines NCCL itself printed (`NCCL INFO` / `NCCL WARN`): none means NCCL_DEBUG was unset.
    pub nccl_lines: u64,
    /// GPU names nccl-tests and NCCL printed.
    pub gpus: Bounded,
    /// The largest `nranks` any communicator reported.
    pub ranks: Option<u64>,
    /// `Using network IB|Socket|...`.
    pub networks: Bounded,
    pub interfaces: BTreeSet<Interface>,
    /// HCAs (`mlx5_0:1/IB`).
    pub hcas: Bounded,
    /// Channels through a NIC with GPUDirect RDMA, and without.
    pub net_channels_gdr: u64,
    pub net_channels_no_gdr: u64,
    /// `GPU Direct RDMA Disabled|Enabled for ...` lines seen.
    pub gdr_disabled_lines: u64,
    pub gdr_enabled_lines: u64,
    #[serde(skip)]
    pub(super) first_gdr_disabled: u64,
    /// Connections per transport (`P2P`, `SHM`, `NET`, `NVLS`, `CollNet`).
    pub transports: BTreeMap<String, u64>,
    /// How the GPUs of a node were joined (NVLink, PCIe, host memory).
    pub gpu_paths: GpuPaths,
    /// How far each process got through communicator set-up.
    pub init: Progress,
    /// `host:pid` of the line being read (a reused buffer).
    #[serde(skip)]
    process_key: String,
    /// The largest channel count seen (`Channel 00/04` or `N coll channels`).
    pub channels: Option<u64>,
    pub rings: bool,
    pub trees: bool,
    /// `NCCL_X set by environment to Y` (first value kept).
    pub environment: BTreeMap<String, String>,
    /// Settings and choices that slow NCCL down without failing it (issue 23's "silent
    /// performance killers"): NCCL_P2P_DISABLE, NCCL_IB_DISABLE, NCCL_NET_GDR_LEVEL, SHM off,
    /// TCP sockets where RDMA devices exist, a virtual interface, GPUDirect RDMA off.
    pub slowdowns: Vec<Slowdown>,
    /// Evidence for the named facts rules can use.
    #[serde(skip)]
    pub evidence: BTreeMap<&'static str, Vec<Evidence>>,
    /// One line per version, for `nccl_versions_differ`.
    #[serde(skip)]
    version_lines: BTreeMap<String, Evidence>,
    #[serde(skip)]
    driver_lines: Vec<Evidence>,
    #[serde(skip)]
    pub(super) socket_lines: Vec<Evidence>,
    #[serde(skip)]
    hca_lines: Vec<Evidence>,
    #[serde(skip)]
    gdr_lines: Vec<Evidence>,
    #[serde(skip)]
    pub(super) no_gdr_lines: Vec<Evidence>,
    /// Socket interfaces chosen (bootstrap, NET/Socket, NET/IB's OOB) that are IPoIB or
    /// link-local, and whether NCCL's socket or bootstrap code then failed.
    #[serde(skip)]
    ipoib_lines: Vec<Evidence>,
    #[serde(skip)]
    socket_failed: Option<Evidence>,
    /// nccl-tests' `# Using devices` header, and whether the run ended after it (its `# Avg
    /// bus bandwidth` summary or a `Test ... failure`): a header alone is a run that hung.
    #[serde(skip)]
    tests_header: Option<Evidence>,
    #[serde(skip)]
    tests_ended: bool,
    /// Hosts whose NCCL loaded an external net plugin, and hosts whose NCCL found none, each
    /// with its first line saying so.
    #[serde(skip)]
    plugin_hosts: BTreeMap<String, Evidence>,
    #[serde(skip)]
    no_plugin_hosts: BTreeMap<String, Evidence>,
    /// Hosts nccl-tests' device lines name (`# Rank 0 ... on HOST device 0 ...`).
    #[serde(skip)]
    tests_hosts: Bounded,
    /// The ranks those lines number: one rank has no GPU peer to hang with.
    #[serde(skip)]
    tests_ranks: Bounded,
    /// Ranks that did not make the same collective call (see [`Collectives`]).
    #[serde(skip)]
    collectives: Collectives,
    /// NCCL could not connect to a peer (refused, timed out, unreachable): then a loopback
    /// or bridge interface matters even in a log that names one host only.
    #[serde(skip)]
    connect_failed: bool,
    /// What a log that stops without an error line shows (see [`Hangs`]).
    #[serde(skip)]
    hangs: Hangs,
}

fn keep(list: &mut Vec<Evidence>, line: u64, text: &str) {
    if list.len() < MAX_EVIDENCE {
        list.push(Evidence {
            line,
            text: text.to_string(),
        });
    }
}

/// The host of an NCCL line (`host:pid:tid [dev] NCCL INFO ...`), after any launcher prefix
/// (`[1,3]<stdout>:`, `node1: `).
fn host_of(before_nccl: &str) -> Option<&str> {
    process_of(before_nccl).map(|(host, _)| host)
}

/// The host and pid of NCCL's `host:pid:tid [rank]` prefix.
fn process_of(before_nccl: &str) -> Option<(&str, &str)> {
    let token = before_nccl
        .split_whitespace()
        .rev()
        .find(|t| t.matches(':').count() >= 2)?;
    let mut parts = token.rsplitn(3, ':');
    let (tid, pid, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if tid.is_empty()
        || pid.is_empty()
        || !tid.bytes().all(|b| b.is_ascii_digit())
        || !pid.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let host = rest.rsplit([':', '>', ']']).next()?;
    (!host.is_empty()).then_some((host, pid))
}

/// `[0]eth0:10.0.0.1<0>` or `eth0:10.0.0.1<0>` -> (`eth0`, `10.0.0.1`).
fn interface_of(token: &str) -> Option<Interface> {
    let token = match token.find(']') {
        Some(at) if token.starts_with('[') => &token[at + 1..],
        _ => token,
    };
    let (name, rest) = token.split_once(':')?;
    let address = rest.split('<').next().unwrap_or("");
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c))
    {
        return None;
    }
    Some(Interface {
        name: name.to_string(),
        address: address.to_string(),
    })
}

/// IPoIB (`ib0`, `ibp75s0`) or a link-local address: NCCL prefers `ib*` interfaces for its
/// sockets by default, and neither is reliably routable between nodes.
fn is_ipoib_or_link_local(iface: &Interface) -> bool {
    iface.name.starts_with("ib")
        || iface.address.starts_with("169.254.")
        || iface.address.starts_with("fe80:")
}

/// `NCCL INFO misc/socket.cc:567 -> 2` or `bootstrap.cc:270 -> 2`: an error passed up from
/// NCCL's socket or bootstrap code; not 6 (`ncclRemoteError`), a peer that went away.
fn is_socket_trace(text: &str) -> bool {
    let Some(at) = text.rfind(" -> ") else {
        return false;
    };
    let code: String = text[at + 4..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let failed = !code.is_empty() && code != "0" && code != "6";
    failed && (text.contains("socket.cc:") || text.contains("bootstrap.cc:"))
}

/// An interface a bootstrap or socket transport should never use between nodes.
pub fn is_virtual(name: &str) -> bool {
    name == "lo"
        || ["docker", "virbr", "veth", "br-", "cni", "flannel", "cali"]
            .iter()
            .any(|p| name.starts_with(p))
}

fn number_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(key)? + key.len();
    let rest = text[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|s| !s.is_empty())
}

impl Facts {
    /// Takes in any line of the log, NCCL's or not: the few facts read from other programs'
    /// output (see [`Hangs`] and [`Collectives`]).
    pub fn observe_any(&mut self, line: u64, text: &str) {
        self.hangs.observe(line, text);
        self.collectives.observe(line, text);
    }

    /// Takes in one (already cleaned) line.
    pub fn observe(&mut self, line: u64, text: &str) {
        let nccl_at = text.find("NCCL INFO").or_else(|| text.find("NCCL WARN"));
        if nccl_at.is_some() {
            self.nccl_lines += 1;
        }
        let host = nccl_at.and_then(|at| host_of(&text[..at]));
        if let Some(host) = host {
            self.hosts.insert(host);
        }
        if nccl_at.is_some()
            && !self.connect_failed
            && [
                "Connection refused",
                "Connection timed out",
                "No route to host",
                "Network is unreachable",
                "No interface found in the same subnet",
            ]
            .iter()
            .any(|e| text.contains(e))
        {
            self.connect_failed = true;
        }
        // `misc/socket.cc:567 -> 2`, `bootstrap.cc:270 -> 2`: NCCL's socket code failed.
        if self.socket_failed.is_none() && nccl_at.is_some() && is_socket_trace(text) {
            self.socket_failed = Some(Evidence {
                line,
                text: text.to_string(),
            });
        }
        let body = match nccl_at {
            Some(at) => &text[at + "NCCL INFO".len()..],
            None => text,
        };
        if let Some(at) = text.find("NCCL version ") {
            let rest = &text[at + "NCCL version ".len()..];
            let token: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != ',')
                .collect();
            let (version, cuda) = match token.split_once("+cuda") {
                Some((v, c)) => (v.to_string(), Some(c.to_string())),
                None => (token.clone(), None),
            };
            if !version.is_empty() && version.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                if let Some(cuda) = cuda {
                    self.cuda_runtimes.insert(&cuda);
                    if self.driver_lines.len() < MAX_EVIDENCE {
                        keep(&mut self.driver_lines, line, text);
                    }
                }
                if self.nccl_versions.len() < MAX_VALUES
                    || self.nccl_versions.contains_key(&version)
                {
                    self.nccl_versions
                        .entry(version.clone())
                        .or_default()
                        .insert(host.unwrap_or("?"));
                    self.version_lines.entry(version).or_insert(Evidence {
                        line,
                        text: text.to_string(),
                    });
                }
            }
        }
        if let Some(n) = number_after(body, "cudaDriverVersion").and_then(|v| v.parse::<u64>().ok())
        {
            self.cuda_drivers
                .insert(&format!("{}.{}", n / 1000, (n % 1000) / 10));
            keep(&mut self.driver_lines, line, text);
        }
        if let Some(n) = number_after(body, "nranks").and_then(|v| v.parse::<u64>().ok()) {
            self.ranks = Some(self.ranks.map_or(n, |r| r.max(n)));
        }
        if let Some(at) = body.find("Using network ") {
            let name = body[at + "Using network ".len()..].trim();
            self.networks.insert(name);
            if name == "Socket" {
                keep(&mut self.socket_lines, line, text);
            }
        }
        let using = [
            "Bootstrap : Using ",
            "Bootstrap: Using ",
            "NET/Socket : Using ",
            "NET : Using interface ",
        ];
        if let Some(prefix) = using.iter().find(|p| body.contains(**p)) {
            let at = body.find(prefix).unwrap_or(0) + prefix.len();
            for token in body[at..].split_whitespace() {
                if let Some(iface) = interface_of(token) {
                    if is_virtual(&iface.name) {
                        let list = self.evidence.entry("virtual_interface_chosen").or_default();
                        keep(list, line, text);
                    }
                    // Docker's default bridge seen from inside a container (on the host the
                    // bridge itself, docker0, is a virtual interface chosen).
                    if iface.address.starts_with("172.17.") && !is_virtual(&iface.name) {
                        let list = self.evidence.entry("docker_bridge_address").or_default();
                        keep(list, line, text);
                    }
                    if is_ipoib_or_link_local(&iface) {
                        keep(&mut self.ipoib_lines, line, text);
                    }
                    if self.interfaces.len() < MAX_VALUES {
                        self.interfaces.insert(iface);
                    }
                }
            }
        }
        if let Some(at) = body.find("; OOB ") {
            let oob = body[at + "; OOB ".len()..].split_whitespace().next();
            if let Some(iface) = oob.and_then(interface_of)
                && is_ipoib_or_link_local(&iface)
            {
                keep(&mut self.ipoib_lines, line, text);
            }
        }
        if let Some(at) = body.find("NET/IB : Using ") {
            let list = body[at + "NET/IB : Using ".len()..]
                .split(';')
                .next()
                .unwrap_or("");
            for token in list.split_whitespace() {
                if token.starts_with('[') && token.contains(']') && token.len() > 3 {
                    let name = token.split_once(']').map_or(token, |(_, n)| n);
                    if !name.is_empty() {
                        self.hcas.insert(name);
                        keep(&mut self.hca_lines, line, text);
                    }
                }
            }
        }
        if body.contains("Unable to open device") || body.contains("ibv_open_device failed") {
            keep(&mut self.hca_lines, line, text);
        }
        if body.contains("GPU Direct RDMA Disabled") {
            if self.gdr_disabled_lines == 0 {
                self.first_gdr_disabled = line;
            }
            self.gdr_disabled_lines += 1;
        } else if body.contains("GPU Direct RDMA Enabled") {
            self.gdr_enabled_lines += 1;
        }
        if let Some(at) = text.find(" via ") {
            let via = text[at + 5..].split_whitespace().next().unwrap_or("");
            let transport = if via.starts_with("NET/") {
                if via.contains("GDRDMA") {
                    self.net_channels_gdr += 1;
                    keep(&mut self.gdr_lines, line, text);
                } else if via.starts_with("NET/IB") {
                    self.net_channels_no_gdr += 1;
                    keep(&mut self.no_gdr_lines, line, text);
                }
                "NET"
            } else if via.starts_with("P2P") {
                "P2P"
            } else if via.starts_with("SHM") || text[at..].starts_with(" via direct shared memory")
            {
                "SHM"
            } else if via.starts_with("CollNet") {
                "CollNet"
            } else {
                ""
            };
            if !transport.is_empty() {
                *self.transports.entry(transport.to_string()).or_default() += 1;
            }
        }
        self.gpu_paths
            .observe(line, text, nccl_at.is_some().then_some(body));
        if let Some(at) = nccl_at
            && let Some((host, pid)) = process_of(&text[..at])
        {
            // One buffer for the key, not an allocation per line of a GB log.
            self.process_key.clear();
            self.process_key.push_str(host);
            self.process_key.push(':');
            self.process_key.push_str(pid);
            self.init.observe(line, &self.process_key, body);
        }
        if body.contains("NVLS comm") {
            *self.transports.entry("NVLS".into()).or_default() += 1;
        }
        if let Some(at) = body.find("Channel ") {
            let rest = &body[at + "Channel ".len()..];
            if let Some(n) = rest
                .split_whitespace()
                .next()
                .and_then(|t| t.split_once('/'))
                .and_then(|(_, total)| total.parse::<u64>().ok())
            {
                self.channels = Some(self.channels.map_or(n, |c| c.max(n)));
            }
        }
        if let Some(at) = body.find(" coll channels") {
            let n = body[..at]
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(n) = n {
                self.channels = Some(self.channels.map_or(n, |c| c.max(n)));
            }
        }
        if body.contains("Trees [") || body.contains("Connected all trees") {
            self.trees = true;
        }
        if body.contains("Ring 00 :")
            || body.contains("Connected all rings")
            || body.contains("Channel 00/")
        {
            self.rings = true;
        }
        if let Some(at) = body.find(" set by environment to ") {
            let key = body[..at].split_whitespace().last().unwrap_or("");
            let value = body[at + " set by environment to ".len()..]
                .trim()
                .trim_end_matches('.');
            if let Some((_, _, what)) = SLOW_SETTINGS
                .iter()
                .find(|(k, v, _)| *k == key && (v.is_empty() || *v == value))
                && !self.environment.contains_key(key)
            {
                self.slow(format!("{key}={value}: {what}"), line);
            }
            if key.starts_with("NCCL_") && self.environment.len() < 64 {
                self.environment
                    .entry(key.to_string())
                    .or_insert_with(|| value.to_string());
            }
        }
        if let Some(gpu) = gpu_of(text) {
            self.gpus.insert(gpu);
        }
        if let Some(host) = tests_host_of(text) {
            self.tests_hosts.insert(host);
            if let Some(rank) = text
                .split_once(" Rank ")
                .and_then(|(_, rest)| rest.split_whitespace().next())
            {
                self.tests_ranks.insert(rank);
            }
        }
        if let Some(at) = nccl_at {
            self.collectives.observe_nccl(line, text, &text[..at], body);
        }
        if let Some(host) = host {
            self.net_plugin(host, line, text);
        }
        if self.tests_header.is_none() && text.starts_with('#') && text.contains("Using devices") {
            self.tests_header = Some(Evidence {
                line,
                text: text.to_string(),
            });
        }
        // A failure ends the run: nccl-tests 2 print `HOST: Test NCCL failure FILE:LINE`,
        // the first ones (built against NCCL 1.x) `NCCL failure FILE:LINE` and `Cuda failure`.
        if text.contains("Avg bus bandwidth")
            || (text.contains("Test ") && text.contains(" failure"))
            || ["NCCL failure ", "CUDA failure ", "Cuda failure "]
                .iter()
                .any(|failure| text.contains(failure))
        {
            self.tests_ended = true;
        }
    }

    /// NCCL's word on the external net plugin (`libnccl-net.so`): loaded, or none found. The
    /// tuner's and profiler's plugins (`TUNER/Plugin`, `PROFILER/Plugin`) are other plugins.
    fn net_plugin(&mut self, host: &str, line: u64, text: &str) {
        if text.contains("TUNER/") || text.contains("PROFILER/") {
            return;
        }
        let hosts = if NET_PLUGIN_LOADED.iter().any(|p| text.contains(p)) {
            &mut self.plugin_hosts
        } else if text.contains("NET/Plugin") && NET_PLUGIN_MISSING.iter().any(|p| text.contains(p))
        {
            &mut self.no_plugin_hosts
        } else {
            return;
        };
        if hosts.len() < MAX_VALUES && !hosts.contains_key(host) {
            hosts.insert(
                host.to_string(),
                Evidence {
                    line,
                    text: text.to_string(),
                },
            );
        }
    }

    fn slow(&mut self, what: String, line: u64) {
        if self.slowdowns.len() < MAX_SLOWDOWNS && !self.slowdowns.iter().any(|s| s.what == what) {
            self.slowdowns.push(Slowdown { what, line });
        }
    }

    /// The named facts that hold for the whole log, each with its evidence lines.
    pub fn conclude(&mut self) {
        self.init.conclude();
        if self.nccl_versions.len() > 1 {
            let lines = self
                .version_lines
                .values()
                .take(MAX_EVIDENCE)
                .cloned()
                .collect();
            self.evidence.insert("nccl_versions_differ", lines);
        }
        // CUDA's minor version compatibility: a 12.8 driver runs a 12.9 runtime; only an
        // older major version cannot.
        let newest_runtime = self
            .cuda_runtimes
            .values
            .iter()
            .filter_map(|v| version_key(v))
            .map(|v| v.0)
            .max();
        let oldest_driver = self
            .cuda_drivers
            .values
            .iter()
            .filter_map(|v| version_key(v))
            .map(|v| v.0)
            .min();
        if let (Some(runtime), Some(driver)) = (newest_runtime, oldest_driver)
            && driver < runtime
        {
            self.evidence
                .insert("cuda_driver_older_than_runtime", self.driver_lines.clone());
        }
        if self.networks.values.contains("Socket") && !self.hca_lines.is_empty() {
            let mut lines = self.hca_lines.clone();
            lines.extend(self.socket_lines.iter().take(2).cloned());
            self.evidence.insert("socket_despite_hca", lines);
        }
        // A job on one host never leaves it: loopback or a bridge is then the right choice,
        // unless connections failed (the log may show only one of the job's hosts).
        let one_host = self.hosts.values.len() == 1 && !self.hosts.truncated;
        if one_host && !self.transports.contains_key("NET") && !self.connect_failed {
            self.evidence.remove("virtual_interface_chosen");
            self.evidence.remove("docker_bridge_address");
        }
        if !self.ipoib_lines.is_empty() && (self.connect_failed || self.socket_failed.is_some()) {
            let mut lines: Vec<Evidence> = self.ipoib_lines.iter().take(2).cloned().collect();
            lines.extend(self.socket_failed.clone());
            self.evidence.insert("socket_on_ipoib_failed", lines);
        }
        // Some hosts load the net plugin and others find none: only a host that did one and
        // never the other counts (NCCL may look for several plugin names before one loads).
        // Where a communicator came up, the hosts connected: logs of two clusters side by side.
        let with = self
            .plugin_hosts
            .iter()
            .find(|(host, _)| !self.no_plugin_hosts.contains_key(*host));
        let without = self
            .no_plugin_hosts
            .iter()
            .find(|(host, _)| !self.plugin_hosts.contains_key(*host));
        if self.init.complete == 0
            && let (Some((_, with)), Some((_, without))) = (with, without)
        {
            let mut lines = vec![with.clone(), without.clone()];
            lines.sort_by_key(|e| e.line);
            self.evidence.insert("net_plugin_on_some_hosts", lines);
        }
        if let Some(header) = self.tests_header.as_ref().filter(|_| !self.tests_ended) {
            self.evidence
                .insert("nccl_tests_hung", vec![header.clone()]);
            // On one host its GPUs talk over PCIe or NVLink only, never a network; a run of
            // one GPU talks to no other.
            if self.tests_hosts.values.len() == 1
                && !self.tests_hosts.truncated
                && self.tests_ranks.values.len() > 1
            {
                self.evidence
                    .insert("nccl_tests_hung_one_host", vec![header.clone()]);
            }
        }
        self.collectives.conclude(&mut self.evidence);
        if self.net_channels_gdr > 0 && self.net_channels_no_gdr > 0 {
            let mut lines = self.gdr_lines.iter().take(2).cloned().collect::<Vec<_>>();
            lines.extend(self.no_gdr_lines.iter().take(3).cloned());
            self.evidence.insert("gdr_partial", lines);
        }
        self.hangs.conclude(&mut self.evidence);
        for lines in self.evidence.values_mut() {
            lines.sort_by_key(|e| e.line);
        }
        let found: Vec<(String, u64)> = [
            (
                "socket_despite_hca",
                "NCCL uses TCP sockets although the log lists RDMA devices",
            ),
            (
                "virtual_interface_chosen",
                "NCCL uses a loopback, bridge or veth interface between nodes",
            ),
            (
                "gdr_partial",
                "GPUDirect RDMA is used on some NIC connections only",
            ),
        ]
        .iter()
        .filter_map(|(fact, what)| {
            self.evidence
                .get(fact)
                .and_then(|l| l.first())
                .map(|e| (what.to_string(), e.line))
        })
        .collect();
        for (what, line) in found {
            self.slow(what, line);
        }
        if self.gpu_paths.nvlink.is_some()
            && let Some(pcie) = self.gpu_paths.not_nvlink()
        {
            let what = self
                .gpu_paths
                .slowdown_text(pcie, "the topology NCCL detected");
            let line = pcie.line;
            self.slow(what, line);
        }
        if self.gdr_disabled_lines > 0 {
            self.slow(
                format!(
                    "GPUDirect RDMA is disabled ({} 'GPU Direct RDMA Disabled' lines)",
                    self.gdr_disabled_lines
                ),
                self.first_gdr_disabled,
            );
        }
        self.slowdowns.sort_by_key(|s| s.line);
    }

    /// True when NCCL said anything at all about itself.
    pub fn any(&self) -> bool {
        !self.nccl_versions.is_empty()
            || !self.networks.values.is_empty()
            || !self.interfaces.is_empty()
            || !self.transports.is_empty()
            || !self.hosts.values.is_empty()
    }
}

/// `12.4` -> (12, 4).
fn version_key(v: &str) -> Option<(u64, u64)> {
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().unwrap_or("0").parse().ok()?;
    Some((major, minor))
}

/// The GPU name of an nccl-tests device line (`#  Rank  0 ... device  0 [0x07] NVIDIA A100`).
fn gpu_of(text: &str) -> Option<&str> {
    if !text.trim_start().starts_with('#') || !text.contains(" Rank ") {
        return None;
    }
    let at = text.find(" device ")?;
    let rest = &text[at..];
    let close = rest.find(']')?;
    let name = rest[close + 1..].trim();
    (!name.is_empty() && name.len() < 100).then_some(name)
}

/// The host of an nccl-tests device line (`#  Rank  0 Group  0 Pid 9822 on host device 0 ...`).
fn tests_host_of(text: &str) -> Option<&str> {
    if !text.trim_start().starts_with('#') || !text.contains(" Rank ") {
        return None;
    }
    let at = text.find(" on ")?;
    let rest = &text[at + " on ".len()..];
    let host = &rest[..rest.find(" device ")?];
    let host = host.trim();
    (!host.is_empty() && !host.contains(char::is_whitespace)).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(lines: &[&str]) -> Facts {
        let mut f = Facts::default();
        for (n, l) in lines.iter().enumerate() {
            f.observe(n as u64 + 1, l);
        }
        f.conclude();
        f
    }

    #[test]
    fn hosts_after_launcher_prefixes() {
        for (line, host) in [
            (
                "gpu2-ru7:2144:2556 [2] NCCL INFO Ring 00 : 2[3d000] -> 3[3e000]",
                "gpu2-ru7",
            ),
            (
                "[1,3]<stdout>:smc-gpu-03:29881:30401 [0] NCCL INFO init.cc:903 -> 5",
                "smc-gpu-03",
            ),
            (
                "node-1: node-1:2914:4490 [0] transport/nvls.cc:245 NCCL WARN x",
                "node-1",
            ),
        ] {
            let f = facts(&[line]);
            assert_eq!(
                f.hosts.values.iter().next().map(String::as_str),
                Some(host),
                "{line}"
            );
        }
        assert!(facts(&["no host here NCCL INFO x"]).hosts.values.is_empty());
    }

    #[test]
    fn versions_networks_interfaces_and_channels() {
        let f = facts(&[
            "a:1:1 [0] NCCL INFO Bootstrap : Using [0]ens5:172.31.0.137<0> [1]veth75fa783:fe80::14ad%veth75fa783<0>",
            "a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_2:1/RoCE ; OOB ens5:172.31.0.137<0>",
            "a:1:1 [0] NCCL INFO Using network Socket",
            "NCCL version 2.7.8+cuda11.1",
            "b:2:2 [0] NCCL INFO NCCL version 2.8.4+cuda11.1",
            "b:2:2 [0] NCCL INFO cudaDriverVersion 10020",
            "a:1:1 [0] NCCL INFO Channel 00/04 :    0   1",
            "a:1:1 [0] NCCL INFO Channel 00 : 1[1e0] -> 0[1e0] [receive] via NET/Socket/0",
            "a:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC/read",
            "a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
            "a:1:1 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1",
            "#  Rank  0 Group  0 Pid   9822 on host device  0 [0000:2c:00] NVIDIA GeForce RTX 4090",
        ]);
        assert_eq!(f.nccl_versions.len(), 2);
        assert!(f.evidence.contains_key("nccl_versions_differ"));
        assert!(f.evidence.contains_key("virtual_interface_chosen"));
        assert!(f.evidence.contains_key("socket_despite_hca"));
        assert!(f.evidence.contains_key("cuda_driver_older_than_runtime"));
        assert_eq!(f.channels, Some(4));
        assert_eq!(f.transports.get("P2P"), Some(&1));
        assert_eq!(f.transports.get("NET"), Some(&1));
        assert!(f.trees && f.rings);
        assert_eq!(
            f.environment.get("NCCL_IB_DISABLE").map(String::as_str),
            Some("1")
        );
        let slow: Vec<&str> = f.slowdowns.iter().map(|s| s.what.as_str()).collect();
        assert!(
            slow.iter().any(|s| s.starts_with("NCCL_IB_DISABLE=1")),
            "{slow:?}"
        );
        assert!(
            slow.iter().any(|s| s.contains("TCP sockets although")),
            "{slow:?}"
        );
        assert!(slow.iter().any(|s| s.contains("veth")), "{slow:?}");
        assert!(f.hcas.values.contains("mlx5_1:1/RoCE"));
        assert!(f.gpus.values.contains("NVIDIA GeForce RTX 4090"));
    }

    #[test]
    fn gdr_on_some_channels_only() {
        let f = facts(&[
            "NCCL INFO Channel 00 : 9[1a000] -> 2[6b000] [send] via NET/IB/0/GDRDMA",
            "NCCL INFO Channel 00 : 9[1a000] -> 2[6b000] [receive] via NET/IB/1",
        ]);
        assert_eq!(f.evidence["gdr_partial"].len(), 2);
    }

    #[test]
    fn bounded_sets_stop_growing() {
        let mut f = Facts::default();
        for n in 0..10_000u64 {
            f.observe(n, &format!("h{n}:1:1 [0] NCCL INFO x"));
        }
        assert_eq!(f.hosts.values.len(), MAX_VALUES);
        assert!(f.hosts.truncated);
    }

    #[test]
    fn sockets_on_ipoib_or_link_local_matter_only_when_they_fail() {
        let oob = "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB/SHARP ; OOB ibp75s0:192.168.0.103<0>";
        let boot = "h:1:1 [0] NCCL INFO Bootstrap : Using eth0:169.254.3.1<0>";
        let trace = "h:1:1 [0] NCCL INFO misc/socket.cc:567 -> 2";
        for chosen in [oob, boot] {
            assert!(
                !facts(&[chosen])
                    .evidence
                    .contains_key("socket_on_ipoib_failed")
            );
            let f = facts(&[chosen, trace]);
            let lines: Vec<u64> = f.evidence["socket_on_ipoib_failed"]
                .iter()
                .map(|e| e.line)
                .collect();
            assert_eq!(lines, [1, 2], "{chosen}");
        }
        let eth = "h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>";
        assert!(
            !facts(&[eth, trace])
                .evidence
                .contains_key("socket_on_ipoib_failed")
        );
        assert!(!is_socket_trace("h:1:1 [0] NCCL INFO bootstrap.cc:1 -> 0"));
        assert!(!is_socket_trace(
            "h:1:1 [0] NCCL INFO misc/socket.cc:80 -> 6"
        ));
    }

    #[test]
    fn an_nccl_tests_run_that_stops_after_its_header_hung() {
        let header = ["# nThread 1 nGpus 2 minBytes 8", "# Using devices"];
        let f = facts(&header);
        assert_eq!(f.evidence["nccl_tests_hung"][0].line, 2);
        // Which hosts it ran on is unknown without the device lines.
        assert!(!f.evidence.contains_key("nccl_tests_hung_one_host"));
        let rank = |r: u32, host: &str| {
            format!(
                "#  Rank  {r} Group  0 Pid  28329 on {host:>9} device  {r} [0x01] NVIDIA RTX A6000"
            )
        };
        let one = [header[0], header[1], &rank(0, "a"), &rank(1, "a")];
        assert_eq!(facts(&one).evidence["nccl_tests_hung_one_host"][0].line, 2);
        let alone = [header[0], header[1], &rank(0, "a")];
        assert!(
            !facts(&alone)
                .evidence
                .contains_key("nccl_tests_hung_one_host")
        );
        let two = [header[0], header[1], &rank(0, "a"), &rank(1, "b")];
        let f = facts(&two);
        assert!(f.evidence.contains_key("nccl_tests_hung"));
        assert!(!f.evidence.contains_key("nccl_tests_hung_one_host"));
        for end in [
            "# Avg bus bandwidth    : 33.3227 ",
            "h: Test NCCL failure common.cu:959 'internal error'",
            "NCCL failure all_reduce.cu:95 'unhandled cuda error'",
            "Cuda failure common.cu:372 'out of memory'",
        ] {
            let f = facts(&[header[0], header[1], end]);
            assert!(!f.evidence.contains_key("nccl_tests_hung"), "{end}");
        }
    }

    #[test]
    fn a_net_plugin_loaded_on_some_hosts_only() {
        let on_some = |lines: &[&str]| {
            facts(lines)
                .evidence
                .get("net_plugin_on_some_hosts")
                .map(|e| e.iter().map(|e| e.line).collect::<Vec<_>>())
        };
        let none = "HGX-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.";
        let loaded = "HGX-04:589474:589541 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so";
        assert_eq!(on_some(&[none, loaded]), Some(vec![1, 2]));
        assert_eq!(on_some(&[loaded]), None);
        assert_eq!(on_some(&[none]), None);
        // A host that looked for one plugin name and then loaded another has the plugin.
        let later = "HGX-11:18226:18274 [5] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)";
        assert_eq!(on_some(&[none, later, loaded]), None);
        // Each NCCL's wording of "none found".
        for none in [
            "a:1:1 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "a:1:1 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
            "a:1:1 [0] NCCL INFO NET/Plugin: Could not find: ofi libnccl-net-ofi.so.",
        ] {
            assert_eq!(on_some(&[none, loaded]), Some(vec![1, 2]), "{none}");
        }
        // The tuner's plugin is another plugin; a host that has the net plugin says so.
        let tuner = "HGX-04:589474:589541 [0] NCCL INFO TUNER/Plugin: No plugin found (libnccl-tuner.so), using internal tuner instead.";
        assert_eq!(on_some(&[none, loaded, tuner]), Some(vec![1, 2]));
        // A communicator came up: the hosts connected (two clusters' logs side by side).
        let complete = "HGX-04:589474:589541 [0] NCCL INFO comm 0x5 rank 0 nranks 16 cudaDev 0 busId 18000 - Init COMPLETE";
        assert_eq!(on_some(&[none, loaded, complete]), None);
    }

    #[test]
    fn loopback_on_one_host_matters_only_when_connections_fail() {
        let lo = "h:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>";
        let f = facts(&[lo]);
        assert!(!f.evidence.contains_key("virtual_interface_chosen"));
        let f = facts(&[
            lo,
            "h:1:1 [0] NCCL WARN Net : Connect to 10.0.0.2<41231> failed : Connection refused",
        ]);
        assert!(f.evidence.contains_key("virtual_interface_chosen"));
    }
}
