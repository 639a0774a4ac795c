//! Whether the node's firewall lets other nodes reach the job's TCP ports: PyTorch's
//! rendezvous range and NCCL's socket ports (the profile's `[job]` section). It finds what
//! filters the node (nftables, iptables-legacy, iptables-nft, and firewalld or ufw on top),
//! reads the live rules (`nft -j list ruleset`, `iptables-save`) and walks them as the kernel
//! would for a new connection from another node, naming the rule that decides.

pub mod iptables;
pub mod model;
pub mod nft;
pub(crate) mod node;

use crate::finding::{Area, Check, Finding, Status};
use crate::host::sysctl;
use crate::probe_error::{Probe, ProbeError};
use crate::profile::job::{NcclPorts, format_ports};
use crate::profile::setting::KeySpec;

use super::Context;
use crate::probe::firewall::FirewallProbe;
use model::{Place, Table, Tool, Verdict, Walk};

/// The firewall area has no judged settings: the ports come from the profile's `[job]`.
pub(crate) const KEYS: &[KeySpec] = &[];

const WHY_RENDEZVOUS: &str = "Every rank connects to rank 0's TCPStore on MASTER_PORT; a firewall that blocks it is the classic cause of rendezvous time-outs.";
const WHY_NCCL: &str = "NCCL's bootstrap and socket transport listen on ephemeral ports; blocked, init_process_group hangs until NCCL's time-out.";

/// One set of ports the profile says must be reachable.
struct Group {
    id: &'static str,
    why: &'static str,
    ranges: Result<Vec<(u16, u16)>, PortRangeError>,
    source: String,
}

impl Group {
    fn expected(&self) -> String {
        match &self.ranges {
            Ok(r) => format!("inbound TCP {} accepted", format_ports(r)),
            Err(_) => format!("inbound TCP to {} accepted", self.source),
        }
    }

    /// These ports as the profile wants them.
    fn check(&self) -> Check {
        self.check_expecting(self.expected())
    }

    /// The check once the rules are read: the expectation names where the ports come from.
    fn judged_check(&self) -> Check {
        self.check_expecting(format!("{} (from {})", self.expected(), self.source))
    }

    fn check_expecting(&self, expected: String) -> Check {
        Check::new(self.id, Area::Firewall)
            .expected(expected)
            .why(self.why)
    }
}

fn groups(ctx: &Context) -> Vec<Group> {
    let mut out = Vec::new();
    if let Some(ranges) = &ctx.profile.job.rendezvous_ports {
        out.push(Group {
            id: "firewall.rendezvous_ports",
            why: WHY_RENDEZVOUS,
            ranges: Ok(ranges.clone()),
            source: "[job] rendezvous_ports".into(),
        });
    }
    match &ctx.profile.job.nccl_ports {
        Some(NcclPorts::Fixed(ranges)) => out.push(Group {
            id: "firewall.nccl_ports",
            why: WHY_NCCL,
            ranges: Ok(ranges.clone()),
            source: "[job] nccl_ports".into(),
        }),
        Some(NcclPorts::LocalPortRange) => out.push(Group {
            id: "firewall.nccl_ports",
            why: WHY_NCCL,
            ranges: local_port_range(ctx),
            source: "net.ipv4.ip_local_port_range".into(),
        }),
        None => {}
    }
    out
}

const LOCAL_PORT_RANGE: &str = "net.ipv4.ip_local_port_range";

/// Why the ports of [`LOCAL_PORT_RANGE`] are unknown.
#[derive(Debug, thiserror::Error)]
enum PortRangeError {
    #[error(transparent)]
    Unreadable(#[from] crate::host::HostError),
    #[error("{} is absent", sysctl::host_path(LOCAL_PORT_RANGE))]
    Absent,
    #[error("{LOCAL_PORT_RANGE} reads `{0}`, not two port numbers")]
    Malformed(String),
}

fn local_port_range(ctx: &Context) -> Result<Vec<(u16, u16)>, PortRangeError> {
    let value = sysctl::read(ctx.root, LOCAL_PORT_RANGE)?.ok_or(PortRangeError::Absent)?;
    let mut f = value.split_whitespace().map(str::parse::<u16>);
    match (f.next(), f.next()) {
        (Some(Ok(lo)), Some(Ok(hi))) if lo <= hi => Ok(vec![(lo, hi)]),
        _ => Err(PortRangeError::Malformed(value)),
    }
}

/// The ruleset as the tools report it, and what writes it.
pub(crate) struct Ruleset {
    pub tables: Vec<Table>,
    /// `firewalld`, `ufw` or empty: the front-end whose commands fix it.
    pub frontend: Option<&'static str>,
    /// Which tools contributed tables with filtering chains.
    pub tools: Vec<Tool>,
    /// Rules that may exist but could not be read (e.g. nft is not installed).
    pub blind_spot: Option<String>,
    /// What the node's interfaces tell about a peer's packets.
    pub facts: model::Facts,
}

/// Why the rules could not be read; the audit skips, warns or errs on the variant.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RulesetError {
    /// The tool refused for want of CAP_NET_ADMIN.
    #[error("{what}: permission denied; reading the firewall needs root (CAP_NET_ADMIN)")]
    NeedsRoot { what: String },
    /// Neither nft nor any iptables-save is on this node.
    #[error("neither nft nor iptables-save is installed, so the rules cannot be read")]
    NoTool,
    /// The tool ran and failed; `detail` is what it said.
    #[error("{what} failed: {detail}")]
    Failed { what: String, detail: String },
    /// A tool could not be run, or its output not parsed; the message says which.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
}

/// Why a tool's rules could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unreadable {
    /// The tool could not be run (or ran past [`TOOL_LIMIT`](crate::probe::firewall::TOOL_LIMIT)).
    #[error("{program}: {error}")]
    Run {
        program: String,
        #[source]
        error: std::io::Error,
    },
    /// `nft -j list ruleset` (or the tables pieced together) is not a ruleset.
    #[error(transparent)]
    Nft(#[from] nft::NftError),
    /// `nft -j list ruleset` is not JSON, and neither is some table's own listing.
    #[error(transparent)]
    TableByTable(#[from] TableByTable),
    /// An `iptables-save` flavour printed a line it never prints.
    #[error(transparent)]
    Save(#[from] iptables::SaveError),
    /// `iptables-nft-save` said a table is "incompatible" without naming it: which of its
    /// tables it left out, and so what filters, cannot be told.
    #[error("{program}: {source}")]
    Incompatible {
        program: String,
        #[source]
        source: iptables::NamesNoTable,
    },
}

/// Why the ruleset could not be pieced together table by table when its whole `nft -j`
/// listing is not JSON.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TableByTable {
    #[error("nft list tables: {0}")]
    Run(#[source] std::io::Error),
    #[error("nft -j list ruleset is not JSON, and nft list tables failed")]
    ListFailed,
    #[error("nft -j list ruleset is not JSON, and nft list tables names no table")]
    NoTable,
    #[error("nft -j list table {family} {name} is not JSON (nor is the whole ruleset's)")]
    NotJson { family: String, name: String },
}

impl RulesetError {
    /// The failure by kind, for [`ProbeError::verdict`] to decide on.
    fn probe_error(&self) -> ProbeError {
        let reason = self.to_string();
        match self {
            RulesetError::NeedsRoot { .. } => ProbeError::Denied(reason),
            RulesetError::NoTool => ProbeError::Absent(reason),
            RulesetError::Failed { .. } | RulesetError::Unreadable(_) => ProbeError::Failed(reason),
        }
    }
}

/// Reads every ruleset that can filter input: nftables, then iptables-nft and
/// iptables-legacy (iptables-nft tables replace their nft view, whose `xt` matches nft
/// cannot show). A tool is only run when it can have something to show, which saves a
/// process each and never makes the kernel load `ip_tables` just to find it empty.
pub(crate) fn read_ruleset(runner: &dyn FirewallProbe) -> Result<Ruleset, RulesetError> {
    let mut tables = Vec::new();
    let mut any_tool = false;
    let mut blind_spot = None;
    let failed = |what: &str, out: &crate::probe::firewall::Output| {
        let detail = out.stderr.trim();
        // The tools' own words for a missing CAP_NET_ADMIN.
        if detail.contains("Operation not permitted") || detail.contains("Permission denied") {
            RulesetError::NeedsRoot { what: what.into() }
        } else {
            RulesetError::Failed {
                what: what.into(),
                detail: detail.into(),
            }
        }
    };
    let run = |program: &str, args: &[&str]| {
        runner.run(program, args).map_err(|error| Unreadable::Run {
            program: program.into(),
            error,
        })
    };
    let nft = run("nft", &["-j", "list", "ruleset"])?;
    let nft_listed = nft.as_ref().is_some_and(|out| out.success);
    if nft.is_none() {
        blind_spot = Some(
            "nft is not installed, so native nftables rules (if any) cannot be read".to_string(),
        );
    }
    // Tables iptables-nft wrote with extensions nft cannot show: only iptables-nft-save
    // reads those. Every other nf_tables table (native `table ip filter` included) is read
    // from nft's JSON, never from iptables-nft-save's lossy rendering of it.
    let mut xt_tables = Vec::new();
    if let Some(out) = nft {
        any_tool = true;
        if !out.success && !unsupported(&out.stderr) {
            return Err(failed("nft -j list ruleset", &out));
        }
        if !out.stdout.trim().is_empty() {
            let dormant = |family: &str, name: &str| {
                let out = runner.run("nft", &["list", "table", family, name]).ok()??;
                out.success.then(|| {
                    out.stdout.lines().any(|l| {
                        let l = l.trim();
                        l.starts_with("flags ") && l.contains("dormant")
                    })
                })
            };
            // nft -j (1.0.6) leaves out the devices of ingress chains; its text listing
            // names them.
            let devices = |family: &str, name: &str| {
                runner
                    .run("nft", &["list", "table", family, name])
                    .ok()
                    .flatten()
                    .filter(|out| out.success)
                    .map(|out| nft::ingress_devices(&out.stdout))
                    .unwrap_or_default()
            };
            // nft 1.0.6 cuts its JSON short at a dormant table's flags: then each table is
            // listed on its own and a dormant one that cannot be listed is left out.
            let json = if serde_json::from_str::<serde_json::Value>(&out.stdout).is_ok() {
                out.stdout.clone()
            } else {
                table_by_table(runner, &dormant).map_err(Unreadable::from)?
            };
            tables = nft::parse_full(&json, &dormant, &devices).map_err(Unreadable::from)?;
            xt_tables = nft::tables_with_xt(&json)
                .into_iter()
                .filter(|name| tables.iter().any(|t| t.id == format!("ip {name}")))
                .collect();
        }
    }
    let legacy_may_exist = runner
        .legacy_tables()
        .is_none_or(|names| !names.trim().is_empty());
    let mut saves = Vec::new();
    let mut skipped = false;
    if nft_listed {
        for name in &xt_tables {
            if let Some(out) = run("iptables-nft-save", &["-t", name])?
                && out.success
            {
                saves.push(("iptables-nft-save", Some(Tool::IptablesNft), out));
            }
            // Unreadable there too: nft's view stands, its `xt` rules "cannot tell".
        }
    } else if let Some(out) = run("iptables-nft-save", &[])? {
        saves.push(("iptables-nft-save", Some(Tool::IptablesNft), out));
    }
    if legacy_may_exist {
        if let Some(out) = run("iptables-legacy-save", &[])? {
            saves.push(("iptables-legacy-save", Some(Tool::IptablesLegacy), out));
        }
    } else {
        skipped = true;
    }
    if saves.is_empty() && !skipped && !nft_listed {
        // Older distributions ship only `iptables-save`: its header tells the flavour.
        if let Some(out) = run("iptables-save", &[])? {
            saves.push(("iptables-save", None, out));
        }
    }
    for (program, tool, out) in saves {
        any_tool = true;
        // Tables nft itself wrote are "incompatible" to iptables-nft-save, which names them
        // and shows the others: those it names are read through nft.
        // One it cannot name leaves the rest unreadable: skipping them would hide a drop.
        let incompatible = iptables::incompatible_tables(&out.stdout)
            .and_then(|mut names| {
                names.extend(iptables::incompatible_tables(&out.stderr)?);
                Ok(names)
            })
            .map_err(|source| Unreadable::Incompatible {
                program: program.to_string(),
                source,
            })?;
        if !out.success {
            if unsupported(&out.stderr) {
                // This kernel has no such tables at all: nothing of this kind filters.
                continue;
            }
            if !incompatible.is_empty() {
                // It showed nothing it could: nft's view of every table stands.
                continue;
            }
            return Err(failed(program, &out));
        }
        let tool = tool.unwrap_or(if out.stdout.contains("(nf_tables)") {
            Tool::IptablesNft
        } else {
            Tool::IptablesLegacy
        });
        let mut parsed = iptables::parse(&out.stdout, tool).map_err(Unreadable::from)?;
        parsed.retain(|t| !incompatible.contains(&t.id));
        if tool == Tool::IptablesNft {
            if nft_listed {
                parsed.retain(|t| xt_tables.contains(&t.id));
            }
            for t in &parsed {
                let shadow = format!("ip {}", t.id);
                tables.retain(|n: &Table| !(n.tool == Tool::Nftables && n.id == shadow));
            }
        }
        tables.extend(parsed);
    }
    if !any_tool {
        return Err(RulesetError::NoTool);
    }
    let has_chain = |name: &str| tables.iter().any(|t| t.chains.contains_key(name));
    let frontend = if tables.iter().any(|t| t.id == "inet firewalld") || has_chain("INPUT_ZONES") {
        Some("firewalld")
    } else if has_chain("ufw-before-input") || has_chain("ufw-user-input") {
        Some("ufw")
    } else {
        None
    };
    let mut tools: Vec<Tool> = model::base_chains(&tables)
        .iter()
        .filter(|(_, c, b)| !c.rules.is_empty() || b.policy == model::Policy::Drop)
        .map(|(t, _, _)| t.tool)
        .collect();
    tools.sort();
    tools.dedup();
    // A port ipset is a port test: its members decide.
    let set_ports: std::collections::BTreeMap<String, Vec<(u16, u16)>> = model::set_names(&tables)
        .into_iter()
        .filter_map(|name| {
            let out = runner.run("ipset", &["save", &name]).ok()??;
            let ports = iptables::port_set(&out.stdout).filter(|_| out.success)?;
            Some((name, ports))
        })
        .collect();
    model::resolve_port_sets(&mut tables, &|name| set_ports.get(name).cloned());
    // The interfaces are read only when a rule's verdict turns on them.
    let facts = match model::wants_facts(&tables)
        .then(|| runner.run("ip", &["-d", "-j", "addr", "show"]))
    {
        Some(Ok(Some(out))) if out.success => node::facts(&out.stdout),
        _ => model::Facts::default(),
    };
    Ok(Ruleset {
        tables,
        frontend,
        tools,
        blind_spot,
        facts,
    })
}

/// The ruleset as one `nft -j` document made of each table's own listing, for when the
/// whole one is not JSON; a table whose listing is not JSON either is skipped when
/// `dormant` says the kernel never runs it, else the error names it.
fn table_by_table(
    runner: &dyn FirewallProbe,
    dormant: &dyn Fn(&str, &str) -> Option<bool>,
) -> Result<String, TableByTable> {
    let list = runner
        .run("nft", &["list", "tables"])
        .map_err(TableByTable::Run)?
        .filter(|out| out.success)
        .ok_or(TableByTable::ListFailed)?;
    let mut items = Vec::new();
    let mut listed_tables = 0;
    for line in list.stdout.lines() {
        let mut words = line.split_whitespace();
        let (Some("table"), Some(family), Some(name)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        listed_tables += 1;
        let listed = runner
            .run("nft", &["-j", "list", "table", family, name])
            .ok()
            .flatten()
            .filter(|out| out.success)
            .and_then(|out| serde_json::from_str::<serde_json::Value>(&out.stdout).ok());
        match listed {
            Some(doc) => items.extend(
                doc.get("nftables")
                    .and_then(serde_json::Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|item| item.get("metainfo").is_none())
                    .cloned(),
            ),
            None if dormant(family, name) == Some(true) => {}
            None => {
                return Err(TableByTable::NotJson {
                    family: family.into(),
                    name: name.into(),
                });
            }
        }
    }
    if listed_tables == 0 {
        // A ruleset whose JSON is broken has tables: a listing without any is no answer.
        return Err(TableByTable::NoTable);
    }
    Ok(serde_json::json!({ "nftables": items }).to_string())
}

/// A tool's complaint that the kernel lacks its subsystem (no nf_tables, no ip_tables):
/// nothing of that kind can filter, so it is not an error.
fn unsupported(stderr: &str) -> bool {
    [
        "Protocol not supported",
        "does not exist",
        "can't initialize",
        "ip_tables_names",
        "insmod",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// Judges the live firewall with the tools `ctx.probes.firewall` runs (the real ones on the
/// live node; tests hand in captured output).
pub(crate) fn audit(ctx: &Context) -> Vec<Finding> {
    let runner = ctx.probes.firewall.as_ref();
    let groups = groups(ctx);
    if groups.is_empty() {
        return Vec::new();
    }
    let not_here = if !ctx.root.is_live() {
        Some("--root is not the running node: the active firewall rules can only be read live")
    } else if ctx.options.persisted {
        Some(
            "--persisted: the saved rules (/etc/nftables.conf, firewalld zones, ufw rules) are not evaluated, only the live ones",
        )
    } else {
        None
    };
    if let Some(reason) = not_here {
        return groups.iter().map(|g| g.check().skip(reason)).collect();
    }
    let ruleset = read_ruleset(runner);
    groups
        .iter()
        .map(|g| match (&g.ranges, &ruleset) {
            (Err(e), _) => g.check().error(e.to_string()),
            (_, Err(e @ RulesetError::NoTool)) => g
                .check()
                .why(format!("cannot tell: {e}"))
                .warn("unknown", ""),
            (_, Err(e)) => e
                .probe_error()
                .finding(Probe::Firewall, &g.check(), e.to_string()),
            (Ok(ranges), Ok(rs)) => judge(g, ranges, rs),
        })
        .collect()
}

/// What happens to a stretch of ports.
enum Outcome {
    Accepted(Walk),
    Blocked(Walk),
    /// Accepted on some interfaces or from some sources only.
    Depends {
        accept: Walk,
        drop: Walk,
    },
    CannotTell(Walk, String),
}

fn classify(walks: Vec<Walk>) -> Outcome {
    if let Some(w) = walks
        .iter()
        .find(|w| matches!(w.verdict, Verdict::CannotTell(_)))
    {
        let why = match &w.verdict {
            Verdict::CannotTell(why) => why.clone(),
            _ => String::new(),
        };
        return Outcome::CannotTell(w.clone(), why);
    }
    let accept = walks
        .iter()
        .find(|w| w.verdict == Verdict::Accepted)
        .cloned();
    let drop = walks
        .iter()
        .find(|w| w.verdict == Verdict::Dropped)
        .cloned();
    match (accept, drop) {
        (Some(accept), Some(drop)) => Outcome::Depends { accept, drop },
        (Some(a), None) => Outcome::Accepted(a),
        (None, Some(d)) => Outcome::Blocked(d),
        (None, None) => Outcome::Accepted(Walk {
            conditions: vec![],
            verdict: Verdict::Accepted,
            decided_by: "no filtering chain on the input path".into(),
            decided_at: None,
        }),
    }
}

fn ports_text(lo: u16, hi: u16) -> String {
    format_ports(&[(lo, hi)])
}

fn judge(group: &Group, ranges: &[(u16, u16)], rs: &Ruleset) -> Finding {
    let check = group.judged_check();
    let filters = if rs.tools.is_empty() {
        "no firewall".to_string()
    } else {
        let tools: Vec<&str> = rs.tools.iter().map(|t| t.name()).collect();
        match rs.frontend {
            Some(f) => format!("{f} ({})", tools.join(", ")),
            None => tools.join(", "),
        }
    };
    if let Some(blind) = &rs.blind_spot
        && rs.tools.is_empty()
    {
        return check
            .clone()
            .why(format!("cannot tell: {blind}. {}", group.why))
            .warn(
                "no iptables rules; nftables unknown",
                "install nftables (the nft tool) so the rules can be read",
            );
    }
    if rs.tools.is_empty() {
        return check.pass("no firewall: no filtering rules or drop policy on the input path");
    }
    // Consecutive stretches with the same outcome are shown as one.
    let mut parts: Vec<((u16, u16), String)> = Vec::new();
    let mut worst = Status::Pass;
    let mut fix_walk: Option<Walk> = None;
    // The first rule that could not be followed: what a person must read by hand.
    let mut unmodelled: Option<String> = None;
    for &(lo, hi) in ranges {
        for (a, b) in model::segments(&rs.tables, lo, hi) {
            let (status, text) = match classify(model::evaluate_with(&rs.tables, a, &rs.facts)) {
                Outcome::Accepted(w) => (Status::Pass, format!("accepted by {}", w.decided_by)),
                Outcome::Blocked(w) => {
                    let text = format!("dropped by {}", w.decided_by);
                    fix_walk.get_or_insert(w);
                    (Status::Fail, text)
                }
                Outcome::Depends { accept, drop } => {
                    let text = format!(
                        "accepted only when {} (by {}); otherwise dropped by {}",
                        accept.conditions.join(" and "),
                        accept.decided_by,
                        drop.decided_by
                    );
                    fix_walk.get_or_insert(drop);
                    (Status::Warn, text)
                }
                Outcome::CannotTell(w, why) => {
                    let text = format!("cannot tell: {why} in {}", w.decided_by);
                    unmodelled.get_or_insert(w.decided_by);
                    (Status::Warn, text)
                }
            };
            let rank = |s: Status| match s {
                Status::Fail => 2,
                Status::Warn => 1,
                _ => 0,
            };
            if rank(status) > rank(worst) {
                worst = status;
            }
            match parts.last_mut() {
                Some(((_, end), last)) if *last == text && u32::from(*end) + 1 == u32::from(a) => {
                    *end = b
                }
                _ => parts.push(((a, b), text)),
            }
        }
    }
    let mut message = group.why.to_string();
    if let Some(rule) = &unmodelled {
        message = format!(
            "Look at {rule}: gputune does not follow it, so whether a new TCP connection from \
             another node to these ports gets past it must be checked by hand. {message}"
        );
    }
    if let Some(blind) = &rs.blind_spot
        && worst == Status::Pass
    {
        worst = Status::Warn;
        message = format!("cannot tell: {blind}. {message}");
    }
    let ports = format_ports(ranges).replace(' ', "");
    let fix = match &fix_walk {
        Some(w) => fix_text(rs.frontend, w.decided_at.as_ref(), &ports),
        None => String::new(),
    };
    let actual = format!(
        "{filters}: {}",
        parts
            .iter()
            .map(|((a, b), text)| format!("{}: {text}", ports_text(*a, *b)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    check.clone().why(message).judge(worst, actual, fix)
}

/// The command that opens `ports` (`29500-29550,50000-51000`) in the tool that decided.
fn fix_text(frontend: Option<&str>, at: Option<&Place>, ports: &str) -> String {
    let colon = ports.replace('-', ":");
    match frontend {
        Some("firewalld") => {
            let adds: Vec<String> = ports
                .split(',')
                .map(|p| format!("--add-port={p}/tcp"))
                .collect();
            return format!(
                "firewall-cmd --permanent {} && firewall-cmd --reload",
                adds.join(" ")
            );
        }
        Some("ufw") => {
            let allows: Vec<String> = colon
                .split(',')
                .map(|p| format!("ufw allow {p}/tcp"))
                .collect();
            return allows.join(" && ");
        }
        _ => {}
    }
    let Some(at) = at else {
        return String::new();
    };
    match at.tool {
        Tool::Nftables => {
            let rule = format!("tcp dport {{ {} }} accept", ports.replace(',', ", "));
            let cmd = match at.position {
                Some(h) => format!(
                    "nft insert rule {} {} position {h} {rule}",
                    at.table, at.chain
                ),
                None => format!("nft add rule {} {} {rule}", at.table, at.chain),
            };
            format!("{cmd} (and add the rule to /etc/nftables.conf so it survives a reboot)")
        }
        Tool::IptablesNft | Tool::IptablesLegacy => {
            let bin = if at.tool == Tool::IptablesNft {
                "iptables-nft"
            } else {
                "iptables-legacy"
            };
            let table = if at.table == "filter" {
                String::new()
            } else {
                format!("-t {} ", at.table)
            };
            let how = match at.position {
                Some(n) => format!("-I {} {n}", at.chain),
                None => format!("-A {}", at.chain),
            };
            format!(
                "{bin} {table}{how} -p tcp -m multiport --dports {colon} -j ACCEPT (persist with iptables-save > /etc/iptables/rules.v4 or your distribution's service)"
            )
        }
    }
}

#[cfg(test)]
mod construct_tests;
#[cfg(test)]
mod tests;
