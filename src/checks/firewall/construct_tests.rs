//! Verdicts at the forks where a wrong model reads otherwise (issues 25 and 27): each case
//! fails on a model that skips the construct, reads it as "every packet" or as "cannot
//! tell". nft cases use real nft 1.0.6 output (`tests/fixtures/firewall/round2.*`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::model::{Facts, Table, Tool, Verdict, Walk, evaluate, evaluate_with};
use super::{iptables, nft};
use crate::testing::fixture;

fn captured(name: &str) -> String {
    let path = fixture(&format!("firewall/{name}"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The tables of round2.json, ingress devices read from the recorded text listing.
fn round2() -> Vec<Table> {
    let edge = captured("netdev-edge.txt");
    let devices = |family: &str, name: &str| {
        if (family, name) == ("netdev", "edge") {
            nft::ingress_devices(&edge)
        } else {
            BTreeMap::new()
        }
    };
    nft::parse_full(&captured("round2.json"), &|_, _| None, &devices).unwrap()
}

fn only(tables: &[Table], id: &str) -> Vec<Table> {
    let out: Vec<Table> = tables.iter().filter(|t| t.id == id).cloned().collect();
    assert_eq!(out.len(), 1, "no table {id}");
    out
}

fn verdicts(walks: &[Walk]) -> Vec<Verdict> {
    walks.iter().map(|w| w.verdict.clone()).collect()
}

fn node(addr: &str, bridged: Option<bool>) -> Facts {
    Facts {
        addresses: Some(vec![addr.parse::<Ipv4Addr>().unwrap()]),
        mark_bits: 0,
        bridged,
        interfaces: None,
        links: None,
    }
}

fn ipt(text: &str) -> Vec<Table> {
    iptables::parse(text, Tool::IptablesLegacy).unwrap()
}

/// INPUT with `policy` and one rule per line of `rules`.
fn input(policy: &str, rules: &[&str]) -> Vec<Table> {
    let body: String = rules.iter().map(|r| format!("-A INPUT {r}\n")).collect();
    ipt(&format!(
        "*filter\n:INPUT {policy} [0:0]\n:sub - [0:0]\n:a - [0:0]\n:b - [0:0]\n{body}COMMIT\n"
    ))
}

fn one(tables: &[Table], facts: &Facts) -> Verdict {
    super::model::tests::one_verdict(&evaluate_with(tables, 29500, facts))
}

#[test]
fn pkt_type_names_as_iptables_spells_them() {
    let f = Facts::default();
    for (policy, rule, want) in [
        (
            "DROP",
            "-m pkttype --pkt-type unicast -j ACCEPT",
            Verdict::Accepted,
        ),
        (
            "DROP",
            "-m pkttype --pkt-type host -j ACCEPT",
            Verdict::Accepted,
        ),
        (
            "ACCEPT",
            "-m pkttype ! --pkt-type unicast -j DROP",
            Verdict::Accepted,
        ),
        (
            "ACCEPT",
            "-m pkttype --pkt-type broadcast -j DROP",
            Verdict::Accepted,
        ),
        (
            "ACCEPT",
            "-m pkttype --pkt-type unicast -j DROP",
            Verdict::Dropped,
        ),
    ] {
        assert_eq!(one(&input(policy, &[rule]), &f), want, "{rule}");
    }
}

#[test]
fn a_bare_match_module_is_no_match_all() {
    // -m socket ignores wildcard listeners: it depends on how the job binds.
    let walks = evaluate(&input("DROP", &["-m socket -j ACCEPT"]), 29500);
    assert_eq!(verdicts(&walks), [Verdict::Accepted, Verdict::Dropped]);
    assert!(walks[0].conditions[0].contains("wildcard"), "{walks:#?}");
    let f = Facts::default();
    let socket = |rule| one(&input("DROP", &[rule]), &f);
    assert_eq!(
        socket("-m socket --transparent -j ACCEPT"),
        Verdict::Dropped
    );
    assert_eq!(
        socket("-m socket --nowildcard -j ACCEPT"),
        Verdict::Accepted
    );
    // A module the model does not know, given bare, is named.
    let walks = evaluate(&input("ACCEPT", &["-m rpfilter -j DROP"]), 29500);
    assert!(
        matches!(&walks[0].verdict, Verdict::CannotTell(t) if t.contains("-m rpfilter without options")),
        "{walks:#?}"
    );
    // Modules whose options are all judged one by one hold for every packet bare.
    assert_eq!(
        socket("-p tcp -m tcp -m comment -j ACCEPT"),
        Verdict::Accepted
    );
}

#[test]
fn synproxy_turns_conntrack_on_so_nat_chains_run() {
    let tables = only(&round2(), "ip syn");
    assert!(tables[0].conntrack);
    assert_eq!(
        one(&tables, &Facts::default()),
        Verdict::Dropped,
        "the nat chain's drop policy"
    );
    let ipt_nat = ipt(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 22 -j SYNPROXY --mss 1460\nCOMMIT\n",
    );
    assert!(ipt_nat[0].conntrack);
}

#[test]
fn bridge_chains_run_for_packets_through_a_bridge_port() {
    let tables = only(&round2(), "bridge br");
    assert_eq!(
        one(&tables, &node("10.0.0.5", Some(true))),
        Verdict::Dropped
    );
    assert_eq!(
        one(&tables, &node("10.0.0.5", Some(false))),
        Verdict::Accepted
    );
    // The node's address is another one: the daddr test fails.
    assert_eq!(
        one(&tables, &node("10.0.0.6", Some(true))),
        Verdict::Accepted
    );
    let unknown = evaluate(&tables, 29500);
    assert!(
        unknown.iter().any(|w| w.verdict == Verdict::Dropped),
        "{unknown:#?}"
    );
    assert!(unknown.iter().any(|w| w.verdict == Verdict::Accepted));
}

#[test]
fn netdev_ingress_applies_to_its_device_only() {
    assert_eq!(
        nft::ingress_devices(&captured("netdev-edge.txt")),
        BTreeMap::from([("lo_in".to_string(), vec!["lo".to_string()])])
    );
    // Its drop policy is on lo, where no peer's packet arrives.
    let tables = only(&round2(), "netdev edge");
    assert_eq!(one(&tables, &Facts::default()), Verdict::Accepted);
    let eth = nft::ingress_devices(
        "table netdev x {\n\tchain c {\n\t\ttype filter hook ingress devices = { eth0, \"eth1\" } priority 0; policy drop;\n\t}\n}\n",
    );
    assert_eq!(eth["c"], ["eth0", "eth1"]);
}

#[test]
fn the_server_ruleset_of_the_nftables_wiki_is_modelled() {
    let tables = round2();
    // An arp table that only counts filters nothing.
    assert!(tables.iter().all(|t| t.id != "arp counted"));
    let wiki = only(&tables, "inet wiki");
    let walks = evaluate(&wiki, 29500);
    // Dropped from the crowdsec-banned address (an element with a time-out and a
    // comment), accepted from the peer's network by the saddr vmap, else the drop policy.
    assert_eq!(
        verdicts(&walks),
        [Verdict::Dropped, Verdict::Accepted, Verdict::Dropped],
        "{walks:#?}"
    );
    assert_eq!(walks[0].conditions, ["saddr 192.0.2.7"]);
    assert_eq!(
        walks[1].conditions,
        ["not saddr 192.0.2.7", "saddr 10.77.0.0/24"]
    );
    // kube-proxy's concatenated map decides port 53 to its service address.
    let svc = evaluate_with(&wiki, 53, &node("10.96.0.10", None));
    assert_eq!(verdicts(&svc), [Verdict::Dropped, Verdict::Accepted]);
    assert_eq!(svc[1].conditions, ["not saddr 192.0.2.7"]);
    // Marks: nothing sets one, so `meta mark & 0x10000 == 0x10000` never holds; with a
    // rule that sets marks, it cannot be told.
    let marked = Facts {
        mark_bits: u32::MAX,
        ..Facts::default()
    };
    let walks = evaluate_with(&wiki, 29500, &marked);
    assert!(
        walks
            .iter()
            .any(|w| matches!(&w.verdict, Verdict::CannotTell(t) if t.contains("mark"))),
        "{walks:#?}"
    );
}

#[test]
fn goto_does_not_come_back() {
    let f = Facts::default();
    // Through a goto, the empty chain's end returns past INPUT: the policy drops.
    assert_eq!(
        one(&input("DROP", &["-g sub", "-j ACCEPT"]), &f),
        Verdict::Dropped
    );
    assert_eq!(
        one(&input("DROP", &["-j sub", "-j ACCEPT"]), &f),
        Verdict::Accepted
    );
    // A goto cycle is named, not followed forever.
    let cycle = ipt(
        "*filter\n:INPUT ACCEPT [0:0]\n:a - [0:0]\n:b - [0:0]\n-A INPUT -g a\n-A a -g b\n-A b -g a\nCOMMIT\n",
    );
    assert!(matches!(one(&cycle, &f), Verdict::CannotTell(t) if t.contains("loop")));
}

#[test]
fn branching_is_capped() {
    // 40 interface tests in each of three base chains: 41^3 ways unless capped.
    let chain = |table: &str, chain: &str| {
        let body: String = (0..40)
            .map(|i| format!("-A {chain} -i {table}{i} -j RETURN\n"))
            .collect();
        format!("*{table}\n:{chain} ACCEPT [0:0]\n{body}COMMIT\n")
    };
    let text = chain("raw", "PREROUTING") + &chain("mangle", "INPUT") + &chain("filter", "INPUT");
    let tables = ipt(&text);
    let started = std::time::Instant::now();
    let walks = evaluate(&tables, 29500);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(walks.len() < 1000, "{} walks", walks.len());
    assert!(
        walks
            .iter()
            .any(|w| matches!(&w.verdict, Verdict::CannotTell(t) if t.contains("too many"))),
    );
}

#[test]
fn mangle_prerouting_drops_count() {
    let tables = ipt(
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp --dport 29500 -j DROP\nCOMMIT\n",
    );
    assert_eq!(one(&tables, &Facts::default()), Verdict::Dropped);
}

#[test]
fn destination_addresses_are_decided_by_the_node_s_own() {
    let f = node("10.0.0.5", None);
    assert_eq!(
        one(&input("DROP", &["-d 10.0.0.5/32 -j ACCEPT"]), &f),
        Verdict::Accepted
    );
    assert_eq!(
        one(&input("DROP", &["-d 10.0.0.0/8 -j ACCEPT"]), &f),
        Verdict::Accepted
    );
    assert_eq!(
        one(&input("DROP", &["-d 192.0.2.1 -j ACCEPT"]), &f),
        Verdict::Dropped
    );
    assert_eq!(
        one(&input("ACCEPT", &["! -d 10.0.0.5 -j DROP"]), &f),
        Verdict::Accepted
    );
    // Unknown addresses: it depends on the address the peer uses.
    let walks = evaluate(&input("DROP", &["-d 10.0.0.5 -j ACCEPT"]), 29500);
    assert_eq!(verdicts(&walks), [Verdict::Accepted, Verdict::Dropped]);
    assert!(walks[0].conditions[0].contains("10.0.0.5"));
}

#[test]
fn source_ports_are_ephemeral() {
    let f = Facts::default();
    let sport = |rule| one(&input("DROP", &[rule]), &f);
    assert_eq!(
        sport("-p tcp --sport 1024:65535 -j ACCEPT"),
        Verdict::Accepted
    );
    assert_eq!(sport("-p tcp --sport 1024: -j ACCEPT"), Verdict::Accepted);
    assert_eq!(sport("-p tcp --sport 53 -j ACCEPT"), Verdict::Dropped);
    assert_eq!(
        sport("-p tcp ! --sport 0:1023 -j ACCEPT"),
        Verdict::Accepted
    );
    let walks = evaluate(
        &input("DROP", &["-p tcp --sport 40000:50000 -j ACCEPT"]),
        29500,
    );
    assert_eq!(verdicts(&walks), [Verdict::Accepted, Verdict::Dropped]);
    // 1024 is the lowest port a peer's connection may come from.
    let walks = evaluate(
        &input("DROP", &["-p tcp --sport 1000:1024 -j ACCEPT"]),
        29500,
    );
    assert_eq!(verdicts(&walks), [Verdict::Accepted, Verdict::Dropped]);
}

#[test]
fn a_source_restricted_accept_is_not_open_to_every_peer() {
    for rules in [
        &["-s 10.77.0.0/24 -j ACCEPT"][..],
        &["! -s 10.99.0.0/24 -j ACCEPT"],
    ] {
        let walks = evaluate(&input("DROP", rules), 29500);
        assert_eq!(
            verdicts(&walks),
            [Verdict::Accepted, Verdict::Dropped],
            "{rules:?}"
        );
    }
}

#[test]
fn fragments_source_types_and_negated_sets_read_plainly() {
    let f = Facts::default();
    assert_eq!(
        one(&input("ACCEPT", &["-f -j DROP"]), &f),
        Verdict::Accepted
    );
    assert_eq!(
        one(&input("DROP", &["! -f -j ACCEPT"]), &f),
        Verdict::Accepted
    );
    assert_eq!(
        one(
            &input("DROP", &["-m addrtype --src-type UNICAST -j ACCEPT"]),
            &f
        ),
        Verdict::Accepted
    );
    assert_eq!(
        one(
            &input("ACCEPT", &["-m addrtype --src-type LOCAL -j DROP"]),
            &f
        ),
        Verdict::Accepted
    );
    assert_eq!(
        one(
            &input("ACCEPT", &["-p tcp --tcp-flags ALL NONE -j DROP"]),
            &f
        ),
        Verdict::Accepted
    );
    let walks = evaluate(
        &input(
            "DROP",
            &["-m set ! --match-set allow src -j DROP", "-j ACCEPT"],
        ),
        29500,
    );
    let texts: Vec<String> = walks.iter().flat_map(|w| w.conditions.clone()).collect();
    assert!(
        texts.contains(&"not in ipset allow (src)".to_string()),
        "{texts:?}"
    );
    assert!(texts.iter().all(|t| !t.contains("not !")), "{texts:?}");
}

#[test]
fn interface_tests_are_decided_when_every_way_in_agrees() {
    let facts = |devs: &[&str]| Facts {
        interfaces: Some(devs.iter().map(|d| d.to_string()).collect()),
        ..Facts::default()
    };
    let rules = input("DROP", &["-i eth+ -j ACCEPT"]);
    assert_eq!(one(&rules, &facts(&["eth0", "eth1"])), Verdict::Accepted);
    assert_eq!(one(&rules, &facts(&["ib0"])), Verdict::Dropped);
    let walks = evaluate_with(&rules, 29500, &facts(&["eth0", "ib0"]));
    assert_eq!(verdicts(&walks), [Verdict::Accepted, Verdict::Dropped]);
}

#[test]
fn mark_tests_see_only_the_bits_rules_set() {
    // Calico's INPUT clears its bits and tests 0x10000, which nothing sets to 1 here.
    let calico = input(
        "DROP",
        &[
            "-j MARK --set-xmark 0x0/0xf0000",
            "-m mark --mark 0x10000/0x10000 -j ACCEPT",
        ],
    );
    assert_eq!(calico[0].mark_bits, 0);
    assert_eq!(one(&calico, &Facts::default()), Verdict::Dropped);
    let set = input(
        "DROP",
        &[
            "-j MARK --set-xmark 0x10000/0x10000",
            "-m mark --mark 0x10000/0x10000 -j ACCEPT",
        ],
    );
    assert!(matches!(one(&set, &Facts::default()), Verdict::CannotTell(t) if t.contains("mark")));
    // Another bit set: this test still sees 0.
    let other = input(
        "ACCEPT",
        &[
            "-j MARK --set-mark 0x4",
            "-m mark ! --mark 0x0/0x10000 -j DROP",
        ],
    );
    assert_eq!(one(&other, &Facts::default()), Verdict::Accepted);
    // Clearing bits sets none.
    let and = input(
        "DROP",
        &[
            "-j MARK --and-mark 0xfffeffff",
            "-m mark --mark 0x10000/0x10000 -j ACCEPT",
        ],
    );
    assert_eq!(one(&and, &Facts::default()), Verdict::Dropped);
    // A bit two tables set is still set.
    let twice = ipt(
        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j MARK --set-xmark 0x10000/0x10000\nCOMMIT\n\
         *filter\n:INPUT DROP [0:0]\n-A INPUT -j MARK --set-xmark 0x10000/0x10000\n\
         -A INPUT -m mark --mark 0x10000/0x10000 -j ACCEPT\nCOMMIT\n",
    );
    assert!(matches!(one(&twice, &Facts::default()), Verdict::CannotTell(t) if t.contains("mark")));
    let restore = input(
        "DROP",
        &["-j CONNMARK --restore-mark", "-m mark --mark 0x1 -j ACCEPT"],
    );
    assert_eq!(restore[0].mark_bits, u32::MAX);
}

#[test]
fn what_is_not_followed_names_the_rule_to_read() {
    use crate::probe::firewall::{FirewallProbe, Output};
    struct Save(String);
    impl FirewallProbe for Save {
        fn run(&self, program: &str, _: &[&str]) -> std::io::Result<Option<Output>> {
            Ok((program == "iptables-legacy-save").then(|| Output {
                success: true,
                stdout: self.0.clone(),
                stderr: String::new(),
            }))
        }
    }
    let save = "*filter\n:INPUT DROP [0:0]\n-A INPUT -p tcp --dport 29500 -m limit --limit 5/sec -j ACCEPT\nCOMMIT\n";
    let tree = crate::testing::Tree::new();
    let profile = tree.profile("/p.toml", "[job]\nrendezvous_ports = \"29500\"\n");
    let mut probes = crate::probe::Probes::absent("in a test");
    probes.firewall = Box::new(Save(save.into()));
    let findings = crate::testing::audit(
        &crate::host::Root::live(),
        &profile,
        &crate::checks::AuditOptions::default(),
        probes,
        crate::finding::Area::Firewall,
    );
    let f = &findings["firewall.rendezvous_ports"];
    crate::testing::assert_contains(&f.actual, "cannot tell: `-m limit --limit 5/sec`");
    crate::testing::assert_contains(
        &f.message,
        "Look at iptables-legacy filter chain INPUT rule 1:",
    );
}

#[test]
fn a_ruleset_json_cut_short_at_a_dormant_table_is_read_table_by_table() {
    use crate::probe::firewall::{FirewallProbe, Output};
    // What nft 1.0.6 prints when a dormant table follows: the document stops at its flags.
    const CUT: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "ip", "name": "d", "handle": 2, "flags": "#;
    const T0: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "ip", "name": "t0", "handle": 1}}, {"chain": {"family": "ip", "table": "t0", "name": "c", "handle": 1, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}}, {"rule": {"family": "ip", "table": "t0", "chain": "c", "handle": 2, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 29500}}, {"drop": null}]}}]}"#;
    struct Nft(bool);
    impl FirewallProbe for Nft {
        fn run(&self, program: &str, args: &[&str]) -> std::io::Result<Option<Output>> {
            let stdout = match (program, args) {
                ("nft", ["-j", "list", "ruleset"]) => CUT,
                ("nft", ["list", "tables"]) => "table ip t0\ntable ip d\n",
                ("nft", ["-j", "list", "table", "ip", "t0"]) => T0,
                ("nft", ["-j", "list", "table", "ip", "d"]) => CUT,
                ("nft", ["list", "table", "ip", "d"]) if self.0 => {
                    "table ip d {\n\tflags dormant\n}\n"
                }
                ("nft", ["list", "table", "ip", "d"]) => "table ip d {\n}\n",
                _ => return Ok(None),
            };
            Ok(Some(Output {
                success: true,
                stdout: stdout.into(),
                stderr: String::new(),
            }))
        }
        fn legacy_tables(&self) -> Option<String> {
            Some(String::new())
        }
    }
    let rs = super::read_ruleset(&Nft(true)).unwrap();
    assert_eq!(rs.tables.len(), 1);
    assert_eq!(one(&rs.tables, &Facts::default()), Verdict::Dropped);
    // Not dormant, and unreadable: the error names the table.
    let e = super::read_ruleset(&Nft(false)).err().unwrap().to_string();
    assert!(e.contains("nft -j list table ip d is not JSON"), "{e}");
}

#[test]
fn a_port_ipset_is_a_port_test() {
    let save = "create ports bitmap:port range 0-65535\nadd ports 22\nadd ports 29500\nadd ports 29501\nadd ports 29502\n";
    assert_eq!(
        iptables::port_set(save),
        Some(vec![(22, 22), (29500, 29502)])
    );
    assert_eq!(
        iptables::port_set("create f2b hash:ip family inet\nadd f2b 192.0.2.7\n"),
        None
    );
    // An empty set of addresses is not a set of no ports: a rule on it is not a port test.
    assert_eq!(iptables::port_set("create f2b hash:ip family inet\n"), None);
    let mut tables = input("DROP", &["-p tcp -m set --match-set ports dst -j ACCEPT"]);
    super::model::resolve_port_sets(&mut tables, &|name| {
        (name == "ports")
            .then(|| iptables::port_set(save))
            .flatten()
    });
    assert_eq!(one(&tables, &Facts::default()), Verdict::Accepted);
    assert_eq!(verdicts(&evaluate(&tables, 29503)), [Verdict::Dropped]);
}

#[test]
fn iptables_options_read_at_their_forks() {
    let f = Facts::default();
    // Every protocol, spelt either way, is no test at all.
    for proto in ["all", "0"] {
        let rule = format!("-p {proto} -j DROP");
        assert_eq!(
            one(&input("ACCEPT", &[&rule]), &f),
            Verdict::Dropped,
            "{rule}"
        );
    }
    // A connection nothing marked has mark 0.
    assert_eq!(
        one(&input("DROP", &["-m connmark --mark 0x1 -j ACCEPT"]), &f),
        Verdict::Dropped
    );
    // A peer's packet is addressed to one of the node's own (LOCAL) addresses.
    assert_eq!(
        one(
            &input("ACCEPT", &["-m addrtype --dst-type LOCAL -j DROP"]),
            &f
        ),
        Verdict::Dropped
    );
    assert_eq!(
        one(
            &input(
                "ACCEPT",
                &["-m addrtype --dst-type BROADCAST,MULTICAST -j DROP"]
            ),
            &f
        ),
        Verdict::Accepted
    );
}

#[test]
fn the_security_table_runs_after_filter_accepts() {
    let tables = ipt(
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 29500 -j ACCEPT\nCOMMIT\n\
         *security\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 29500 -j DROP\nCOMMIT\n",
    );
    assert_eq!(one(&tables, &Facts::default()), Verdict::Dropped);
}

#[test]
fn a_target_not_followed_names_its_rule() {
    // conntrack is on (the REDIRECT), so nat PREROUTING runs; the rule to read is the
    // REDIRECT itself, not a chain of that name.
    let tables = ipt(
        "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp --dport 29500 -j REDIRECT --to-ports 1\nCOMMIT\n",
    );
    let walks = evaluate(&tables, 29500);
    assert_eq!(
        walks[0].verdict,
        Verdict::CannotTell("verdict `REDIRECT` is not modelled".into())
    );
    assert!(
        walks[0].decided_by.contains("rule 1"),
        "{}",
        walks[0].decided_by
    );
}
