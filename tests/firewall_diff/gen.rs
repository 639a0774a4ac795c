//! Rulesets for the differential firewall test: shapes real tools write
//! (iptables-restore-translate, ufw, firewalld, fail2ban, kube-proxy, Docker), kept as data
//! in shapes.toml, and seeded random compositions of the constructs the model claims to
//! follow. Each case says how
//! it is loaded into the server's namespace and which outcomes other than the kernel's own
//! verdict are acceptable: "cannot tell" only when it holds a named unmodelled construct,
//! "depends" only when it matches on the interface, the source or an ipset.

use std::collections::BTreeMap;

/// The client's address: rules that name it (or its network) match the peer.
pub const PEER: &str = "10.77.0.2";
/// The server's veth device.
pub const DEV: &str = "v0";
/// The server's address, on its veth device (or on the bridge an `enslave` load makes).
pub const SERVER: &str = "10.77.0.1";

/// How a piece of a ruleset is loaded.
#[derive(Debug, Clone)]
pub enum Load {
    /// `nft -f -`.
    Nft(String),
    /// `iptables-legacy-restore` (tables it names only).
    Legacy(String),
    /// `iptables-nft-restore`.
    IptNft(String),
    /// `ipset restore`.
    Ipset(String),
    /// A shell script that sets the namespace's links up (a bridge over the NIC).
    Sh(String),
}

#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// The seed of a random case (`None` for a hand-written one).
    pub seed: Option<u64>,
    pub loads: Vec<Load>,
    /// The port the peer connects to and the audit asks about.
    pub port: u16,
    /// The unmodelled construct it holds, which makes "cannot tell" acceptable.
    pub unmodelled: Option<String>,
    /// It matches on the interface, the source or an ipset: "depends" is acceptable.
    pub depends: bool,
}

/// The port every hand-written shape is asked about.
const P: u16 = 29500;

/// shapes.toml: the hand-written shapes and the templates they fill in. A key it does not
/// know (a misspelling) is an error, not a shape silently left without its loads.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Shapes {
    #[serde(default)]
    templates: BTreeMap<String, String>,
    case: Vec<Shape>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Shape {
    name: String,
    /// Each load's `via`, its `text` or `template`, and the template's parameters.
    #[serde(default)]
    load: Vec<BTreeMap<String, String>>,
    unmodelled: Option<String>,
    #[serde(default)]
    depends: bool,
}

/// Fills the `${name}` placeholders of `text` from `params`, `${peer}` and `${dev}`.
fn fill(text: &str, params: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    for (name, value) in params {
        out = out.replace(&format!("${{{name}}}"), value);
    }
    let out = out
        .replace("${peer}", PEER)
        .replace("${server}", SERVER)
        .replace("${dev}", DEV);
    assert!(!out.contains("${"), "a placeholder left unfilled in {out}");
    out
}

/// One load of a shape, its text written out or filled into its template.
fn load(spec: &BTreeMap<String, String>, templates: &BTreeMap<String, String>) -> Load {
    let text = match (spec.get("text"), spec.get("template")) {
        (Some(text), None) => text,
        (None, Some(name)) => &templates[name],
        _ => panic!("a load has either a text or a template: {spec:?}"),
    };
    // A load's other keys are its text's parameters: a misspelled one fills nothing.
    for name in spec.keys() {
        if !["via", "text", "template"].contains(&name.as_str()) {
            assert!(
                text.contains(&format!("${{{name}}}")),
                "a load's parameter `{name}` is not in its text: {spec:?}"
            );
        }
    }
    let text = fill(text, spec);
    match spec.get("via").map(String::as_str) {
        Some("nft") => Load::Nft(text),
        Some("legacy") => Load::Legacy(text),
        Some("iptnft") => Load::IptNft(text),
        Some("ipset") => Load::Ipset(text),
        Some("sh") => Load::Sh(text),
        other => panic!("a load is via nft, legacy, iptnft, ipset or sh, not {other:?}"),
    }
}

/// The one shape meant to load nothing.
const EMPTY: &str = "empty ruleset";

/// Hand-written shapes, each found on real nodes or written by a real tool (shapes.toml),
/// and the rulesets real tools write by default (tools.toml).
pub fn shapes() -> Vec<Case> {
    let mut cases = shapes_of("shapes.toml", include_str!("shapes.toml"));
    cases.extend(shapes_of("tools.toml", include_str!("tools.toml")));
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    let total = names.len();
    names.dedup();
    assert_eq!(names.len(), total, "two shapes share a name");
    cases
}

fn shapes_of(file: &str, text: &str) -> Vec<Case> {
    let shapes: Shapes = toml::from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"));
    let empty: Vec<&str> = shapes
        .case
        .iter()
        .filter(|shape| shape.load.is_empty())
        .map(|shape| shape.name.as_str())
        .collect();
    if file == "shapes.toml" {
        assert_eq!(empty, [EMPTY], "shapes.toml: only `{EMPTY}` loads nothing");
    } else {
        assert!(empty.is_empty(), "{file}: {empty:?} load nothing");
    }
    shapes
        .case
        .iter()
        .map(|shape| Case {
            name: shape.name.clone(),
            seed: None,
            loads: shape
                .load
                .iter()
                .map(|spec| load(spec, &shapes.templates))
                .collect(),
            port: P,
            unmodelled: shape.unmodelled.clone(),
            depends: shape.depends,
        })
        .collect()
}

/// splitmix64: small, seeded, the same everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// One abstract test of a random rule, rendered for nft or iptables.
#[derive(Clone, Copy)]
enum Test {
    /// Destination port range (negated or not).
    DPort(u16, u16, bool),
    Udp,
    CtEstablished,
    CtNew,
    CtInvalid,
    Lo,
    /// Source is (or is not) the peer's network: "depends".
    Peer(bool),
    Syn,
    Limit,
    /// Arrives on the server's veth, its only interface besides lo: decided.
    Dev,
    /// Addressed to the server's own address (or, false, to another): decided.
    DaddrSelf(bool),
    /// Source port from 1024 up, which every peer's connection uses.
    SportHigh,
    /// Addressed to this host (`pkttype host`, iptables' `unicast`).
    PktHost,
}

#[derive(Clone, Copy)]
enum Verdict {
    Accept,
    Drop,
    Reject,
    Jump,
    Goto,
    Return,
    Counter,
}

struct RandRule {
    tests: Vec<Test>,
    verdict: Verdict,
}

fn port_range(rng: &mut Rng, port: u16) -> (u16, u16) {
    match rng.below(5) {
        0 => (port, port),
        1 => (port - 10, port + 50),
        2 => (port + 1, port + 60),
        3 => (port - 100, port - 1),
        _ => (22, 22),
    }
}

fn rand_rule(rng: &mut Rng, port: u16, in_sub: bool, raw: bool) -> RandRule {
    let mut tests = Vec::new();
    for _ in 0..rng.below(3) {
        let t = match rng.below(24) {
            0..=7 => {
                let (lo, hi) = port_range(rng, port);
                Test::DPort(lo, hi, rng.chance(15))
            }
            8 => Test::Udp,
            9 | 10 => Test::CtEstablished,
            11 => Test::CtNew,
            12 => {
                if raw {
                    Test::CtInvalid
                } else {
                    Test::CtEstablished
                }
            }
            13 => Test::Lo,
            14 => Test::Peer(rng.chance(50)),
            15 | 16 => Test::Syn,
            17 => Test::Limit,
            18 => Test::Dev,
            19 => Test::DaddrSelf(rng.chance(70)),
            20 => Test::SportHigh,
            21 => Test::PktHost,
            _ => {
                let (lo, hi) = port_range(rng, port);
                Test::DPort(lo, hi, false)
            }
        };
        // One port test per rule keeps both renderings equal.
        if matches!(t, Test::DPort(..)) && tests.iter().any(|x| matches!(x, Test::DPort(..))) {
            continue;
        }
        // udp excludes the tcp tests (nft and iptables refuse both in one rule).
        let l4 = |x: &Test| matches!(x, Test::Udp | Test::Syn | Test::DPort(..) | Test::SportHigh);
        if l4(&t)
            && tests
                .iter()
                .any(|x| matches!(x, Test::Udp) || (matches!(t, Test::Udp) && l4(x)))
        {
            continue;
        }
        if matches!(t, Test::Syn | Test::SportHigh | Test::PktHost)
            && tests
                .iter()
                .any(|x| std::mem::discriminant(x) == std::mem::discriminant(&t))
        {
            continue;
        }
        // One interface test per rule (iptables takes one -i).
        let iif = |x: &Test| matches!(x, Test::Lo | Test::Dev);
        if iif(&t) && tests.iter().any(iif) {
            continue;
        }
        tests.push(t);
    }
    let verdict = match rng.below(12) {
        0..=3 => Verdict::Accept,
        4..=6 => Verdict::Drop,
        7 => Verdict::Reject,
        8 if !in_sub => Verdict::Jump,
        9 if !in_sub => Verdict::Goto,
        10 if in_sub => Verdict::Return,
        _ => Verdict::Counter,
    };
    RandRule { tests, verdict }
}

/// The two renderings of a random rule: nft's and iptables'.
#[derive(Clone, Copy)]
enum Syntax {
    Nft = 0,
    Ipt = 1,
}

/// A test's words as nft (`[0]`) and iptables (`[1]`) spell them.
fn spellings(t: Test) -> [String; 2] {
    let both = |nft: &str, ipt: &str| [nft.to_string(), ipt.to_string()];
    match t {
        Test::DPort(lo, hi, neg) => {
            let (nft_not, ipt_not) = if neg { ("!= ", "! ") } else { ("", "") };
            if lo == hi {
                [
                    format!("tcp dport {nft_not}{lo}"),
                    format!("{ipt_not}--dport {lo}"),
                ]
            } else {
                [
                    format!("tcp dport {nft_not}{lo}-{hi}"),
                    format!("{ipt_not}--dport {lo}:{hi}"),
                ]
            }
        }
        Test::Udp => both("meta l4proto udp", "-p udp"),
        Test::CtEstablished => both(
            "ct state established,related",
            "-m conntrack --ctstate RELATED,ESTABLISHED",
        ),
        Test::CtNew => both("ct state new", "-m conntrack --ctstate NEW"),
        Test::CtInvalid => both("ct state invalid", "-m conntrack --ctstate INVALID"),
        Test::Lo => both("iifname \"lo\"", "-i lo"),
        Test::Peer(true) => both("ip saddr 10.77.0.0/24", "-s 10.77.0.0/24"),
        Test::Peer(false) => both("ip saddr != 10.77.0.0/24", "! -s 10.77.0.0/24"),
        Test::Syn => both("tcp flags & (fin|syn|rst|ack) == syn", "--syn"),
        Test::Limit => both("limit rate 5/second", "-m limit --limit 5/sec"),
        Test::Dev => [format!("iifname \"{DEV}\""), format!("-i {DEV}")],
        Test::DaddrSelf(true) => [format!("ip daddr {SERVER}"), format!("-d {SERVER}")],
        Test::DaddrSelf(false) => both("ip daddr 10.77.0.99", "-d 10.77.0.99"),
        Test::SportHigh => both("tcp sport 1024-65535", "--sport 1024:65535"),
        Test::PktHost => both("meta pkttype host", "-m pkttype --pkt-type unicast"),
    }
}

/// A verdict as nft (`[0]`) and iptables (`[1]`) spell it.
fn verdict_spellings(v: Verdict) -> [&'static str; 2] {
    match v {
        Verdict::Accept => ["accept", "-j ACCEPT"],
        Verdict::Drop => ["drop", "-j DROP"],
        Verdict::Reject => ["reject", "-j REJECT"],
        Verdict::Jump => ["jump sub", "-j sub"],
        Verdict::Goto => ["goto sub", "-g sub"],
        Verdict::Return => ["return", "-j RETURN"],
        Verdict::Counter => ["counter", "-m comment --comment counted"],
    }
}

/// The rule's tests and verdict in `syntax`. Both name the protocol once, before the first
/// port test; iptables also before `--syn`, which nft's flags test implies.
fn rule_words(r: &RandRule, syntax: Syntax) -> String {
    let at = syntax as usize;
    let mut words = Vec::new();
    let mut proto = false;
    for &t in &r.tests {
        let tcp_only = match t {
            Test::DPort(..) | Test::SportHigh => true,
            Test::Syn => matches!(syntax, Syntax::Ipt),
            _ => false,
        };
        if tcp_only && !proto {
            words.push(["meta l4proto tcp", "-p tcp -m tcp"][at].to_string());
            proto = true;
        }
        let [nft, ipt] = spellings(t);
        words.push(if at == 0 { nft } else { ipt });
    }
    words.push(verdict_spellings(r.verdict)[at].to_string());
    words.join(" ")
}

fn nft_rule(r: &RandRule) -> String {
    rule_words(r, Syntax::Nft)
}

fn ipt_rule(chain: &str, r: &RandRule) -> String {
    format!("-A {chain} {}", rule_words(r, Syntax::Ipt))
}

/// A random composition: one to three layers (nft at several hooks and priorities,
/// iptables-legacy, iptables-nft), each a base chain with a policy and rules, some jumping
/// to a sub-chain.
pub fn random(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let port = *rng.pick(&[29500u16, 29520, 50005]);
    let mut loads = Vec::new();
    let mut unmodelled = None;
    let mut depends = false;
    let layers = 1 + rng.below(3);
    let mut used_legacy = false;
    let mut used_iptnft = false;
    for layer in 0..layers {
        let kind = rng.below(5);
        let policy_drop = rng.chance(35);
        let raw = kind == 3;
        let n_rules = rng.below(5) as usize;
        let rules: Vec<RandRule> = (0..n_rules)
            .map(|_| rand_rule(&mut rng, port, false, raw))
            .collect();
        let sub: Vec<RandRule> = (0..1 + rng.below(3))
            .map(|_| rand_rule(&mut rng, port, true, raw))
            .collect();
        for r in rules.iter().chain(&sub) {
            for t in &r.tests {
                match t {
                    Test::Limit => unmodelled = Some("limit".to_string()),
                    Test::Peer(_) => depends = true,
                    _ => {}
                }
            }
        }
        let ipt = |chain_policy: &str| {
            let mut s = format!(
                "*filter\n:INPUT {chain_policy} [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:sub - [0:0]\n"
            );
            for r in &rules {
                s.push_str(&ipt_rule("INPUT", r));
                s.push('\n');
            }
            for r in &sub {
                s.push_str(&ipt_rule("sub", r));
                s.push('\n');
            }
            s + "COMMIT\n"
        };
        let policy = if policy_drop { "DROP" } else { "ACCEPT" };
        match kind {
            1 if !used_legacy => {
                used_legacy = true;
                loads.push(Load::Legacy(ipt(policy)));
            }
            2 if !used_iptnft => {
                used_iptnft = true;
                loads.push(Load::IptNft(ipt(policy)));
            }
            _ => {
                let (family, hook, prio) = match kind {
                    3 => ("ip", "prerouting", -300),
                    4 => ("inet", "prerouting", -150),
                    _ => (
                        *rng.pick(&["inet", "ip"]),
                        "input",
                        *rng.pick(&[-10, 0, 10]),
                    ),
                };
                let mut s = format!(
                    "table {family} t{layer} {{\n chain sub {{\n{} }}\n chain c {{\n  type filter hook {hook} priority {prio}; policy {};\n{} }}\n}}\n",
                    sub.iter()
                        .map(|r| format!("  {}\n", nft_rule(r)))
                        .collect::<String>(),
                    policy.to_ascii_lowercase(),
                    rules
                        .iter()
                        .map(|r| format!("  {}\n", nft_rule(r)))
                        .collect::<String>(),
                );
                if rng.chance(10) {
                    // A dormant copy with everything dropped changes nothing.
                    s.push_str(&format!("table ip dormant{layer} {{\n flags dormant\n chain c {{\n  type filter hook input priority 0; policy drop;\n }}\n}}\n"));
                }
                loads.push(Load::Nft(s));
            }
        }
    }
    Case {
        name: format!("random composition {seed}"),
        seed: Some(seed),
        loads,
        port,
        unmodelled,
        depends,
    }
}
