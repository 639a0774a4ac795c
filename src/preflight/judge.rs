//! Rank 0's verdict from every node's facts and probes: each problem named on the node where
//! it must be fixed (the node whose firewall drops, whose `/etc/hosts` is stale, whose NCCL
//! differs), so a job of thousands of nodes reads as a short list.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::bench::control::hostlist;

use super::ifaces;
use super::wire::{Cell, Facts, Mtu};

/// Problem categories, as JSON and the table name them.
pub(crate) mod category {
    pub(crate) const MISSING: &str = "missing-rank";
    pub(crate) const MASTER: &str = "master-addr";
    pub(crate) const OWN_NAME: &str = "own-name";
    pub(crate) const NAMES: &str = "name-resolution";
    pub(crate) const INTERFACE: &str = "interface";
    pub(crate) const VERSION: &str = "version";
    pub(crate) const NCCL_ENV: &str = "nccl-env";
    pub(crate) const PORT: &str = "port";
    pub(crate) const MTU: &str = "mtu";
    pub(crate) const CLOCK: &str = "clock";
}

/// Clocks further apart than this make logs and timeouts disagree.
pub(crate) const CLOCK_LIMIT_MS: f64 = 1000.0;

/// One problem, named on the node that must change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Problem {
    pub rank: Option<usize>,
    pub host: String,
    pub peer: Option<String>,
    pub port: Option<u16>,
    pub category: &'static str,
    pub message: String,
}

/// What one rank reported after probing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probed {
    pub cells: Vec<Cell>,
    pub mtus: Vec<Mtu>,
    pub names: Vec<(String, Result<Vec<IpAddr>, String>)>,
    pub clock_offset_ms: Option<f64>,
}

/// Everything rank 0 knows at the end.
pub(crate) struct Evidence<'a> {
    pub world: usize,
    /// Facts by rank; `None` for a rank that never joined.
    pub facts: &'a [Option<Facts>],
    pub probed: &'a BTreeMap<usize, Probed>,
    /// What is known of a rank that never joined (its host from the launcher, if any).
    pub missing_hint: &'a dyn Fn(usize) -> Option<String>,
    /// What rank 0 found when it looked for a missing rank's host itself.
    pub missing_seen: &'a BTreeMap<usize, String>,
    pub timeout_s: u64,
}

fn host_of(facts: &[Option<Facts>], rank: usize) -> String {
    facts
        .get(rank)
        .and_then(|f| f.as_ref())
        .map_or_else(|| format!("rank{rank}"), |f| f.host.clone())
}

fn list(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(IpAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn non_loopback(ips: &[IpAddr]) -> Vec<IpAddr> {
    ips.iter().copied().filter(|i| !i.is_loopback()).collect()
}

/// Every problem, in a stable order: by category, then rank.
pub(crate) fn judge(ev: &Evidence) -> Vec<Problem> {
    let mut out = Vec::new();
    let joined: Vec<&Facts> = ev.facts.iter().flatten().collect();
    let hosts: Vec<String> = {
        let mut h: Vec<String> = joined.iter().map(|f| f.host.clone()).collect();
        h.sort();
        h.dedup();
        h
    };
    let multi_host = hosts.len() > 1 || joined.len() < ev.world;
    for rank in 0..ev.world {
        if ev.facts.get(rank).is_none_or(|f| f.is_none()) {
            let hint = (ev.missing_hint)(rank);
            out.push(Problem {
                rank: Some(rank),
                host: hint.clone().unwrap_or_else(|| format!("rank{rank}")),
                peer: None,
                port: None,
                category: category::MISSING,
                message: format!(
                    "rank {rank}{} did not join within {}s: {}",
                    hint.map(|h| format!(" ({h})")).unwrap_or_default(),
                    ev.timeout_s,
                    ev.missing_seen.get(&rank).map_or(
                        "it was not started, or it cannot reach rank 0 (its own output says \
                         which address it tried)",
                        String::as_str
                    )
                ),
            });
        }
    }
    let rank0 = ev.facts.first().and_then(|f| f.as_ref());
    let rank0_addrs: Vec<IpAddr> = rank0.map(|f| f.addresses.clone()).unwrap_or_default();
    for f in &joined {
        // MASTER_ADDR as this node resolves it.
        match &f.master_resolved {
            Err(e) => out.push(problem(f, None, None, category::MASTER, e.clone())),
            Ok(ips) if f.rank != 0 && !ips.first().is_some_and(|i| rank0_addrs.contains(i)) => {
                out.push(problem(
                    f,
                    Some(host_of(ev.facts, 0)),
                    None,
                    category::MASTER,
                    format!(
                        "{} resolves MASTER_ADDR={} to {} (first), which is not an address of rank 0 \
                         ({}: {})",
                        f.host,
                        f.master_addr,
                        list(ips),
                        host_of(ev.facts, 0),
                        list(&non_loopback(&rank0_addrs))
                    ),
                ))
            }
            Ok(ips) if f.rank == 0 && multi_host && ips.iter().all(IpAddr::is_loopback) => out
                .push(problem(
                    f,
                    None,
                    None,
                    category::MASTER,
                    format!(
                        "MASTER_ADDR={} resolves to {} on rank 0's own host, so ranks on \
                         other hosts cannot reach it (check /etc/hosts)",
                        f.master_addr,
                        list(ips)
                    ),
                )),
            _ => {}
        }
        if let Some(p) = own_name_problem(f, multi_host) {
            out.push(p);
        }
        if let Some(p) = interface_problem(f, multi_host) {
            out.push(p);
        }
    }
    name_problems(ev, &joined, &mut out);
    agreement(&joined, category::VERSION, |f| f.versions.clone(), &mut out);
    // Debug output settings may differ per node (a log file per host); the rest may not.
    agreement(
        &joined,
        category::NCCL_ENV,
        |f| {
            let mut env = f.nccl_env.clone();
            env.retain(|k, _| !k.starts_with("NCCL_DEBUG"));
            env
        },
        &mut out,
    );
    port_problems(ev, &mut out);
    mtu_problems(ev, &mut out);
    for (rank, p) in ev.probed {
        if let (Some(off), Some(Some(f))) = (p.clock_offset_ms, ev.facts.get(*rank))
            && off.abs() > CLOCK_LIMIT_MS
        {
            out.push(problem(
                f,
                Some(host_of(ev.facts, 0)),
                None,
                category::CLOCK,
                format!(
                    "the clock of {} is {:.1}s {} rank 0's: timeouts and logs will disagree \
                     (check chrony/ntpd)",
                    f.host,
                    off.abs() / 1e3,
                    if off > 0.0 { "ahead of" } else { "behind" }
                ),
            ));
        }
    }
    out.sort_by(|a, b| (a.category, a.rank).cmp(&(b.category, b.rank)));
    out
}

fn problem(
    f: &Facts,
    peer: Option<String>,
    port: Option<u16>,
    category: &'static str,
    message: String,
) -> Problem {
    Problem {
        rank: Some(f.rank),
        host: f.host.clone(),
        peer,
        port,
        category,
        message,
    }
}

/// The node's own host name resolving to loopback (Debian's `127.0.1.1` line): torch and
/// NCCL advertise that address to the other nodes. Also usable before the rendezvous.
pub(crate) fn own_name_problem(f: &Facts, multi_host: bool) -> Option<Problem> {
    match &f.own_name {
        Err(e) => Some(problem(
            f,
            None,
            None,
            category::OWN_NAME,
            format!("this node's host name {e}: torch's store and Gloo look it up"),
        )),
        Ok(ips) if multi_host && ips.first().is_some_and(IpAddr::is_loopback) => Some(problem(
            f,
            None,
            None,
            category::OWN_NAME,
            format!(
                "host name {} resolves to {} (loopback) on its own node: torch and NCCL \
                 advertise that address to the other nodes; map it to {} in /etc/hosts",
                f.host,
                list(ips),
                f.probe_addr
                    .map_or_else(|| "its network address".to_string(), |a| a.to_string())
            ),
        )),
        _ => None,
    }
}

/// NCCL finding no interface, or bootstrapping over one that reaches no other node.
pub(crate) fn interface_problem(f: &Facts, multi_host: bool) -> Option<Problem> {
    match &f.nccl.chosen {
        None => Some(problem(
            f,
            None,
            None,
            category::INTERFACE,
            format!("NCCL finds no socket interface: {}", f.nccl.rule),
        )),
        Some(c) if multi_host && (ifaces::is_fallback(&c.name) || c.addr.is_loopback()) => {
            Some(problem(
                f,
                None,
                None,
                category::INTERFACE,
                format!(
                    "NCCL would use {} ({}): {}; other nodes cannot reach it there \
                     (set NCCL_SOCKET_IFNAME to the training interface)",
                    c.name, c.addr, f.nccl.rule
                ),
            ))
        }
        _ => None,
    }
}

/// Peer names resolving, on some node, to none of that peer's own addresses.
fn name_problems(ev: &Evidence, joined: &[&Facts], out: &mut Vec<Problem>) {
    let mut owners: BTreeMap<&str, Vec<IpAddr>> = BTreeMap::new();
    for f in joined {
        owners
            .entry(f.host.as_str())
            .or_default()
            .extend(non_loopback(&f.addresses));
    }
    for (rank, p) in ev.probed {
        let Some(Some(f)) = ev.facts.get(*rank) else {
            continue;
        };
        for (name, answer) in &p.names {
            if *name == f.host {
                continue; // own-name covers it
            }
            let Some(theirs) = owners.get(name.as_str()) else {
                continue;
            };
            let message = match answer {
                Err(e) => format!("{} cannot resolve peer {name}: {e}", f.host),
                // A connect (and NCCL's address parsing) takes the first answer.
                Ok(ips) if !ips.first().is_some_and(|i| theirs.contains(i)) => format!(
                    "{} resolves {name} to {} (first), but {name}'s addresses are {} (a stale \
                     /etc/hosts entry or DNS record on {})",
                    f.host,
                    list(ips),
                    list(theirs),
                    f.host
                ),
                _ => continue,
            };
            out.push(problem(
                f,
                Some(name.clone()),
                None,
                category::NAMES,
                message,
            ));
        }
    }
}

/// Values that must be the same on every node: the odd ones out (against the most common
/// value, rank 0's on a tie) are named.
fn agreement(
    joined: &[&Facts],
    cat: &'static str,
    values: impl Fn(&Facts) -> BTreeMap<String, String>,
    out: &mut Vec<Problem>,
) {
    let maps: Vec<(&Facts, BTreeMap<String, String>)> =
        joined.iter().map(|f| (*f, values(f))).collect();
    let mut keys: Vec<String> = maps.iter().flat_map(|(_, m)| m.keys().cloned()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let value_of = |m: &BTreeMap<String, String>| {
            m.get(&key)
                .cloned()
                .unwrap_or_else(|| "(unset)".to_string())
        };
        let mut counts: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (f, m) in &maps {
            counts.entry(value_of(m)).or_default().push(f.host.clone());
        }
        if counts.len() < 2 {
            continue;
        }
        let rank0_value = maps
            .iter()
            .find(|(f, _)| f.rank == 0)
            .map(|(_, m)| value_of(m));
        let reference = counts
            .iter()
            .max_by_key(|(v, hosts)| (hosts.len(), Some(*v) == rank0_value.as_ref()))
            .map(|(v, _)| v.clone())
            .unwrap_or_default();
        let reference_hosts = hostlist::compress(counts[&reference].iter().map(String::as_str));
        for (f, m) in &maps {
            let v = value_of(m);
            if v != reference {
                out.push(problem(
                    f,
                    None,
                    None,
                    cat,
                    format!(
                        "{key} is {v} on {}, {reference} on {reference_hosts}",
                        f.host
                    ),
                ));
            }
        }
    }
}

/// Failed cells grouped on the target: the node that does not accept the port.
/// A prober whose every connect failed, to at least two peers that others reached: the
/// fault is its own way out (an egress filter, a wrong route), not every peer's firewall.
fn cut_off_probers(ev: &Evidence) -> Vec<usize> {
    let reached: Vec<usize> = ev
        .probed
        .values()
        .flat_map(|p| p.cells.iter().filter(|c| c.ms.is_some()).map(|c| c.to))
        .collect();
    ev.probed
        .iter()
        .filter(|(_, p)| {
            let tried: Vec<&Cell> = p
                .cells
                .iter()
                .filter(|c| c.error.as_deref() != Some("not probed (deadline)"))
                .collect();
            let mut peers: Vec<usize> = tried.iter().map(|c| c.to).collect();
            peers.dedup();
            peers.len() >= 2
                && tried.iter().all(|c| c.error.is_some())
                && peers.iter().all(|t| reached.contains(t))
        })
        .map(|(r, _)| *r)
        .collect()
}

fn port_problems(ev: &Evidence, out: &mut Vec<Problem>) {
    let cut_off = cut_off_probers(ev);
    for rank in &cut_off {
        let Some(Some(f)) = ev.facts.get(*rank) else {
            continue;
        };
        let mut words: Vec<String> = ev.probed[rank]
            .cells
            .iter()
            .filter_map(|c| c.error.clone())
            .collect();
        words.sort();
        words.dedup();
        out.push(problem(
            f,
            None,
            None,
            category::PORT,
            format!(
                "{} cannot connect to any peer ({}), while the others reach them: check its \
                 outgoing firewall rules and routes",
                f.host,
                words.join(", ")
            ),
        ));
    }
    let mut failed: BTreeMap<(usize, u16), Vec<(usize, String)>> = BTreeMap::new();
    for p in ev
        .probed
        .iter()
        .filter(|(r, _)| !cut_off.contains(r))
        .map(|(_, p)| p)
    {
        for c in &p.cells {
            if let Some(e) = &c.error
                && e != "not probed (deadline)"
            {
                failed
                    .entry((c.to, c.port))
                    .or_default()
                    .push((c.from, e.clone()));
            }
        }
    }
    for ((to, port), froms) in failed {
        let Some(Some(f)) = ev.facts.get(to) else {
            continue;
        };
        let listen = f.listens.iter().find(|l| l.port == port);
        let kind = listen.map_or("rendezvous", |l| l.kind.as_str());
        let mut words: Vec<String> = froms.iter().map(|(_, e)| e.clone()).collect();
        words.sort();
        words.dedup();
        let probers: Vec<String> = froms.iter().map(|(r, _)| host_of(ev.facts, *r)).collect();
        let probers = hostlist::compress(probers.iter().map(String::as_str));
        let firewall = listen
            .and_then(|l| l.firewall.clone())
            .map(|w| format!("; its firewall: {w}"))
            .unwrap_or_default();
        out.push(problem(
            f,
            Some(probers.clone()),
            Some(port),
            category::PORT,
            format!(
                "{} does not accept {kind} port {port} from {probers}: {}{firewall}",
                f.host,
                words.join(", ")
            ),
        ));
    }
}

/// Datagrams of this node's MTU lost on the way to a peer while smaller ones arrive.
fn mtu_problems(ev: &Evidence, out: &mut Vec<Problem>) {
    for (rank, p) in ev.probed {
        let Some(Some(f)) = ev.facts.get(*rank) else {
            continue;
        };
        let mut short: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for m in &p.mtus {
            let Some(&(first, false)) = m.tried.first() else {
                continue;
            };
            let _ = first;
            if let Some(&(passed, _)) = m.tried.iter().find(|(_, ok)| *ok) {
                short
                    .entry(passed)
                    .or_default()
                    .push(host_of(ev.facts, m.to));
            }
        }
        for (passed, peers) in short {
            let peers = hostlist::compress(peers.iter().map(String::as_str));
            out.push(problem(
                f,
                Some(peers.clone()),
                None,
                category::MTU,
                format!(
                    "packets of {} bytes (the MTU of {}'s {}) do not reach {peers}, {passed}-byte \
                     ones do: an MTU mismatch on this link (set the same MTU on both ends and \
                     the switch)",
                    f.mtu.unwrap_or(0),
                    f.host,
                    f.nccl
                        .chosen
                        .as_ref()
                        .map_or("interface", |c| c.name.as_str()),
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preflight::ifaces::{IfAddr, Pick};

    fn node(rank: usize, ip: &str) -> Facts {
        let addr: IpAddr = ip.parse().unwrap();
        Facts {
            rank,
            host: format!("n{rank}"),
            launcher: "torchrun".into(),
            master_addr: "n0".into(),
            master_resolved: Ok(vec!["10.0.0.1".parse().unwrap()]),
            own_name: Ok(vec![addr]),
            addresses: vec!["127.0.0.1".parse().unwrap(), addr],
            nccl: Pick {
                chosen: Some(IfAddr {
                    name: "eth0".into(),
                    index: 2,
                    addr,
                }),
                rule: "default".into(),
            },
            mtu: Some(1500),
            versions: BTreeMap::from([("nccl".to_string(), "2.21.5".to_string())]),
            nccl_env: BTreeMap::new(),
            listens: Vec::new(),
            probe_addr: Some(addr),
            echo_port: None,
            firewall_note: None,
        }
    }

    fn judged(
        facts: &[Option<Facts>],
        probed: &BTreeMap<usize, Probed>,
    ) -> Vec<(String, &'static str)> {
        let hint = |rank: usize| (rank == 3).then(|| "n3".to_string());
        judge(&Evidence {
            world: facts.len(),
            facts,
            probed,
            missing_hint: &hint,
            missing_seen: &BTreeMap::new(),
            timeout_s: 30,
        })
        .into_iter()
        .map(|p| (p.host, p.category))
        .collect()
    }

    #[test]
    fn a_clean_job_has_no_problems() {
        let facts: Vec<Option<Facts>> = (0..3)
            .map(|r| Some(node(r, &format!("10.0.0.{}", r + 1))))
            .collect();
        assert!(judged(&facts, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn each_fault_is_named_on_its_node() {
        let mut facts: Vec<Option<Facts>> = (0..5)
            .map(|r| Some(node(r, &format!("10.0.0.{}", r + 1))))
            .collect();
        // n1 resolves MASTER_ADDR elsewhere; n2 would bootstrap over docker0; n3 never came;
        // n4's clock is 2 s ahead and its NCCL_SOCKET_IFNAME differs (NCCL_DEBUG may).
        facts[1].as_mut().unwrap().master_resolved = Ok(vec!["10.9.9.9".parse().unwrap()]);
        facts[2]
            .as_mut()
            .unwrap()
            .nccl
            .chosen
            .as_mut()
            .unwrap()
            .name = "docker0".into();
        facts[3] = None;
        let n4 = facts[4].as_mut().unwrap();
        n4.nccl_env
            .insert("NCCL_SOCKET_IFNAME".into(), "eth1".into());
        n4.nccl_env.insert("NCCL_DEBUG".into(), "INFO".into());
        let probed = BTreeMap::from([(
            4,
            Probed {
                clock_offset_ms: Some(2000.0),
                ..Probed::default()
            },
        )]);
        assert_eq!(
            judged(&facts, &probed),
            vec![
                ("n4".to_string(), category::CLOCK),
                ("n2".to_string(), category::INTERFACE),
                ("n1".to_string(), category::MASTER),
                ("n3".to_string(), category::MISSING),
                ("n4".to_string(), category::NCCL_ENV),
            ]
        );
        // A prober that reaches nobody is named itself, not on every peer it tried.
        let facts: Vec<Option<Facts>> = (0..3)
            .map(|r| Some(node(r, &format!("10.0.0.{}", r + 1))))
            .collect();
        let cell = |from: usize, to: usize, ok: bool| Cell {
            from,
            to,
            port: 29500,
            ms: ok.then_some(0.1),
            error: (!ok).then(|| "timed out".to_string()),
        };
        let probed = BTreeMap::from([
            (
                0,
                Probed {
                    cells: vec![cell(0, 1, true), cell(0, 2, true)],
                    ..Probed::default()
                },
            ),
            (
                1,
                Probed {
                    cells: vec![cell(1, 0, true), cell(1, 2, true)],
                    ..Probed::default()
                },
            ),
            (
                2,
                Probed {
                    cells: vec![cell(2, 0, false), cell(2, 1, false)],
                    ..Probed::default()
                },
            ),
        ]);
        assert_eq!(
            judged(&facts, &probed),
            vec![("n2".to_string(), category::PORT)]
        );
        // A one-host job: loopback answers reach every rank, nothing to report.
        let mut alone = node(0, "10.0.0.1");
        alone.own_name = Ok(vec!["127.0.1.1".parse().unwrap()]);
        let mut second = alone.clone();
        second.rank = 1;
        assert!(judged(&[Some(alone.clone()), Some(second)], &BTreeMap::new()).is_empty());
        // The same with a second host is a problem on the node whose name is loopback.
        let other = node(1, "10.0.0.2");
        assert_eq!(
            judged(&[Some(alone), Some(other)], &BTreeMap::new()),
            vec![("n0".to_string(), category::OWN_NAME)]
        );
    }
}
