//! Rulesets for the differential firewall test: shapes real tools write
//! (iptables-restore-translate, ufw, firewalld, fail2ban, kube-proxy, Docker) and seeded
//! random compositions of the constructs the model claims to follow. Each case says how
//! it is loaded into the server's namespace and which outcomes other than the kernel's own
//! verdict are acceptable: "cannot tell" only when it holds a named unmodelled construct,
//! "depends" only when it matches on the interface, the source or an ipset.

/// The client's address: rules that name it (or its network) match the peer.
pub const PEER: &str = "10.77.0.2";
/// The server's veth device.
pub const DEV: &str = "v0";

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
    pub unmodelled: Option<&'static str>,
    /// It matches on the interface, the source or an ipset: "depends" is acceptable.
    pub depends: bool,
}

fn case(name: &str, port: u16, loads: Vec<Load>) -> Case {
    Case {
        name: name.into(),
        seed: None,
        loads,
        port,
        unmodelled: None,
        depends: false,
    }
}

fn nft(text: &str) -> Load {
    Load::Nft(text.into())
}

fn legacy(text: &str) -> Load {
    Load::Legacy(text.into())
}

fn iptnft(text: &str) -> Load {
    Load::IptNft(text.into())
}

/// A filter table of iptables-save form with INPUT's policy and rules.
fn ipt_filter(policy: &str, rules: &[&str]) -> String {
    let mut s =
        format!("*filter\n:INPUT {policy} [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    for r in rules {
        s.push_str(r);
        s.push('\n');
    }
    s.push_str("COMMIT\n");
    s
}

const P: u16 = 29500;

/// Hand-written shapes, each found on real nodes or written by a real tool.
pub fn shapes() -> Vec<Case> {
    let translate = |body: &str| {
        format!(
            "table ip filter {{\n chain INPUT {{\n  type filter hook input priority 0; policy drop;\n  ct state related,established counter accept\n  iifname \"lo\" counter accept\n{body}\n }}\n chain FORWARD {{\n  type filter hook forward priority 0; policy drop;\n }}\n}}\n"
        )
    };
    let ufw = |user: &[&str]| {
        let mut rules = vec![
            "-A INPUT -j ufw-before-input",
            "-A INPUT -j ufw-user-input",
            "-A INPUT -j ufw-after-input",
            "-A ufw-before-input -i lo -j ACCEPT",
            "-A ufw-before-input -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "-A ufw-before-input -m conntrack --ctstate INVALID -j DROP",
            "-A ufw-before-input -p icmp -m icmp --icmp-type 8 -j ACCEPT",
            "-A ufw-before-input -p udp -m udp --sport 67 --dport 68 -j ACCEPT",
            "-A ufw-before-input -j ufw-not-local",
            "-A ufw-not-local -m addrtype --dst-type LOCAL -j RETURN",
            "-A ufw-not-local -m addrtype --dst-type MULTICAST -j RETURN",
            "-A ufw-not-local -m addrtype --dst-type BROADCAST -j RETURN",
            "-A ufw-not-local -m limit --limit 3/min --limit-burst 10 -j ufw-logging-deny",
            "-A ufw-not-local -j DROP",
            "-A ufw-after-input -p udp -m udp --dport 137 -j ufw-skip-to-policy-input",
            "-A ufw-after-input -m addrtype --dst-type BROADCAST -j ufw-skip-to-policy-input",
            "-A ufw-logging-deny -m limit --limit 3/min --limit-burst 10 -j LOG --log-prefix \"[UFW BLOCK] \"",
            "-A ufw-skip-to-policy-input -j DROP",
        ];
        rules.extend_from_slice(user);
        let mut s =
            String::from("*filter\n:INPUT DROP [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n");
        for c in [
            "ufw-before-input",
            "ufw-user-input",
            "ufw-after-input",
            "ufw-not-local",
            "ufw-logging-deny",
            "ufw-skip-to-policy-input",
        ] {
            s.push_str(&format!(":{c} - [0:0]\n"));
        }
        for r in rules {
            s.push_str(r);
            s.push('\n');
        }
        s + "COMMIT\n"
    };
    let firewalld = |allow: &str| {
        format!(
            "table inet firewalld {{
 chain filter_INPUT {{
  type filter hook input priority filter + 10; policy accept;
  ct state {{ established, related }} accept
  ct status dnat accept
  iifname \"lo\" accept
  ct state invalid drop
  jump filter_INPUT_ZONES
  reject with icmpx admin-prohibited
 }}
 chain filter_INPUT_ZONES {{
  goto filter_IN_public
 }}
 chain filter_IN_public {{
  jump filter_IN_public_pre
  jump filter_IN_public_allow
  meta l4proto {{ icmp, ipv6-icmp }} accept
 }}
 chain filter_IN_public_pre {{
 }}
 chain filter_IN_public_allow {{
  tcp dport 22 accept
  {allow}
 }}
}}
"
        )
    };
    let kube_firewall = ipt_filter(
        "ACCEPT",
        &[
            ":KUBE-FIREWALL - [0:0]",
            ":KUBE-NODEPORTS - [0:0]",
            "-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS",
            "-A INPUT -j KUBE-FIREWALL",
            "-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP",
        ],
    );
    // Chain declarations must precede rules: move the `:KUBE` lines up.
    let fix_decls = |text: String| {
        let (decls, rest): (Vec<&str>, Vec<&str>) = text
            .lines()
            .partition(|l| l.starts_with(':') || l.starts_with('*'));
        format!("{}\n{}\n", decls.join("\n"), rest.join("\n"))
    };
    let kube_firewall = fix_decls(kube_firewall);
    let kube_nat = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-SVC-X - [0:0]\n:KUBE-SEP-X - [0:0]\n\
        -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
        -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVC-X\n\
        -A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n\
        -A KUBE-NODEPORTS -p tcp -m comment --comment \"default/web\" -m tcp --dport 30080 -j KUBE-SVC-X\n\
        -A KUBE-SVC-X -j KUBE-SEP-X\n\
        -A KUBE-SEP-X -p tcp -m tcp -j DNAT --to-destination 10.244.0.5:8443\n\
        COMMIT\n";
    let docker_nat = |port: u16| {
        format!(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:DOCKER - [0:0]\n\
            -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n\
            -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE\n\
            -A DOCKER -i docker0 -j RETURN\n\
            -A DOCKER ! -i docker0 -p tcp -m tcp --dport {port} -j DNAT --to-destination 172.17.0.2:80\n\
            COMMIT\n"
        )
    };
    let docker_filter = ipt_filter(
        "ACCEPT",
        &[
            "-A FORWARD -j DOCKER-USER",
            "-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
            "-A DOCKER-USER -j RETURN",
        ],
    )
    .replace(
        ":OUTPUT ACCEPT [0:0]\n",
        ":OUTPUT ACCEPT [0:0]\n:DOCKER-USER - [0:0]\n",
    );
    let fail2ban = |members: &str, policy: &str, rule: &str| {
        vec![
            Load::Ipset(format!(
                "create f2b-sshd hash:ip family inet hashsize 1024 maxelem 65536\n{members}"
            )),
            legacy(&ipt_filter(policy, &[rule])),
        ]
    };
    let peer_member = format!("add f2b-sshd {PEER}\n");

    let mut out = vec![
        case("empty ruleset", P, vec![]),
        case(
            "nft inet filter, policy drop, only ssh open",
            P,
            vec![nft(
                "table inet filter {\n chain input {\n  type filter hook input priority 0; policy drop;\n  ct state established,related accept\n  iif lo accept\n  tcp dport 22 accept\n }\n}\n",
            )],
        ),
        case(
            "nft inet filter, policy drop, port set open",
            P,
            vec![nft(
                "table inet filter {\n chain input {\n  type filter hook input priority 0; policy drop;\n  ct state established,related accept\n  tcp dport { 22, 29500-29550 } accept\n }\n}\n",
            )],
        ),
        case(
            "iptables-restore-translate: anonymous port set under policy drop",
            P,
            vec![nft(&translate(
                "  tcp dport { 22, 29500-29550 } counter accept",
            ))],
        ),
        case(
            "iptables-restore-translate: anonymous port set without the port",
            P,
            vec![nft(&translate(
                "  tcp dport { 22, 29600-29650 } counter accept",
            ))],
        ),
        case(
            "native ip filter INPUT: named port set",
            P,
            vec![nft(
                "table ip filter {\n set ports {\n  type inet_service; flags interval;\n  elements = { 22, 29500-29550 }\n }\n chain INPUT {\n  type filter hook input priority 0; policy drop;\n  tcp dport @ports accept\n }\n}\n",
            )],
        ),
        case(
            "native ip filter INPUT: named port set without the port",
            P,
            vec![nft(
                "table ip filter {\n set ports {\n  type inet_service; flags interval;\n  elements = { 22, 29600-29650 }\n }\n chain INPUT {\n  type filter hook input priority 0; policy drop;\n  tcp dport @ports accept\n }\n}\n",
            )],
        ),
        case(
            "native ip filter INPUT: verdict map drops the range",
            P,
            vec![nft(
                "table ip filter {\n chain INPUT {\n  type filter hook input priority 0; policy accept;\n  tcp dport vmap { 29500-29550 : drop }\n }\n}\n",
            )],
        ),
        case(
            "native ip filter INPUT: verdict map accepts the range",
            P,
            vec![nft(
                "table ip filter {\n chain INPUT {\n  type filter hook input priority 0; policy drop;\n  tcp dport vmap { 22 : accept, 29500-29550 : accept }\n }\n}\n",
            )],
        ),
        case(
            "native ip filter INPUT: th dport accept",
            P,
            vec![nft(
                "table ip filter {\n chain INPUT {\n  type filter hook input priority 0; policy drop;\n  meta l4proto tcp th dport 29500 accept\n }\n}\n",
            )],
        ),
        case(
            "native ip filter INPUT: th dport drop",
            P,
            vec![nft(
                "table ip filter {\n chain INPUT {\n  type filter hook input priority 0; policy accept;\n  meta l4proto tcp th dport 29400-29600 drop\n }\n}\n",
            )],
        ),
        case(
            "native ip filter INPUT: jumping verdict map",
            P,
            vec![nft(
                "table ip filter {\n chain ssh {\n  accept\n }\n chain block {\n  drop\n }\n chain INPUT {\n  type filter hook input priority 0; policy accept;\n  tcp dport vmap { 22 : jump ssh, 29500-29550 : jump block }\n }\n}\n",
            )],
        ),
        case(
            "iptables-legacy: --syn drop on the range",
            P,
            vec![legacy(&ipt_filter(
                "ACCEPT",
                &[
                    "-A INPUT -p tcp -m tcp --dport 29500:29550 --tcp-flags FIN,SYN,RST,ACK SYN -j DROP",
                ],
            ))],
        ),
        case(
            "iptables-legacy: --syn accept under policy drop",
            P,
            vec![legacy(&ipt_filter(
                "DROP",
                &[
                    "-A INPUT -p tcp -m tcp --dport 29500:29550 --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT",
                ],
            ))],
        ),
        case(
            "iptables-legacy: accept only non-SYN under policy drop",
            P,
            vec![legacy(&ipt_filter(
                "DROP",
                &["-A INPUT -p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN -j ACCEPT"],
            ))],
        ),
        case(
            "iptables-nft: --syn drop on the range",
            P,
            vec![iptnft(&ipt_filter(
                "ACCEPT",
                &[
                    "-A INPUT -p tcp -m tcp --dport 29500:29550 --tcp-flags FIN,SYN,RST,ACK SYN -j DROP",
                ],
            ))],
        ),
        case(
            "iptables-legacy: multiport accept, policy drop",
            P,
            vec![legacy(&ipt_filter(
                "DROP",
                &[
                    "-A INPUT -i lo -j ACCEPT",
                    "-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
                    "-A INPUT -p tcp -m multiport --dports 22,29500:29550 -m conntrack --ctstate NEW -j ACCEPT",
                ],
            ))],
        ),
        case(
            "iptables-legacy: REJECT with tcp-reset",
            P,
            vec![legacy(&ipt_filter(
                "ACCEPT",
                &["-A INPUT -p tcp -m tcp --dport 29500 -j REJECT --reject-with tcp-reset"],
            ))],
        ),
        case(
            "iptables-legacy: udp drop on the port",
            P,
            vec![legacy(&ipt_filter(
                "ACCEPT",
                &["-A INPUT -p udp -m udp --dport 29500 -j DROP"],
            ))],
        ),
        case(
            "ufw: port allowed",
            P,
            vec![legacy(&ufw(&[
                "-A ufw-user-input -p tcp -m tcp --dport 29500:29550 -j ACCEPT",
            ]))],
        ),
        case(
            "ufw: port not allowed",
            P,
            vec![legacy(&ufw(&[
                "-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT",
            ]))],
        ),
        case(
            "ufw through iptables-nft: port allowed",
            P,
            vec![iptnft(&ufw(&[
                "-A ufw-user-input -p tcp -m tcp --dport 29500:29550 -j ACCEPT",
            ]))],
        ),
        case(
            "ufw through iptables-nft: port not allowed",
            P,
            vec![iptnft(&ufw(&[
                "-A ufw-user-input -p tcp -m tcp --dport 22 -j ACCEPT",
            ]))],
        ),
        case(
            "firewalld: port allowed",
            P,
            vec![nft(&firewalld("tcp dport 29500-29550 accept"))],
        ),
        case("firewalld: port not allowed", P, vec![nft(&firewalld(""))]),
        case(
            "kube-proxy: KUBE-FIREWALL and service DNATs",
            P,
            vec![legacy(&kube_firewall), legacy(kube_nat)],
        ),
        case(
            "kube-proxy through iptables-nft",
            P,
            vec![iptnft(&kube_firewall), iptnft(kube_nat)],
        ),
        case(
            "Docker: published port elsewhere",
            P,
            vec![legacy(&docker_filter), legacy(&docker_nat(8080))],
        ),
        case(
            "dormant table with policy drop",
            P,
            vec![nft(
                "table ip t {\n flags dormant\n chain c {\n  type filter hook input priority 0; policy drop;\n }\n}\n",
            )],
        ),
        case(
            "nat prerouting drop, conntrack off",
            P,
            vec![nft(
                "table ip n {\n chain p {\n  type nat hook prerouting priority -100; policy accept;\n  tcp dport 29500 drop\n }\n}\n",
            )],
        ),
        case(
            "nat prerouting drop, conntrack on",
            P,
            vec![nft(
                "table ip n {\n chain p {\n  type nat hook prerouting priority -100; policy accept;\n  tcp dport 29500 drop\n }\n}\ntable ip f {\n chain i {\n  type filter hook input priority 0;\n  ct state established accept\n }\n}\n",
            )],
        ),
        case(
            "ct status != dnat drop before conntrack",
            P,
            vec![nft(
                "table ip raw {\n chain p {\n  type filter hook prerouting priority -300;\n  ct status != dnat drop\n }\n}\n",
            )],
        ),
        case(
            "ct status != dnat drop after conntrack",
            P,
            vec![nft(
                "table ip f {\n chain i {\n  type filter hook input priority 0;\n  ct status != dnat drop\n }\n}\n",
            )],
        ),
        case(
            "ct status dnat accept under policy drop",
            P,
            vec![nft(
                "table ip f {\n chain i {\n  type filter hook input priority 0; policy drop;\n  ct status dnat accept\n }\n}\n",
            )],
        ),
        case(
            "ct state invalid drop in raw",
            P,
            vec![nft(
                "table ip raw {\n chain p {\n  type filter hook prerouting priority -300;\n  ct state invalid drop\n }\n}\n",
            )],
        ),
        case(
            "ct state new accept in raw under policy drop",
            P,
            vec![nft(
                "table ip raw {\n chain p {\n  type filter hook prerouting priority -300; policy drop;\n  ct state new accept\n }\n}\n",
            )],
        ),
        case(
            "ct state vmap in input",
            P,
            vec![nft(
                "table inet f {\n chain i {\n  type filter hook input priority 0; policy drop;\n  ct state vmap { established : accept, related : accept, invalid : drop }\n  tcp dport 29500 accept\n }\n}\n",
            )],
        ),
        case(
            "several base chains: mangle accepts, filter drops",
            P,
            vec![nft(
                "table ip m {\n chain p {\n  type filter hook prerouting priority -150;\n  tcp dport 29500 accept\n }\n}\ntable ip f {\n chain i {\n  type filter hook input priority 0;\n  tcp dport 29500 drop\n }\n}\n",
            )],
        ),
        case(
            "security table drops after filter accepts",
            P,
            vec![
                legacy(
                    "*security\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A INPUT -p tcp --dport 29500 -j DROP\nCOMMIT\n",
                ),
                legacy(&ipt_filter(
                    "ACCEPT",
                    &["-A INPUT -p tcp --dport 29500 -j ACCEPT"],
                )),
            ],
        ),
        case(
            "legacy accepts, nft drops",
            P,
            vec![
                legacy(&ipt_filter(
                    "ACCEPT",
                    &["-A INPUT -p tcp --dport 29500 -j ACCEPT"],
                )),
                nft(
                    "table inet f {\n chain i {\n  type filter hook input priority 10; policy drop;\n }\n}\n",
                ),
            ],
        ),
        case(
            "ip6 table drops everything",
            P,
            vec![nft(
                "table ip6 f {\n chain i {\n  type filter hook input priority 0; policy drop;\n }\n}\n",
            )],
        ),
        case(
            "goto and return",
            P,
            vec![nft(
                "table inet f {\n chain a {\n  tcp dport 29500 return\n  drop\n }\n chain b {\n  goto a\n }\n chain i {\n  type filter hook input priority 0; policy drop;\n  jump b\n  tcp dport 29500 accept\n }\n}\n",
            )],
        ),
    ];
    let mut tagged = |mut c: Case, unmodelled: Option<&'static str>, depends: bool| {
        c.unmodelled = unmodelled;
        c.depends = depends;
        out.push(c);
    };
    tagged(
        case(
            "arp table with policy drop",
            P,
            vec![nft(
                "table arp a {\n chain i {\n  type filter hook input priority 0; policy drop;\n }\n}\n",
            )],
        ),
        Some("ARP filtering"),
        false,
    );
    tagged(
        case(
            "nat redirect of the port",
            P,
            vec![nft(
                "table ip n {\n chain p {\n  type nat hook prerouting priority -100;\n  tcp dport 29500 redirect to :1\n }\n}\n",
            )],
        ),
        Some("redirect"),
        false,
    );
    tagged(
        case(
            "mangle rewrites the port",
            P,
            vec![nft(
                "table ip m {\n chain p {\n  type filter hook prerouting priority -150;\n  tcp dport 29500 tcp dport set 1\n }\n}\n",
            )],
        ),
        Some("mangle"),
        false,
    );
    tagged(
        case(
            "iptables REDIRECT of the port",
            P,
            vec![legacy(
                "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n-A PREROUTING -p tcp --dport 29500 -j REDIRECT --to-ports 1\nCOMMIT\n",
            )],
        ),
        Some("REDIRECT"),
        false,
    );
    tagged(
        case(
            "Docker: the port published to a container",
            P,
            vec![legacy(&docker_filter), legacy(&docker_nat(P))],
        ),
        Some("DNAT"),
        true,
    );
    tagged(
        case(
            "NFQUEUE on the port",
            P,
            vec![legacy(&ipt_filter(
                "ACCEPT",
                &["-A INPUT -p tcp --dport 29500 -j NFQUEUE --queue-num 3"],
            ))],
        ),
        Some("NFQUEUE"),
        false,
    );
    tagged(
        case(
            "limit on the accept",
            P,
            vec![nft(
                "table inet f {\n chain i {\n  type filter hook input priority 0; policy drop;\n  tcp dport 29500 limit rate 10/second accept\n }\n}\n",
            )],
        ),
        Some("limit"),
        false,
    );
    tagged(
        case(
            "recent through iptables-nft",
            P,
            vec![iptnft(&ipt_filter(
                "ACCEPT",
                &["-A INPUT -p tcp --dport 29500 -m recent --name x --rcheck --seconds 60 -j DROP"],
            ))],
        ),
        Some("recent"),
        false,
    );
    tagged(
        case(
            "notrack in raw then ct state new accept",
            P,
            vec![nft(
                "table ip raw {\n chain p {\n  type filter hook prerouting priority -300;\n  tcp dport 29500 notrack\n }\n}\ntable ip f {\n chain i {\n  type filter hook input priority 0; policy drop;\n  ct state new accept\n }\n}\n",
            )],
        ),
        Some("notrack"),
        false,
    );
    tagged(
        case(
            "fail2ban: ipset holds the peer",
            P,
            fail2ban(
                &peer_member,
                "ACCEPT",
                "-A INPUT -p tcp -m multiport --dports 22,29500 -m set --match-set f2b-sshd src -j REJECT --reject-with icmp-port-unreachable",
            ),
        ),
        None,
        true,
    );
    tagged(
        case(
            "fail2ban: ipset holds another address",
            P,
            fail2ban(
                "add f2b-sshd 192.0.2.7\n",
                "ACCEPT",
                "-A INPUT -p tcp -m multiport --dports 22,29500 -m set --match-set f2b-sshd src -j REJECT --reject-with icmp-port-unreachable",
            ),
        ),
        None,
        true,
    );
    tagged(
        case(
            "policy drop, accept via ipset of the peer",
            P,
            fail2ban(
                &peer_member,
                "DROP",
                "-A INPUT -m set --match-set f2b-sshd src -j ACCEPT",
            ),
        ),
        None,
        true,
    );
    tagged(
        case(
            "interface match: accept on the veth only",
            P,
            vec![nft(&format!(
                "table inet f {{\n chain i {{\n  type filter hook input priority 0; policy drop;\n  iifname \"{DEV}\" accept\n }}\n}}\n"
            ))],
        ),
        None,
        true,
    );
    tagged(
        case(
            "source match: drop from the peer's network",
            P,
            vec![legacy(&ipt_filter(
                "ACCEPT",
                &["-A INPUT -s 10.77.0.0/24 -p tcp --dport 29500 -j DROP"],
            ))],
        ),
        None,
        true,
    );
    out
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
        let t = match rng.below(20) {
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
        let l4 = |x: &Test| matches!(x, Test::Udp | Test::Syn | Test::DPort(..));
        if l4(&t)
            && tests
                .iter()
                .any(|x| matches!(x, Test::Udp) || (matches!(t, Test::Udp) && l4(x)))
        {
            continue;
        }
        if matches!(t, Test::Syn) && tests.iter().any(|x| matches!(x, Test::Syn)) {
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
            Test::DPort(..) => true,
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
                    Test::Limit => unmodelled = Some("limit"),
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
