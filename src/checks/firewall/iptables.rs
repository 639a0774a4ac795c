//! `iptables-save` output (legacy or nft flavour) → [`Table`]s. Built-in chains become base
//! chains at the hook and priority the kernel gives them; options outside the model become
//! [`Match::Unknown`], so the evaluation says "cannot tell" instead of guessing.

use std::collections::BTreeMap;

use super::model::{Action, Base, Chain, ChainKind, Hook, Match, Policy, Rule, Table, Tool};

/// Targets that log, count or mark and let the packet go on. (`CT --notrack` changes the
/// conntrack state later rules see: not modelled, so it is not listed.)
const NON_TERMINAL: &[&str] = &[
    "LOG",
    "NFLOG",
    "ULOG",
    "MARK",
    "CONNMARK",
    "TRACE",
    "AUDIT",
    "CLASSIFY",
    "DSCP",
    "TOS",
    "TCPMSS",
    "TTL",
    "SECMARK",
    "CONNSECMARK",
];

/// Where the kernel runs a built-in chain of a table (netfilter_ipv4.h priorities).
fn builtin(table: &str, chain: &str) -> Option<(Hook, i32)> {
    Some(match (table, chain) {
        ("raw", "PREROUTING") => (Hook::Prerouting, -300),
        ("mangle", "PREROUTING") => (Hook::Prerouting, -150),
        ("mangle", "INPUT") => (Hook::Input, -150),
        ("filter", "INPUT") => (Hook::Input, 0),
        ("security", "INPUT") => (Hook::Input, 50),
        ("nat", "PREROUTING") => (Hook::Prerouting, -100),
        ("nat", "INPUT") => (Hook::Input, 100),
        _ => return None,
    })
}

/// Why `iptables-save` output could not be read: the tool, the line and what is wrong there.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SaveError {
    /// Line `line` (from 1) cannot be read.
    #[error("{} line {line}: {problem}", tool.name())]
    Line {
        tool: Tool,
        line: usize,
        problem: LineError,
    },
    /// The output ends inside a table: it was cut short.
    #[error("{}: a *table has no COMMIT", .0.name())]
    NoCommit(Tool),
}

/// What is wrong with one line of `iptables-save` output.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("chain declared outside a *table")]
    ChainOutsideTable,
    #[error("malformed chain line `{0}`")]
    MalformedChain(String),
    #[error("policy `{0}` is not ACCEPT or DROP")]
    Policy(String),
    #[error("rule outside a *table")]
    RuleOutsideTable,
    #[error(transparent)]
    Quote(#[from] UnterminatedQuote),
    #[error("rule names no chain")]
    NoChain,
    #[error("COMMIT outside a *table")]
    CommitOutsideTable,
    #[error("rule for undeclared chain {0}")]
    UndeclaredChain(String),
    #[error("unexpected line `{0}`")]
    Unexpected(String),
}

/// A `"` that opens a string the line never closes; carries the line.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("unterminated quote in `{0}`")]
pub struct UnterminatedQuote(String);

/// A comment that says "incompatible" but names no table; carries the line.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` names no table")]
pub(crate) struct NamesNoTable(String);

/// Splits a line as iptables-save quotes it: words, and "double quoted" strings.
fn words(line: &str) -> Result<Vec<String>, UnterminatedQuote> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '"' {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => word.extend(chars.next()),
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => word.push(c),
                }
            }
            if !closed {
                return Err(UnterminatedQuote(line.to_string()));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        out.push(word);
    }
    Ok(out)
}

fn port_ranges(text: &str) -> Option<Vec<(u16, u16)>> {
    text.split(',')
        .map(|p| {
            let (lo, hi) = p.split_once(':').unwrap_or((p, p));
            let lo: u16 = if lo.is_empty() { 0 } else { lo.parse().ok()? };
            let hi: u16 = if hi.is_empty() {
                65535
            } else {
                hi.parse().ok()?
            };
            (lo <= hi).then_some((lo, hi))
        })
        .collect()
}

/// A rule waiting for its table's COMMIT: chain, arguments, the line as written.
type PendingRule = (String, Vec<String>, String);
/// A `*table` being read: its name, declared chains and rules.
type OpenTable = (String, BTreeMap<String, Chain>, Vec<PendingRule>);

/// Tables `iptables-nft-save` cannot show because nft itself wrote (part of) them, from its
/// `# Table `mangle' is incompatible, use 'nft' tool.` lines: their nft view stands in for
/// them, and every other table it shows is read as usual. `Err` names a line that says
/// "incompatible" but no table.
pub(crate) fn incompatible_tables(text: &str) -> Result<Vec<String>, NamesNoTable> {
    let mut names = Vec::new();
    for line in text.lines() {
        let Some(comment) = line.trim().strip_prefix('#') else {
            continue;
        };
        let comment = comment.trim();
        if !comment.contains("incompatible") {
            continue;
        }
        let name = comment
            .strip_prefix("Table ")
            .map(|rest| rest.trim_start_matches(['`', '\'', '"']))
            .and_then(|rest| rest.split(['\'', '`', '"']).next())
            .filter(|name| !name.is_empty() && !name.contains(char::is_whitespace));
        match name {
            Some(name) => names.push(name.to_string()),
            None => return Err(NamesNoTable(line.trim().to_string())),
        }
    }
    Ok(names)
}

/// The ports of a `bitmap:port` ipset from `ipset save NAME`, merged into ranges; `None`
/// for a set of another type or output that cannot be read.
pub(crate) fn port_set(save: &str) -> Option<Vec<(u16, u16)>> {
    let mut lines = save.lines().map(str::trim).filter(|l| !l.is_empty());
    let create: Vec<&str> = lines.next()?.split_whitespace().collect();
    if create.first() != Some(&"create") || create.get(2) != Some(&"bitmap:port") {
        return None;
    }
    let mut ports: Vec<(u16, u16)> = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(&"add"), Some(elem)) = (words.first(), words.get(2)) else {
            return None;
        };
        let elem = elem.rsplit(':').next()?;
        let (lo, hi) = elem.split_once('-').unwrap_or((elem, elem));
        let (lo, hi): (u16, u16) = (lo.parse().ok()?, hi.parse().ok()?);
        match ports.last_mut() {
            Some((_, end)) if u32::from(*end) + 1 == u32::from(lo) => *end = hi,
            _ => ports.push((lo, hi)),
        }
    }
    Some(ports)
}

/// Parses the whole output; errors name the line.
pub fn parse(text: &str, tool: Tool) -> Result<Vec<Table>, SaveError> {
    let mut tables: Vec<Table> = Vec::new();
    let mut current: Option<OpenTable> = None;
    for (index, raw) in text.lines().enumerate() {
        let n = index + 1;
        let line = raw.trim();
        let err = |problem: LineError| SaveError::Line {
            tool,
            line: n,
            problem,
        };
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            current = Some((name.to_string(), BTreeMap::new(), Vec::new()));
        } else if let Some(decl) = line.strip_prefix(':') {
            let Some((table, chains, _)) = current.as_mut() else {
                return Err(err(LineError::ChainOutsideTable));
            };
            let mut f = decl.split_whitespace();
            let (Some(name), Some(policy)) = (f.next(), f.next()) else {
                return Err(err(LineError::MalformedChain(line.to_string())));
            };
            let base = match builtin(table, name) {
                Some((hook, priority)) => Some(Base {
                    hook,
                    priority,
                    kind: if table == "nat" {
                        ChainKind::Nat
                    } else {
                        ChainKind::Filter
                    },
                    policy: match policy {
                        "ACCEPT" => Policy::Accept,
                        "DROP" => Policy::Drop,
                        other => {
                            return Err(err(LineError::Policy(other.to_string())));
                        }
                    },
                }),
                None => None,
            };
            chains.insert(
                name.to_string(),
                Chain {
                    name: name.into(),
                    base,
                    rules: Vec::new(),
                },
            );
        } else if line.starts_with("-A ") || line.starts_with("-I ") {
            let Some((_, _, rules)) = current.as_mut() else {
                return Err(err(LineError::RuleOutsideTable));
            };
            let w = words(line).map_err(|e| err(e.into()))?;
            let chain = w.get(1).cloned().ok_or_else(|| err(LineError::NoChain))?;
            rules.push((chain, w[2..].to_vec(), line.to_string()));
        } else if line == "COMMIT" {
            let Some((name, mut chains, rules)) = current.take() else {
                return Err(err(LineError::CommitOutsideTable));
            };
            let mut numbers: BTreeMap<String, usize> = BTreeMap::new();
            let conntrack = rules.iter().any(|(_, args, _)| tracks(args));
            let mark_bits = rules
                .iter()
                .fold(0, |bits, (_, args, _)| bits | marks(args));
            for (chain, args, text) in rules {
                let number = numbers.entry(chain.clone()).or_default();
                *number += 1;
                let label = format!("{} {name} chain {chain} rule {number}: {text}", tool.name());
                let mut rule = rule_of(&args, &chains, label);
                rule.position = Some(*number as u64);
                match chains.get_mut(&chain) {
                    Some(c) => c.rules.push(rule),
                    None => return Err(err(LineError::UndeclaredChain(chain))),
                }
            }
            tables.push(Table {
                name: format!("{} {name}", tool.name()),
                id: name,
                tool,
                chains,
                conntrack,
                mark_bits,
            });
        } else {
            return Err(err(LineError::Unexpected(line.to_string())));
        }
    }
    if current.is_some() {
        return Err(SaveError::NoCommit(tool));
    }
    Ok(tables)
}

/// Options `iptables-save` prints and how many words follow each; anything else makes the
/// rest of the rule unreadable, so the rule is "cannot tell" (never silently a no-op).
fn arity(opt: &str) -> Option<usize> {
    Some(match opt {
        "--syn"
        | "--rsource"
        | "--rdest"
        | "--set"
        | "--rcheck"
        | "--update"
        | "--remove"
        | "--rttl"
        | "--reap"
        | "--return-nomatch"
        | "--update-counters"
        | "--update-subcounters"
        | "--limit-iface-in"
        | "--limit-iface-out"
        | "--loose"
        | "--validmark"
        | "--accept-local"
        | "--invert"
        | "--connlimit-saddr"
        | "--connlimit-daddr"
        | "--transparent"
        | "--nowildcard"
        | "--restore-skmark"
        | "-f"
        | "--fragment" => 0,
        "--tcp-flags" | "--match-set" => 2,
        "-p"
        | "--protocol"
        | "-i"
        | "--in-interface"
        | "-o"
        | "--out-interface"
        | "-s"
        | "--source"
        | "-d"
        | "--destination"
        | "-m"
        | "--match"
        | "--dport"
        | "--destination-port"
        | "--dports"
        | "--destination-ports"
        | "--sport"
        | "--source-port"
        | "--sports"
        | "--source-ports"
        | "--ports"
        | "--port"
        | "--ctstate"
        | "--state"
        | "--ctstatus"
        | "--ctproto"
        | "--ctorigsrc"
        | "--ctorigdst"
        | "--ctreplsrc"
        | "--ctrepldst"
        | "--ctorigsrcport"
        | "--ctorigdstport"
        | "--ctreplsrcport"
        | "--ctrepldstport"
        | "--ctexpire"
        | "--ctdir"
        | "--dst-type"
        | "--src-type"
        | "--comment"
        | "--icmp-type"
        | "--pkt-type"
        | "--limit"
        | "--limit-burst"
        | "--name"
        | "--seconds"
        | "--hitcount"
        | "--mask"
        | "--mark"
        | "--src-range"
        | "--dst-range"
        | "--length"
        | "--tcp-option"
        | "--uid-owner"
        | "--gid-owner"
        | "--connlimit-above"
        | "--connlimit-upto"
        | "--connlimit-mask"
        | "--hashlimit"
        | "--hashlimit-upto"
        | "--hashlimit-above"
        | "--hashlimit-burst"
        | "--hashlimit-mode"
        | "--hashlimit-name"
        | "--hashlimit-htable-size"
        | "--hashlimit-htable-max"
        | "--hashlimit-htable-expire"
        | "--hashlimit-htable-gcinterval"
        | "--hashlimit-srcmask"
        | "--hashlimit-dstmask"
        | "--u32"
        | "--string"
        | "--algo"
        | "--from"
        | "--to"
        | "--packets-eq"
        | "--packets-lt"
        | "--packets-gt"
        | "--bytes-eq"
        | "--bytes-lt"
        | "--bytes-gt"
        | "--helper"
        | "--physdev-in"
        | "--physdev-out"
        | "--dscp"
        | "--dscp-class"
        | "--tos"
        | "--ttl-eq"
        | "--ttl-lt"
        | "--ttl-gt"
        | "--every"
        | "--packet"
        | "--mode"
        | "--probability"
        | "--quota"
        | "--state-flags"
        | "--set-mark"
        | "--cgroup"
        | "--path"
        | "--ipvs"
        | "--vproto"
        | "--vaddr"
        | "--vport"
        | "--vdir"
        | "--vmethod"
        | "--vportctl" => 1,
        _ => return None,
    })
}

/// TCP flag names in a `--tcp-flags` list; `None` for a word that is none.
fn tcp_flags(list: &str) -> Option<Vec<&str>> {
    const ALL: &[&str] = &["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
    let mut out = Vec::new();
    for f in list.split(',') {
        match f {
            "ALL" => out.extend_from_slice(ALL),
            "NONE" => {}
            f if ALL.contains(&f) => out.push(f),
            _ => return None,
        }
    }
    Some(out)
}

/// Whether a rule's words make the kernel track connections in the namespace.
fn tracks(args: &[String]) -> bool {
    args.windows(2).any(|w| {
        matches!(
            (w[0].as_str(), w[1].as_str()),
            (
                "-m" | "--match",
                "conntrack" | "state" | "connmark" | "connlimit" | "helper" | "connbytes"
            ) | (
                "-j" | "--jump",
                "DNAT"
                    | "SNAT"
                    | "MASQUERADE"
                    | "REDIRECT"
                    | "CT"
                    | "CONNMARK"
                    | "NETMAP"
                    | "SYNPROXY"
            )
        )
    })
}

/// The mark bits a rule's target may set to 1 (`-j MARK --set-xmark 0x10000/0x10000`): the
/// value's bits; every bit for a restore from the connection mark or an option not read.
fn marks(args: &[String]) -> u32 {
    let Some(at) = args.windows(2).position(|w| {
        matches!(w[0].as_str(), "-j" | "--jump" | "-g" | "--goto")
            && matches!(w[1].as_str(), "MARK" | "CONNMARK")
    }) else {
        return 0;
    };
    let opts = &args[at + 2..];
    let mut bits = 0;
    let mut i = 0;
    while i < opts.len() {
        let value = opts.get(i + 1).map(String::as_str).unwrap_or_default();
        match opts[i].as_str() {
            "--set-xmark" | "--set-mark" | "--or-mark" | "--xor-mark" => match mark_of(value) {
                Some((v, _)) => bits |= v,
                None => return u32::MAX,
            },
            "--and-mark" | "--mask" | "--nfmask" | "--ctmask" => {}
            // Copies the packet's mark to the connection's: no new bit.
            "--save-mark" => {
                i += 1;
                continue;
            }
            _ => return u32::MAX,
        }
        i += 2;
    }
    bits
}

/// `--mark value[/mask]` in hex or decimal.
fn mark_of(text: &str) -> Option<(u32, u32)> {
    let num = |t: &str| match t.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    };
    match text.split_once('/') {
        Some((v, m)) => Some((num(v)?, num(m)?)),
        None => Some((num(text)?, u32::MAX)),
    }
}

/// Modules whose options are all tests already judged one by one, so that given without
/// options they hold for every packet (`-p tcp -m tcp`, `-m comment`).
const NO_OPTION_MATCHES_ALL: &[&str] = &[
    "tcp",
    "udp",
    "udplite",
    "sctp",
    "dccp",
    "icmp",
    "comment",
    "conntrack",
    "state",
    "addrtype",
    "multiport",
];

/// What `-m MODULE` given without any option tests, as a match (`None` for nothing at
/// all). A module the model does not know is "cannot tell", never "every packet".
fn bare_module(module: &str) -> Option<Match> {
    if NO_OPTION_MATCHES_ALL.contains(&module) {
        return None;
    }
    Some(match module {
        // Without --nowildcard, `-m socket` ignores listeners bound to the wildcard
        // address, so a new connection matches only when the job's listener is bound to
        // one address.
        "socket" => socket_match(false, false),
        other => Match::Unknown {
            text: format!("-m {other} without options"),
        },
    })
}

/// `-m socket` for a new connection to the job's listener: `--transparent` only matches
/// transparent sockets (a job's are not), `--nowildcard` finds any listener.
fn socket_match(transparent: bool, nowildcard: bool) -> Match {
    let text = format!(
        "-m socket{}{}",
        if transparent { " --transparent" } else { "" },
        if nowildcard { " --nowildcard" } else { "" }
    );
    if transparent {
        Match::Fixed { holds: false, text }
    } else if nowildcard {
        Match::Fixed { holds: true, text }
    } else {
        Match::Unfixed {
            text: "the job's listener is bound to one address, not the wildcard (`-m socket` \
                   ignores wildcard listeners)"
                .into(),
        }
    }
}

fn rule_of(args: &[String], chains: &BTreeMap<String, Chain>, label: String) -> Rule {
    let mut matches = Vec::new();
    let mut action = Action::Continue;
    let mut negate = false;
    let mut module = "";
    // Whether the last `-m` module had an option, and `-m socket`'s flags.
    let mut module_used = true;
    let mut socket = (false, false);
    let mut i = 0;
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or_default();
    // The module just left behind: given bare, it tests what `bare_module` says; socket's
    // flags make one test of it.
    let close = |module: &str, used: bool, socket: (bool, bool), matches: &mut Vec<Match>| {
        if module == "socket" {
            matches.push(socket_match(socket.0, socket.1));
        } else if !used && !module.is_empty() {
            matches.extend(bare_module(module));
        }
    };
    while i < args.len() {
        let opt = arg(i);
        let value = arg(i + 1);
        let n = negate;
        negate = false;
        let not = if n { "! " } else { "" };
        if opt == "!" {
            negate = true;
            i += 1;
            continue;
        }
        if matches!(opt, "-m" | "--match" | "-j" | "--jump" | "-g" | "--goto") {
            close(module, module_used, socket, &mut matches);
            module = "";
            module_used = true;
            socket = (false, false);
        } else if !opt.starts_with("--") || module.is_empty() {
            // `-p`, `-s`, `-i`, ... belong to no module.
        } else {
            module_used = true;
        }
        if matches!(opt, "-j" | "--jump" | "-g" | "--goto") {
            action = match value {
                "ACCEPT" => Action::Accept,
                "DROP" => Action::Drop,
                "REJECT" => Action::Reject,
                "RETURN" => Action::Return,
                t if NON_TERMINAL.contains(&t) => Action::Continue,
                t if chains.contains_key(t) => {
                    if opt.starts_with("-g") || opt == "--goto" {
                        Action::Goto(t.into())
                    } else {
                        Action::Jump(t.into())
                    }
                }
                // DNAT, REDIRECT, NFQUEUE, CT, TPROXY, ...: they divert, queue or change
                // what later rules see.
                t => Action::Unknown(t.into()),
            };
            // Target options (--reject-with, --log-prefix "...") follow; none changes
            // whether the packet passes.
            break;
        }
        let count = arity(opt);
        let values: Vec<&str> = (1..=count.unwrap_or(0)).map(|k| arg(i + k)).collect();
        let target = |w: &str| matches!(w, "-j" | "--jump" | "-g" | "--goto");
        let missing = values.iter().any(|v| v.is_empty() || target(v));
        let Some(count) = count.filter(|_| !missing) else {
            // An option this model cannot even count the words of (or one missing its
            // value): the rule's remaining matches are unreadable. Its target is still
            // read, so that a rule whose readable matches already fail stays skipped and
            // one that matches says "cannot tell" naming the option.
            matches.push(Match::Unknown {
                text: if missing {
                    format!("{not}{opt} without its value")
                } else {
                    format!("{not}{opt} (an option gputune does not read)")
                },
            });
            match args[i + 1..].iter().position(|w| target(w)) {
                Some(j) => {
                    i += 1 + j;
                    continue;
                }
                None => break,
            }
        };
        let text = format!("{not}{opt} {}", values.join(" "));
        match opt {
            "-p" | "--protocol" => {
                let protos = vec![value.to_ascii_lowercase()];
                if protos[0] == "all" || protos[0] == "0" {
                    // Every protocol: no test at all.
                } else {
                    matches.push(Match::Proto { protos, negate: n });
                }
            }
            "-i" | "--in-interface" => matches.push(Match::Iif {
                names: vec![value.to_string()],
                negate: n,
            }),
            "-s" | "--source" => matches.push(Match::Saddr {
                nets: value.split(',').map(str::to_string).collect(),
                negate: n,
            }),
            "-d" | "--destination" => matches.push(Match::Daddr {
                nets: value.split(',').map(str::to_string).collect(),
                negate: n,
            }),
            "-m" | "--match" => {
                module = value;
                module_used = false;
            }
            "-f" | "--fragment" => matches.push(Match::Fixed {
                holds: n,
                text: format!("{not}-f (a later fragment)"),
            }),
            "--transparent" if module == "socket" => socket.0 = true,
            "--nowildcard" if module == "socket" => socket.1 = true,
            "--restore-skmark" if module == "socket" => {}
            "--mark" if module == "mark" || module == "connmark" => match mark_of(value) {
                Some((value, mask)) => matches.push(Match::Mark {
                    value,
                    mask,
                    negate: n,
                    text: format!("-m {module} {text}"),
                }),
                None => matches.push(Match::Unknown { text }),
            },
            "--dport" | "--destination-port" | "--dports" | "--destination-ports" => {
                match port_ranges(value) {
                    Some(ranges) => matches.push(Match::DPort { ranges, negate: n }),
                    None => matches.push(Match::Unknown { text }),
                }
            }
            "--sport" | "--source-port" | "--sports" | "--source-ports" => {
                match port_ranges(value) {
                    Some(ranges) => matches.push(Match::SPort { ranges, negate: n }),
                    None => matches.push(Match::Unknown { text }),
                }
            }
            "--ctstate" | "--state" => matches.push(Match::CtState {
                states: value.split(',').map(|s| s.to_ascii_lowercase()).collect(),
                negate: n,
            }),
            // A new connection to the node has no status bit (NONE is no bit at all).
            "--ctstatus" => matches.push(Match::CtStatus { holds: n, text }),
            "--dst-type" => matches.push(Match::Fixed {
                holds: value.split(',').any(|t| t == "LOCAL") != n,
                text: format!("addrtype {text}"),
            }),
            // A peer's address is unicast, and none of the node's own.
            "--src-type" => matches.push(Match::Fixed {
                holds: value.split(',').any(|t| t == "UNICAST") != n,
                text: format!("addrtype {text}"),
            }),
            // iptables names a packet to this host `unicast` (`host` is its alias).
            "--pkt-type" => matches.push(Match::Fixed {
                holds: matches!(value.to_ascii_lowercase().as_str(), "unicast" | "host") != n,
                text,
            }),
            // The packet is the connection's SYN: `--syn`, or the flags it is saved as.
            "--syn" => matches.push(Match::Fixed { holds: !n, text }),
            "--tcp-flags" => match (tcp_flags(values[0]), tcp_flags(values[1])) {
                (Some(mask), Some(set)) => {
                    let seen: Vec<&str> = mask.iter().copied().filter(|f| *f == "SYN").collect();
                    // The kernel compares the masked flags with the whole second list.
                    let mut want = set;
                    want.sort_unstable();
                    want.dedup();
                    matches.push(Match::Fixed {
                        holds: (seen == want) != n,
                        text,
                    });
                }
                _ => matches.push(Match::Unknown { text }),
            },
            // An ipset of sources or destinations: whether the peer is in it depends on
            // who the peer is (and on the set's content at the time).
            "--match-set" => matches.push(Match::Set {
                name: values[0].to_string(),
                dirs: values[1].to_string(),
                negate: n,
            }),
            "--comment" => {}
            "--icmp-type" => matches.push(Match::Fixed { holds: n, text }),
            _ => matches.push(Match::Unknown {
                text: if module.is_empty() {
                    text
                } else {
                    format!("-m {module} {text}")
                },
            }),
        }
        i += 1 + count;
    }
    if !args
        .iter()
        .any(|w| matches!(w.as_str(), "-j" | "--jump" | "-g" | "--goto"))
    {
        close(module, module_used, socket, &mut matches);
    }
    Rule {
        label,
        position: None,
        matches,
        action,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copying_the_packet_mark_to_the_connection_sets_no_new_bit() {
        let args = |line: &str| {
            line.split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        };
        assert_eq!(marks(&args("-j CONNMARK --save-mark")), 0);
        assert_eq!(
            marks(&args("-j CONNMARK --save-mark --nfmask 0xff --ctmask 0xff")),
            0
        );
        assert_eq!(marks(&args("-j MARK --set-xmark 0x10/0x10")), 0x10);
        assert_eq!(marks(&args("-j CONNMARK --restore-mark")), u32::MAX);
    }

    #[test]
    fn quoting() {
        assert_eq!(
            words(r#"-A INPUT -m comment --comment "a \"b\" c" -j ACCEPT"#).unwrap(),
            [
                "-A",
                "INPUT",
                "-m",
                "comment",
                "--comment",
                "a \"b\" c",
                "-j",
                "ACCEPT"
            ]
        );
        assert_eq!(
            words("-A INPUT --comment \"open"),
            Err(UnterminatedQuote("-A INPUT --comment \"open".into()))
        );
    }

    #[test]
    fn port_lists() {
        assert_eq!(
            port_ranges("29500:29550,22"),
            Some(vec![(29500, 29550), (22, 22)])
        );
        assert_eq!(port_ranges("1024:"), Some(vec![(1024, 65535)]));
        assert_eq!(port_ranges("9:1"), None);
        assert_eq!(port_ranges("ssh"), None);
    }

    #[test]
    fn incompatible_tables_are_named_one_by_one() {
        let names = |text: &str| incompatible_tables(text);
        let ok = |v: &[&str]| Ok(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        // iptables 1.8.9, and the wording of later versions.
        assert_eq!(
            names("# Table `mangle' is incompatible, use 'nft' tool.\n*filter\nCOMMIT\n"),
            ok(&["mangle"])
        );
        assert_eq!(
            names(
                "# Table `raw' contains incompatible base-chains, use 'nft' tool to list them.\n"
            ),
            ok(&["raw"])
        );
        // A rule's comment is no table.
        assert_eq!(
            names("*filter\n-A INPUT -m comment --comment \"incompatible with foo\" -j REJECT\n"),
            ok(&[])
        );
        assert_eq!(
            names("  # something incompatible happened\n")
                .unwrap_err()
                .to_string(),
            "`# something incompatible happened` names no table"
        );
    }

    #[test]
    fn malformed_input_names_the_line() {
        let at = |line: usize, problem: LineError| SaveError::Line {
            tool: Tool::IptablesLegacy,
            line,
            problem,
        };
        let cases = [
            ("-A INPUT -j DROP\n", at(1, LineError::RuleOutsideTable)),
            (":INPUT ACCEPT [0:0]\n", at(1, LineError::ChainOutsideTable)),
            ("COMMIT\n", at(1, LineError::CommitOutsideTable)),
            (
                "*filter\n:INPUT\nCOMMIT\n",
                at(2, LineError::MalformedChain(":INPUT".into())),
            ),
            (
                "*filter\n:INPUT MAYBE [0:0]\nCOMMIT\n",
                at(2, LineError::Policy("MAYBE".into())),
            ),
            (
                "*filter\n:INPUT ACCEPT [0:0]\n-A OTHER -j DROP\nCOMMIT\n",
                at(4, LineError::UndeclaredChain("OTHER".into())),
            ),
            (
                "*filter\n-A INPUT --comment \"open\n",
                at(
                    2,
                    UnterminatedQuote("-A INPUT --comment \"open".into()).into(),
                ),
            ),
            (
                "*filter\n:INPUT ACCEPT [0:0]\n",
                SaveError::NoCommit(Tool::IptablesLegacy),
            ),
            (
                "*filter\nnonsense\n",
                at(2, LineError::Unexpected("nonsense".into())),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text, Tool::IptablesLegacy), Err(want), "{text}");
        }
        assert_eq!(parse("", Tool::IptablesLegacy).unwrap(), vec![]);
        // What the audit shows: the tool, the line and the problem, as before.
        let shown = |text: &str, tool| parse(text, tool).unwrap_err().to_string();
        assert_eq!(
            shown("*filter\n:INPUT MAYBE [0:0]\nCOMMIT\n", Tool::IptablesNft),
            "iptables-nft line 2: policy `MAYBE` is not ACCEPT or DROP"
        );
        assert_eq!(
            shown("*filter\n-A INPUT -j \"x\n", Tool::IptablesLegacy),
            "iptables-legacy line 2: unterminated quote in `-A INPUT -j \"x`"
        );
        assert_eq!(
            shown("*nat\n", Tool::IptablesLegacy),
            "iptables-legacy: a *table has no COMMIT"
        );
    }

    #[test]
    fn rules() {
        let text = "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:ufw-user-input - [0:0]\n\
            -A INPUT -i lo -j ACCEPT\n\
            -A INPUT -p tcp -m multiport --dports 29500:29550,22 -m conntrack --ctstate NEW -j ACCEPT\n\
            -A INPUT ! -s 10.0.0.0/8 -p udp --dport 53 -j DROP\n\
            -A INPUT -m limit --limit 3/min -j LOG --log-prefix \"[UFW BLOCK] \"\n\
            -A INPUT -j ufw-user-input\n\
            -A INPUT -m recent --name x --rcheck -j REJECT --reject-with tcp-reset\n\
            COMMIT\n";
        let tables = parse(text, Tool::IptablesLegacy).unwrap();
        let input = &tables[0].chains["INPUT"];
        assert_eq!(
            input.base,
            Some(Base {
                hook: Hook::Input,
                priority: 0,
                policy: Policy::Drop,
                kind: ChainKind::Filter,
            })
        );
        assert_eq!(tables[0].chains["FORWARD"].base, None);
        assert_eq!(input.rules.len(), 6);
        assert_eq!(
            input.rules[0].matches,
            [Match::Iif {
                names: vec!["lo".into()],
                negate: false
            }]
        );
        assert_eq!(
            input.rules[1].matches,
            [
                Match::Proto {
                    protos: vec!["tcp".into()],
                    negate: false
                },
                Match::DPort {
                    ranges: vec![(29500, 29550), (22, 22)],
                    negate: false
                },
                Match::CtState {
                    states: vec!["new".into()],
                    negate: false
                },
            ]
        );
        assert_eq!(input.rules[1].action, Action::Accept);
        assert_eq!(
            input.rules[2].matches[0],
            Match::Saddr {
                nets: vec!["10.0.0.0/8".into()],
                negate: true
            }
        );
        assert_eq!(input.rules[3].action, Action::Continue);
        assert_eq!(input.rules[4].action, Action::Jump("ufw-user-input".into()));
        assert_eq!(input.rules[5].action, Action::Reject);
        assert!(
            matches!(&input.rules[5].matches[0], Match::Unknown { text } if text == "-m recent --name x")
        );
        assert!(
            input.rules[5]
                .label
                .starts_with("iptables-legacy filter chain INPUT rule 6: -A INPUT -m recent")
        );
    }

    /// The INPUT verdict of one rule under policy `policy`, for port 29500.
    fn verdict_of(policy: &str, rule: &str) -> super::super::model::Verdict {
        let text = format!("*filter\n:INPUT {policy} [0:0]\n-A INPUT {rule}\nCOMMIT\n");
        let tables = parse(&text, Tool::IptablesLegacy).unwrap();
        super::super::model::tests::one_verdict(&super::super::model::evaluate(&tables, 29500))
    }

    #[test]
    fn options_take_their_real_number_of_words() {
        use super::super::model::Verdict::{self, Accepted, CannotTell, Dropped};
        // Cannot tell, for whatever reason: the comparison below ignores it.
        const CANNOT_TELL: Verdict = CannotTell(String::new());
        let cases = [
            // `--syn` as iptables-save prints it: the target is still read.
            (
                "ACCEPT",
                "-p tcp -m tcp --dport 29500:29550 --tcp-flags FIN,SYN,RST,ACK SYN -j DROP",
                Dropped,
            ),
            (
                "DROP",
                "-p tcp -m tcp --dport 29500 --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT",
                Accepted,
            ),
            (
                "DROP",
                "-p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT",
                Dropped,
            ),
            (
                "ACCEPT",
                "-p tcp -m tcp --tcp-flags SYN,ACK SYN,ACK -j DROP",
                Accepted,
            ),
            (
                "ACCEPT",
                "-p tcp -m tcp --tcp-flags ALL NONE -j DROP",
                Accepted,
            ),
            (
                "ACCEPT",
                "-p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK NONSENSE -j DROP",
                CANNOT_TELL,
            ),
            ("ACCEPT", "-p tcp --syn -j DROP", Dropped),
            // Loopback destinations are never a peer's.
            (
                "ACCEPT",
                "! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
                Accepted,
            ),
            ("DROP", "! -d 127.0.0.1/32 -j ACCEPT", Accepted),
            // Before a rule's readable matches fail, an unknown option is never a no-op.
            (
                "ACCEPT",
                "-p tcp -m frobnicate --frob 1 2 -j DROP",
                CANNOT_TELL,
            ),
            (
                "ACCEPT",
                "-p udp -m frobnicate --frob 1 2 -j DROP",
                Accepted,
            ),
            (
                "ACCEPT",
                "-p tcp --dport 29500 -j NFQUEUE --queue-num 1",
                CANNOT_TELL,
            ),
            ("ACCEPT", "-m conntrack --ctstatus DNAT -j DROP", Accepted),
            ("ACCEPT", "-m conntrack ! --ctstatus DNAT -j DROP", Dropped),
            ("ACCEPT", "-p tcp -m tcp --dport -j DROP", CANNOT_TELL),
            ("ACCEPT", "-p tcp -m set --match-set x -j DROP", CANNOT_TELL),
        ];
        for (policy, rule, want) in cases {
            let got = verdict_of(policy, rule);
            let same = match (&got, &want) {
                (CannotTell(_), CannotTell(_)) => true,
                (a, b) => a == b,
            };
            assert!(same, "{rule}: {got:?}, not {want:?}");
        }
    }

    #[test]
    fn an_ipset_match_depends_on_the_peer() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m multiport --dports 22,29500 -m set --match-set f2b-sshd src -j REJECT --reject-with icmp-port-unreachable\nCOMMIT\n";
        let tables = parse(text, Tool::IptablesLegacy).unwrap();
        let rule = &tables[0].chains["INPUT"].rules[0];
        assert_eq!(rule.action, Action::Reject);
        assert_eq!(
            rule.matches[2],
            Match::Set {
                name: "f2b-sshd".into(),
                dirs: "src".into(),
                negate: false
            }
        );
        let verdicts: Vec<_> = super::super::model::evaluate(&tables, 29500)
            .into_iter()
            .map(|w| w.verdict)
            .collect();
        assert!(verdicts.contains(&super::super::model::Verdict::Dropped));
        assert!(verdicts.contains(&super::super::model::Verdict::Accepted));
    }

    #[test]
    fn nat_chains_count_only_with_conntrack() {
        let nat = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n-A PREROUTING -p tcp --dport 29500 -j REDIRECT --to-ports 1\nCOMMIT\n";
        let tables = parse(nat, Tool::IptablesLegacy).unwrap();
        assert!(tables[0].conntrack, "REDIRECT turns conntrack on");
        let pre = tables[0].chains["PREROUTING"].base.as_ref().unwrap();
        assert_eq!(
            (pre.hook, pre.priority, pre.kind),
            (Hook::Prerouting, -100, ChainKind::Nat)
        );
        let walks = super::super::model::evaluate(&tables, 29500);
        assert!(
            matches!(&walks[0].verdict, super::super::model::Verdict::CannotTell(t) if t.contains("REDIRECT")),
            "{walks:#?}"
        );
        let plain = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp --dport 29500 -j ACCEPT\nCOMMIT\n";
        assert!(!parse(plain, Tool::IptablesLegacy).unwrap()[0].conntrack);
    }
}
