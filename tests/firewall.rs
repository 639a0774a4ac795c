//! The firewall checks against the real `nft` and `iptables` in a network namespace each test
//! makes (`unshare --net`, as root): rulesets are loaded there and the built binary audits
//! them from inside. Needs root, util-linux, nftables and iptables: `scripts/test` installs
//! them.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{Checked, SYSTEM_PATH, expect, fixture, require, stdout_json, temp_file};

const RDV: &str = "firewall.rendezvous_ports";
const NCCL: &str = "firewall.nccl_ports";

/// Runs `setup` (shell) in a fresh network namespace, then audits the firewall there with a
/// profile opening 29500-29550 (rendezvous) and 50000-50010 (NCCL). Returns the findings.
fn audit_in_netns(setup: &str) -> Vec<Value> {
    require(&[
        "unshare",
        "nft",
        "iptables-legacy-restore",
        "iptables-nft-restore",
    ]);
    let (_dir, profile) = temp_file(
        "ports.toml",
        "description = \"ports\"\n[job]\nrendezvous_ports = \"29500-29550\"\nnccl_ports = \"50000-50010\"\n",
    );
    let script = format!(
        "set -e\ncd '{}'\n{setup}\nexec '{}' audit --only firewall --profile '{}' --format json",
        fixture("firewall").display(),
        Path::new(crate::common::bin()).display(),
        profile.display()
    );
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script])
        .env("PATH", SYSTEM_PATH)
        .output()
        .unwrap();
    let doc = stdout_json(&out);
    let findings = crate::common::findings(&doc).to_vec();
    let failed = findings.iter().any(|f| f["status"] == "fail");
    assert_eq!(
        out.status.code(),
        Some(if failed { 1 } else { 0 }),
        "{doc:#}"
    );
    findings
}

/// The rendezvous and the NCCL ports' findings, both asserted to have `status`.
fn both<'a>(f: &'a [Value], status: &str) -> [Checked<'a>; 2] {
    [expect(f, RDV, status), expect(f, NCCL, status)]
}

#[test]
fn no_firewall_is_a_pass() {
    let f = audit_in_netns("true");
    for port in both(&f, "pass") {
        port.actual_starts("no firewall");
    }
}

#[test]
fn nft_drop_of_29500_fails_naming_the_rule() {
    let f = audit_in_netns("nft -f drop-29500.nft");
    expect(&f, RDV, "fail")
        .actual_starts("nftables: 29500: dropped by nftables inet filter chain input handle ")
        .actual_has(": tcp dport 29500 drop comment \"no rendezvous here\"")
        .actual_has("29501-29550: accepted by policy accept of nftables inet filter chain input")
        .starts("fix", "nft insert rule inet filter input position ");
    expect(&f, NCCL, "pass");
}

#[test]
fn nft_default_deny_that_accepts_the_ranges_passes() {
    let f = audit_in_netns("nft -f accept-range.nft");
    for port in both(&f, "pass") {
        port.actual_has("accepted by nftables inet filter chain input handle")
            .actual_has("tcp dport 29500-29550,50000-50010 ct state new accept");
    }
}

#[test]
fn firewalld_style_ruleset() {
    let f = audit_in_netns("nft -f firewalld.nft");
    let dropped = "firewalld (nftables): 29500-29550: dropped by nftables inet firewalld chain filter_INPUT handle";
    let fix = "firewall-cmd --permanent --add-port=29500-29550/tcp && firewall-cmd --reload";
    expect(&f, RDV, "fail")
        .actual_starts(dropped)
        .actual_has("reject")
        .is("fix", fix);
    // What `firewall-cmd --add-port=29500-29550/tcp` adds to the zone's allow chain.
    let f = audit_in_netns(
        "nft -f firewalld.nft\nnft add rule inet firewalld filter_IN_public_allow tcp dport 29500-29550 ct state '{ new, untracked }' accept",
    );
    expect(&f, RDV, "pass").actual_has("chain filter_IN_public_allow");
    expect(&f, NCCL, "fail");
}

#[test]
fn ufw_style_iptables_legacy_ruleset() {
    let f = audit_in_netns("iptables-legacy-restore < ufw.rules");
    let dropped = "ufw (iptables-legacy): 29500-29550: dropped by policy drop of iptables-legacy filter chain INPUT";
    expect(&f, RDV, "fail")
        .is("actual", dropped)
        .is("fix", "ufw allow 29500:29550/tcp");
    // What `ufw allow 29500:29550/tcp` adds to user.rules.
    let f = audit_in_netns(
        "iptables-legacy-restore < ufw.rules\niptables-legacy -A ufw-user-input -p tcp -m multiport --dports 29500:29550 -j ACCEPT",
    );
    let accepted = "chain ufw-user-input rule 2: -A ufw-user-input -p tcp -m multiport --dports 29500:29550 -j ACCEPT";
    expect(&f, RDV, "pass").actual_has(accepted);
}

#[test]
fn ufw_style_iptables_nft_ruleset() {
    let f = audit_in_netns("iptables-nft-restore < ufw.rules");
    expect(&f, RDV, "fail").is(
        "actual",
        "ufw (iptables-nft): 29500-29550: dropped by policy drop of iptables-nft filter chain INPUT",
    );
}

#[test]
fn iptables_drop_and_an_interface_dependent_accept() {
    let f = audit_in_netns(
        "iptables-legacy -A INPUT -p tcp --dport 29500 -j DROP\n\
         iptables-nft -A INPUT -i eth1 -p tcp --dport 50000:50010 -j ACCEPT\n\
         iptables-nft -A INPUT -p tcp --dport 50000:50010 -j REJECT",
    );
    let dropped = "29500: dropped by iptables-legacy filter chain INPUT rule 1: -A INPUT -p tcp -m tcp --dport 29500 -j DROP";
    expect(&f, RDV, "fail").actual_has(dropped);
    expect(&f, NCCL, "warn")
        .actual_has("accepted only when iif eth1")
        .actual_has("otherwise dropped by iptables-nft filter chain INPUT rule 2");
}

#[test]
fn an_ingress_chain_on_lo_sees_no_peer() {
    // nft -j does not say which device an ingress chain is bound to; its text listing does,
    // and a peer's packet never arrives on lo.
    let f = audit_in_netns(
        "printf 'table netdev edge {\\n chain ingress {\\n  type filter hook ingress device \"lo\" priority -500; policy drop;\\n }\\n}\\n' | nft -f -",
    );
    expect(&f, RDV, "pass")
        .actual_has("accepted by nftables netdev edge chain ingress (ingress on lo)");
}

#[test]
fn a_named_verdict_map_is_read() {
    let f = audit_in_netns("nft -f named-vmap.nft");
    expect(&f, RDV, "fail")
        .actual_starts("nftables: 29500: dropped by nftables inet f chain input handle ")
        .actual_has(": tcp dport vmap @portv");
    expect(&f, NCCL, "pass");
}

#[test]
fn iptables_nft_rejects_count_beside_tables_nft_wrote() {
    // iptables-nft-save says "# Table `mangle' is incompatible": only that table is read
    // through nft; the filter table's REJECT still decides. A rule's comment that says
    // "incompatible" changes nothing.
    let f = audit_in_netns(
        "iptables-nft -A INPUT -p tcp --dport 29500 -j REJECT\n\
         iptables-nft -A INPUT -p tcp --dport 50000:50010 -m comment --comment 'incompatible with foo' -j REJECT\n\
         printf 'table ip mangle {\\n chain PREROUTING {\\n  type filter hook prerouting priority -150; policy accept;\\n  ct state vmap { invalid : drop }\\n }\\n}\\n' | nft -f -",
    );
    let rejected = "29500: dropped by iptables-nft filter chain INPUT rule 1: -A INPUT -p tcp -m tcp --dport 29500 -j REJECT";
    expect(&f, RDV, "fail").actual_has(rejected);
    expect(&f, NCCL, "fail").actual_has("dropped by iptables-nft filter chain INPUT rule 2");
}

#[test]
fn ct_state_before_conntrack_is_invalid() {
    // raw at -300 runs before conntrack: `ct state invalid` drops a new connection there.
    let f = audit_in_netns("nft -f raw-ct-state.nft");
    for (id, rule) in [(RDV, "ct state invalid"), (NCCL, "ct state vmap @states")] {
        expect(&f, id, "fail")
            .actual_has("dropped by nftables ip raw chain pre handle")
            .actual_has(rule);
    }
    // The same through iptables' raw table.
    let f = audit_in_netns(
        "printf '*raw\\n-A PREROUTING -m conntrack --ctstate INVALID -j DROP\\nCOMMIT\\n' | iptables-nft-restore",
    );
    expect(&f, RDV, "fail").actual_has("dropped by iptables-nft raw chain PREROUTING rule 1");
    // And `ct state new` never matches there: the policy drops.
    let f = audit_in_netns("nft -f raw-ct-new.nft");
    expect(&f, RDV, "fail").actual_has("dropped by policy drop of nftables inet f chain pre");
}

#[test]
fn interface_conditions_that_cannot_all_hold_are_not_reported() {
    let f = audit_in_netns("nft -f iif-accepts.nft");
    both(&f, "pass");
    let f = audit_in_netns(
        "printf 'table ip f {\\n chain input {\\n  type filter hook input priority 0; policy accept;\\n  ip saddr 0.0.0.0/0 tcp dport 29500 drop\\n }\\n}\\n' | nft -f -",
    );
    expect(&f, RDV, "fail").actual_starts("nftables: 29500: dropped by");
}

#[test]
fn a_statement_not_modelled_is_never_passed_over() {
    // `notrack` makes `ct state new` miss 29500 (the kernel drops it): cannot tell, not a
    // pass. The rate-limited log before it changes nothing, so the NCCL ports still pass.
    let f = audit_in_netns("nft -f notrack.nft");
    expect(&f, RDV, "warn")
        .actual_has("29500: cannot tell")
        .actual_has("notrack");
    expect(&f, NCCL, "pass");
}
