use super::*;
use crate::testing::assert_cases;

fn rule(label: &str, matches: Vec<Match>, action: Action) -> Rule {
    Rule {
        label: label.into(),
        position: None,
        matches,
        action,
    }
}

fn chain(name: &str, base: Option<(Hook, i32, Policy)>, rules: Vec<Rule>) -> (String, Chain) {
    (
        name.to_string(),
        Chain {
            name: name.into(),
            base: base.map(|(hook, priority, policy)| Base {
                hook,
                priority,
                policy,
                kind: ChainKind::Filter,
            }),
            rules,
        },
    )
}

fn table(name: &str, chains: Vec<(String, Chain)>) -> Table {
    Table {
        name: name.into(),
        id: name.into(),
        tool: Tool::Nftables,
        chains: chains.into_iter().collect(),
        conntrack: false,
        mark_bits: 0,
    }
}

fn dport(lo: u16, hi: u16) -> Match {
    Match::DPort {
        ranges: vec![(lo, hi)],
        negate: false,
    }
}

fn iif(name: &str) -> Match {
    Match::Iif {
        names: vec![name.into()],
        negate: false,
    }
}

fn saddr(net: &str) -> Match {
    Match::Saddr {
        nets: vec![net.into()],
        negate: false,
    }
}

/// Table `t` with one base chain, `input`.
fn input_chain(base: Option<(Hook, i32, Policy)>, rules: Vec<Rule>) -> Table {
    table("t", vec![chain("input", base, rules)])
}

const INPUT_DROP: Option<(Hook, i32, Policy)> = Some((Hook::Input, 0, Policy::Drop));
const INPUT_ACCEPT: Option<(Hook, i32, Policy)> = Some((Hook::Input, 0, Policy::Accept));

/// The one verdict of walks that fork on nothing but unmodelled tests: a "cannot tell" of
/// one of them, else the verdict every walk agrees on.
pub(crate) fn one_verdict(walks: &[Walk]) -> Verdict {
    if let Some(w) = walks
        .iter()
        .find(|w| matches!(w.verdict, Verdict::CannotTell(_)))
    {
        return w.verdict.clone();
    }
    assert!(
        !walks.is_empty() && walks.iter().all(|w| w.verdict == walks[0].verdict),
        "{walks:#?}"
    );
    walks[0].verdict.clone()
}

/// The verdicts of every walk, with what decided each.
fn outcome(tables: &[Table], port: u16) -> Vec<(Verdict, String, Vec<String>)> {
    evaluate(tables, port)
        .into_iter()
        .map(|w| (w.verdict, w.decided_by, w.conditions))
        .collect()
}

#[test]
fn no_chains_accept_everything() {
    assert_eq!(
        outcome(&[], 29500),
        [(
            Verdict::Accepted,
            "no filtering chain on the input path".into(),
            vec![]
        )]
    );
}

#[test]
fn first_matching_rule_decides_else_the_policy() {
    let t = input_chain(
        INPUT_DROP,
        vec![
            rule(
                "established",
                vec![Match::CtState {
                    states: vec!["established".into(), "related".into()],
                    negate: false,
                }],
                Action::Accept,
            ),
            rule("log", vec![], Action::Continue),
            rule("drop 29500", vec![dport(29500, 29500)], Action::Drop),
            rule("open range", vec![dport(29500, 29550)], Action::Accept),
        ],
    );
    let tables = [t];
    assert_eq!(outcome(&tables, 29500)[0].1, "drop 29500");
    assert_eq!(outcome(&tables, 29500)[0].0, Verdict::Dropped);
    assert_eq!(outcome(&tables, 29501)[0].1, "open range");
    assert_eq!(outcome(&tables, 29501)[0].0, Verdict::Accepted);
    assert_eq!(outcome(&tables, 22)[0].1, "policy drop of t chain input");
    assert_eq!(
        segments(&tables, 29000, 29600),
        [
            (29000, 29499),
            (29500, 29500),
            (29501, 29550),
            (29551, 29600)
        ]
    );
}

#[test]
fn an_accept_ends_one_base_chain_only() {
    let first = table(
        "first",
        vec![chain(
            "in",
            Some((Hook::Input, -10, Policy::Accept)),
            vec![rule("accept all", vec![], Action::Accept)],
        )],
    );
    let second = table(
        "second",
        vec![chain(
            "in",
            INPUT_ACCEPT,
            vec![rule("drop 29500", vec![dport(29500, 29500)], Action::Drop)],
        )],
    );
    // Order of the tables does not matter: priority does.
    let tables = [second, first];
    assert_eq!(
        outcome(&tables, 29500),
        [(Verdict::Dropped, "drop 29500".into(), vec![])]
    );
    let pre = table(
        "raw",
        vec![chain(
            "pre",
            Some((Hook::Prerouting, -300, Policy::Drop)),
            vec![],
        )],
    );
    assert_eq!(outcome(&[pre], 29501)[0].1, "policy drop of raw chain pre");
}

#[test]
fn interface_and_source_matches_split_the_walk() {
    let t = input_chain(
        INPUT_DROP,
        vec![
            rule("loopback", vec![iif("lo")], Action::Accept),
            rule("from localhost", vec![saddr("127.0.0.0/8")], Action::Accept),
            rule(
                "eth0",
                vec![iif("eth0"), dport(29500, 29550)],
                Action::Accept,
            ),
        ],
    );
    let got = outcome(&[t], 29500);
    assert_eq!(
        got,
        [
            (Verdict::Accepted, "eth0".into(), vec!["iif eth0".into()]),
            (
                Verdict::Dropped,
                "policy drop of t chain input".into(),
                vec!["not iif eth0".into()]
            ),
        ]
    );
}

#[test]
fn only_a_test_on_the_interface_or_address_asks_for_the_node_s_facts() {
    let ports = input_chain(
        INPUT_DROP,
        vec![rule("p", vec![dport(1, 2)], Action::Accept)],
    );
    assert!(!wants_facts(&[ports]));
    let by_interface = input_chain(
        INPUT_DROP,
        vec![rule("lo", vec![iif("lo")], Action::Accept)],
    );
    assert!(wants_facts(&[by_interface]));
}

#[test]
fn jumps_returns_and_gotos() {
    let t = table(
        "t",
        vec![
            chain(
                "input",
                INPUT_DROP,
                vec![
                    rule("to sub", vec![], Action::Jump("sub".into())),
                    rule("after sub", vec![dport(1, 100)], Action::Accept),
                    rule("to zone", vec![], Action::Goto("zone".into())),
                    rule("never reached", vec![], Action::Accept),
                ],
            ),
            chain(
                "sub",
                None,
                vec![
                    rule("back", vec![dport(50, 60)], Action::Return),
                    rule("sub drops 70", vec![dport(70, 70)], Action::Drop),
                ],
            ),
            chain(
                "zone",
                None,
                vec![rule(
                    "zone accepts 500",
                    vec![dport(500, 500)],
                    Action::Accept,
                )],
            ),
        ],
    );
    let tables = [t];
    assert_eq!(outcome(&tables, 55)[0].1, "after sub");
    assert_eq!(outcome(&tables, 70)[0].1, "sub drops 70");
    assert_eq!(outcome(&tables, 500)[0].1, "zone accepts 500");
    // Falling off the end of a goto target returns past the goto: the base policy.
    assert_eq!(outcome(&tables, 600)[0].1, "policy drop of t chain input");
}

#[test]
fn what_is_not_modelled_is_never_guessed() {
    let unknown = Match::Unknown {
        text: "meta skuid 0".into(),
    };
    let t = input_chain(
        INPUT_DROP,
        vec![
            // A known-false match settles the rule whatever the unknown one says.
            rule(
                "udp only",
                vec![
                    unknown.clone(),
                    Match::Proto {
                        protos: vec!["udp".into()],
                        negate: false,
                    },
                ],
                Action::Accept,
            ),
            rule(
                "mystery",
                vec![unknown, dport(29500, 29500)],
                Action::Accept,
            ),
            rule(
                "queue",
                vec![dport(29501, 29501)],
                Action::Unknown("queue".into()),
            ),
        ],
    );
    let tables = [t];
    // Both ways (the mystery test holding: accepted; failing: the policy drops) differ, so
    // every way is "cannot tell", the first naming the rule.
    let told = outcome(&tables, 29500);
    assert_eq!(
        told[0],
        (
            Verdict::CannotTell("`meta skuid 0` is not modelled".into()),
            "mystery".into(),
            vec![]
        )
    );
    assert!(
        told.iter()
            .all(|(v, ..)| matches!(v, Verdict::CannotTell(_))),
        "{told:?}"
    );
    assert!(matches!(
        outcome(&tables, 29501)[0].0,
        Verdict::CannotTell(_)
    ));
    assert_eq!(outcome(&tables, 29502)[0].0, Verdict::Dropped);
}

#[test]
fn an_unmodelled_test_that_changes_nothing_is_decided() {
    let limit = || Match::Unknown {
        text: "limit rate 5/second".into(),
    };
    let verdicts = |rules: Vec<Rule>| -> Vec<Verdict> {
        outcome(&[input_chain(INPUT_DROP, rules)], 29500)
            .into_iter()
            .map(|(v, ..)| v)
            .collect()
    };
    // A rate-limited drop ahead of a drop of the same port: dropped whatever the limit.
    assert_eq!(
        verdicts(vec![
            rule("limited", vec![limit(), dport(29500, 29500)], Action::Drop),
            rule("port", vec![dport(29500, 29500)], Action::Drop),
        ]),
        [Verdict::Dropped, Verdict::Dropped]
    );
    // A rate-limited accept ahead of an accept of every port: accepted either way.
    assert_eq!(
        verdicts(vec![
            rule("limited", vec![limit()], Action::Accept),
            rule("all", vec![], Action::Accept),
        ]),
        [Verdict::Accepted, Verdict::Accepted]
    );
    // The same in a verdict map entry.
    assert_eq!(
        verdicts(vec![rule(
            "map",
            vec![],
            Action::Map(vec![
                (vec![limit()], Action::Drop),
                (vec![dport(29500, 29500)], Action::Drop),
            ]),
        )]),
        [Verdict::Dropped, Verdict::Dropped]
    );
    // A rate-limited accept before the policy drop: it depends on the rate, never told,
    // and each way names the rule of the limit.
    let limited = vec![rule("limited", vec![limit()], Action::Accept)];
    let cannot = || Verdict::CannotTell("`limit rate 5/second` is not modelled".into());
    assert_eq!(
        outcome(&[input_chain(INPUT_DROP, limited)], 29500),
        [
            (cannot(), "limited".into(), vec![]),
            (cannot(), "limited".into(), vec![]),
        ]
    );
    // Nor when the other way depends on the source: "cannot tell", not "depends".
    let told = verdicts(vec![
        rule("limited", vec![limit()], Action::Drop),
        rule("source", vec![saddr("10.0.0.0/8")], Action::Accept),
    ]);
    assert!(
        told.iter().any(|v| matches!(v, Verdict::CannotTell(_))),
        "{told:?}"
    );
}

#[test]
fn loops_and_missing_chains_cannot_be_told() {
    let t = table(
        "t",
        vec![
            chain(
                "input",
                INPUT_ACCEPT,
                vec![rule("loop", vec![], Action::Jump("a".into()))],
            ),
            chain(
                "a",
                None,
                vec![rule("a->input", vec![], Action::Jump("a".into()))],
            ),
        ],
    );
    assert!(matches!(outcome(&[t], 1)[0].0, Verdict::CannotTell(_)));
    let t = input_chain(
        INPUT_ACCEPT,
        vec![rule("x", vec![], Action::Jump("gone".into()))],
    );
    assert!(matches!(outcome(&[t], 1)[0].0, Verdict::CannotTell(_)));
}

#[test]
fn port_verdict_maps() {
    let t = input_chain(
        INPUT_ACCEPT,
        vec![rule(
            "vmap",
            vec![],
            Action::DPortMap(vec![
                ((22, 22), Action::Accept),
                ((29500, 29550), Action::Drop),
            ]),
        )],
    );
    let tables = [t];
    assert_eq!(outcome(&tables, 29510)[0].0, Verdict::Dropped);
    assert_eq!(
        outcome(&tables, 40000)[0].1,
        "policy accept of t chain input"
    );
    assert_eq!(
        segments(&tables, 29540, 29560),
        [(29540, 29550), (29551, 29560)]
    );
}

fn ct_state(state: &str) -> Match {
    Match::CtState {
        states: vec![state.into()],
        negate: false,
    }
}

/// Verdicts of `chain` hooked at `hook`/`priority` with the given policy, for port 29500.
fn verdicts_at(hook: Hook, priority: i32, policy: Policy, rules: Vec<Rule>) -> Vec<Verdict> {
    let t = table("t", vec![chain("c", Some((hook, priority, policy)), rules)]);
    outcome(&[t], 29500)
        .into_iter()
        .map(|(verdict, _, _)| verdict)
        .collect()
}

#[test]
fn ct_state_is_invalid_before_conntrack_and_new_after() {
    let drop_invalid = || {
        vec![rule(
            "invalid drop",
            vec![ct_state("invalid")],
            Action::Drop,
        )]
    };
    let accept_new = || vec![rule("new accept", vec![ct_state("new")], Action::Accept)];
    use Hook::{Ingress, Input, Prerouting};
    use Policy::{Accept, Drop};
    // A verdict map on the state picks the entry of the state the chain sees.
    let vmap = || {
        vec![rule(
            "ct state vmap",
            vec![],
            Action::CtStateMap(vec![
                (vec!["invalid".into()], Action::Drop),
                (vec!["established".into(), "related".into()], Action::Accept),
            ]),
        )]
    };
    let cases = [
        // raw (-300) and ingress run before conntrack (-200): no entry, so `invalid`.
        (
            (Prerouting, -300, Accept, drop_invalid()),
            [Verdict::Dropped],
        ),
        (
            (Prerouting, -201, Accept, drop_invalid()),
            [Verdict::Dropped],
        ),
        ((Ingress, 0, Accept, drop_invalid()), [Verdict::Dropped]),
        ((Prerouting, -300, Drop, accept_new()), [Verdict::Dropped]),
        // After conntrack the first packet is `new`.
        (
            (Prerouting, -199, Accept, drop_invalid()),
            [Verdict::Accepted],
        ),
        ((Input, -300, Accept, drop_invalid()), [Verdict::Accepted]),
        ((Prerouting, -150, Drop, accept_new()), [Verdict::Accepted]),
        ((Prerouting, -300, Accept, vmap()), [Verdict::Dropped]),
        ((Input, 0, Accept, vmap()), [Verdict::Accepted]),
    ];
    assert_cases(cases, |(hook, priority, policy, rules)| {
        verdicts_at(hook, priority, policy, rules)
    });
    // At conntrack's own priority the order is not defined; a bridge chain sees a tracked
    // packet only where the bridge conntrack module is loaded. The verdict says which.
    let at_conntrack = "the conntrack state in a prerouting chain of priority -200, where \
                        conntrack itself runs";
    let bridge = "the conntrack state in a bridge family chain";
    for (hook, priority, why) in [
        (Prerouting, -200, at_conntrack),
        (Hook::BridgePrerouting, -200, bridge),
        (Hook::BridgeInput, 0, bridge),
    ] {
        let v = verdicts_at(hook, priority, Accept, drop_invalid());
        assert!(
            matches!(&v[..], [Verdict::CannotTell(t), ..] if t.contains(why)),
            "{v:?}"
        );
        assert_eq!(
            verdicts_at(hook, priority, Accept, vmap())[..],
            [Verdict::CannotTell(format!("{why} is not modelled"))]
        );
    }
    // A chain jumped to sees the state of the base chain that jumped.
    let t = table(
        "t",
        vec![
            chain(
                "raw",
                Some((Prerouting, -300, Accept)),
                vec![rule("jump", vec![], Action::Jump("sub".into()))],
            ),
            chain("sub", None, drop_invalid()),
        ],
    );
    assert_eq!(outcome(&[t], 29500)[0].0, Verdict::Dropped);
}

#[test]
fn a_walk_never_assumes_a_condition_and_its_opposite() {
    let t = input_chain(
        INPUT_ACCEPT,
        vec![
            rule("ssh", vec![iif("eth0"), dport(22, 22)], Action::Accept),
            rule(
                "high",
                vec![iif("eth0"), dport(29500, 65535)],
                Action::Accept,
            ),
            rule("rest", vec![iif("eth0")], Action::Drop),
        ],
    );
    // Through eth0 the second rule accepts; elsewhere the drop on eth0 cannot match.
    assert_eq!(
        outcome(&[t], 29500),
        [
            (Verdict::Accepted, "high".into(), vec!["iif eth0".into()]),
            (
                Verdict::Accepted,
                "policy accept of t chain input".into(),
                vec!["not iif eth0".into()]
            ),
        ]
    );
    // The same across base chains, and with the negated match of the same interface.
    let t = table(
        "t",
        vec![
            chain(
                "pre",
                Some((Hook::Prerouting, 0, Policy::Accept)),
                vec![rule(
                    "not eth0",
                    vec![Match::Iif {
                        names: vec!["eth0".into()],
                        negate: true,
                    }],
                    Action::Accept,
                )],
            ),
            chain(
                "input",
                INPUT_ACCEPT,
                vec![rule("eth0", vec![iif("eth0")], Action::Drop)],
            ),
        ],
    );
    assert_eq!(
        outcome(&[t], 29500),
        [
            (
                Verdict::Accepted,
                "policy accept of t chain input".into(),
                vec!["not iif eth0".into()]
            ),
            (Verdict::Dropped, "eth0".into(), vec!["iif eth0".into()]),
        ]
    );
    // Every IPv4 source is in 0.0.0.0/0.
    let any = saddr("0.0.0.0/0");
    assert_eq!(
        verdicts_at(
            Hook::Input,
            0,
            Policy::Accept,
            vec![rule("any", vec![any], Action::Drop)]
        ),
        [Verdict::Dropped]
    );
}
