//! `nft -j list ruleset` → [`Table`]s. Matches and statements outside the model become
//! [`Match::Unknown`] / [`Action::Unknown`], so the evaluation says "cannot tell" instead of
//! guessing.

use std::collections::BTreeMap;

use serde_json::Value;

use super::model::{Action, Base, Chain, ChainKind, Hook, Match, Policy, Rule, Table, Tool};

/// Why `nft -j` output could not be read; the objects it names are quoted as JSON.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("nft -j output is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("nft -j output has no `nftables` array")]
    NoArray,
    #[error("nft table without family or name: {0}")]
    UnnamedTable(Value),
    #[error("nft chain without a name: {0}")]
    UnnamedChain(Value),
    #[error("nft base chain without a numeric priority: {0}")]
    NoPriority(Value),
    #[error("nft chain policy `{0}` is not accept or drop")]
    Policy(String),
}

/// Parses the JSON document; only `ip`, `inet`, `netdev` and `bridge` tables can filter
/// IPv4 input (an `arp` table that filters is named as "cannot tell"). A table whose flags
/// `nft -j` prints unreadably is kept, which can only make the verdict stricter.
pub fn parse(json: &str) -> Result<Vec<Table>, NftError> {
    parse_with(json, &|_, _| None)
}

/// The devices of each ingress chain in `nft list table netdev NAME`'s text (`nft -j`
/// 1.0.6 leaves them out): `hook ingress device "eth0"` or `devices = { eth0, eth1 }`.
pub(crate) fn ingress_devices(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut chain = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("chain ") {
            chain = rest
                .split_whitespace()
                .next()
                .map(|n| n.trim_matches('"').to_string());
            continue;
        }
        let Some((_, after)) = line.split_once("hook ingress ") else {
            continue;
        };
        let Some(name) = chain.clone() else { continue };
        let names: Vec<String> = if let Some(rest) = after.strip_prefix("devices = {") {
            let list = rest.split('}').next().unwrap_or_default();
            list.split(',')
                .map(|d| d.trim().trim_matches('"').to_string())
                .filter(|d| !d.is_empty())
                .collect()
        } else if let Some(rest) = after.strip_prefix("device ") {
            rest.split_whitespace()
                .next()
                .map(|d| d.trim_end_matches(';').trim_matches('"').to_string())
                .into_iter()
                .collect()
        } else {
            Vec::new()
        };
        if !names.is_empty() {
            out.insert(name, names);
        }
    }
    out
}

/// As [`parse`]; `dormant(family, name)` says whether a table whose JSON `flags` cannot be
/// read is dormant (nft 1.0.6 prints garbage there). The kernel never runs a dormant table.
pub(crate) fn parse_with(
    json: &str,
    dormant: &dyn Fn(&str, &str) -> Option<bool>,
) -> Result<Vec<Table>, NftError> {
    parse_full(json, dormant, &|_, _| BTreeMap::new())
}

/// Each ingress chain's devices (by chain name) of a table, given its family and name.
pub(crate) type Devices<'a> = dyn Fn(&str, &str) -> BTreeMap<String, Vec<String>> + 'a;

/// As [`parse_with`]; `devices(family, table)` names each ingress chain's devices where
/// `nft -j` does not.
pub(crate) fn parse_full(
    json: &str,
    dormant: &dyn Fn(&str, &str) -> Option<bool>,
    devices: &Devices<'_>,
) -> Result<Vec<Table>, NftError> {
    let doc: Value = serde_json::from_str(json).map_err(NftError::NotJson)?;
    let items = doc
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or(NftError::NoArray)?;

    let mut tables: BTreeMap<(String, String), Table> = BTreeMap::new();
    let mut sets: BTreeMap<(String, String, String), Vec<Value>> = BTreeMap::new();
    let key = |o: &Value| -> Option<(String, String)> {
        Some((
            o.get("family")?.as_str()?.to_string(),
            o.get("table")?.as_str()?.to_string(),
        ))
    };
    let relevant = |family: &str| matches!(family, "ip" | "inet" | "netdev" | "bridge");
    let mut chain_devices: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();

    for item in items {
        if let Some(t) = item.get("table") {
            let (Some(family), Some(name)) = (
                t.get("family").and_then(Value::as_str),
                t.get("name").and_then(Value::as_str),
            ) else {
                return Err(NftError::UnnamedTable(t.clone()));
            };
            if relevant(family) || family == "arp" {
                if is_dormant(t, &|| dormant(family, name)) {
                    continue;
                }
                tables.insert(
                    (family.into(), name.into()),
                    Table {
                        name: format!("nftables {family} {name}"),
                        id: format!("{family} {name}"),
                        tool: Tool::Nftables,
                        chains: BTreeMap::new(),
                        conntrack: false,
                        mark_bits: 0,
                    },
                );
            }
        } else if let Some(s) = item.get("set").or_else(|| item.get("map"))
            && let (Some((family, table)), Some(name)) =
                (key(s), s.get("name").and_then(Value::as_str))
        {
            // Sets and maps share one namespace per table; a map's elements are
            // `[key, value]` pairs, which only `vmap` reads.
            let elems = s
                .get("elem")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            sets.insert((family, table, name.into()), elems);
        }
    }
    for item in items {
        if let Some(c) = item.get("chain") {
            let Some(k) = key(c) else { continue };
            let Some(table) = tables.get_mut(&k) else {
                continue;
            };
            let Some(name) = c.get("name").and_then(Value::as_str) else {
                return Err(NftError::UnnamedChain(c.clone()));
            };
            // Newer nft prints an ingress chain's devices as `dev` (one or a list).
            let dev: Option<Vec<String>> = match c.get("dev") {
                Some(Value::String(d)) => Some(vec![d.clone()]),
                Some(Value::Array(a)) => a.iter().map(|d| d.as_str().map(str::to_string)).collect(),
                _ => None,
            };
            if let Some(dev) = dev.filter(|d| !d.is_empty()) {
                chain_devices.insert((k.0.clone(), k.1.clone(), name.to_string()), dev);
            }
            table.chains.insert(
                name.into(),
                Chain {
                    name: name.into(),
                    base: base_of(c)?,
                    rules: Vec::new(),
                },
            );
        }
    }
    for item in items {
        let Some(r) = item.get("rule") else { continue };
        let Some(k) = key(r) else { continue };
        let Some(table) = tables.get_mut(&k) else {
            continue;
        };
        let chain_name = r
            .get("chain")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let handle = r.get("handle").and_then(Value::as_u64).unwrap_or(0);
        let exprs = r
            .get("expr")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let table_sets = |name: &str| {
            sets.get(&(k.0.clone(), k.1.clone(), name.to_string()))
                .cloned()
        };
        let mut rule = rule_of(
            &exprs,
            &table_sets,
            &format!("{} chain {chain_name} handle {handle}", table.name),
            r.get("comment").and_then(Value::as_str),
        );
        rule.position = Some(handle);
        table.conntrack |= exprs.iter().any(tracks);
        table.mark_bits |= exprs
            .iter()
            .filter_map(|e| e.get("mangle"))
            .map(mark_bits)
            .fold(0, |a, b| a | b);
        if let Some(chain) = table.chains.get_mut(&chain_name) {
            chain.rules.push(rule);
        }
    }
    // An ingress chain sees only its devices' packets: those of another device pass it.
    // A bridge family chain sees only packets that arrive through a bridge port.
    for ((family, table_name), table) in tables.iter_mut() {
        let mut listed: Option<BTreeMap<String, Vec<String>>> = None;
        for chain in table.chains.values_mut() {
            let Some(hook) = chain.base.as_ref().map(|b| b.hook) else {
                continue;
            };
            let gate = match hook {
                Hook::Ingress => {
                    let key = (family.clone(), table_name.clone(), chain.name.clone());
                    let names = chain_devices.get(&key).cloned().or_else(|| {
                        listed
                            .get_or_insert_with(|| devices(family, table_name))
                            .get(&chain.name)
                            .cloned()
                    });
                    match names {
                        Some(names) => (
                            format!(
                                "{} chain {} (ingress on {})",
                                table.name,
                                chain.name,
                                names.join(",")
                            ),
                            Match::Iif {
                                names,
                                negate: true,
                            },
                        ),
                        None => (
                            format!(
                                "{} chain {} (ingress: only packets of its device)",
                                table.name, chain.name
                            ),
                            Match::Unfixed {
                                text: format!(
                                    "arrives on a device other than that of ingress chain {}",
                                    chain.name
                                ),
                            },
                        ),
                    }
                }
                Hook::BridgePrerouting | Hook::BridgeInput => (
                    format!(
                        "{} chain {} (bridge: only packets through a bridge port)",
                        table.name, chain.name
                    ),
                    Match::Bridged { negate: true },
                ),
                _ => continue,
            };
            chain.rules.insert(
                0,
                Rule {
                    label: gate.0,
                    position: None,
                    matches: vec![gate.1],
                    action: Action::Accept,
                },
            );
        }
    }
    let mut out: Vec<Table> = Vec::new();
    for ((family, _), table) in tables {
        if family == "arp" {
            out.extend(arp_filter(table));
        } else {
            out.push(table);
        }
    }
    Ok(out)
}

/// The `ip` tables (by name) with a rule nft can only show as `xt`: iptables-nft wrote it
/// with an extension nft does not translate, so only iptables-nft-save can tell what it
/// does. Every other table is read from nft's JSON, which is complete.
pub(crate) fn tables_with_xt(json: &str) -> Vec<String> {
    let Ok(doc) = serde_json::from_str::<Value>(json) else {
        return Vec::new();
    };
    let mut names: Vec<String> = doc
        .get("nftables")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("rule"))
        .filter(|r| r.get("family").and_then(Value::as_str) == Some("ip"))
        .filter(|r| r.get("expr").is_some_and(has_xt))
        .filter_map(|r| r.get("table").and_then(Value::as_str).map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

fn has_xt(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.iter().any(|(k, body)| k == "xt" || has_xt(body)),
        Value::Array(a) => a.iter().any(has_xt),
        _ => false,
    }
}

/// Whether a table is dormant: `flags` names `dormant`, or cannot be read and `unreadable`
/// says so.
fn is_dormant(table: &Value, unreadable: &dyn Fn() -> Option<bool>) -> bool {
    const KNOWN: &[&str] = &["dormant", "owner", "persist"];
    let flags: Option<Vec<&str>> = match table.get("flags") {
        None => Some(Vec::new()),
        Some(Value::String(s)) => Some(vec![s.as_str()]),
        Some(Value::Array(a)) => a.iter().map(Value::as_str).collect(),
        Some(_) => None,
    };
    match flags {
        Some(flags) if flags.iter().all(|f| KNOWN.contains(f)) => flags.contains(&"dormant"),
        _ => unreadable().unwrap_or(false),
    }
}

/// An `arp` table that can drop ARP on input breaks every connection it stops the node
/// answering, which the model does not follow: it stands as one rule that says so, met
/// first on the way in.
fn arp_filter(table: Table) -> Option<Table> {
    // Rules that only count change nothing.
    let chain = table.chains.values().find(|c| {
        c.base.as_ref().is_some_and(|b| {
            b.policy == Policy::Drop || c.rules.iter().any(|r| r.action != Action::Continue)
        })
    })?;
    let name = "arp".to_string();
    let text = format!(
        "ARP filtering in {} chain {} (policy {}, {} rules)",
        table.name,
        chain.name,
        match chain.base.as_ref().map(|b| b.policy) {
            Some(Policy::Drop) => "drop",
            _ => "accept",
        },
        chain.rules.len()
    );
    let rule = Rule {
        label: text.clone(),
        position: None,
        matches: vec![Match::Unknown { text }],
        action: Action::Drop,
    };
    Some(Table {
        chains: BTreeMap::from([(
            name.clone(),
            Chain {
                name,
                base: Some(Base {
                    hook: Hook::Ingress,
                    priority: i32::MIN,
                    policy: Policy::Accept,
                    kind: ChainKind::Filter,
                }),
                rules: vec![rule],
            },
        )]),
        ..table
    })
}

/// Whether an expression makes the kernel track connections: a `ct` expression or
/// statement, a nat statement, an iptables-nft conntrack match or nat target.
fn tracks(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.iter().any(|(k, body)| {
            matches!(
                k.as_str(),
                "ct" | "dnat"
                    | "snat"
                    | "masquerade"
                    | "redirect"
                    | "ct helper"
                    | "ct count"
                    | "synproxy"
            ) || (k == "xt"
                && body.get("name").and_then(Value::as_str).is_some_and(|n| {
                    matches!(
                        n,
                        "conntrack"
                            | "state"
                            | "connmark"
                            | "connlimit"
                            | "helper"
                            | "DNAT"
                            | "SNAT"
                            | "MASQUERADE"
                            | "REDIRECT"
                            | "CT"
                            | "CONNMARK"
                            | "SYNPROXY"
                    )
                }))
                || tracks(body)
        }),
        Value::Array(a) => a.iter().any(tracks),
        _ => false,
    }
}

fn base_of(c: &Value) -> Result<Option<Base>, NftError> {
    let Some(hook) = c.get("hook").and_then(Value::as_str) else {
        return Ok(None);
    };
    let family = c.get("family").and_then(Value::as_str).unwrap_or_default();
    // Filter chains see every packet; nat chains a new connection's first packet when
    // conntrack runs (their drops and rewrites count then).
    let kind = match c.get("type").and_then(Value::as_str) {
        Some("filter") => ChainKind::Filter,
        Some("nat") => ChainKind::Nat,
        _ => return Ok(None),
    };
    let hook = match (family, hook) {
        ("arp", "input") => Hook::Input,
        ("arp", _) => return Ok(None),
        ("bridge", "prerouting") => Hook::BridgePrerouting,
        ("bridge", "input") => Hook::BridgeInput,
        ("bridge", _) => return Ok(None),
        (_, "input") => Hook::Input,
        ("ip" | "inet", "prerouting") => Hook::Prerouting,
        ("netdev" | "inet", "ingress") => Hook::Ingress,
        _ => return Ok(None),
    };
    let priority = c
        .get("prio")
        .and_then(Value::as_i64)
        .ok_or_else(|| NftError::NoPriority(c.clone()))?;
    let policy = match c.get("policy").and_then(Value::as_str) {
        None | Some("accept") => Policy::Accept,
        Some("drop") => Policy::Drop,
        Some(other) => return Err(NftError::Policy(other.to_string())),
    };
    Ok(Some(Base {
        hook,
        priority: priority as i32,
        policy,
        kind,
    }))
}

/// Port ranges of a `right` side: 22, {"range":[a,b]}, {"set":[...]}, "@set".
fn ports(right: &Value, sets: &dyn Fn(&str) -> Option<Vec<Value>>) -> Option<Vec<(u16, u16)>> {
    let one = |v: &Value| -> Option<(u16, u16)> {
        if let Some(n) = v.as_u64() {
            let p = u16::try_from(n).ok()?;
            return Some((p, p));
        }
        let r = v.get("range")?.as_array()?;
        let lo = u16::try_from(r.first()?.as_u64()?).ok()?;
        let hi = u16::try_from(r.get(1)?.as_u64()?).ok()?;
        Some((lo, hi))
    };
    if let Some(name) = right.as_str().and_then(|s| s.strip_prefix('@')) {
        let elems = sets(name)?;
        return elems
            .iter()
            .map(|e| one(e.get("elem").and_then(|x| x.get("val")).unwrap_or(e)))
            .collect();
    }
    if let Some(items) = right.get("set").and_then(Value::as_array) {
        return items.iter().map(one).collect();
    }
    one(right).map(|r| vec![r])
}

/// Words of a `right` side: "lo", ["established","related"], {"set":[...]}, "@set".
fn words(right: &Value, sets: &dyn Fn(&str) -> Option<Vec<Value>>) -> Option<Vec<String>> {
    if let Some(s) = right.as_str() {
        if let Some(name) = s.strip_prefix('@') {
            return sets(name)?
                .iter()
                .map(|v| element(v).as_str().map(str::to_string))
                .collect();
        }
        return Some(vec![s.to_string()]);
    }
    let list = right
        .as_array()
        .or_else(|| right.get("set").and_then(Value::as_array))?;
    list.iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Addresses of a `right` side: "10.0.0.1", {"prefix":{"addr","len"}}, sets of those.
fn nets(right: &Value, sets: &dyn Fn(&str) -> Option<Vec<Value>>) -> Option<Vec<String>> {
    let one = |v: &Value| -> Option<String> {
        if let Some(s) = v.as_str() {
            return Some(s.to_string());
        }
        let p = v.get("prefix")?;
        Some(format!(
            "{}/{}",
            p.get("addr")?.as_str()?,
            p.get("len")?.as_u64()?
        ))
    };
    if let Some(name) = right.as_str().and_then(|s| s.strip_prefix('@')) {
        // Elements may carry a time-out, expiry or comment (fail2ban, crowdsec, sshguard).
        return sets(name)?.iter().map(|e| one(element(e))).collect();
    }
    if let Some(items) = right.get("set").and_then(Value::as_array) {
        return items.iter().map(one).collect();
    }
    one(right).map(|n| vec![n])
}

fn match_of(m: &Value, sets: &dyn Fn(&str) -> Option<Vec<Value>>) -> Match {
    let text = || {
        format!(
            "{} {} {}",
            m.get("left").map(short).unwrap_or_default(),
            m.get("op").and_then(Value::as_str).unwrap_or("=="),
            m.get("right").map(Value::to_string).unwrap_or_default()
        )
    };
    let unknown = || Match::Unknown { text: text() };
    let op = m.get("op").and_then(Value::as_str).unwrap_or("==");
    let (Some(left), Some(right)) = (m.get("left"), m.get("right")) else {
        return unknown();
    };
    // `tcp flags ! syn`, `tcp flags ! fin,syn,rst,psh,ack,urg` (what iptables-nft writes for
    // `--tcp-flags ALL NONE`): none of these bits set. A SYN has only SYN.
    if op == "!" {
        return match (left.get("payload"), flag_names(right)) {
            (Some(p), Some(flags))
                if p.get("protocol").and_then(Value::as_str) == Some("tcp")
                    && p.get("field").and_then(Value::as_str) == Some("flags") =>
            {
                Match::Fixed {
                    holds: !flags.iter().any(|f| f == "syn"),
                    text: text(),
                }
            }
            _ => unknown(),
        };
    }
    let negate = match op {
        "==" | "in" => false,
        "!=" => true,
        _ => return unknown(),
    };
    if let Some(m) = masked(left, right, negate, &text) {
        return m;
    }
    if let Some(m) = tcp_flags(left, right, negate, op) {
        return m;
    }
    if let Some(p) = left.get("payload") {
        let protocol = p
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let field = p.get("field").and_then(Value::as_str).unwrap_or_default();
        return match (protocol, field) {
            ("tcp" | "th", "dport") => {
                ports(right, sets).map_or_else(unknown, |ranges| Match::DPort { ranges, negate })
            }
            ("tcp" | "th", "sport") => {
                ports(right, sets).map_or_else(unknown, |ranges| Match::SPort { ranges, negate })
            }
            ("ip", "saddr") => {
                nets(right, sets).map_or_else(unknown, |nets| Match::Saddr { nets, negate })
            }
            ("ip", "daddr") => {
                nets(right, sets).map_or_else(unknown, |nets| Match::Daddr { nets, negate })
            }
            // A peer's connection is IPv4.
            ("ip", "version") => match right.as_u64() {
                Some(v) => Match::Fixed {
                    holds: (v == 4) != negate,
                    text: text(),
                },
                None => unknown(),
            },
            // A peer's frame carries IPv4 (what a bridge or netdev chain sees).
            ("ether", "type") => match words(right, sets) {
                Some(types) => Match::Fixed {
                    holds: types.iter().any(|t| t == "ip") != negate,
                    text: text(),
                },
                None => unknown(),
            },
            ("ip", "protocol") => {
                words(right, sets).map_or_else(unknown, |protos| Match::Proto { protos, negate })
            }
            // Any test of another protocol's header implies that protocol: never our packet.
            (
                "ip6" | "icmp" | "icmpv6" | "udp" | "sctp" | "dccp" | "udplite" | "arp" | "vlan",
                _,
            ) => Match::Fixed {
                holds: false,
                text: format!("{protocol} {field}"),
            },
            _ => unknown(),
        };
    }
    if let Some(meta) = left.get("meta") {
        let key = meta.get("key").and_then(Value::as_str).unwrap_or_default();
        let list = words(right, sets);
        return match (key, list) {
            ("l4proto", Some(protos)) => Match::Proto { protos, negate },
            ("iifname" | "iif", Some(names)) => Match::Iif { names, negate },
            ("nfproto", Some(v)) => Match::Fixed {
                holds: v.iter().any(|f| f == "ipv4") != negate,
                text: text(),
            },
            ("protocol", Some(v)) => Match::Fixed {
                holds: v.iter().any(|f| f == "ip") != negate,
                text: text(),
            },
            ("pkttype", Some(v)) => Match::Fixed {
                holds: v.iter().any(|f| f == "host") != negate,
                text: text(),
            },
            ("mark", _) => match right.as_u64().and_then(|v| u32::try_from(v).ok()) {
                Some(value) => Match::Mark {
                    value,
                    mask: u32::MAX,
                    negate,
                    text: text(),
                },
                None => unknown(),
            },
            _ => unknown(),
        };
    }
    if let Some(ct) = left.get("ct") {
        let key = ct.get("key").and_then(Value::as_str).unwrap_or_default();
        return match (key, words(right, sets)) {
            ("state", Some(states)) => Match::CtState { states, negate },
            // A new connection addressed to the node itself carries no NAT or reply status.
            ("status", Some(_)) => Match::CtStatus {
                holds: negate,
                text: text(),
            },
            // A connection's mark is 0 unless a rule sets it (which `sets_mark` records).
            ("mark", _) => match right.as_u64().and_then(|v| u32::try_from(v).ok()) {
                Some(value) => Match::Mark {
                    value,
                    mask: u32::MAX,
                    negate,
                    text: text(),
                },
                None => unknown(),
            },
            _ => unknown(),
        };
    }
    if let Some(fib) = left.get("fib") {
        let result = fib.get("result").and_then(Value::as_str);
        let flags = fib
            .get("flags")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let daddr_only = flags.len() == 1 && flags[0].as_str() == Some("daddr");
        if result == Some("type") && daddr_only {
            // Addressed to one of the node's own unicast addresses.
            return match words(right, sets) {
                Some(types) => Match::Fixed {
                    holds: types.iter().any(|t| t == "local") != negate,
                    text: text(),
                },
                None => unknown(),
            };
        }
    }
    unknown()
}

/// A masked test (`left & mask == value`) of a field whose value for a peer's connection
/// is known: `meta mark`/`ct mark` (0 unless set) and `ip frag-off` (a SYN is no fragment,
/// though it may carry DF, 0x4000).
fn masked(left: &Value, right: &Value, negate: bool, text: &dyn Fn() -> String) -> Option<Match> {
    let pair = left.get("&")?.as_array()?;
    let (field, mask) = (pair.first()?, pair.get(1)?.as_u64()?);
    let value = right.as_u64()?;
    let key = |k: &str| {
        field
            .get(k)
            .and_then(|m| m.get("key"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if key("meta").as_deref() == Some("mark") || key("ct").as_deref() == Some("mark") {
        return Some(Match::Mark {
            value: u32::try_from(value).ok()?,
            mask: u32::try_from(mask).ok()?,
            negate,
            text: text(),
        });
    }
    let p = field.get("payload")?;
    if p.get("protocol")?.as_str()? == "ip" && p.get("field")?.as_str()? == "frag-off" {
        if mask & 0x4000 != 0 {
            return Some(Match::Unknown { text: text() });
        }
        return Some(Match::Fixed {
            holds: (value == 0) != negate,
            text: text(),
        });
    }
    None
}

/// TCP flag names of a flags value: `"syn"`, `["fin","syn"]`, `{"|": [...]}`, `0` (none).
fn flag_names(v: &Value) -> Option<Vec<String>> {
    let mut out = match v {
        Value::Number(n) if n.as_u64() == Some(0) => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(flag_names)
            .collect::<Option<Vec<_>>>()?
            .concat(),
        Value::Object(o) => o.get("|").and_then(flag_names)?,
        _ => return None,
    };
    out.sort();
    out.dedup();
    Some(out)
}

/// A test of the TCP flags (`tcp flags & (fin|syn|rst|ack) == syn`, which is also how
/// iptables-nft stores `--syn`, or `tcp flags syn`): the packet is a connection's first,
/// whose only flag is SYN. `None` when the left side is no test of the flags.
fn tcp_flags(left: &Value, right: &Value, negate: bool, op: &str) -> Option<Match> {
    let is_flags = |v: &Value| {
        v.get("payload").is_some_and(|p| {
            p.get("protocol").and_then(Value::as_str) == Some("tcp")
                && p.get("field").and_then(Value::as_str) == Some("flags")
        })
    };
    let text = format!("tcp flags {op} {left} {right}");
    let unknown = Match::Unknown { text: text.clone() };
    let (mask, exact) = if is_flags(left) {
        (None, op != "in")
    } else {
        let pair = left.get("&")?.as_array()?;
        if !pair.first().is_some_and(is_flags) {
            return None;
        }
        (Some(pair.get(1).and_then(flag_names)), true)
    };
    let Some(want) = flag_names(right) else {
        return Some(unknown);
    };
    let syn = |set: &[String]| set.iter().any(|f| f == "syn");
    let seen: Vec<String> = match mask {
        None => vec!["syn".to_string()],
        Some(Some(mask)) if syn(&mask) => vec!["syn".to_string()],
        Some(Some(_)) => Vec::new(),
        Some(None) => return Some(unknown),
    };
    // `tcp flags syn` (op `in`) asks for any of the bits; `==` for exactly these.
    let holds = if exact { seen == want } else { syn(&want) };
    Some(Match::Fixed {
        holds: holds != negate,
        text,
    })
}

fn verdict_of(v: &Value) -> Option<Action> {
    let obj = v.as_object()?;
    let (k, body) = obj.iter().next()?;
    let target = || {
        body.get("target")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Some(match k.as_str() {
        "accept" => Action::Accept,
        "drop" => Action::Drop,
        "reject" => Action::Reject,
        "return" => Action::Return,
        "continue" => Action::Continue,
        "jump" => Action::Jump(target()?),
        "goto" => Action::Goto(target()?),
        _ => return None,
    })
}

fn rule_of(
    exprs: &[Value],
    sets: &dyn Fn(&str) -> Option<Vec<Value>>,
    place: &str,
    comment: Option<&str>,
) -> Rule {
    let mut matches = Vec::new();
    let mut action = Action::Continue;
    let mut words: Vec<String> = Vec::new();
    let mut unknown_statement = None;
    for e in exprs {
        let Some((kind, body)) = e.as_object().and_then(|o| o.iter().next()) else {
            continue;
        };
        match kind.as_str() {
            "match" => {
                let m = match_of(body, sets);
                words.push(describe(&m));
                matches.push(m);
            }
            // Counting, logging and setting marks let the packet go on.
            "counter" | "log" => {}
            "mangle" if sets_mark(body) => {}
            "vmap" => {
                let key = body.get("key").cloned().unwrap_or_default();
                let data = body.get("data").cloned().unwrap_or_default();
                words.push(format!("{} vmap {}", short(&key), map_name(&data)));
                // A map that cannot be read is "cannot tell", never an empty map.
                action = map_entries(&data, sets)
                    .and_then(|entries| {
                        vmap(&key, &entries, sets)
                            .or_else(|| ct_state_vmap(&key, &entries))
                            .or_else(|| any_vmap(&key, &entries, sets))
                    })
                    .unwrap_or_else(|| {
                        Action::Unknown(format!("vmap on {} {}", short(&key), map_name(&data)))
                    });
            }
            // What iptables-nft wrote with an extension nft cannot show: a target decides
            // (REJECT, DROP, ...), a match tests the packet, neither is modelled here.
            "xt" => {
                let name = body.get("name").and_then(Value::as_str).unwrap_or("?");
                let kind = body.get("type").and_then(Value::as_str).unwrap_or("?");
                let text = format!("xt {kind} {name}");
                match (kind, name) {
                    // `-m comment` holds for every packet.
                    ("match", "comment") => {}
                    ("match", _) => matches.push(Match::Unknown { text: text.clone() }),
                    _ => action = Action::Unknown(text.clone()),
                }
                words.push(text);
            }
            "accept" | "drop" | "reject" | "return" | "continue" | "jump" | "goto" => {
                action = verdict_of(e).unwrap_or_else(|| Action::Unknown(e.to_string()));
                words.push(
                    kind.clone()
                        + &body
                            .get("target")
                            .and_then(Value::as_str)
                            .map(|t| format!(" {t}"))
                            .unwrap_or_default(),
                );
            }
            "queue" => {
                action = Action::Unknown("queue".into());
                words.push("queue".into());
            }
            // Rate and quota tests only decide whether the rest of the rule runs.
            "limit" | "quota" | "meter" => {
                matches.push(Match::Unknown {
                    text: kind.clone() + " " + &body.to_string(),
                });
                words.push(kind.clone());
            }
            // Any other statement may decide or change what later rules see (`notrack`,
            // `fwd`, a set update): when the rule matches, the walk cannot go on past it.
            other => {
                let text = other.to_string() + " " + &body.to_string();
                matches.push(Match::Unknown { text: text.clone() });
                unknown_statement.get_or_insert(text);
                words.push(other.to_string());
            }
        }
    }
    if let (Action::Continue, Some(text)) = (&action, unknown_statement) {
        action = Action::Unknown(text);
    }
    let mut label = format!("{place}: {}", words.join(" "));
    if let Some(c) = comment {
        label.push_str(&format!(" comment \"{c}\""));
    }
    Rule {
        label,
        position: None,
        matches,
        action,
    }
}

/// The `[key, verdict]` pairs of a verdict map: inline (`{"set": [...]}`) or named
/// (`"@portv"`, a `map` of the same table). `None` when they cannot be read.
fn map_entries(data: &Value, sets: &dyn Fn(&str) -> Option<Vec<Value>>) -> Option<Vec<Value>> {
    if let Some(name) = data.as_str().and_then(|s| s.strip_prefix('@')) {
        return sets(name);
    }
    data.get("set").and_then(Value::as_array).cloned()
}

/// How a rule label names a verdict map: `@portv` for a named one.
fn map_name(data: &Value) -> String {
    match data.as_str() {
        Some(name) => name.to_string(),
        None => "{...}".into(),
    }
}

/// A set or map element, without the `{"elem": {"val": ...}}` wrapper that carries
/// counters or time-outs.
fn element(v: &Value) -> &Value {
    v.get("elem").and_then(|e| e.get("val")).unwrap_or(v)
}

/// `ct state vmap { established : accept, invalid : drop, new : jump x }`: which entry
/// applies depends on the chain (before conntrack the state is `invalid`), so the model
/// picks it.
fn ct_state_vmap(key: &Value, entries: &[Value]) -> Option<Action> {
    if key.get("ct")?.get("key")?.as_str()? != "state" {
        return None;
    }
    let mut map = Vec::new();
    for pair in entries {
        let pair = pair.as_array()?;
        let (k, v) = (element(pair.first()?), pair.get(1)?);
        let states: Vec<String> = match k {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect::<Option<_>>()?,
            _ => return None,
        };
        map.push((states, verdict_of(v)?));
    }
    Some(Action::CtStateMap(map))
}

/// Any other verdict map: each entry becomes the tests `key == element` (one per part of a
/// concatenation, `ip daddr . meta l4proto . th dport` as kube-proxy writes), read as a
/// rule's match would be; what the model does not understand stays "cannot tell".
fn any_vmap(
    key: &Value,
    entries: &[Value],
    sets: &dyn Fn(&str) -> Option<Vec<Value>>,
) -> Option<Action> {
    let keys: Vec<Value> = match key.get("concat") {
        Some(parts) => parts.as_array()?.clone(),
        None => vec![key.clone()],
    };
    let mut map = Vec::new();
    for pair in entries {
        let pair = pair.as_array()?;
        let elem = element(pair.first()?);
        let values: Vec<Value> = match (keys.len(), elem.get("concat")) {
            (1, _) => vec![elem.clone()],
            (_, Some(parts)) => parts.as_array()?.clone(),
            _ => return None,
        };
        if values.len() != keys.len() {
            return None;
        }
        let tests = keys
            .iter()
            .zip(values)
            .map(|(left, right)| {
                let test = serde_json::json!({"op": "==", "left": left, "right": right});
                match_of(&test, sets)
            })
            .collect();
        map.push((tests, verdict_of(pair.get(1)?)?));
    }
    Some(Action::Map(map))
}

/// `tcp dport vmap { 22 : accept, 29500-29550 : drop }`.
fn vmap(
    key: &Value,
    entries: &[Value],
    sets: &dyn Fn(&str) -> Option<Vec<Value>>,
) -> Option<Action> {
    let p = key.get("payload")?;
    if !matches!(p.get("protocol")?.as_str()?, "tcp" | "th") || p.get("field")?.as_str()? != "dport"
    {
        return None;
    }
    let mut map = Vec::new();
    for pair in entries {
        let pair = pair.as_array()?;
        let ranges = ports(element(pair.first()?), sets)?;
        let action = verdict_of(pair.get(1)?)?;
        for r in ranges {
            map.push((r, action.clone()));
        }
    }
    Some(Action::DPortMap(map))
}

/// The mark bits a `mangle` statement may set to 1: a constant's bits, every bit for a
/// computed value; 0 when it sets no packet or connection mark.
fn mark_bits(body: &Value) -> u32 {
    let key = body.get("key");
    let marks = ["meta", "ct"].iter().any(|k| {
        key.and_then(|v| v.get(k))
            .and_then(|m| m.get("key"))
            .and_then(Value::as_str)
            == Some("mark")
    });
    if !marks {
        return 0;
    }
    body.get("value")
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(u32::MAX)
}

/// A `mangle` statement that sets a mark, priority or trace flag: the packet goes on
/// unchanged. (Rewriting a header field, e.g. `tcp dport set`, diverts the connection.)
fn sets_mark(body: &Value) -> bool {
    let key = body.get("key");
    let meta = key
        .and_then(|k| k.get("meta").or_else(|| k.get("ct")))
        .and_then(|m| m.get("key"))
        .and_then(Value::as_str);
    matches!(meta, Some("mark" | "priority" | "nftrace" | "secmark"))
}

fn short(v: &Value) -> String {
    if let Some(p) = v.get("payload") {
        return format!(
            "{} {}",
            p.get("protocol").and_then(Value::as_str).unwrap_or("?"),
            p.get("field").and_then(Value::as_str).unwrap_or("?")
        );
    }
    for k in ["meta", "ct"] {
        if let Some(m) = v.get(k) {
            let key = m.get("key").and_then(Value::as_str).unwrap_or("?");
            return if k == "meta" {
                key.to_string()
            } else {
                format!("ct {key}")
            };
        }
    }
    v.to_string()
}

fn describe(m: &Match) -> String {
    let not = |n: &bool| if *n { "!= " } else { "" };
    let ports = |r: &[(u16, u16)]| crate::profile::job::format_ports(r).replace(' ', "");
    match m {
        Match::Proto { protos, negate } => format!("l4proto {}{}", not(negate), protos.join(",")),
        Match::DPort { ranges, negate } => format!("tcp dport {}{}", not(negate), ports(ranges)),
        Match::Iif { names, negate } => format!("iifname {}{}", not(negate), names.join(",")),
        Match::Saddr { nets, negate } => format!("ip saddr {}{}", not(negate), nets.join(",")),
        Match::Daddr { nets, negate } => format!("ip daddr {}{}", not(negate), nets.join(",")),
        Match::SPort { ranges, negate } => format!("tcp sport {}{}", not(negate), ports(ranges)),
        Match::Bridged { negate } => format!("{}bridged", not(negate)),
        Match::Set { name, dirs, negate } => format!("{}@{name} ({dirs})", not(negate)),
        Match::Mark { text, .. } => text.clone(),
        Match::CtState { states, negate } => {
            format!("ct state {}{}", not(negate), states.join(","))
        }
        Match::Fixed { text, .. }
        | Match::CtStatus { text, .. }
        | Match::Unfixed { text }
        | Match::Unknown { text }
        | Match::Forked { text, .. } => text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mark_statement_sets_mark_bits() {
        let set = |key: &str, what: &str, value: Value| {
            mark_bits(&serde_json::json!({"key": {key: {"key": what}}, "value": value}))
        };
        assert_eq!(set("meta", "mark", 0x10.into()), 0x10);
        assert_eq!(set("ct", "mark", 0x4.into()), 0x4);
        // A computed value may set any bit.
        assert_eq!(
            set("meta", "mark", serde_json::json!({"ct": {"key": "mark"}})),
            u32::MAX
        );
        // Another meta or ct key sets no mark.
        assert_eq!(set("meta", "priority", 0x10.into()), 0);
        assert_eq!(set("ct", "helper", "ftp".into()), 0);
    }

    #[test]
    fn a_document_that_cannot_be_read_says_what_is_wrong() {
        let doc = |items: &[&str]| format!(r#"{{"nftables": [{}]}}"#, items.join(", "));
        let table = r#"{"table": {"family": "ip", "name": "t"}}"#;
        let chain = |rest: &str| {
            format!(r#"{{"chain": {{"family": "ip", "table": "t", "name": "c"{rest}}}}}"#)
        };
        let base = |rest: &str| chain(&format!(r#", "type": "filter", "hook": "input"{rest}"#));
        let shown = |json: &str| parse(json).err().map(|e| e.to_string());

        let e = parse("{not json").err();
        assert!(matches!(e, Some(NftError::NotJson(_))), "{e:?}");
        assert_eq!(
            shown("{not json"),
            Some("nft -j output is not JSON: key must be a string at line 1 column 2".into())
        );
        assert!(matches!(parse("{}"), Err(NftError::NoArray)));
        assert_eq!(
            shown("{}"),
            Some("nft -j output has no `nftables` array".into())
        );
        let json = doc(&[r#"{"table": {"family": "ip"}}"#]);
        assert!(matches!(parse(&json), Err(NftError::UnnamedTable(_))));
        assert_eq!(
            shown(&json),
            Some(r#"nft table without family or name: {"family":"ip"}"#.into())
        );
        let json = doc(&[table, r#"{"chain": {"family": "ip", "table": "t"}}"#]);
        assert!(matches!(parse(&json), Err(NftError::UnnamedChain(_))));
        assert_eq!(
            shown(&json),
            Some(r#"nft chain without a name: {"family":"ip","table":"t"}"#.into())
        );
        let json = doc(&[table, &base("")]);
        assert!(matches!(parse(&json), Err(NftError::NoPriority(_))));
        assert_eq!(
            shown(&json),
            Some(
                r#"nft base chain without a numeric priority: {"family":"ip","hook":"input","name":"c","table":"t","type":"filter"}"#
                    .into()
            )
        );
        let json = doc(&[table, &base(r#", "prio": 0, "policy": "queue""#)]);
        assert!(matches!(parse(&json), Err(NftError::Policy(p)) if p == "queue"));
        assert_eq!(
            shown(&json),
            Some("nft chain policy `queue` is not accept or drop".into())
        );
        // A regular chain needs neither priority nor policy; an unknown hook is no base.
        assert!(parse(&doc(&[table, &chain("")])).is_ok());
        assert!(
            parse(&doc(&[
                table,
                &chain(r#", "type": "filter", "hook": "output""#)
            ]))
            .is_ok()
        );
    }
}
