//! Node states as scontrol and sinfo print them, and what the health check does with each.

use super::*;

const IDLE: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 State=IDLE ThreadsPerCore=1 Partitions=debug CurrentWatts=0\n";
const OURS: &str = "NodeName=n1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=gputune: net.core.rmem_max: 212992 (want 16777216) [root@2026-11-23T20:00:01]\n";
const ADMIN: &str = "NodeName=n1 State=MIXED+DRAIN Reason=bad dimm [slurm@2026-11-23T20:00:01]\n";
const DOWN: &str =
    "NodeName=n1 State=DOWN*+DRAIN Reason=Not responding [slurm@2026-11-23T20:00:01]\n";

fn node(state: &str, reason: &str) -> NodeState {
    NodeState {
        state: state.into(),
        reason: reason.into(),
    }
}

#[test]
fn parses_state_and_reason() {
    let idle = parse_node("n1", IDLE).unwrap();
    assert_eq!((idle.state.as_str(), idle.reason.as_str()), ("IDLE", ""));
    assert!(!idle.drained());
    let ours = parse_node("n1", OURS).unwrap();
    assert_eq!(ours.state, "IDLE+DRAIN");
    assert!(ours.drained_by_us());
    let admin = parse_node("n1", ADMIN).unwrap();
    assert!(admin.drained() && !admin.drained_by_us());
    assert_eq!(admin.reason, "bad dimm [slurm@2026-11-23T20:00:01]");
    assert!(parse_node("n1", DOWN).unwrap().drained());
    let err = parse_node("n1", "Node n1 not found\n").unwrap_err();
    assert!(err.to_string().contains("no State="), "{err}");
    assert!(parse_node("n1", "").is_err());
    assert!(parse_node("n1", "NodeName=n1 State= Reason=x").is_err());
    // An escape sequence in what slurmctld answered never reaches the terminal.
    let err = parse_node("n1", "\u{1b}[2Jno state here").unwrap_err();
    assert!(!err.to_string().contains('\u{1b}'), "{err}");
}

/// Every spelling of every state: `scontrol show node` (base+FLAGS), `sinfo %T` (long, with
/// suffixes), `sinfo %t` (compact), Slurm before 17.02 (`DRAINED`, `DRAINING`, `FAILING`),
/// lowercase. Each row: the state, whether it is someone else's decision, whether drained.
#[test]
fn every_state_spelling() {
    use Word::*;
    let cases: &[(&str, &[Word], bool, bool)] = &[
        // Base states: ours to act on.
        ("IDLE", &[Idle], false, false),
        ("idle", &[Idle], false, false),
        ("ALLOCATED", &[Allocated], false, false),
        ("alloc", &[Allocated], false, false),
        ("ALLOCATED+", &[Allocated], false, false),
        ("MIXED", &[Mixed], false, false),
        ("mix", &[Mixed], false, false),
        ("MIXED-", &[Mixed, Planned], false, false),
        ("UNKNOWN", &[Unknown], false, false),
        ("unk*", &[Unknown, NotResponding], false, false),
        ("IDLE*", &[Idle, NotResponding], false, false),
        ("IDLE+NOT_RESPONDING", &[Idle, NotResponding], false, false),
        ("IDLE+COMPLETING", &[Idle, Completing], false, false),
        ("comp", &[Completing], false, false),
        ("IDLE+PLANNED", &[Idle, Planned], false, false),
        ("plnd", &[Planned], false, false),
        ("IDLE+RESERVED", &[Idle, Reserved], false, false),
        ("resv", &[Reserved], false, false),
        ("IDLE+CLOUD", &[Idle, Harmless], false, false),
        ("IDLE+DYNAMIC_NORM", &[Idle, Harmless], false, false),
        // Drains: a decision when the reason is not ours.
        ("IDLE+DRAIN", &[Idle, Drain], false, true),
        ("MIXED+DRAIN", &[Mixed, Drain], false, true),
        ("ALLOCATED+DRAIN", &[Allocated, Drain], false, true),
        ("DRAINED", &[Drain], false, true),
        ("DRAINING", &[Drain], false, true),
        ("drained", &[Drain], false, true),
        ("draining*", &[Drain, NotResponding], false, true),
        ("drain", &[Drain], false, true),
        ("drng", &[Drain], false, true),
        // Someone else's: never touched.
        ("DOWN", &[Down], true, false),
        ("down*", &[Down, NotResponding], true, false),
        ("DOWN*+DRAIN", &[Down, Drain, NotResponding], true, true),
        ("DOWN+DRAIN", &[Down, Drain], true, true),
        ("IDLE+FAIL", &[Idle, Fail], true, false),
        ("ALLOCATED+FAIL", &[Allocated, Fail], true, false),
        ("FAIL", &[Fail], true, false),
        ("FAILING", &[Fail], true, false),
        ("fail*", &[Fail, NotResponding], true, false),
        ("failg", &[Fail], true, false),
        (
            "IDLE+MAINTENANCE+RESERVED",
            &[Idle, Maint, Reserved],
            true,
            false,
        ),
        (
            "FUTURE+MAINTENANCE+RESERVED",
            &[Future, Maint, Reserved],
            true,
            false,
        ),
        ("MAINT", &[Maint], true, false),
        ("maint", &[Maint], true, false),
        ("IDLE$", &[Idle, Maint], true, false),
        ("DRAINED$", &[Drain, Maint], true, true),
        (
            "IDLE+REBOOT_REQUESTED",
            &[Idle, RebootRequested],
            true,
            false,
        ),
        (
            "MIXED+REBOOT_REQUESTED",
            &[Mixed, RebootRequested],
            true,
            false,
        ),
        ("DOWN+REBOOT_ISSUED", &[Down, RebootIssued], true, false),
        ("IDLE+REBOOT_ISSUED", &[Idle, RebootIssued], true, false),
        ("idle^", &[Idle, RebootIssued], true, false),
        ("REBOOT", &[RebootRequested], true, false),
        ("REBOOT^", &[RebootIssued, RebootRequested], true, false),
        ("boot", &[RebootRequested], true, false),
        ("mix@", &[Mixed, RebootRequested], true, false),
        ("IDLE+POWERED_DOWN", &[Idle, Power], true, false),
        ("IDLE+POWERING_UP", &[Idle, Power], true, false),
        ("IDLE+POWERING_DOWN", &[Idle, Power], true, false),
        ("IDLE+POWER_DOWN", &[Idle, Power], true, false),
        ("idle~", &[Idle, Power], true, false),
        ("idle#", &[Idle, Power], true, false),
        ("idle%", &[Idle, Power], true, false),
        ("idle!", &[Idle, Power], true, false),
        ("pow_dn", &[Power], true, false),
        ("POWERED_DOWN", &[Power], true, false),
        ("FUTURE", &[Future], true, false),
        ("futr", &[Future], true, false),
        ("INVAL", &[Invalid], true, false),
        ("IDLE+INVALID_REG", &[Idle, Invalid], true, false),
        (
            "IDLE+BLOCKED",
            &[Idle, Other("BLOCKED".into())],
            true,
            false,
        ),
        ("", &[Other(String::new())], true, false),
    ];
    for (state, words, held, drained) in cases {
        let n = node(state, "");
        let mut want = words.to_vec();
        want.sort();
        want.dedup();
        assert_eq!(n.words(), want, "{state:?}");
        assert_eq!(n.held().is_some(), *held, "{state:?}: {:?}", n.held());
        assert_eq!(n.drained(), *drained, "{state:?}");
    }
}

/// The health check on a node in every state an administrator or Slurm can set: failing,
/// then passing. Nothing is ever done to a node that is not idle/allocated/mixed with no
/// reason or with gputune's own drain.
#[test]
fn what_a_failing_and_a_passing_run_do_in_each_state() {
    let ours = "gputune: net.core.rmem_max: 212992 (want 16777216) [root@2026-11-25T10:00:00]";
    let fail = Some("gputune: x");
    let drain = Action::Drain("gputune: x".into());
    // (state, reason, failing run, passing run)
    let left = || Action::Leave(String::new());
    let cases: Vec<(&str, &str, Action, Action)> = vec![
        ("IDLE", "", drain.clone(), Action::Healthy),
        ("MIXED", "", drain.clone(), Action::Healthy),
        ("ALLOCATED", "", drain.clone(), Action::Healthy),
        ("UNKNOWN", "", drain.clone(), Action::Healthy),
        ("IDLE+RESERVED", "", drain.clone(), Action::Healthy),
        ("IDLE*", "", drain.clone(), Action::Healthy),
        ("IDLE+DRAIN", ours, left(), Action::Resume),
        ("MIXED+DRAIN", ours, left(), Action::Resume),
        ("DRAINING", ours, left(), Action::Resume),
        ("drained", ours, left(), Action::Resume),
        ("IDLE+DRAIN", "admin: bad dimm [root@t]", left(), left()),
        ("IDLE+DRAIN", "", left(), left()),
        ("DOWN", "RMA gpu3 [root@t]", left(), left()),
        ("DOWN*", "Not responding [slurm@t]", left(), left()),
        ("DOWN+DRAIN", ours, left(), left()),
        ("DOWN", ours, left(), left()),
        ("IDLE+FAIL", "bad psu [root@t]", left(), left()),
        ("FAILING", "bad psu [root@t]", left(), left()),
        ("IDLE+DRAIN+FAIL", ours, left(), left()),
        ("IDLE+MAINTENANCE+RESERVED", "", left(), left()),
        ("IDLE+DRAIN+MAINTENANCE", ours, left(), left()),
        (
            "IDLE+REBOOT_REQUESTED",
            "fw upgrade [root@t]",
            left(),
            left(),
        ),
        (
            "DOWN+REBOOT_ISSUED",
            "fw upgrade : reboot issued [root@t]",
            left(),
            left(),
        ),
        ("REBOOT^", "", left(), left()),
        ("IDLE+POWERED_DOWN", "", left(), left()),
        ("idle#", "", left(), left()),
        ("FUTURE", "", left(), left()),
        ("IDLE+INVALID_REG", "", left(), left()),
        ("IDLE+SOMETHING_NEW", "", left(), left()),
        // A reason with no drain (left behind by a resume that kept it): not overwritten.
        ("IDLE", "admin note [root@t]", left(), Action::Healthy),
    ];
    let shape = |a: Action| match a {
        Action::Leave(why) => {
            assert!(!why.is_empty());
            left()
        }
        other => other,
    };
    for (state, reason, failing, passing) in cases {
        let n = node(state, reason);
        assert_eq!(
            shape(decide(&n, fail)),
            failing,
            "failing run, {state} {reason:?}"
        );
        assert_eq!(
            shape(decide(&n, None)),
            passing,
            "passing run, {state} {reason:?}"
        );
    }
}

#[test]
fn leaving_a_node_says_why_without_its_escapes() {
    let down = node("DOWN", "RMA gpu3\u{1b}[2J [root@t]");
    let Action::Leave(why) = decide(&down, Some("gputune: x")) else {
        panic!("a DOWN node is left alone");
    };
    assert!(
        why.contains("it is DOWN") && why.contains("RMA gpu3"),
        "{why}"
    );
    assert!(!why.contains('\u{1b}'), "{why}");
    let admin = node("IDLE+DRAIN", "bad dimm [root@t]");
    let Action::Leave(why) = decide(&admin, None) else {
        panic!("an admin's drain is not lifted");
    };
    assert!(
        why.contains("not gputune's") && why.contains("bad dimm"),
        "{why}"
    );
    // Our own drain on a failing run: said to be ours, never "not gputune's".
    let ours = node("IDLE+DRAIN", "gputune: x [root@t]");
    let Action::Leave(why) = decide(&ours, Some("gputune: y")) else {
        panic!("our drain is kept while the node fails");
    };
    assert!(why.contains("already drained by gputune"), "{why}");
}
