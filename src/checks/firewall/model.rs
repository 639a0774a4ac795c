//! A firewall ruleset as the kernel walks it for one kind of packet, whatever tool wrote it:
//! base chains on the receive path in hook and priority order, rules of matches and an
//! action, jumps, gotos and returns. [`evaluate`] says what happens to a new inbound IPv4
//! TCP connection from another node to a given port, and which rule decides.
//!
//! The packet is known except for the interface it arrives on and its source address. A
//! match on those splits the walk in two (the verdict may depend on them); a match on
//! anything not modelled stops the walk with "cannot tell" naming the rule. Nothing is
//! guessed.

use std::collections::BTreeMap;

/// Where a base chain hooks, in the order a received packet meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hook {
    /// A `netdev` (or `inet`) ingress chain: packets of its devices only.
    Ingress,
    /// `bridge` family chains: packets that arrive through a bridge port only, before the
    /// bridge hands them to the IP stack.
    BridgePrerouting,
    BridgeInput,
    Prerouting,
    Input,
}

/// How a base chain ends when no rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Accept,
    Drop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub hook: Hook,
    pub priority: i32,
    pub policy: Policy,
    /// What kind of chain the kernel runs here.
    pub kind: ChainKind,
}

/// Filter chains see every packet; nat chains only a connection's first packet, and only
/// when conntrack runs in the namespace (without it the nat hook passes every packet on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainKind {
    Filter,
    Nat,
}

/// A chain of one table; `base` is set for chains the kernel enters from a hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub base: Option<Base>,
    pub rules: Vec<Rule>,
}

/// One table's chains, under the name findings use (`nftables inet filter`,
/// `iptables-legacy filter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    /// The table as its own tool names it (`inet filter` for nft, `filter` for iptables).
    pub id: String,
    /// What wrote it (nftables, iptables-nft, iptables-legacy, firewalld, ufw), for messages
    /// and fixes.
    pub tool: Tool,
    pub chains: BTreeMap<String, Chain>,
    /// A rule of this table makes the kernel track connections in the namespace (a `ct`
    /// expression, a conntrack or state match, a nat statement or target): then nat chains
    /// run.
    pub conntrack: bool,
    /// The mark bits a rule of this table may set to 1 (`meta mark set`, `-j MARK
    /// --set-xmark`, a restore from the connection mark): the others stay 0.
    pub mark_bits: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    Nftables,
    IptablesNft,
    IptablesLegacy,
}

impl Tool {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Tool::Nftables => "nftables",
            Tool::IptablesNft => "iptables-nft",
            Tool::IptablesLegacy => "iptables-legacy",
        }
    }
}

/// A test on the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Layer-4 protocol is one of these (`tcp`, `udp`, `6`).
    Proto { protos: Vec<String>, negate: bool },
    /// Destination port in one of the ranges.
    DPort {
        ranges: Vec<(u16, u16)>,
        negate: bool,
    },
    /// Arrives on one of these interfaces (`eth*` / `eth+` are prefixes).
    Iif { names: Vec<String>, negate: bool },
    /// Source address in one of these (`10.0.0.0/8`, `192.0.2.1`).
    Saddr { nets: Vec<String>, negate: bool },
    /// Destination address in one of these: decided by the node's own addresses when
    /// they are known (a peer connects to one of them), else it depends on which one.
    Daddr { nets: Vec<String>, negate: bool },
    /// Source port in one of the ranges: a peer's ephemeral port is 1024 or above.
    SPort {
        ranges: Vec<(u16, u16)>,
        negate: bool,
    },
    /// The packet's mark, masked, equals `value` (`meta mark & mask == value`,
    /// `-m mark --mark value/mask`): 0 unless a rule of the ruleset sets marks.
    Mark {
        value: u32,
        mask: u32,
        negate: bool,
        text: String,
    },
    /// The packet arrives through a bridge port (what a `bridge` family chain sees).
    Bridged { negate: bool },
    /// The source (or destination) address is in an ipset: it depends on the peer.
    Set {
        name: String,
        dirs: String,
        negate: bool,
    },
    /// Conntrack state is one of these (`new`, `established`, ...).
    CtState { states: Vec<String>, negate: bool },
    /// A test of the connection's conntrack status (`ct status dnat`, `--ctstatus`): once
    /// tracked, `holds` says whether a new connection to the node has it; before conntrack
    /// there is no entry and the test never matches, negated or not.
    CtStatus { holds: bool, text: String },
    /// A fact the packet has or lacks whatever its port, interface or source: `true` when
    /// the packet has it (e.g. `ct status dnat` is false for a connection to the node,
    /// `addrtype --dst-type LOCAL` is true).
    Fixed { holds: bool, text: String },
    /// Depends on something the packet description does not fix (source port, daddr).
    Unfixed { text: String },
    /// A match this model does not understand.
    Unknown { text: String },
    /// Not a test a ruleset holds: the mark a walk carries of the unmodelled test `text` of
    /// the rule `label` (at `at`) it forked on, so that a "cannot tell" names that rule.
    Forked {
        text: String,
        label: String,
        at: Option<Place>,
    },
}

/// What a rule does when every match holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Accept,
    Drop,
    Reject,
    Jump(String),
    Goto(String),
    Return,
    /// Counters, logging, marks: the walk goes on.
    Continue,
    /// A verdict map on the destination port: the first range holding the port decides.
    DPortMap(Vec<((u16, u16), Action)>),
    /// A verdict map on the conntrack state (`ct state vmap { established : accept, ... }`):
    /// the entry holding the state the packet has in this chain decides, else the walk goes
    /// on.
    CtStateMap(Vec<(Vec<String>, Action)>),
    /// Any other verdict map (`meta protocol vmap`, `ip saddr vmap`, kube-proxy's
    /// `ip daddr . meta l4proto . th dport vmap`): each entry as the tests its key and
    /// element make; the first entry whose tests hold decides, else the walk goes on.
    Map(Vec<(Vec<Match>, Action)>),
    /// A verdict this model does not understand (queue to user space, ...).
    Unknown(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// How findings name the rule: the rule text and where it is.
    pub label: String,
    /// Its nft handle or its 1-based number in an iptables chain, for fixes that insert
    /// before it.
    pub position: Option<u64>,
    pub matches: Vec<Match>,
    pub action: Action,
}

/// The end of one walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Accepted,
    Dropped,
    CannotTell(String),
}

/// One way through the ruleset: the conditions on interface/source it assumed, the verdict,
/// and the rule or policy that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walk {
    pub conditions: Vec<String>,
    pub verdict: Verdict,
    pub decided_by: String,
    /// The chain (and rule position; none for a policy) that decided, for the fix.
    pub decided_at: Option<Place>,
}

/// Where a verdict was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub tool: Tool,
    pub table: String,
    pub chain: String,
    pub position: Option<u64>,
}

/// Walks that can fork before the model gives up on a ruleset as too branched.
const MAX_WALKS: usize = 64;
/// Jump depth beyond which a ruleset loops (the kernel's own limit is 16 for nft).
const MAX_DEPTH: usize = 32;

/// What is known of the node beyond the ruleset, for tests a peer's packet answers by
/// the node it arrives at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The node's IPv4 addresses other than loopback ones (a peer connects to one of
    /// them); `None` when they could not be read.
    pub addresses: Option<Vec<std::net::Ipv4Addr>>,
    /// The mark bits some rule may set: a mark test of one of them cannot be told, one of
    /// the others sees 0.
    pub mark_bits: u32,
    /// Whether a peer's packets arrive through a bridge port; `None` when it cannot be
    /// told.
    pub bridged: Option<bool>,
    /// The interfaces the IP layer can see a peer's packet arrive on (up, not loopback,
    /// not a bridge port: a port's packets reach IP as the bridge's); `None` when they
    /// could not be read.
    pub interfaces: Option<Vec<String>>,
    /// The devices a peer's frame can come in through, as netdev ingress and bridge
    /// chains see it (bridge ports included).
    pub links: Option<Vec<String>>,
}

/// Whether `addr` lies in `net` (`10.0.0.0/8`, `192.0.2.1`); `None` when `net` is no IPv4
/// network.
pub fn net_holds(net: &str, addr: std::net::Ipv4Addr) -> Option<bool> {
    let (base, len) = match net.split_once('/') {
        Some((b, l)) => (b, l.parse::<u32>().ok().filter(|l| *l <= 32)?),
        None => (net, 32),
    };
    let base: std::net::Ipv4Addr = base.parse().ok()?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some(u32::from(base) & mask == u32::from(addr) & mask)
}

/// The lowest source port a peer's connection uses: Linux hands out ephemeral ports from
/// `ip_local_port_range` (32768-60999 by default), and only root binds below 1024.
const EPHEMERAL_LOW: u16 = 1024;

enum Tri {
    True,
    False,
    /// Holds for some packets of this kind: the condition says for which.
    Maybe(Cond),
    Unknown(String),
}

/// A condition on the interface or source a walk assumed: the test (its own `negate`
/// cleared) and whether it holds. Kept structured so that a walk never assumes a condition
/// and its opposite at once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cond {
    test: Match,
    holds: bool,
}

impl Cond {
    fn of(m: &Match) -> Cond {
        let (test, negate) = match m {
            Match::Iif { names, negate } => (
                Match::Iif {
                    names: names.clone(),
                    negate: false,
                },
                *negate,
            ),
            Match::Saddr { nets, negate } => (
                Match::Saddr {
                    nets: nets.clone(),
                    negate: false,
                },
                *negate,
            ),
            Match::Daddr { nets, negate } => (
                Match::Daddr {
                    nets: nets.clone(),
                    negate: false,
                },
                *negate,
            ),
            Match::Bridged { negate } => (Match::Bridged { negate: false }, *negate),
            Match::Set { name, dirs, negate } => (
                Match::Set {
                    name: name.clone(),
                    dirs: dirs.clone(),
                    negate: false,
                },
                *negate,
            ),
            other => (other.clone(), false),
        };
        Cond {
            test,
            holds: !negate,
        }
    }

    fn opposite(&self) -> Cond {
        Cond {
            test: self.test.clone(),
            holds: !self.holds,
        }
    }

    fn text(&self) -> String {
        let not = if self.holds { "" } else { "not " };
        match &self.test {
            Match::Iif { names, .. } => format!("{not}iif {}", names.join("|")),
            Match::Saddr { nets, .. } => format!("{not}saddr {}", nets.join("|")),
            Match::Daddr { nets, .. } => {
                format!(
                    "the peer connects to {}{}",
                    if self.holds {
                        ""
                    } else {
                        "an address other than "
                    },
                    nets.join("|")
                )
            }
            Match::Unfixed { text } => format!("{not}{text}"),
            Match::Bridged { .. } => format!(
                "the peer's packets arrive {}through a bridge port",
                if self.holds { "" } else { "not " }
            ),
            Match::Set { name, dirs, .. } => format!("{not}in ipset {name} ({dirs})"),
            other => format!("{not}{other:?}"),
        }
    }
}

/// What the conntrack state of the packet is in a chain: conntrack itself hooks prerouting
/// at priority -200 (`NF_IP_PRI_CONNTRACK`), so chains before it (raw at -300, ingress) see
/// a packet without an entry, which `ct state` / `--ctstate` show as `invalid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conntrack {
    /// After conntrack: the first packet of a new connection is `new`.
    Tracked,
    /// Before conntrack: no entry yet, so the state is `invalid`.
    NotYet,
    /// At conntrack's own priority: the order between the two is not defined.
    Unsure,
    /// In a bridge chain: tracked only where the bridge conntrack module is loaded.
    Bridge,
}

impl Conntrack {
    /// Conntrack's priority on prerouting (`NF_IP_PRI_CONNTRACK`).
    const PRIORITY: i32 = -200;

    fn of(base: &Base) -> Conntrack {
        match base.hook {
            Hook::Ingress => Conntrack::NotYet,
            Hook::BridgePrerouting | Hook::BridgeInput => Conntrack::Bridge,
            Hook::Input => Conntrack::Tracked,
            Hook::Prerouting if base.priority < Conntrack::PRIORITY => Conntrack::NotYet,
            Hook::Prerouting if base.priority == Conntrack::PRIORITY => Conntrack::Unsure,
            Hook::Prerouting => Conntrack::Tracked,
        }
    }

    /// The state `ct state` shows for the packet here, or why it cannot be told.
    fn state(self) -> Result<&'static str, StateUnknown> {
        match self {
            Conntrack::Tracked => Ok("new"),
            Conntrack::NotYet => Ok("invalid"),
            Conntrack::Unsure => Err(StateUnknown::AtConntrack),
            Conntrack::Bridge => Err(StateUnknown::Bridge),
        }
    }
}

/// Why the conntrack state of a new connection's first packet cannot be told in a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum StateUnknown {
    /// The chain runs at conntrack's own priority, in an undefined order with it.
    #[error(
        "the conntrack state in a prerouting chain of priority {}, where conntrack itself runs",
        Conntrack::PRIORITY
    )]
    AtConntrack,
    /// A bridge chain sees tracked packets only where the bridge conntrack module is loaded.
    #[error("the conntrack state in a bridge family chain")]
    Bridge,
}

fn in_ranges(port: u16, ranges: &[(u16, u16)]) -> bool {
    ranges.iter().any(|&(lo, hi)| lo <= port && port <= hi)
}

fn iif_loopback_only(names: &[String]) -> bool {
    names.iter().all(|n| n == "lo")
}

/// Whether interface `dev` is one `names` matches (`eth*` and `eth+` are prefixes).
fn iif_holds(names: &[String], dev: &str) -> bool {
    names.iter().any(|n| match n.strip_suffix(['*', '+']) {
        Some(prefix) => dev.starts_with(prefix),
        None => n == dev,
    })
}

fn net_loopback_only(nets: &[String]) -> bool {
    nets.iter()
        .all(|n| n.starts_with("127.") || n == "::1" || n == "::1/128")
}

/// Whether one of the networks holds every IPv4 source.
fn net_any(nets: &[String]) -> bool {
    nets.iter().any(|n| n == "0.0.0.0/0")
}

/// What one test says of the packet; `link` is set in ingress and bridge chains, which see
/// the device the frame came in through (the IP layer sees a bridge port's packets as the
/// bridge's).
fn judge(m: &Match, port: u16, conntrack: Conntrack, facts: &Facts, link: bool) -> Tri {
    let devices = if link {
        &facts.links
    } else {
        &facts.interfaces
    };
    let flip = |holds: bool, negate: bool| {
        if holds != negate {
            Tri::True
        } else {
            Tri::False
        }
    };
    match m {
        Match::Proto { protos, negate } => {
            flip(protos.iter().any(|p| p == "tcp" || p == "6"), *negate)
        }
        Match::DPort { ranges, negate } => flip(in_ranges(port, ranges), *negate),
        // Traffic from another node never arrives on loopback or from 127.0.0.0/8.
        Match::Iif { names, negate } if iif_loopback_only(names) => flip(false, *negate),
        // A peer's packet arrives on one of the node's up interfaces other than loopback:
        // a test all of them pass (or none does) is decided.
        Match::Iif { names, negate }
            if devices.as_ref().is_some_and(|devs| {
                !devs.is_empty()
                    && (devs.iter().all(|d| iif_holds(names, d))
                        || !devs.iter().any(|d| iif_holds(names, d)))
            }) =>
        {
            let devs = devices.as_deref().unwrap_or_default();
            flip(devs.iter().any(|d| iif_holds(names, d)), *negate)
        }
        Match::Saddr { nets, negate } if net_loopback_only(nets) => flip(false, *negate),
        Match::Saddr { nets, negate } if net_any(nets) => flip(true, *negate),
        Match::Daddr { nets, negate } => {
            if nets.iter().all(|n| n.starts_with("127.")) {
                return flip(false, *negate);
            }
            let Some(addrs) = facts.addresses.as_ref().filter(|a| !a.is_empty()) else {
                return Tri::Maybe(Cond::of(m));
            };
            let hits = |a: &std::net::Ipv4Addr| nets.iter().any(|n| net_holds(n, *a) == Some(true));
            let readable = nets
                .iter()
                .all(|n| net_holds(n, std::net::Ipv4Addr::UNSPECIFIED).is_some());
            if !readable {
                Tri::Maybe(Cond::of(m))
            } else if addrs.iter().all(hits) {
                flip(true, *negate)
            } else if !addrs.iter().any(hits) {
                flip(false, *negate)
            } else {
                Tri::Maybe(Cond::of(m))
            }
        }
        Match::SPort { ranges, negate } => {
            if in_ranges(EPHEMERAL_LOW, ranges)
                && ranges
                    .iter()
                    .any(|&(lo, hi)| lo <= EPHEMERAL_LOW && hi == u16::MAX)
            {
                flip(true, *negate)
            } else if ranges.iter().all(|&(_, hi)| hi < EPHEMERAL_LOW) {
                flip(false, *negate)
            } else {
                let ports = crate::profile::job::format_ports(ranges).replace(' ', "");
                Tri::Maybe(Cond {
                    test: Match::Unfixed {
                        text: format!("the peer's source port is in {ports}"),
                    },
                    holds: !negate,
                })
            }
        }
        // Unmarked, the masked mark is 0.
        Match::Mark {
            value,
            mask,
            negate,
            text,
        } => {
            if mask & facts.mark_bits != 0 {
                Tri::Unknown(format!("{text} (a rule of the ruleset sets marks)"))
            } else {
                flip(*value == 0, *negate)
            }
        }
        Match::Bridged { negate } => match facts.bridged {
            Some(bridged) => flip(bridged, *negate),
            None => Tri::Maybe(Cond::of(m)),
        },
        Match::Iif { .. } | Match::Saddr { .. } | Match::Set { .. } | Match::Unfixed { .. } => {
            Tri::Maybe(Cond::of(m))
        }
        // A new connection's first packet, as this chain sees it.
        Match::CtState { states, negate } => match conntrack.state() {
            Ok(state) => flip(states.iter().any(|s| s == state), *negate),
            Err(why) => Tri::Unknown(why.to_string()),
        },
        Match::CtStatus { holds, text } => match conntrack {
            Conntrack::Tracked => flip(*holds, false),
            Conntrack::NotYet => Tri::False,
            Conntrack::Unsure => Tri::Unknown(format!(
                "{text} in a prerouting chain of priority {}, where conntrack itself runs",
                Conntrack::PRIORITY
            )),
            Conntrack::Bridge => Tri::Unknown(format!("{text} in a bridge family chain")),
        },
        Match::Fixed { holds, .. } => flip(*holds, false),
        Match::Unknown { text } | Match::Forked { text, .. } => Tri::Unknown(text.clone()),
    }
}

/// One in-progress walk through a chain.
#[derive(Clone)]
struct State {
    conditions: Vec<Cond>,
}

impl State {
    /// Whether the walk already assumed this condition (true) or its opposite (false).
    fn assumes(&self, c: &Cond) -> Option<bool> {
        if self.conditions.contains(c) {
            Some(true)
        } else if self.conditions.contains(&c.opposite()) {
            Some(false)
        } else {
            None
        }
    }

    /// The interface/source conditions, as findings show them (an unmodelled test the
    /// walk forked on is no condition a user can meet).
    fn texts(&self) -> Vec<String> {
        self.conditions
            .iter()
            .filter(|c| !matches!(c.test, Match::Forked { .. }))
            .map(Cond::text)
            .collect()
    }

    /// The first unmodelled test this walk forked on (a [`Match::Forked`]).
    fn unmodelled(conditions: &[Cond]) -> Option<&Match> {
        conditions
            .iter()
            .map(|c| &c.test)
            .find(|t| matches!(t, Match::Forked { .. }))
    }
}

enum Step {
    /// The chain finished: back to the caller (or the policy for a base chain).
    Return(State),
    /// A verdict, with the conditions the walk assumed (an accept goes on to the next base
    /// chain with them).
    End(Vec<Cond>, Walk),
}

struct Walker<'a> {
    table: &'a Table,
    port: u16,
    /// Where the base chain of this walk runs relative to conntrack.
    conntrack: Conntrack,
    /// An ingress or bridge chain (see [`judge`]).
    link: bool,
    facts: &'a Facts,
    /// Forks so far: carried from one base chain to the next, so that many branching
    /// chains cannot make one evaluation exponential.
    walks: usize,
}

impl Walker<'_> {
    fn place(&self, chain: &Chain, rule: &Rule) -> Place {
        Place {
            tool: self.table.tool,
            table: self.table.id.clone(),
            chain: chain.name.clone(),
            position: rule.position,
        }
    }

    fn chain(&mut self, name: &str, state: State, depth: usize) -> Vec<Step> {
        let Some(chain) = self.table.chains.get(name) else {
            return vec![Step::End(
                state.conditions.clone(),
                Walk {
                    conditions: state.texts(),
                    verdict: Verdict::CannotTell(format!(
                        "jump to chain {name}, which {} lacks",
                        self.table.name
                    )),
                    decided_by: format!("{} chain {name}", self.table.name),
                    decided_at: None,
                },
            )];
        };
        if depth > MAX_DEPTH {
            return vec![Step::End(
                state.conditions.clone(),
                Walk {
                    conditions: state.texts(),
                    verdict: Verdict::CannotTell("jumps nest deeper than 32 (a loop?)".into()),
                    decided_by: format!("{} chain {name}", self.table.name),
                    decided_at: None,
                },
            )];
        }
        self.rules(chain, 0, state, depth)
    }

    /// Whether every test holds (false when one fails), the interface/source conditions
    /// it holds under, and the first test that cannot be told.
    fn test(&self, matches: &[Match], state: &State) -> (bool, Vec<Cond>, Option<String>) {
        let mut forks: Vec<Cond> = Vec::new();
        let mut unknown = None;
        for m in matches {
            let tri = match judge(m, self.port, self.conntrack, self.facts, self.link) {
                // What this walk already assumed about the interface or source decides.
                Tri::Maybe(c) => match state.assumes(&c) {
                    Some(true) => Tri::True,
                    Some(false) => Tri::False,
                    None if forks.contains(&c) => Tri::True,
                    None if forks.contains(&c.opposite()) => Tri::False,
                    None => Tri::Maybe(c),
                },
                other => other,
            };
            match tri {
                Tri::True => {}
                Tri::False => return (false, Vec::new(), None),
                Tri::Maybe(c) => forks.push(c),
                Tri::Unknown(t) => unknown = unknown.or(Some(t)),
            }
        }
        (true, forks, unknown)
    }

    /// Counts one more way that depends on the interface or source; past [`MAX_WALKS`] the
    /// way ends at `rule`, undecided.
    fn one_walk_more(&mut self, chain: &Chain, rule: &Rule, state: &State) -> Option<Vec<Step>> {
        self.walks += 1;
        (self.walks > MAX_WALKS).then(|| {
            vec![Step::End(
                state.conditions.clone(),
                Walk {
                    conditions: state.texts(),
                    verdict: Verdict::CannotTell(
                        "too many interface/source-dependent branches to follow".into(),
                    ),
                    decided_by: rule.label.clone(),
                    decided_at: Some(self.place(chain, rule)),
                },
            )]
        })
    }

    /// The two ways on from a rule (or map entry) whose other tests hold but one test is
    /// not modelled: taken (that test holds, with the interface/source `forks`) and skipped
    /// (it fails). Each way is marked with the test, so that [`evaluate_with`] says "cannot
    /// tell" when the ways end differently. Past the fork budget, "cannot tell" at once.
    fn unknown_fork(
        &mut self,
        chain: &Chain,
        rule: &Rule,
        state: &State,
        forks: &[Cond],
        text: String,
    ) -> Result<(State, State), Vec<Step>> {
        self.walks += 1;
        if self.walks > MAX_WALKS {
            return Err(vec![Step::End(
                state.conditions.clone(),
                Walk {
                    conditions: state.texts(),
                    verdict: Verdict::CannotTell(format!("`{text}` is not modelled")),
                    decided_by: rule.label.clone(),
                    decided_at: Some(self.place(chain, rule)),
                },
            )]);
        }
        let test = Match::Forked {
            text,
            label: rule.label.clone(),
            at: Some(self.place(chain, rule)),
        };
        let mut taken = state.clone();
        taken.conditions.extend(forks.iter().cloned());
        taken.conditions.push(Cond {
            test: test.clone(),
            holds: true,
        });
        let mut skipped = state.clone();
        skipped.conditions.push(Cond { test, holds: false });
        Ok((taken, skipped))
    }

    fn rules(&mut self, chain: &Chain, from: usize, state: State, depth: usize) -> Vec<Step> {
        for (index, rule) in chain.rules.iter().enumerate().skip(from) {
            // A rule that only counts or logs changes nothing, whatever it matches. (A
            // statement the model does not understand is an `Action::Unknown`, never this.)
            if rule.action == Action::Continue {
                continue;
            }
            let (holds, forks, unknown) = self.test(&rule.matches, &state);
            if !holds {
                continue;
            }
            if let Some(text) = unknown {
                // Follow both ways: when every way ends the same, the test did not matter.
                let (taken, skipped) = match self.unknown_fork(chain, rule, &state, &forks, text) {
                    Ok(ways) => ways,
                    Err(end) => return end,
                };
                let mut steps = self.act(chain, index, rule, taken, depth);
                steps.extend(self.rules(chain, index + 1, skipped, depth));
                return steps;
            }
            if forks.is_empty() {
                return self.act(chain, index, rule, state, depth);
            }
            // The verdict depends on the interface or source: follow both ways.
            if let Some(end) = self.one_walk_more(chain, rule, &state) {
                return end;
            }
            let mut taken = state.clone();
            taken.conditions.extend(forks.iter().cloned());
            let mut steps = self.act(chain, index, rule, taken, depth);
            for skipped in failing_ways(&state, &forks) {
                steps.extend(self.rules(chain, index + 1, skipped, depth));
            }
            return steps;
        }
        state_return(state)
    }

    fn act(
        &mut self,
        chain: &Chain,
        index: usize,
        rule: &Rule,
        state: State,
        depth: usize,
    ) -> Vec<Step> {
        let place = self.place(chain, rule);
        let end = |verdict, state: State| {
            vec![Step::End(
                state.conditions.clone(),
                Walk {
                    conditions: state.texts(),
                    verdict,
                    decided_by: rule.label.clone(),
                    decided_at: Some(place.clone()),
                },
            )]
        };
        if let Action::Map(entries) = &rule.action {
            return self.map(chain, index, rule, entries, 0, state, depth);
        }
        let action = match &rule.action {
            Action::DPortMap(entries) => entries
                .iter()
                .find(|((lo, hi), _)| *lo <= self.port && self.port <= *hi)
                .map(|(_, a)| a.clone())
                .unwrap_or(Action::Continue),
            Action::CtStateMap(entries) => match self.conntrack.state() {
                Ok(ct) => entries
                    .iter()
                    .find(|(states, _)| states.iter().any(|s| s == ct))
                    .map(|(_, a)| a.clone())
                    .unwrap_or(Action::Continue),
                Err(why) => {
                    return end(Verdict::CannotTell(format!("{why} is not modelled")), state);
                }
            },
            other => other.clone(),
        };
        match action {
            Action::Accept => end(Verdict::Accepted, state),
            Action::Drop | Action::Reject => end(Verdict::Dropped, state),
            Action::Unknown(text) => end(
                Verdict::CannotTell(format!("verdict `{text}` is not modelled")),
                state,
            ),
            Action::Continue => self.rules(chain, index + 1, state, depth),
            Action::Return => state_return(state),
            Action::Goto(target) => self.chain(&target, state, depth + 1),
            Action::Jump(target) => {
                let mut steps = Vec::new();
                for step in self.chain(&target, state, depth + 1) {
                    match step {
                        Step::Return(back) => {
                            steps.extend(self.rules(chain, index + 1, back, depth))
                        }
                        end @ Step::End(..) => steps.push(end),
                    }
                }
                steps
            }
            Action::DPortMap(_) | Action::CtStateMap(_) | Action::Map(_) => {
                end(Verdict::CannotTell("nested verdict map".into()), state)
            }
        }
    }

    /// A verdict map from entry `from` on: the first entry whose tests hold acts as the
    /// rule would with that verdict; an entry that holds only for some interface or source
    /// forks like a rule; none holding goes on after the rule.
    #[allow(clippy::too_many_arguments)]
    fn map(
        &mut self,
        chain: &Chain,
        index: usize,
        rule: &Rule,
        entries: &[(Vec<Match>, Action)],
        from: usize,
        state: State,
        depth: usize,
    ) -> Vec<Step> {
        let as_rule = |action: &Action| Rule {
            action: action.clone(),
            ..rule.clone()
        };
        for (at, (tests, action)) in entries.iter().enumerate().skip(from) {
            let (holds, forks, unknown) = self.test(tests, &state);
            if !holds {
                continue;
            }
            if let Some(text) = unknown {
                let (taken, skipped) = match self.unknown_fork(chain, rule, &state, &forks, text) {
                    Ok(ways) => ways,
                    Err(end) => return end,
                };
                let mut steps = self.act(chain, index, &as_rule(action), taken, depth);
                steps.extend(self.map(chain, index, rule, entries, at + 1, skipped, depth));
                return steps;
            }
            if matches!(action, Action::Map(_)) {
                return self.act(chain, index, &as_rule(action), state, depth);
            }
            if forks.is_empty() {
                return self.act(chain, index, &as_rule(action), state, depth);
            }
            if let Some(end) = self.one_walk_more(chain, rule, &state) {
                return end;
            }
            let mut taken = state.clone();
            taken.conditions.extend(forks.iter().cloned());
            let mut steps = self.act(chain, index, &as_rule(action), taken, depth);
            for skipped in failing_ways(&state, &forks) {
                steps.extend(self.map(chain, index, rule, entries, at + 1, skipped, depth));
            }
            return steps;
        }
        self.rules(chain, index + 1, state, depth)
    }
}

/// The ways on when a rule's interface/source `forks` do not all hold: at least one
/// condition fails, and with several each failure is its own way (the conditions before it
/// holding), which keeps the ways exact.
fn failing_ways<'a>(state: &'a State, forks: &'a [Cond]) -> impl Iterator<Item = State> + 'a {
    forks.iter().enumerate().map(move |(i, c)| {
        let mut skipped = state.clone();
        skipped.conditions.extend(forks[..i].iter().cloned());
        skipped.conditions.push(c.opposite());
        skipped
    })
}

fn state_return(state: State) -> Vec<Step> {
    vec![Step::Return(state)]
}

/// Every base chain on the receive path, in the order the kernel runs them.
pub(crate) fn base_chains(tables: &[Table]) -> Vec<(&Table, &Chain, &Base)> {
    let mut bases: Vec<(&Table, &Chain, &Base)> = tables
        .iter()
        .flat_map(|t| {
            t.chains
                .values()
                .filter_map(move |c| c.base.as_ref().map(|b| (t, c, b)))
        })
        .collect();
    bases.sort_by_key(|(_, _, b)| (b.hook, b.priority));
    bases
}

/// Every way a new TCP connection to `port` from another node can go through the ruleset.
/// An accept ends one base chain only; the packet must be accepted by all of them.
pub(crate) fn evaluate(tables: &[Table], port: u16) -> Vec<Walk> {
    evaluate_with(tables, port, &Facts::default())
}

/// As [`evaluate`], with what is known of the node (its addresses); whether marks are set
/// is read from the tables.
pub(crate) fn evaluate_with(tables: &[Table], port: u16, facts: &Facts) -> Vec<Walk> {
    let facts = Facts {
        mark_bits: tables
            .iter()
            .fold(facts.mark_bits, |bits, t| bits | t.mark_bits),
        ..facts.clone()
    };
    let facts = &facts;
    let mut forks = 0;
    let tracking = tables.iter().any(|t| t.conntrack);
    // Each walk with the conditions it assumed, structured, for the next base chain.
    let mut walks = vec![(
        Walk {
            conditions: Vec::new(),
            verdict: Verdict::Accepted,
            decided_by: "no filtering chain on the input path".into(),
            decided_at: None,
        },
        Vec::new(),
    )];
    for (table, chain, base) in base_chains(tables) {
        if base.kind == ChainKind::Nat && !tracking {
            continue;
        }
        let mut next = Vec::new();
        for (walk, conditions) in walks {
            if walk.verdict != Verdict::Accepted {
                next.push((walk, conditions));
                continue;
            }
            let mut walker = Walker {
                table,
                port,
                conntrack: Conntrack::of(base),
                link: matches!(
                    base.hook,
                    Hook::Ingress | Hook::BridgePrerouting | Hook::BridgeInput
                ),
                facts,
                walks: forks,
            };
            let start = State { conditions };
            let steps = walker.chain(&chain.name, start, 0);
            forks = walker.walks;
            for step in steps {
                let (walk, conditions) = match step {
                    Step::End(conditions, w) => (w, conditions),
                    Step::Return(state) => (
                        Walk {
                            conditions: state.texts(),
                            verdict: match base.policy {
                                Policy::Accept => Verdict::Accepted,
                                Policy::Drop => Verdict::Dropped,
                            },
                            decided_by: format!(
                                "policy {} of {} chain {}",
                                match base.policy {
                                    Policy::Accept => "accept",
                                    Policy::Drop => "drop",
                                },
                                table.name,
                                chain.name
                            ),
                            decided_at: Some(Place {
                                tool: table.tool,
                                table: table.id.clone(),
                                chain: chain.name.clone(),
                                position: None,
                            }),
                        },
                        state.conditions,
                    ),
                };
                next.push((walk, conditions));
            }
        }
        walks = next;
    }
    // A walk that forked on an unmodelled test is decided only when every way through
    // the ruleset ends the same: then the test's truth does not matter.
    let same = walks.iter().all(|(w, _)| w.verdict == walks[0].0.verdict);
    walks
        .into_iter()
        .map(|(mut walk, conditions)| {
            if let Some(Match::Forked { text, label, at }) =
                State::unmodelled(&conditions).filter(|_| !same)
                && !matches!(walk.verdict, Verdict::CannotTell(_))
            {
                walk.verdict = Verdict::CannotTell(format!("`{text}` is not modelled"));
                walk.decided_by = label.clone();
                walk.decided_at = at.clone();
            }
            walk
        })
        .collect()
}

/// The ipsets the rules test, by name.
pub(crate) fn set_names(tables: &[Table]) -> Vec<String> {
    let mut names: Vec<String> = tables
        .iter()
        .flat_map(|t| t.chains.values())
        .flat_map(|c| &c.rules)
        .flat_map(|r| &r.matches)
        .filter_map(|m| match m {
            Match::Set { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The ports of an ipset by name, `None` for a set of other members.
pub(crate) type PortsOf<'a> = dyn Fn(&str) -> Option<Vec<(u16, u16)>> + 'a;

/// Replaces a test of a port ipset (`-m set --match-set ports dst`) by the port test it
/// is, where `ports(name)` gives the set's ports: decided, instead of "depends".
pub(crate) fn resolve_port_sets(tables: &mut [Table], ports: &PortsOf<'_>) {
    for rule in tables
        .iter_mut()
        .flat_map(|t| t.chains.values_mut())
        .flat_map(|c| c.rules.iter_mut())
    {
        for m in rule.matches.iter_mut() {
            let Match::Set { name, dirs, negate } = m else {
                continue;
            };
            let Some(ranges) = ports(name) else { continue };
            let negate = *negate;
            *m = match dirs.as_str() {
                "dst" => Match::DPort { ranges, negate },
                "src" => Match::SPort { ranges, negate },
                _ => continue,
            };
        }
    }
}

/// Whether some test turns on the node's addresses or bridges (see [`Facts`]).
pub(crate) fn wants_facts(tables: &[Table]) -> bool {
    let wanted = |m: &Match| {
        matches!(
            m,
            Match::Daddr { .. } | Match::Bridged { .. } | Match::Iif { .. }
        )
    };
    tables
        .iter()
        .flat_map(|t| t.chains.values())
        .flat_map(|c| &c.rules)
        .any(|r| {
            r.matches.iter().any(wanted)
                || matches!(&r.action, Action::Map(entries)
                    if entries.iter().flat_map(|(tests, _)| tests).any(wanted))
        })
}

/// Ports where some rule's port match changes, so one port stands for each stretch between.
pub(crate) fn segments(tables: &[Table], lo: u16, hi: u16) -> Vec<(u16, u16)> {
    let mut cuts: Vec<u32> = vec![u32::from(lo), u32::from(hi) + 1];
    let mut add = |ranges: &[(u16, u16)]| {
        for &(a, b) in ranges {
            for cut in [u32::from(a), u32::from(b) + 1] {
                if cut > u32::from(lo) && cut <= u32::from(hi) {
                    cuts.push(cut);
                }
            }
        }
    };
    for table in tables {
        for chain in table.chains.values() {
            for rule in &chain.rules {
                for m in &rule.matches {
                    if let Match::DPort { ranges, .. } = m {
                        add(ranges);
                    }
                }
                if let Action::DPortMap(entries) = &rule.action {
                    let ranges: Vec<(u16, u16)> = entries.iter().map(|(r, _)| *r).collect();
                    add(&ranges);
                }
                if let Action::Map(entries) = &rule.action {
                    for m in entries.iter().flat_map(|(tests, _)| tests) {
                        if let Match::DPort { ranges, .. } = m {
                            add(ranges);
                        }
                    }
                }
            }
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| (w[0] as u16, (w[1] - 1) as u16))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
