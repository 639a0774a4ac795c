//! The NCCL settings the node needs, as `/etc/nccl.conf` lines (`apply` writes them):
//! `NCCL_SOCKET_IFNAME` naming the NIC NCCL's bootstrap and socket transport should use.

use crate::finding::{Area, Change, Check, Finding, Remedy};
use crate::inventory::nic::Nic;

use super::super::Context;

/// Parses `/etc/nccl.conf`: `KEY=VALUE` lines, `#` comments, blank lines.
pub fn parse_nccl_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Whether NCCL would pick interface `name` under `NCCL_SOCKET_IFNAME=value`: a list of
/// prefixes, `=` for exact names, `^` to exclude.
pub fn ifname_selects(value: &str, name: &str) -> bool {
    let (exclude, list) = match value.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, value),
    };
    let (exact, list) = match list.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let hit = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if exact {
                p == name
            } else {
                name.starts_with(p)
            }
        });
    hit != exclude
}

/// The interface NCCL should use: always one of the judged NICs (the fastest that is up),
/// never another interface, so the management port is never written.
fn recommended<'a>(judged: &[&'a Nic]) -> Option<&'a Nic> {
    let up: Vec<Nic> = judged
        .iter()
        .filter(|n| n.is_up())
        .map(|n| (*n).clone())
        .collect();
    super::fastest_up(&up).and_then(|best| judged.iter().copied().find(|n| n.name == best.name))
}

/// `NCCL_SOCKET_IFNAME`: pass when `/etc/nccl.conf` already selects the recommended NIC,
/// warn with the `/etc/nccl.conf` line otherwise.
pub fn socket_ifname(ctx: &Context, judged: &[&Nic]) -> Finding {
    let check = Check::new("nccl.NCCL_SOCKET_IFNAME", Area::Nic);
    let Some(nic) = recommended(judged) else {
        return check
            .expected("a judged NIC that is up")
            .skip(if judged.is_empty() {
                "no network interface belongs to the training fabric (RDMA devices without a netdev here): name the interface peers reach for NCCL's bootstrap yourself"
            } else {
                "no judged interface is up; NCCL would fall back to whatever is left"
            });
    };
    let check = check.expected(nic.name.clone());
    let current = match ctx.root.read_optional("/etc/nccl.conf") {
        Ok(text) => text
            .map(|t| parse_nccl_conf(&t))
            .unwrap_or_default()
            .into_iter()
            .rev()
            .find(|(k, _)| k == "NCCL_SOCKET_IFNAME")
            .map(|(_, v)| v),
        Err(e) => return check.error(e.to_string()),
    };
    let speed = nic
        .speed_mbps
        .map_or("speed unreported".into(), |s| format!("{s} Mb/s"));
    let check = check.why(format!(
        "NCCL should use {} ({speed}); left unset, NCCL picks the first interface that is not lo or docker*, which may be a management port",
        nic.name
    ));
    let actual = current.clone().unwrap_or_else(|| "unset".into());
    if current
        .as_deref()
        .is_some_and(|v| ifname_selects(v, &nic.name))
    {
        return check.pass(actual);
    }
    check.warn(
        actual,
        Remedy::applied(
            format!(
                "add `NCCL_SOCKET_IFNAME={}` to /etc/nccl.conf (gputune apply writes it)",
                nic.name
            ),
            Change::NcclEnv {
                key: "NCCL_SOCKET_IFNAME".into(),
                value: nic.name.clone(),
            },
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_lines() {
        let text = "# site settings\nNCCL_SOCKET_IFNAME=eth0\n\n NCCL_IB_TIMEOUT = 22 \nbogus\n";
        assert_eq!(
            parse_nccl_conf(text),
            [
                ("NCCL_SOCKET_IFNAME".to_string(), "eth0".to_string()),
                ("NCCL_IB_TIMEOUT".to_string(), "22".to_string())
            ]
        );
        assert!(parse_nccl_conf("").is_empty());
    }

    #[test]
    fn ifname_semantics() {
        let cases = [
            ("eth", "eth0", true),
            ("eth0", "eth0", true),
            ("=eth0", "eth01", false),
            ("=eth0", "eth0", true),
            ("^docker,lo", "eth0", true),
            ("^eth", "eth0", false),
            ("ens1,ens2", "ens2np0", true),
            ("ib", "eth0", false),
            ("", "eth0", false),
        ];
        for (value, name, want) in cases {
            assert_eq!(ifname_selects(value, name), want, "{value} {name}");
        }
    }
}
