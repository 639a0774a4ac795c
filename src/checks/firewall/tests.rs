//! The firewall audit over captured tool output (real nft 1.0.6 / iptables 1.8.9 output,
//! recorded from rulesets in `tests/fixtures/firewall/`); the live tools in network
//! namespaces are exercised by `tests/firewall.rs`.

use std::collections::BTreeMap;
use std::io;

use super::*;
use crate::checks::AuditOptions;
use crate::host::Root;
use crate::probe::Probes;
use crate::probe::firewall::{FirewallProbe, NoFirewall, Output};
use crate::testing::{Tree, assert_contains, assert_starts, expect, fixture};

/// A tool's output captured in `tests/fixtures/firewall`.
fn captured(name: &str) -> String {
    let path = fixture(&format!("firewall/{name}"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Hands out canned output per program; programs not listed are "not installed".
#[derive(Clone)]
struct Canned(BTreeMap<&'static str, Output>);

impl Canned {
    fn new(entries: &[(&'static str, bool, &str, &str)]) -> Self {
        Canned(
            entries
                .iter()
                .map(|(p, success, stdout, stderr)| {
                    (
                        *p,
                        Output {
                            success: *success,
                            stdout: stdout.to_string(),
                            stderr: stderr.to_string(),
                        },
                    )
                })
                .collect(),
        )
    }
}

impl FirewallProbe for Canned {
    fn run(&self, program: &str, _args: &[&str]) -> io::Result<Option<Output>> {
        Ok(self.0.get(program).cloned())
    }
}

fn audit(runner: impl FirewallProbe + 'static, root: &Root) -> BTreeMap<String, Finding> {
    audit_options(runner, root, AuditOptions::default())
}

fn audit_persisted(runner: impl FirewallProbe + 'static, root: &Root) -> BTreeMap<String, Finding> {
    audit_options(
        runner,
        root,
        AuditOptions {
            persisted: true,
            ..AuditOptions::default()
        },
    )
}

fn audit_options(
    runner: impl FirewallProbe + 'static,
    root: &Root,
    options: AuditOptions,
) -> BTreeMap<String, Finding> {
    let tree = Tree::new();
    let profile = tree.profile(
        "/ports.toml",
        "[job]\nrendezvous_ports = \"29500-29550\"\nnccl_ports = \"50000-50010\"\n",
    );
    let mut probes = Probes::absent("in a test");
    probes.firewall = Box::new(runner);
    crate::testing::audit(root, &profile, &options, probes, Area::Firewall)
}

#[test]
fn captured_nft_ruleset() {
    let json = captured("nft-mixed.json");
    let f = audit(Canned::new(&[("nft", true, &json, "")]), &Root::live());
    let rdv = expect(&f, "firewall.rendezvous_ports", Status::Pass);
    assert_starts(
        &rdv.actual,
        "nftables: 29500-29550: accepted by nftables inet filter chain input handle 10",
    );
    // 50000-50010 reaches chain foo, whose `limit` is not modelled.
    let nccl = expect(&f, "firewall.nccl_ports", Status::Warn);
    assert_contains(&nccl.actual, "cannot tell: `limit");
}

#[test]
fn verdict_maps_that_cannot_be_read_cannot_be_told() {
    // The shape `nft -j` gives a vmap rule; only the map and its data vary.
    let ruleset = |data: &str, maps: &str| {
        format!(
            r#"{{"nftables": [{{"table": {{"family": "inet", "name": "f"}}}}, {maps}
            {{"chain": {{"family": "inet", "table": "f", "name": "input", "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}}}},
            {{"rule": {{"family": "inet", "table": "f", "chain": "input", "handle": 4, "expr": [{{"vmap": {{"key": {{"payload": {{"protocol": "tcp", "field": "dport"}}}}, "data": {data}}}}}]}}}}]}}"#
        )
    };
    let verdict = |json: &str| {
        let tables = nft::parse(json).unwrap();
        model::evaluate(&tables, 29500)[0].verdict.clone()
    };
    let portv = r#"{"map": {"family": "inet", "name": "portv", "table": "f", "type": "inet_service", "map": "verdict", "elem": [[22, {"accept": null}], [{"elem": {"val": 29500, "counter": {"packets": 0, "bytes": 0}}}, {"drop": null}]]}},"#;
    assert_eq!(
        verdict(&ruleset(r#""@portv""#, portv)),
        model::Verdict::Dropped
    );
    // An empty map is no match; a map that is not there, or data of another shape, is
    // not read as one.
    let empty = r#"{"map": {"family": "inet", "name": "portv", "table": "f", "type": "inet_service", "map": "verdict"}},"#;
    assert_eq!(
        verdict(&ruleset(r#""@portv""#, empty)),
        model::Verdict::Accepted
    );
    for (data, maps) in [(r#""@portv""#, ""), (r#"{"concat": [1, 2]}"#, portv)] {
        assert!(
            matches!(verdict(&ruleset(data, maps)), model::Verdict::CannotTell(_)),
            "{data}"
        );
    }
}

#[test]
fn iptables_nft_tables_are_read_through_iptables_nft_save() {
    // nft shows iptables-nft's conntrack/multiport matches as opaque `xt` expressions; the
    // same table from iptables-nft-save is fully readable, and replaces the nft view.
    let runner = Canned::new(&[
        ("nft", true, &captured("iptables-nft-as-nft.json"), ""),
        (
            "iptables-nft-save",
            true,
            &captured("iptables-nft.save"),
            "",
        ),
    ]);
    let f = audit(runner.clone(), &Root::live());
    let rdv = expect(&f, "firewall.rendezvous_ports", Status::Pass);
    assert_starts(
        &rdv.actual,
        "iptables-nft: 29500-29550: accepted by iptables-nft filter chain INPUT rule 1",
    );
    let nccl = expect(&f, "firewall.nccl_ports", Status::Fail);
    assert_contains(
        &nccl.actual,
        "dropped by policy drop of iptables-nft filter chain INPUT",
    );
    assert_eq!(
        nccl.fix,
        "iptables-nft -A INPUT -p tcp -m multiport --dports 50000:50010 -j ACCEPT (persist with iptables-save > /etc/iptables/rules.v4 or your distribution's service)"
    );
    // Without iptables-nft-save, the xt matches make it "cannot tell", never a pass.
    let runner = Canned::new(&[("nft", true, &captured("iptables-nft-as-nft.json"), "")]);
    assert_eq!(
        audit(runner.clone(), &Root::live())["firewall.rendezvous_ports"].status,
        Status::Warn
    );
}

#[test]
fn iptables_nft_targets_nft_cannot_show_are_never_passed_over() {
    // Recorded from `iptables-nft -A INPUT -p tcp --dport 29500 -j REJECT` and a REJECT of
    // 50000:50010 with a comment: nft shows both targets as `{"xt": {"type": "target"}}`.
    // Read through nft alone (iptables-nft-save absent), they are "cannot tell".
    let runner = Canned::new(&[(
        "nft",
        true,
        &captured("iptables-nft-reject-as-nft.json"),
        "",
    )]);
    let f = audit(runner.clone(), &Root::live());
    for id in ["firewall.rendezvous_ports", "firewall.nccl_ports"] {
        expect(&f, id, Status::Warn);
        assert_contains(&f[id].actual, "xt target REJECT");
    }
}

#[test]
fn legacy_only_iptables_save_is_recognised() {
    let save = "# Generated by iptables-save v1.6.1 on Sun Nov 22 01:42:13 2026\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 29500 -j DROP\nCOMMIT\n";
    let f = audit(
        Canned::new(&[("iptables-save", true, save, "")]),
        &Root::live(),
    );
    let rdv = expect(&f, "firewall.rendezvous_ports", Status::Fail);
    assert!(rdv.actual.starts_with("iptables-legacy: 29500: dropped by iptables-legacy filter chain INPUT rule 1: -A INPUT -p tcp -m tcp --dport 29500 -j DROP; 29501-29550: accepted by policy accept"), "{}", rdv.actual);
    assert_starts(
        &rdv.fix,
        "iptables-legacy -I INPUT 1 -p tcp -m multiport --dports 29500:29550 -j ACCEPT",
    );
}

#[test]
fn tools_that_cannot_answer() {
    let root = Root::live();
    // Nothing installed: cannot tell, a warning.
    let f = audit(Canned::new(&[]), &root);
    expect(&f, "firewall.rendezvous_ports", Status::Warn);
    assert_contains(&f["firewall.rendezvous_ports"].message, "cannot tell");
    // Not root: skipped with the reason.
    let f = audit(
        Canned::new(&[("nft", false, "", "Error: Operation not permitted\n")]),
        &root,
    );
    expect(&f, "firewall.nccl_ports", Status::Skip);
    assert_contains(&f["firewall.nccl_ports"].message, "needs root");
    // Garbage from nft is an error, not a pass.
    let f = audit(Canned::new(&[("nft", true, "{not json", "")]), &root);
    expect(&f, "firewall.nccl_ports", Status::Error);
    // A kernel without ip_tables: legacy iptables has nothing to say, not an error.
    let no_ip_tables = (
        "iptables-legacy-save",
        false,
        "",
        "iptables-legacy-save v1.8.9: Cannot initialize: Protocol not supported\n",
    );
    let empty_nft = "{\"nftables\": [{\"metainfo\": {\"version\": \"1.0.6\"}}]}";
    let f = audit(
        Canned::new(&[no_ip_tables, ("nft", true, empty_nft, "")]),
        &root,
    );
    expect(&f, "firewall.nccl_ports", Status::Pass);
    // Without nft, native nftables rules are a blind spot: never a pass.
    let f = audit(Canned::new(&[no_ip_tables]), &root);
    expect(&f, "firewall.nccl_ports", Status::Warn);
    assert_contains(&f["firewall.nccl_ports"].message, "nft is not installed");
    let legacy_accept =
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 50000:50010 -j ACCEPT\nCOMMIT\n";
    let f = audit(
        Canned::new(&[("iptables-legacy-save", true, legacy_accept, "")]),
        &root,
    );
    expect(&f, "firewall.nccl_ports", Status::Warn);
    assert_starts(
        &f["firewall.nccl_ports"].actual,
        "iptables-legacy: 50000-50010: accepted by",
    );
    // --persisted does not pretend the live rules are the saved ones.
    let f = audit_persisted(Canned::new(&[]), &root);
    expect(&f, "firewall.nccl_ports", Status::Skip);
    // Empty rulesets: no firewall at all, a pass.
    let f = audit(
        Canned::new(&[
            (
                "nft",
                true,
                "{\"nftables\": [{\"metainfo\": {\"version\": \"1.0.6\"}}]}",
                "",
            ),
            ("iptables-legacy-save", true, "", ""),
        ]),
        &root,
    );
    expect(&f, "firewall.rendezvous_ports", Status::Pass);
    assert_starts(&f["firewall.rendezvous_ports"].actual, "no firewall");
}

#[test]
fn another_root_is_skipped() {
    let f = audit(Canned::new(&[]), &Tree::new().root());
    expect(&f, "firewall.rendezvous_ports", Status::Skip);
    assert_contains(&f["firewall.rendezvous_ports"].message, "--root");
}

#[test]
fn fixes_per_front_end() {
    let at = Place {
        tool: Tool::Nftables,
        table: "inet filter".into(),
        chain: "input".into(),
        position: Some(7),
    };
    assert_eq!(
        fix_text(None, Some(&at), "29500-29550,50000-51000"),
        "nft insert rule inet filter input position 7 tcp dport { 29500-29550, 50000-51000 } accept (and add the rule to /etc/nftables.conf so it survives a reboot)"
    );
    assert_eq!(
        fix_text(Some("firewalld"), Some(&at), "29500-29550,50000-51000"),
        "firewall-cmd --permanent --add-port=29500-29550/tcp --add-port=50000-51000/tcp && firewall-cmd --reload"
    );
    assert_eq!(
        fix_text(Some("ufw"), None, "29500-29550,22"),
        "ufw allow 29500:29550/tcp && ufw allow 22/tcp"
    );
}

/// A runner that records what it was asked to run and knows the legacy table list.
#[derive(Clone)]
struct Recording {
    canned: Canned,
    legacy_tables: Option<String>,
    asked: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
}

impl FirewallProbe for Recording {
    fn run(&self, program: &str, args: &[&str]) -> io::Result<Option<Output>> {
        self.asked.borrow_mut().push(program.to_string());
        self.canned.run(program, args)
    }

    fn legacy_tables(&self) -> Option<String> {
        self.legacy_tables.clone()
    }
}

#[test]
fn iptables_tools_run_only_when_they_can_have_rules() {
    let empty_nft = "{\"nftables\": [{\"metainfo\": {\"version\": \"1.0.6\"}}]}";
    let legacy_drop =
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 29500 -j DROP\nCOMMIT\n";
    let run = |nft: &str, legacy_tables: Option<&str>| {
        let runner = Recording {
            canned: Canned::new(&[
                ("nft", true, nft, ""),
                ("iptables-legacy-save", true, legacy_drop, ""),
                ("iptables-nft-save", true, "", ""),
            ]),
            legacy_tables: legacy_tables.map(str::to_string),
            asked: Default::default(),
        };
        let status = audit(runner.clone(), &Root::live())["firewall.rendezvous_ports"].status;
        (status, runner.asked.take())
    };
    // No legacy tables in the kernel, no ip-family tables in nft: only nft runs.
    assert_eq!(
        run(empty_nft, Some("")),
        (Status::Pass, vec!["nft".to_string()])
    );
    // Legacy tables exist: iptables-legacy-save runs and its drop is found.
    let (status, asked) = run(empty_nft, Some("filter\n"));
    assert_eq!(status, Status::Fail);
    assert_eq!(asked, ["nft", "iptables-legacy-save"]);
    // Unknown legacy state: run it rather than guess.
    assert_eq!(run(empty_nft, None).1, ["nft", "iptables-legacy-save"]);
    // nft lists an `ip filter` table, which iptables-nft may have written: ask it.
    let (_, asked) = run(&captured("iptables-nft-as-nft.json"), Some(""));
    assert_eq!(asked, ["nft", "iptables-nft-save"]);
}

/// The verdicts for port 29500 of an `nft -j` document with these items after its metainfo.
fn nft_verdicts(items: &str) -> Vec<model::Verdict> {
    let json = format!(r#"{{"nftables": [{{"metainfo": {{"version": "1.0.6"}}}}, {items}]}}"#);
    let tables = nft::parse(&json).unwrap();
    model::evaluate(&tables, 29500)
        .into_iter()
        .map(|w| w.verdict)
        .collect()
}

#[test]
fn kernel_behaviour_the_model_follows() {
    use model::Verdict::{Accepted, Dropped};
    let table = |family: &str, name: &str, extra: &str| {
        format!(r#"{{"table": {{"family": "{family}", "name": "{name}", "handle": 1{extra}}}}}"#)
    };
    let chain = |family: &str, t: &str, kind: &str, hook: &str, prio: i32, policy: &str| {
        format!(
            r#"{{"chain": {{"family": "{family}", "table": "{t}", "name": "c", "handle": 1, "type": "{kind}", "hook": "{hook}", "prio": {prio}, "policy": "{policy}"}}}}"#
        )
    };
    let rule = |family: &str, t: &str, expr: &str| {
        format!(
            r#"{{"rule": {{"family": "{family}", "table": "{t}", "chain": "c", "handle": 2, "expr": [{expr}]}}}}"#
        )
    };
    let dport = r#"{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 29500}}"#;
    let ct_est = r#"{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "established"}}, {"accept": null}"#;
    let nat_drop = [
        table("ip", "n", ""),
        chain("ip", "n", "nat", "prerouting", -100, "accept"),
        rule("ip", "n", &format!("{dport}, {{\"drop\": null}}")),
    ]
    .join(", ");
    // A nat chain runs only once a `ct` rule anywhere turns conntrack on.
    assert_eq!(nft_verdicts(&nat_drop), [Accepted]);
    let with_ct = [
        nat_drop.clone(),
        table("ip", "f", ""),
        chain("ip", "f", "filter", "input", 0, "accept"),
        rule("ip", "f", ct_est),
    ]
    .join(", ");
    assert_eq!(nft_verdicts(&with_ct), [Dropped]);
    // A dormant table is not run (nft 1.0.6 prints its flags unreadably: kept then).
    let dormant = |flags: &str| {
        [
            table("ip", "t", flags),
            chain("ip", "t", "filter", "input", 0, "drop"),
        ]
        .join(", ")
    };
    assert_eq!(
        nft_verdicts(&dormant(r#", "flags": "dormant""#)),
        [Accepted]
    );
    assert_eq!(
        nft_verdicts(&dormant(r#", "flags": ["dormant"]"#)),
        [Accepted]
    );
    assert_eq!(
        nft_verdicts(&dormant(r#", "flags": "Lester Gooch #5""#)),
        [Dropped]
    );
    // `ct status != dnat` before conntrack never matches; after it, it does.
    let ct_status = |prio: i32| {
        [
            table("ip", "r", ""),
            chain("ip", "r", "filter", "prerouting", prio, "accept"),
            rule(
                "ip",
                "r",
                r#"{"match": {"op": "!=", "left": {"ct": {"key": "status"}}, "right": "dnat"}}, {"drop": null}"#,
            ),
        ]
        .join(", ")
    };
    assert_eq!(nft_verdicts(&ct_status(-300)), [Accepted]);
    assert_eq!(nft_verdicts(&ct_status(-150)), [Dropped]);
    assert!(matches!(
        nft_verdicts(&ct_status(-200))[0],
        model::Verdict::CannotTell(_)
    ));
    // `tcp flags & (fin|syn|rst|ack) == syn`, as iptables-nft stores `--syn`.
    let syn = |op: &str, verdict: &str| {
        [
            table("ip", "filter", ""),
            chain("ip", "filter", "filter", "input", 0, "accept"),
            rule(
                "ip",
                "filter",
                &format!(
                    r#"{{"match": {{"op": "{op}", "left": {{"&": [{{"payload": {{"protocol": "tcp", "field": "flags"}}}}, ["fin", "syn", "rst", "ack"]]}}, "right": "syn"}}}}, {{"{verdict}": null}}"#
                ),
            ),
        ]
        .join(", ")
    };
    assert_eq!(nft_verdicts(&syn("==", "drop")), [Dropped]);
    assert_eq!(nft_verdicts(&syn("!=", "drop")), [Accepted]);
    // 127.0.0.0/8 destinations are never a peer's: no condition, no warning.
    let lo = [
        table("ip", "f", ""),
        chain("ip", "f", "filter", "input", 0, "accept"),
        rule(
            "ip",
            "f",
            r#"{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "127.0.0.0", "len": 8}}}}, {"drop": null}"#,
        ),
    ]
    .join(", ");
    assert_eq!(nft_verdicts(&lo), [Accepted]);
}

#[test]
fn what_diverts_the_connection_cannot_be_told_by_name() {
    let told = |items: &str, name: &str| {
        let json = format!(r#"{{"nftables": [{items}]}}"#);
        let tables = nft::parse(&json).unwrap();
        let walks = model::evaluate(&tables, 29500);
        assert!(
            walks.iter().any(
                |w| matches!(&w.verdict, model::Verdict::CannotTell(t) if t.contains(name))
                    || w.decided_by.contains(name)
            ),
            "{name}: {walks:#?}"
        );
    };
    told(
        r#"{"table": {"family": "arp", "name": "a"}}, {"chain": {"family": "arp", "table": "a", "name": "i", "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}}"#,
        "ARP filtering",
    );
    told(
        r#"{"table": {"family": "ip", "name": "m"}}, {"chain": {"family": "ip", "table": "m", "name": "p", "type": "filter", "hook": "prerouting", "prio": -150, "policy": "accept"}},
        {"rule": {"family": "ip", "table": "m", "chain": "p", "handle": 3, "expr": [{"mangle": {"key": {"payload": {"protocol": "tcp", "field": "dport"}}, "value": 1}}]}}"#,
        "mangle",
    );
    told(
        r#"{"table": {"family": "ip", "name": "n"}}, {"chain": {"family": "ip", "table": "n", "name": "p", "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}},
        {"rule": {"family": "ip", "table": "n", "chain": "p", "handle": 3, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 29500}}, {"redirect": {"port": 1}}]}}"#,
        "redirect",
    );
    // Setting a mark lets the packet go on.
    let json = r#"{"nftables": [{"table": {"family": "ip", "name": "m"}}, {"chain": {"family": "ip", "table": "m", "name": "p", "type": "filter", "hook": "prerouting", "prio": -150, "policy": "accept"}},
        {"rule": {"family": "ip", "table": "m", "chain": "p", "handle": 3, "expr": [{"mangle": {"key": {"meta": {"key": "mark"}}, "value": 1}}]}}]}"#;
    let walks = model::evaluate(&nft::parse(json).unwrap(), 29500);
    assert_eq!(walks[0].verdict, model::Verdict::Accepted);
}

#[test]
fn a_native_ip_table_is_read_from_nft_not_iptables_nft_save() {
    // `table ip filter { chain INPUT { ... tcp dport { 22, 29600 } accept } }` under policy
    // drop: iptables-nft-save 1.8 would print it as `-p tcp -j ACCEPT`.
    let json = r#"{"nftables": [{"table": {"family": "ip", "name": "filter"}},
        {"chain": {"family": "ip", "table": "filter", "name": "INPUT", "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}},
        {"rule": {"family": "ip", "table": "filter", "chain": "INPUT", "handle": 2, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [22, 29600]}}}, {"accept": null}]}}]}"#;
    let lossy = "# Generated by iptables-nft-save v1.8.9 (nf_tables)\n*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp -j ACCEPT\nCOMMIT\n";
    let runner = Canned::new(&[
        ("nft", true, json, ""),
        ("iptables-nft-save", true, lossy, ""),
        ("iptables-legacy-save", true, "", ""),
    ]);
    let rs = read_ruleset(&runner).unwrap();
    assert_eq!(rs.tables.len(), 1);
    assert_eq!(rs.tables[0].tool, Tool::Nftables);
    let walks = model::evaluate(&rs.tables, 29500);
    assert_eq!(walks[0].verdict, model::Verdict::Dropped);
}

#[test]
fn nccl_ports_from_the_local_port_range_are_named() {
    let findings = |range: &str| {
        let tree = Tree::new();
        tree.file("/proc/sys/net/ipv4/ip_local_port_range", range);
        let profile = tree.profile("/p.toml", "[job]\nnccl_ports = \"ip_local_port_range\"\n");
        let probes = Probes::absent("in a test");
        let options = AuditOptions::default();
        crate::testing::audit(&tree.root(), &profile, &options, probes, Area::Firewall)
    };
    // Under --root the rules are not read, but the expectation still names the ports.
    let f = findings("32768\t60999\n");
    let nccl = expect(&f, "firewall.nccl_ports", Status::Skip);
    assert_eq!(nccl.expected, "inbound TCP 32768-60999 accepted");
    let f = findings("29500 29500\n");
    assert_eq!(
        f["firewall.nccl_ports"].expected,
        "inbound TCP 29500 accepted"
    );
    // A range that is not one says where the ports would come from, not a wrong range.
    for bad in ["60999 32768\n", "32768\n", "many ports\n"] {
        assert_eq!(
            findings(bad)["firewall.nccl_ports"].expected,
            "inbound TCP to net.ipv4.ip_local_port_range accepted",
            "{bad}"
        );
    }
}

#[test]
fn either_ufw_chain_makes_ufw_the_fix() {
    for chain in ["ufw-before-input", "ufw-user-input"] {
        let save =
            format!("*filter\n:INPUT DROP [0:0]\n:{chain} - [0:0]\n-A INPUT -j {chain}\nCOMMIT\n");
        let f = audit(
            Canned::new(&[("iptables-legacy-save", true, &save, "")]),
            &Root::live(),
        );
        let rdv = expect(&f, "firewall.rendezvous_ports", Status::Fail);
        assert_starts(&rdv.actual, "ufw (iptables-legacy): 29500-29550: dropped");
        assert_eq!(rdv.fix, "ufw allow 29500:29550/tcp", "{chain}");
    }
}

#[test]
fn the_live_probe_reads_the_kernel_s_legacy_table_names() {
    use crate::probe::firewall::LiveFirewall;
    let tree = Tree::new();
    // No ip_tables module, no file: no legacy table, so iptables-legacy-save need not run.
    assert_eq!(
        LiveFirewall(tree.root()).legacy_tables(),
        Some(String::new())
    );
    tree.file("/proc/net/ip_tables_names", "filter\nnat\n");
    assert_eq!(
        LiveFirewall(tree.root()).legacy_tables(),
        Some("filter\nnat\n".to_string())
    );
    // Unreadable: cannot tell, so the tool is run rather than guessed about.
    let tree = Tree::new();
    tree.dir("/proc/net/ip_tables_names");
    assert_eq!(LiveFirewall(tree.root()).legacy_tables(), None);
}

#[test]
fn an_inet_rule_for_one_family_sees_the_peer_s_ipv4_packets_or_none() {
    use model::Verdict::{Accepted, Dropped};
    let ruleset = |family: &str| {
        format!(
            r#"{{"table": {{"family": "inet", "name": "f"}}}}, {{"chain": {{"family": "inet", "table": "f", "name": "c", "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}}}},
            {{"rule": {{"family": "inet", "table": "f", "chain": "c", "handle": 2, "expr": [{{"match": {{"op": "==", "left": {{"meta": {{"key": "nfproto"}}}}, "right": "{family}"}}}}, {{"drop": null}}]}}}}"#
        )
    };
    assert_eq!(nft_verdicts(&ruleset("ipv4")), [Dropped]);
    assert_eq!(nft_verdicts(&ruleset("ipv6")), [Accepted]);
}

#[test]
fn a_mark_an_nft_rule_sets_is_one_a_later_test_may_see() {
    // `meta mark set VALUE` then `meta mark & 0x10000 == 0x10000 accept`, under policy drop.
    let ruleset = |value: u32| {
        format!(
            r#"{{"table": {{"family": "inet", "name": "f"}}}}, {{"chain": {{"family": "inet", "table": "f", "name": "c", "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}}}},
            {{"rule": {{"family": "inet", "table": "f", "chain": "c", "handle": 2, "expr": [{{"mangle": {{"key": {{"meta": {{"key": "mark"}}}}, "value": {value}}}}}]}}}},
            {{"rule": {{"family": "inet", "table": "f", "chain": "c", "handle": 3, "expr": [{{"match": {{"op": "==", "left": {{"&": [{{"meta": {{"key": "mark"}}}}, 65536]}}, "right": 65536}}}}, {{"accept": null}}]}}}}"#
        )
    };
    let v = nft_verdicts(&ruleset(0x10000));
    assert!(
        !v.is_empty()
            && v.iter()
                .all(|v| matches!(v, model::Verdict::CannotTell(t) if t.contains("sets marks"))),
        "{v:?}"
    );
    // Another bit set: the test still sees 0.
    assert_eq!(nft_verdicts(&ruleset(0x4)), [model::Verdict::Dropped]);
}

#[test]
fn a_ct_state_verdict_map_picks_the_entry_of_the_chain_s_place() {
    use model::Verdict::{Accepted, Dropped};
    // `ct state vmap { established : accept, invalid : drop, new : drop }` at `prio`:
    // before conntrack (-300) a packet's state is `invalid`.
    let ruleset = |prio: i32, new: &str| {
        format!(
            r#"{{"table": {{"family": "inet", "name": "f"}}}}, {{"chain": {{"family": "inet", "table": "f", "name": "c", "type": "filter", "hook": "prerouting", "prio": {prio}, "policy": "accept"}}}},
            {{"rule": {{"family": "inet", "table": "f", "chain": "c", "handle": 2, "expr": [{{"vmap": {{"key": {{"ct": {{"key": "state"}}}}, "data": {{"set": [["established", {{"accept": null}}], ["invalid", {{"drop": null}}], ["new", {{"{new}": null}}]]}}}}}}]}}}}"#
        )
    };
    assert_eq!(nft_verdicts(&ruleset(-300, "accept")), [Dropped]);
    assert_eq!(nft_verdicts(&ruleset(0, "accept")), [Accepted]);
    assert_eq!(nft_verdicts(&ruleset(0, "drop")), [Dropped]);
}

/// Why `runner`'s rules could not be read; panics if they could, or failed otherwise.
fn unreadable(runner: &dyn FirewallProbe) -> Unreadable {
    match read_ruleset(runner).err() {
        Some(RulesetError::Unreadable(e)) => e,
        other => panic!("not unreadable: {other:?}"),
    }
}

#[test]
fn rules_that_cannot_be_read_say_why() {
    // A tool that cannot be run names itself.
    let e = unreadable(&NoFirewall("no tools here".into()));
    assert!(
        matches!(&e, Unreadable::Run { program, .. } if program == "nft"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "nft: no tools here");
    // nft's JSON broken, and no table listed to read one by one.
    let e = unreadable(&Canned::new(&[("nft", true, "{not json", "")]));
    assert!(
        matches!(e, Unreadable::TableByTable(TableByTable::NoTable)),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "nft -j list ruleset is not JSON, and nft list tables names no table"
    );
    // JSON, but not nft's.
    let e = unreadable(&Canned::new(&[("nft", true, "{}", "")]));
    assert!(
        matches!(e, Unreadable::Nft(nft::NftError::NoArray)),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "nft -j output has no `nftables` array");
    // iptables-save output that is not.
    let e = unreadable(&Canned::new(&[(
        "iptables-legacy-save",
        true,
        "*filter\nnonsense\n",
        "",
    )]));
    assert!(matches!(e, Unreadable::Save(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "iptables-legacy line 2: unexpected line `nonsense`"
    );
    // An "incompatible" table it does not name: what it left out cannot be told, so its
    // drop policy is not taken for "no firewall".
    let e = unreadable(&Canned::new(&[(
        "iptables-nft-save",
        true,
        "# Some table is incompatible, use 'nft' tool.\n*filter\n:INPUT DROP [0:0]\nCOMMIT\n",
        "",
    )]));
    assert!(matches!(e, Unreadable::Incompatible { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "iptables-nft-save: `# Some table is incompatible, use 'nft' tool.` names no table"
    );
    // The audit shows the same words as an error.
    let f = audit(Canned::new(&[("nft", true, "{}", "")]), &Root::live());
    let nccl = expect(&f, "firewall.nccl_ports", Status::Error);
    assert_eq!(nccl.message, "nft -j output has no `nftables` array");
}

#[test]
fn a_ruleset_pieced_together_table_by_table_names_what_is_missing() {
    let never = |_: &str, _: &str| None;
    let dormant = |_: &str, _: &str| Some(true);
    let e = table_by_table(&NoFirewall("not live".into()), &never).unwrap_err();
    assert!(matches!(e, TableByTable::Run(_)), "{e:?}");
    assert_eq!(e.to_string(), "nft list tables: not live");
    for listing in [Canned::new(&[]), Canned::new(&[("nft", false, "", "")])] {
        let e = table_by_table(&listing, &never).unwrap_err();
        assert!(matches!(e, TableByTable::ListFailed), "{e:?}");
        assert_eq!(
            e.to_string(),
            "nft -j list ruleset is not JSON, and nft list tables failed"
        );
    }
    // Every nft command answers this text: a table list, but no table's JSON.
    let tables = Canned::new(&[("nft", true, "table ip x\n", "")]);
    let e = table_by_table(&tables, &never).unwrap_err();
    assert!(
        matches!(&e, TableByTable::NotJson { family, name } if family == "ip" && name == "x"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "nft -j list table ip x is not JSON (nor is the whole ruleset's)"
    );
    // A dormant table that cannot be listed is left out.
    assert_eq!(
        table_by_table(&tables, &dormant).unwrap(),
        r#"{"nftables":[]}"#
    );
}
