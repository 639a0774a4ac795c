//! The firewall check against the kernel itself: every ruleset of a seeded generator
//! (shapes real tools write, and random compositions) is loaded into a server network
//! namespace joined to a client namespace by a veth pair; the truth is a real TCP connect
//! from the client to a listener on the tested port, and gputune's verdict (audited inside
//! the server namespace) must agree. No false pass, no false fail; "cannot tell" only for a
//! case holding a named unmodelled construct, "depends" only for one that matches on the
//! interface, the source or an ipset, and a "depends" whose stated accept conditions the
//! peer meets (source networks, loaded ipsets) must be an accept in the kernel too. The
//! summary line counts false passes, false fails and the "cannot tell"/"depends" share.
//! Needs root, iproute2, nftables, iptables and ipset: `scripts/test` installs them.

#[path = "firewall_diff/gen.rs"]
mod generator;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use generator::{Case, Load};
use serde_json::Value;

use crate::common::{End, SYSTEM_PATH as PATH, VethPair, in_netns, require};

/// Random compositions on top of the hand-written shapes.
const RANDOM_CASES: u64 = 130;
/// Namespace pairs working at once (most of a case's time is a dropped connect's wait).
const WORKERS: usize = 4;
/// How long a connect may take before the kernel's answer counts as "dropped": past the
/// first SYN retransmission (1 s), so a SYN lost while the fresh veth comes up is retried.
const CONNECT_LIMIT: Duration = Duration::from_millis(1300);

fn sh(script: &str, stdin: &str) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new("sh")
        .args(["-c", script])
        .env("PATH", PATH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("sh: {e}"))?;
    if let Some(mut input) = child.stdin.take() {
        input
            .write_all(stdin.as_bytes())
            .map_err(|e| format!("writing to `{script}`: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("`{script}`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{script}` failed: {}\ninput:\n{stdin}",
            String::from_utf8_lossy(&out.stderr),
        ))
    }
}

/// A server and a client namespace joined by a veth pair, made afresh for each case (so no
/// rule, set or conntrack entry of one case is seen by the next) and removed on drop.
struct Pair(VethPair);

const SERVER_ADDR: &str = generator::SERVER;

impl Pair {
    fn new(slot: usize) -> Pair {
        let id = std::process::id();
        Pair(VethPair::new(
            format!("gtfw{id}s{slot}"),
            format!("gtfw{id}c{slot}"),
            End {
                dev: generator::DEV,
                addr: SERVER_ADDR,
            },
            End {
                dev: "v1",
                addr: generator::PEER,
            },
        ))
    }

    fn server(&self) -> &str {
        &self.0.a
    }

    /// Loads a case's rules in the server namespace.
    fn load(&self, loads: &[Load]) -> Result<(), String> {
        let s = self.server();
        for load in loads {
            let (cmd, text) = match load {
                Load::Nft(t) => ("nft -f -", t),
                Load::Legacy(t) => ("iptables-legacy-restore --noflush", t),
                Load::IptNft(t) => ("iptables-nft-restore --noflush", t),
                Load::Ipset(t) => ("ipset restore", t),
                Load::Sh(t) => ("sh -s", t),
            };
            sh(&format!("ip netns exec {s} {cmd}"), text)?;
        }
        Ok(())
    }

    /// The kernel's answer: does a connect from the client reach a listener on `port`?
    fn reachable(&self, port: u16) -> bool {
        let listener = in_netns(self.server(), move || TcpListener::bind(("0.0.0.0", port)))
            .join()
            .unwrap()
            .expect("listener in the server namespace");
        let addr: SocketAddr = format!("{SERVER_ADDR}:{port}").parse().unwrap();
        let open = in_netns(&self.0.b, move || {
            TcpStream::connect_timeout(&addr, CONNECT_LIMIT).is_ok()
        })
        .join()
        .unwrap();
        drop(listener);
        open
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    Pass,
    Fail,
    CannotTell,
    Depends,
}

/// gputune's verdict on `port`, audited inside the server namespace.
fn audit(bin: &Path, profile_dir: &Path, pair: &Pair, port: u16) -> Result<(Said, String), String> {
    let profile = profile_dir.join(format!("p{port}.toml"));
    if !profile.exists() {
        std::fs::write(
            &profile,
            format!("description = \"diff\"\n[job]\nrendezvous_ports = \"{port}\"\n"),
        )
        .map_err(|e| e.to_string())?;
    }
    let out = Command::new("ip")
        .args(["netns", "exec", pair.server()])
        .arg(bin)
        .args([
            "audit",
            "--only",
            "firewall",
            "--format",
            "json",
            "--profile",
        ])
        .arg(&profile)
        .env("PATH", PATH)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).map_err(|e| {
        format!(
            "{e}: exit {:?}\nstdout: {stdout}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let finding = doc["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["id"] == "firewall.rendezvous_ports"))
        .ok_or_else(|| format!("no firewall.rendezvous_ports finding in {stdout}"))?;
    let actual = finding["actual"].as_str().unwrap_or_default().to_string();
    let said = match finding["status"].as_str() {
        Some("pass") => Said::Pass,
        Some("fail") => Said::Fail,
        Some("warn") if actual.contains("cannot tell") => Said::CannotTell,
        Some("warn") if actual.contains("accepted only when") => Said::Depends,
        other => return Err(format!("unexpected finding {other:?}: {finding}")),
    };
    Ok((said, actual))
}

#[derive(Default)]
struct Tally {
    agree: usize,
    cannot_tell: usize,
    depends: usize,
    false_pass: usize,
    false_fail: usize,
    /// "depends" verdicts whose stated conditions were checked against the peer.
    conditions_checked: usize,
    wrong: Vec<String>,
}

/// Whether every condition of a "depends" verdict's accept (`accepted only when C1 and C2
/// (by ...)`) holds for the peer: source networks, and ipsets whose members the case loads.
/// `None` when one of them cannot be read off the case (an interface, a listener, ...).
fn accept_conditions_hold(case: &Case, actual: &str) -> Option<bool> {
    use gputune::checks::firewall::model::net_holds;
    let peer: std::net::Ipv4Addr = generator::PEER.parse().ok()?;
    let (_, rest) = actual.split_once("accepted only when ")?;
    let (conditions, _) = rest.split_once(" (by ")?;
    let members = |set: &str| -> Vec<String> {
        case.loads
            .iter()
            .filter_map(|l| match l {
                Load::Ipset(text) => Some(text),
                _ => None,
            })
            .flat_map(|text| text.lines())
            .filter_map(|line| {
                let mut w = line.split_whitespace();
                (w.next() == Some("add") && w.next() == Some(set)).then(|| w.next())?
            })
            .map(str::to_string)
            .collect()
    };
    let mut all = true;
    for c in conditions.split(" and ") {
        let (negated, c) = match c.strip_prefix("not ") {
            Some(rest) => (true, rest),
            None => (false, c),
        };
        let holds = if let Some(nets) = c.strip_prefix("saddr ") {
            nets.split('|')
                .map(|n| net_holds(n, peer))
                .collect::<Option<Vec<bool>>>()?
                .contains(&true)
        } else if let Some(set) = c
            .strip_prefix("in ipset ")
            .and_then(|s| s.strip_suffix(" (src)"))
        {
            members(set)
                .iter()
                .any(|m| net_holds(m, peer) == Some(true))
        } else {
            return None;
        };
        all &= holds != negated;
    }
    Some(all)
}

fn describe(case: &Case) -> String {
    match case.seed {
        Some(seed) => format!("seed {seed} ({})", case.name),
        None => format!("shape `{}`", case.name),
    }
}

fn judge(case: &Case, open: bool, said: Said, actual: &str, tally: &Mutex<Tally>) {
    let mut t = tally.lock().unwrap();
    let truth = if open { "accepts" } else { "drops" };
    let wrong = |why: &str| {
        format!(
            "{}: the kernel {truth} port {} but gputune {why}: {actual}\nrules: {:#?}",
            describe(case),
            case.port,
            case.loads
        )
    };
    match said {
        Said::Pass if open => t.agree += 1,
        Said::Fail if !open => t.agree += 1,
        Said::Pass => {
            t.false_pass += 1;
            t.wrong.push(wrong("passes (FALSE PASS)"))
        }
        Said::Fail => {
            t.false_fail += 1;
            t.wrong.push(wrong("fails (false fail)"))
        }
        Said::CannotTell | Said::Depends => {
            println!("{}: {actual}", describe(case));
            judge_unsure(case, said, actual, open, &mut t, wrong)
        }
    }
}

/// A "cannot tell" or "depends": acceptable only for a case that holds what it names.
fn judge_unsure(
    case: &Case,
    said: Said,
    actual: &str,
    open: bool,
    t: &mut Tally,
    wrong: impl Fn(&str) -> String,
) {
    match said {
        Said::CannotTell => match case.unmodelled.as_deref() {
            Some(what) if actual.to_lowercase().contains(&what.to_lowercase()) => {
                t.cannot_tell += 1
            }
            Some(what) => t
                .wrong
                .push(wrong(&format!("cannot tell without naming {what}"))),
            None => t
                .wrong
                .push(wrong("cannot tell, with no unmodelled construct")),
        },
        Said::Depends if case.depends => {
            t.depends += 1;
            // The conditions it states for the accept, where the peer's side of each can be
            // read off the case: when they all hold for the peer, the kernel must accept.
            if let Some(holds) = accept_conditions_hold(case, actual) {
                t.conditions_checked += 1;
                if holds && !open {
                    t.wrong.push(wrong(
                        "says it accepts under conditions the peer meets, but the kernel drops",
                    ));
                }
            }
        }
        Said::Depends => t
            .wrong
            .push(wrong("says it depends, with nothing it depends on")),
        Said::Pass | Said::Fail => {}
    }
}

#[test]
fn verdicts_agree_with_the_kernel_on_generated_rulesets() {
    require(&[
        "ip",
        "nft",
        "iptables-legacy-restore",
        "iptables-nft-restore",
        "ipset",
    ]);
    let started = Instant::now();
    let bin = Path::new(crate::common::bin()).to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let mut cases = generator::shapes();
    cases.extend((1..=RANDOM_CASES).map(|n| generator::random(0x6a7e_0000 + n)));
    let total = cases.len();
    assert!(total >= 150, "{total} cases");
    let queue = Mutex::new(cases.into_iter());
    let tally = Mutex::new(Tally::default());
    std::thread::scope(|scope| {
        for slot in 0..WORKERS {
            let (queue, tally, bin, dir) = (&queue, &tally, &bin, dir.path());
            scope.spawn(move || {
                loop {
                    let Some(case) = queue.lock().unwrap().next() else {
                        break;
                    };
                    let pair = Pair::new(slot);
                    if let Err(e) = pair.load(&case.loads) {
                        tally
                            .lock()
                            .unwrap()
                            .wrong
                            .push(format!("{}: loading failed: {e}", describe(&case)));
                        continue;
                    }
                    let result = audit(bin, dir, &pair, case.port);
                    let open = pair.reachable(case.port);
                    match result {
                        Ok((said, actual)) => judge(&case, open, said, &actual, tally),
                        Err(e) => tally.lock().unwrap().wrong.push(format!(
                            "{}: audit failed: {e}\nrules: {:#?}",
                            describe(&case),
                            case.loads
                        )),
                    }
                }
            });
        }
    });
    let t = tally.into_inner().unwrap();
    println!(
        "firewall differential: {total} rulesets in {:.1} s: {} agree, {} cannot tell, {} depends ({:.1}% of verdicts; {} depends checked against the peer), {} false passes, {} false fails, {} wrong in all",
        started.elapsed().as_secs_f64(),
        t.agree,
        t.cannot_tell,
        t.depends,
        100.0 * (t.cannot_tell + t.depends) as f64 / total as f64,
        t.conditions_checked,
        t.false_pass,
        t.false_fail,
        t.wrong.len()
    );
    assert!(t.wrong.is_empty(), "{}", t.wrong.join("\n\n"));
}
