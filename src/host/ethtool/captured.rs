//! Test-only [`Ethtool`]: what `ethtool -g/-k/-c/-a/-l IFACE` printed on real NICs (mlx5,
//! ice, bnxt), captured under `tests/fixtures/ethtool/DRIVER/{g,k,c,a,l}.txt`. The text is
//! parsed only here, never on a live node (there gputune asks the kernel over netlink). A
//! missing capture stands for a driver that answers "Operation not supported". Values set
//! through it are remembered, so apply's plan, verify and rollback run against it too.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Channels, Coalesce, Ethtool, EthtoolError, Features, Knob, Pause, Rings};

/// Captured outputs of one NIC, and what tests have set since.
pub struct Captured {
    dir: PathBuf,
    set: RefCell<BTreeMap<Knob, u32>>,
}

impl Captured {
    /// The captures of `driver` (a directory under `tests/fixtures/ethtool`).
    pub fn of(driver: &str) -> Captured {
        Captured {
            dir: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/ethtool")
                .join(driver),
            set: RefCell::new(BTreeMap::new()),
        }
    }

    fn text(&self, iface: &str, opt: &str, what: &str) -> Result<String, EthtoolError> {
        std::fs::read_to_string(self.dir.join(format!("{opt}.txt"))).map_err(|_| {
            EthtoolError::Unsupported {
                iface: iface.into(),
                what: what.into(),
            }
        })
    }

    fn overlay(&self, knob: Knob) -> Option<u32> {
        self.set.borrow().get(&knob).copied()
    }
}

/// `Label:   value` lines of one section (`Pre-set maximums:` or `Current hardware
/// settings:`); `n/a` is absent.
fn section(text: &str, header: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let mut inside = false;
    for line in text.lines() {
        if line.ends_with(':') && !line.starts_with(char::is_whitespace) {
            inside = line.starts_with(header);
            continue;
        }
        if !inside {
            continue;
        }
        if let Some((label, value)) = line.split_once(':')
            && let Ok(v) = value.trim().parse()
        {
            out.insert(label.trim().to_string(), v);
        }
    }
    out
}

/// `-g` text.
pub fn parse_rings(text: &str) -> Rings {
    let max = section(text, "Pre-set maximums");
    let cur = section(text, "Current hardware settings");
    Rings {
        rx: cur.get("RX").copied(),
        rx_max: max.get("RX").copied(),
        tx: cur.get("TX").copied(),
        tx_max: max.get("TX").copied(),
    }
}

/// `-l` text.
pub fn parse_channels(text: &str) -> Channels {
    let max = section(text, "Pre-set maximums");
    let cur = section(text, "Current hardware settings");
    Channels {
        rx: cur.get("RX").copied(),
        rx_max: max.get("RX").copied(),
        tx: cur.get("TX").copied(),
        tx_max: max.get("TX").copied(),
        combined: cur.get("Combined").copied(),
        combined_max: max.get("Combined").copied(),
    }
}

fn on(word: &str) -> Option<bool> {
    match word {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// `-a` text.
pub fn parse_pause(text: &str) -> Pause {
    let mut p = Pause::default();
    for line in text.lines() {
        let Some((label, value)) = line.split_once(':') else {
            continue;
        };
        let v = on(value.trim());
        match label.trim() {
            "Autonegotiate" => p.autoneg = v,
            "RX" => p.rx = v,
            "TX" => p.tx = v,
            _ => {}
        }
    }
    p
}

/// `-c` text: `Adaptive RX: on  TX: off` and `rx-usecs: N`.
pub fn parse_coalesce(text: &str) -> Coalesce {
    let mut c = Coalesce::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Adaptive RX:") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            c.adaptive_rx = words.first().and_then(|w| on(w));
            c.adaptive_tx = words.get(2).and_then(|w| on(w));
        } else if let Some(v) = line.strip_prefix("rx-usecs:") {
            c.rx_usecs = v.trim().parse().ok();
        }
    }
    c
}

/// `-k` text: `name: on|off [fixed]`; ethtool's legacy names map to the kernel's.
pub fn parse_features(text: &str) -> Features {
    let mut f = Features::default();
    for line in text.lines().skip(1) {
        let Some((name, rest)) = line.trim().split_once(':') else {
            continue;
        };
        let name = match name {
            "generic-receive-offload" => "rx-gro",
            "large-receive-offload" => "rx-lro",
            "generic-segmentation-offload" => "tx-generic-segmentation",
            other => other,
        };
        let mut words = rest.split_whitespace();
        if words.next() == Some("on") {
            f.active.insert(name.to_string());
        }
        if !rest.contains("[fixed]") {
            f.changeable.insert(name.to_string());
        }
    }
    f
}

impl Ethtool for Captured {
    fn rings(&self, iface: &str) -> Result<Rings, EthtoolError> {
        let mut r = parse_rings(&self.text(iface, "g", "ring parameters (ethtool -g)")?);
        r.rx = self.overlay(Knob::RxRing).or(r.rx);
        r.tx = self.overlay(Knob::TxRing).or(r.tx);
        Ok(r)
    }

    fn features(&self, iface: &str) -> Result<Features, EthtoolError> {
        let mut f = parse_features(&self.text(iface, "k", "offload features (ethtool -k)")?);
        for knob in [Knob::Gro, Knob::Lro, Knob::Tso, Knob::Gso] {
            if let Some(v) = self.overlay(knob) {
                for name in knob.features() {
                    if v == 0 {
                        f.active.remove(*name);
                    } else if f.changeable.contains(*name) {
                        f.active.insert((*name).to_string());
                    }
                }
            }
        }
        Ok(f)
    }

    fn coalesce(&self, iface: &str) -> Result<Coalesce, EthtoolError> {
        let mut c = parse_coalesce(&self.text(iface, "c", "interrupt coalescing (ethtool -c)")?);
        c.adaptive_rx = self
            .overlay(Knob::AdaptiveRx)
            .map(|v| v != 0)
            .or(c.adaptive_rx);
        c.adaptive_tx = self
            .overlay(Knob::AdaptiveTx)
            .map(|v| v != 0)
            .or(c.adaptive_tx);
        c.rx_usecs = self.overlay(Knob::RxUsecs).or(c.rx_usecs);
        Ok(c)
    }

    fn pause(&self, iface: &str) -> Result<Pause, EthtoolError> {
        let mut p = parse_pause(&self.text(iface, "a", "pause frames (ethtool -a)")?);
        p.rx = self.overlay(Knob::PauseRx).map(|v| v != 0).or(p.rx);
        p.tx = self.overlay(Knob::PauseTx).map(|v| v != 0).or(p.tx);
        Ok(p)
    }

    fn channels(&self, iface: &str) -> Result<Channels, EthtoolError> {
        let mut c = parse_channels(&self.text(iface, "l", "channels (ethtool -l)")?);
        c.combined = self.overlay(Knob::CombinedChannels).or(c.combined);
        c.rx = self.overlay(Knob::RxChannels).or(c.rx);
        c.tx = self.overlay(Knob::TxChannels).or(c.tx);
        Ok(c)
    }

    fn set(&self, iface: &str, knob: Knob, value: u32) -> Result<(), EthtoolError> {
        // Refuse what the kernel would: more than the maximum, a group the driver lacks.
        let over = |max: Option<u32>| max.is_some_and(|m| value > m);
        let too_big = match knob {
            Knob::RxRing => over(self.rings(iface)?.rx_max),
            Knob::TxRing => over(self.rings(iface)?.tx_max),
            Knob::CombinedChannels => over(self.channels(iface)?.combined_max),
            Knob::RxChannels => over(self.channels(iface)?.rx_max),
            Knob::TxChannels => over(self.channels(iface)?.tx_max),
            _ => {
                knob.read(self, iface)?;
                false
            }
        };
        if too_big {
            return Err(EthtoolError::Failed(format!(
                "{}: Invalid argument",
                knob.command(iface, value)
            )));
        }
        self.set.borrow_mut().insert(knob, value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_outputs_of_three_drivers_parse() {
        let mlx5 = Captured::of("mlx5");
        let r = mlx5.rings("x").unwrap();
        assert_eq!(
            (r.rx, r.rx_max, r.tx, r.tx_max),
            (Some(1024), Some(8192), Some(1024), Some(8192))
        );
        let c = mlx5.channels("x").unwrap();
        assert_eq!(
            (c.combined, c.combined_max, c.rx),
            (Some(63), Some(63), None)
        );
        let f = mlx5.features("x").unwrap();
        assert!(
            f.active.contains("rx-gro") && !f.active.contains("rx-lro"),
            "{f:?}"
        );
        assert!(f.changeable.contains("rx-lro"));
        assert!(!f.changeable.contains("tx-tcp-ecn-segmentation"));
        let co = mlx5.coalesce("x").unwrap();
        assert_eq!(
            (co.adaptive_rx, co.adaptive_tx, co.rx_usecs),
            (Some(true), Some(true), Some(8))
        );
        let p = mlx5.pause("x").unwrap();
        assert_eq!(
            (p.autoneg, p.rx, p.tx),
            (Some(false), Some(true), Some(true))
        );

        let ice = Captured::of("ice");
        assert_eq!(ice.rings("x").unwrap().rx_max, Some(8160));
        let bnxt = Captured::of("bnxt");
        assert_eq!(bnxt.rings("x").unwrap().rx_max, Some(2047));
        assert_eq!(bnxt.channels("x").unwrap().combined_max, Some(74));
        assert!(bnxt.features("x").unwrap().active.contains("rx-gro-hw"));

        // Setting is remembered; more than the maximum is refused.
        bnxt.set("x", Knob::RxRing, 2047).unwrap();
        assert_eq!(bnxt.rings("x").unwrap().rx, Some(2047));
        assert!(bnxt.set("x", Knob::RxRing, 4096).is_err());
        assert!(matches!(
            Captured::of("none").rings("x"),
            Err(EthtoolError::Unsupported { .. })
        ));
    }
}
