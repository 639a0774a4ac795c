//! What the node itself says about a peer's packets, beyond the ruleset: the addresses a
//! peer can connect to (so a `daddr` test is decided) and whether its packets come through
//! a bridge port (so `bridge` family chains are run or not), from `ip -d -j addr show`.

use serde_json::Value;

use super::model::Facts;

/// The facts `ip -d -j addr show` gives; what it cannot tell stays `None`.
pub(crate) fn facts(json: &str) -> Facts {
    let Ok(Value::Array(links)) = serde_json::from_str::<Value>(json) else {
        return Facts::default();
    };
    let up = |l: &Value| {
        l.get("flags")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x == "UP"))
    };
    let info = |l: &Value, key: &str| {
        l.get("linkinfo")
            .and_then(|i| i.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let loopback = |l: &Value| l.get("link_type").and_then(Value::as_str) == Some("loopback");
    let ipv4 = |l: &Value| -> Vec<std::net::Ipv4Addr> {
        l.get("addr_info")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|a| a.get("family").and_then(Value::as_str) == Some("inet"))
            .filter_map(|a| a.get("local").and_then(Value::as_str)?.parse().ok())
            .filter(|a: &std::net::Ipv4Addr| !a.is_loopback())
            .collect()
    };
    let reachable: Vec<&Value> = links.iter().filter(|l| up(l) && !loopback(l)).collect();
    let addresses: Vec<std::net::Ipv4Addr> = reachable.iter().flat_map(|l| ipv4(l)).collect();
    let ports = links
        .iter()
        .any(|l| info(l, "info_slave_kind").as_deref() == Some("bridge"));
    let addressed: Vec<&&Value> = reachable.iter().filter(|l| !ipv4(l).is_empty()).collect();
    let bridged = if !ports {
        // No bridge port on the node: no bridge chain ever sees a packet.
        Some(false)
    } else if !addressed.is_empty()
        && addressed
            .iter()
            .all(|l| info(l, "info_kind").as_deref() == Some("bridge"))
    {
        // Every address lives on a bridge: a peer reaches it through a bridge port.
        Some(true)
    } else {
        None
    };
    let name = |l: &&Value| l.get("ifname").and_then(Value::as_str).map(str::to_string);
    let links: Vec<String> = reachable.iter().filter_map(name).collect();
    let names: Vec<String> = reachable
        .iter()
        .filter(|l| info(l, "info_slave_kind").as_deref() != Some("bridge"))
        .filter_map(name)
        .collect();
    Facts {
        addresses: (!addresses.is_empty()).then_some(addresses),
        mark_bits: 0,
        bridged,
        interfaces: (!names.is_empty()).then_some(names),
        links: (!links.is_empty()).then_some(links),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, kind: &str, slave: &str, addr: &str) -> String {
        let info = match (kind, slave) {
            ("", "") => String::new(),
            ("", s) => format!(r#","linkinfo":{{"info_slave_kind":"{s}"}}"#),
            (k, _) => format!(r#","linkinfo":{{"info_kind":"{k}"}}"#),
        };
        let addr = if addr.is_empty() {
            String::new()
        } else {
            format!(r#","addr_info":[{{"family":"inet","local":"{addr}","prefixlen":24}}]"#)
        };
        format!(r#"{{"ifname":"{name}","flags":["UP"],"link_type":"ether"{info}{addr}}}"#)
    }

    #[test]
    fn addresses_and_bridges() {
        let lo = r#"{"ifname":"lo","flags":["LOOPBACK","UP"],"link_type":"loopback","addr_info":[{"family":"inet","local":"127.0.0.1"}]}"#;
        let plain = format!("[{lo},{}]", link("eth0", "", "", "10.0.0.5"));
        let f = facts(&plain);
        assert_eq!(f.addresses, Some(vec!["10.0.0.5".parse().unwrap()]));
        assert_eq!(f.bridged, Some(false));
        assert_eq!(f.interfaces, Some(vec!["eth0".to_string()]));
        let bridged = format!(
            "[{lo},{},{}]",
            link("eth0", "", "bridge", ""),
            link("br0", "bridge", "", "10.0.0.5")
        );
        let f = facts(&bridged);
        assert_eq!(f.bridged, Some(true));
        assert_eq!(f.interfaces, Some(vec!["br0".to_string()]));
        assert_eq!(f.links, Some(vec!["eth0".to_string(), "br0".to_string()]));
        let mixed = format!(
            "[{lo},{},{},{}]",
            link("eth1", "", "", "192.0.2.1"),
            link("eth0", "", "bridge", ""),
            link("br0", "bridge", "", "10.0.0.5")
        );
        assert_eq!(facts(&mixed).bridged, None);
        assert_eq!(facts("not json"), Facts::default());
        // A down interface's address is no one's to connect to.
        let down = format!(
            "[{}]",
            link("eth0", "", "", "10.0.0.5").replace(r#"["UP"]"#, "[]")
        );
        assert_eq!(facts(&down).addresses, None);
    }
}
