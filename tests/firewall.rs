//! The firewall checks against the real `nft` and `iptables` in a network namespace each test
//! makes (`unshare --net`, as root): rulesets are loaded there and the built binary audits
//! them from inside. Needs root, util-linux, nftables and iptables: `scripts/test` installs
//! them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/firewall")
        .join(name)
}

fn require_tools() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let missing: Vec<&str> = [
        "unshare",
        "nft",
        "iptables-legacy-restore",
        "iptables-nft-restore",
    ]
    .into_iter()
    .filter(|t| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {t} >/dev/null")])
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .status()
            .is_ok_and(|s| s.success())
    })
    .collect();
    assert!(
        root && missing.is_empty(),
        "firewall tests need root and {missing:?} (network namespaces, real nft/iptables): run scripts/test"
    );
}

/// Runs `setup` (shell) in a fresh network namespace, then audits the firewall there with a
/// profile opening 29500-29550 (rendezvous) and 50000-50010 (NCCL). Returns findings by id.
fn audit_in_netns(setup: &str) -> std::collections::BTreeMap<String, Value> {
    require_tools();
    let bin = std::ffi::OsString::from(crate::common::bin());
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("ports.toml");
    std::fs::write(
        &profile,
        "description = \"ports\"\n[job]\nrendezvous_ports = \"29500-29550\"\nnccl_ports = \"50000-50010\"\n",
    )
    .unwrap();
    let script = format!(
        "set -e\ncd '{}'\n{setup}\nexec '{}' audit --only firewall --profile '{}' --format json",
        fixture("").display(),
        Path::new(&bin).display(),
        profile.display()
    );
    let out = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", &script])
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: exit {:?}\nstdout: {stdout}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let failed = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["status"] == "fail");
    assert_eq!(
        out.status.code(),
        Some(if failed { 1 } else { 0 }),
        "{stdout}"
    );
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap().to_string(), f.clone()))
        .collect()
}

fn field<'a>(f: &'a Value, name: &str) -> &'a str {
    f[name].as_str().unwrap_or_default()
}

#[test]
fn no_firewall_is_a_pass() {
    let f = audit_in_netns("true");
    for id in ["firewall.rendezvous_ports", "firewall.nccl_ports"] {
        assert_eq!(f[id]["status"], "pass", "{:#}", f[id]);
        assert!(
            field(&f[id], "actual").starts_with("no firewall"),
            "{:#}",
            f[id]
        );
    }
}

#[test]
fn nft_drop_of_29500_fails_naming_the_rule() {
    let f = audit_in_netns("nft -f drop-29500.nft");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    let actual = field(rdv, "actual");
    assert!(
        actual.starts_with("nftables: 29500: dropped by nftables inet filter chain input handle ")
            && actual.contains(": tcp dport 29500 drop comment \"no rendezvous here\""),
        "{actual}"
    );
    assert!(
        actual
            .contains("29501-29550: accepted by policy accept of nftables inet filter chain input"),
        "{actual}"
    );
    assert!(
        field(rdv, "fix").starts_with("nft insert rule inet filter input position "),
        "{rdv:#}"
    );
    assert_eq!(f["firewall.nccl_ports"]["status"], "pass");
}

#[test]
fn nft_default_deny_that_accepts_the_ranges_passes() {
    let f = audit_in_netns("nft -f accept-range.nft");
    for id in ["firewall.rendezvous_ports", "firewall.nccl_ports"] {
        assert_eq!(f[id]["status"], "pass", "{:#}", f[id]);
        assert!(
            field(&f[id], "actual").contains("accepted by nftables inet filter chain input handle"),
            "{:#}",
            f[id]
        );
        assert!(
            field(&f[id], "actual")
                .contains("tcp dport 29500-29550,50000-50010 ct state new accept"),
            "{:#}",
            f[id]
        );
    }
}

#[test]
fn firewalld_style_ruleset() {
    let f = audit_in_netns("nft -f firewalld.nft");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(field(rdv, "actual").starts_with("firewalld (nftables): 29500-29550: dropped by nftables inet firewalld chain filter_INPUT handle"), "{rdv:#}");
    assert!(field(rdv, "actual").contains("reject"), "{rdv:#}");
    assert_eq!(
        field(rdv, "fix"),
        "firewall-cmd --permanent --add-port=29500-29550/tcp && firewall-cmd --reload"
    );
    // What `firewall-cmd --add-port=29500-29550/tcp` adds to the zone's allow chain.
    let f = audit_in_netns(
        "nft -f firewalld.nft\nnft add rule inet firewalld filter_IN_public_allow tcp dport 29500-29550 ct state '{ new, untracked }' accept",
    );
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "pass", "{rdv:#}");
    assert!(
        field(rdv, "actual").contains("chain filter_IN_public_allow"),
        "{rdv:#}"
    );
    assert_eq!(f["firewall.nccl_ports"]["status"], "fail");
}

#[test]
fn ufw_style_iptables_legacy_ruleset() {
    let f = audit_in_netns("iptables-legacy-restore < ufw.rules");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert_eq!(
        field(rdv, "actual"),
        "ufw (iptables-legacy): 29500-29550: dropped by policy drop of iptables-legacy filter chain INPUT"
    );
    assert_eq!(field(rdv, "fix"), "ufw allow 29500:29550/tcp");
    // What `ufw allow 29500:29550/tcp` adds to user.rules.
    let f = audit_in_netns(
        "iptables-legacy-restore < ufw.rules\niptables-legacy -A ufw-user-input -p tcp -m multiport --dports 29500:29550 -j ACCEPT",
    );
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "pass", "{rdv:#}");
    assert!(field(rdv, "actual").contains("chain ufw-user-input rule 2: -A ufw-user-input -p tcp -m multiport --dports 29500:29550 -j ACCEPT"), "{rdv:#}");
}

#[test]
fn ufw_style_iptables_nft_ruleset() {
    let f = audit_in_netns("iptables-nft-restore < ufw.rules");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert_eq!(
        field(rdv, "actual"),
        "ufw (iptables-nft): 29500-29550: dropped by policy drop of iptables-nft filter chain INPUT"
    );
}

#[test]
fn iptables_drop_and_an_interface_dependent_accept() {
    let f = audit_in_netns(
        "iptables-legacy -A INPUT -p tcp --dport 29500 -j DROP\n\
         iptables-nft -A INPUT -i eth1 -p tcp --dport 50000:50010 -j ACCEPT\n\
         iptables-nft -A INPUT -p tcp --dport 50000:50010 -j REJECT",
    );
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(field(rdv, "actual").contains("29500: dropped by iptables-legacy filter chain INPUT rule 1: -A INPUT -p tcp -m tcp --dport 29500 -j DROP"), "{rdv:#}");
    let nccl = &f["firewall.nccl_ports"];
    assert_eq!(nccl["status"], "warn", "{nccl:#}");
    assert!(
        field(nccl, "actual").contains("accepted only when iif eth1"),
        "{nccl:#}"
    );
    assert!(
        field(nccl, "actual")
            .contains("otherwise dropped by iptables-nft filter chain INPUT rule 2"),
        "{nccl:#}"
    );
}

#[test]
fn an_ingress_chain_of_unknown_device_cannot_be_judged_as_a_pass() {
    // nft -j does not say which device an ingress chain is bound to.
    let f = audit_in_netns(
        "printf 'table netdev edge {\\n chain ingress {\\n  type filter hook ingress device \"lo\" priority -500; policy drop;\\n }\\n}\\n' | nft -f -",
    );
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "warn", "{rdv:#}");
    assert!(
        field(rdv, "actual").contains(
            "accepted only when arrives on a device other than that of ingress chain ingress"
        ),
        "{rdv:#}"
    );
    assert!(
        field(rdv, "actual")
            .contains("otherwise dropped by policy drop of nftables netdev edge chain ingress"),
        "{rdv:#}"
    );
}

#[test]
fn a_named_verdict_map_is_read() {
    let f = audit_in_netns("nft -f named-vmap.nft");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(
        field(rdv, "actual")
            .starts_with("nftables: 29500: dropped by nftables inet f chain input handle ")
            && field(rdv, "actual").contains(": tcp dport vmap @portv"),
        "{rdv:#}"
    );
    assert_eq!(f["firewall.nccl_ports"]["status"], "pass");
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
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(
        field(rdv, "actual").contains(
            "29500: dropped by iptables-nft filter chain INPUT rule 1: -A INPUT -p tcp -m tcp --dport 29500 -j REJECT"
        ),
        "{rdv:#}"
    );
    let nccl = &f["firewall.nccl_ports"];
    assert_eq!(nccl["status"], "fail", "{nccl:#}");
    assert!(
        field(nccl, "actual").contains("dropped by iptables-nft filter chain INPUT rule 2"),
        "{nccl:#}"
    );
}

#[test]
fn ct_state_before_conntrack_is_invalid() {
    // raw at -300 runs before conntrack: `ct state invalid` drops a new connection there.
    let f = audit_in_netns("nft -f raw-ct-state.nft");
    for (id, rule) in [
        ("firewall.rendezvous_ports", "ct state invalid"),
        ("firewall.nccl_ports", "ct state vmap @states"),
    ] {
        assert_eq!(f[id]["status"], "fail", "{:#}", f[id]);
        assert!(
            field(&f[id], "actual").contains("dropped by nftables ip raw chain pre handle")
                && field(&f[id], "actual").contains(rule),
            "{:#}",
            f[id]
        );
    }
    // The same through iptables' raw table.
    let f = audit_in_netns(
        "printf '*raw\\n-A PREROUTING -m conntrack --ctstate INVALID -j DROP\\nCOMMIT\\n' | iptables-nft-restore",
    );
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(
        field(rdv, "actual").contains("dropped by iptables-nft raw chain PREROUTING rule 1"),
        "{rdv:#}"
    );
    // And `ct state new` never matches there: the policy drops.
    let f = audit_in_netns("nft -f raw-ct-new.nft");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(
        field(rdv, "actual").contains("dropped by policy drop of nftables inet f chain pre"),
        "{rdv:#}"
    );
}

#[test]
fn interface_conditions_that_cannot_all_hold_are_not_reported() {
    let f = audit_in_netns("nft -f iif-accepts.nft");
    for id in ["firewall.rendezvous_ports", "firewall.nccl_ports"] {
        assert_eq!(f[id]["status"], "pass", "{:#}", f[id]);
    }
    let f = audit_in_netns(
        "printf 'table ip f {\\n chain input {\\n  type filter hook input priority 0; policy accept;\\n  ip saddr 0.0.0.0/0 tcp dport 29500 drop\\n }\\n}\\n' | nft -f -",
    );
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "fail", "{rdv:#}");
    assert!(
        field(rdv, "actual").starts_with("nftables: 29500: dropped by"),
        "{rdv:#}"
    );
}

#[test]
fn a_statement_not_modelled_is_never_passed_over() {
    // `notrack` makes `ct state new` miss 29500 (the kernel drops it): cannot tell, not a
    // pass. The rate-limited log before it changes nothing, so the NCCL ports still pass.
    let f = audit_in_netns("nft -f notrack.nft");
    let rdv = &f["firewall.rendezvous_ports"];
    assert_eq!(rdv["status"], "warn", "{rdv:#}");
    assert!(
        field(rdv, "actual").contains("29500: cannot tell")
            && field(rdv, "actual").contains("notrack"),
        "{rdv:#}"
    );
    assert_eq!(
        f["firewall.nccl_ports"]["status"], "pass",
        "{:#}",
        f["firewall.nccl_ports"]
    );
}
