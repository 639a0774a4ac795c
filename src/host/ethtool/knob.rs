//! One settable NIC value, named as the profile key that judges it (`ring.rx`,
//! `offload.gro`), with how `ethtool` and systemd's `.link` files spell it.

use super::{Ethtool, EthtoolError};

/// A NIC setting gputune judges and sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Knob {
    RxRing,
    TxRing,
    Gro,
    Lro,
    Tso,
    Gso,
    AdaptiveRx,
    AdaptiveTx,
    RxUsecs,
    PauseRx,
    PauseTx,
    CombinedChannels,
    RxChannels,
    TxChannels,
}

impl Knob {
    pub const ALL: &'static [Knob] = &[
        Knob::RxRing,
        Knob::TxRing,
        Knob::Gro,
        Knob::Lro,
        Knob::Tso,
        Knob::Gso,
        Knob::AdaptiveRx,
        Knob::AdaptiveTx,
        Knob::RxUsecs,
        Knob::PauseRx,
        Knob::PauseTx,
        Knob::CombinedChannels,
        Knob::RxChannels,
        Knob::TxChannels,
    ];

    /// The profile key (and journal name) of this knob.
    pub fn key(self) -> &'static str {
        match self {
            Knob::RxRing => "ring.rx",
            Knob::TxRing => "ring.tx",
            Knob::Gro => "offload.gro",
            Knob::Lro => "offload.lro",
            Knob::Tso => "offload.tso",
            Knob::Gso => "offload.gso",
            Knob::AdaptiveRx => "coalesce.adaptive_rx",
            Knob::AdaptiveTx => "coalesce.adaptive_tx",
            Knob::RxUsecs => "coalesce.rx_usecs",
            Knob::PauseRx => "pause.rx",
            Knob::PauseTx => "pause.tx",
            Knob::CombinedChannels => "channels.combined",
            Knob::RxChannels => "channels.rx",
            Knob::TxChannels => "channels.tx",
        }
    }

    pub fn from_key(key: &str) -> Option<Knob> {
        Knob::ALL.iter().copied().find(|k| k.key() == key)
    }

    /// Whether the value is on/off (0 or 1) rather than a count.
    pub fn is_bool(self) -> bool {
        !matches!(
            self,
            Knob::RxRing
                | Knob::TxRing
                | Knob::RxUsecs
                | Knob::CombinedChannels
                | Knob::RxChannels
                | Knob::TxChannels
        )
    }

    /// The kernel features an offload switches, main one first: `ethtool -K tso` switches
    /// every TCP segmentation feature, as ethtool's `tso` alias does.
    pub fn features(self) -> &'static [&'static str] {
        match self {
            Knob::Gro => &["rx-gro"],
            Knob::Lro => &["rx-lro"],
            Knob::Gso => &["tx-generic-segmentation"],
            Knob::Tso => &[
                "tx-tcp-segmentation",
                "tx-tcp-ecn-segmentation",
                "tx-tcp-mangleid-segmentation",
                "tx-tcp6-segmentation",
            ],
            _ => &[],
        }
    }

    /// The `ethtool` command that sets it to `value` on `iface`.
    pub fn command(self, iface: &str, value: u32) -> String {
        let onoff = if value == 0 { "off" } else { "on" };
        match self {
            Knob::RxRing => format!("ethtool -G {iface} rx {value}"),
            Knob::TxRing => format!("ethtool -G {iface} tx {value}"),
            Knob::Gro => format!("ethtool -K {iface} gro {onoff}"),
            Knob::Lro => format!("ethtool -K {iface} lro {onoff}"),
            Knob::Tso => format!("ethtool -K {iface} tso {onoff}"),
            Knob::Gso => format!("ethtool -K {iface} gso {onoff}"),
            Knob::AdaptiveRx => format!("ethtool -C {iface} adaptive-rx {onoff}"),
            Knob::AdaptiveTx => format!("ethtool -C {iface} adaptive-tx {onoff}"),
            Knob::RxUsecs => format!("ethtool -C {iface} rx-usecs {value}"),
            Knob::PauseRx => format!("ethtool -A {iface} rx {onoff}"),
            Knob::PauseTx => format!("ethtool -A {iface} tx {onoff}"),
            Knob::CombinedChannels => format!("ethtool -L {iface} combined {value}"),
            Knob::RxChannels => format!("ethtool -L {iface} rx {value}"),
            Knob::TxChannels => format!("ethtool -L {iface} tx {value}"),
        }
    }

    /// The `[Link]` setting of a systemd `.link` file that applies it at boot
    /// (systemd.link(5); udev applies it when the device appears), and the value there.
    pub fn link_setting(self, value: u32) -> (&'static str, String) {
        let yes = if value == 0 { "no" } else { "yes" };
        match self {
            Knob::RxRing => ("RxBufferSize", value.to_string()),
            Knob::TxRing => ("TxBufferSize", value.to_string()),
            Knob::Gro => ("GenericReceiveOffload", yes.into()),
            Knob::Lro => ("LargeReceiveOffload", yes.into()),
            Knob::Tso => ("TCPSegmentationOffload", yes.into()),
            Knob::Gso => ("GenericSegmentationOffload", yes.into()),
            Knob::AdaptiveRx => ("UseAdaptiveRxCoalesce", yes.into()),
            Knob::AdaptiveTx => ("UseAdaptiveTxCoalesce", yes.into()),
            Knob::RxUsecs => ("RxCoalesceSec", format!("{value}us")),
            Knob::PauseRx => ("RxFlowControl", yes.into()),
            Knob::PauseTx => ("TxFlowControl", yes.into()),
            Knob::CombinedChannels => ("CombinedChannels", value.to_string()),
            Knob::RxChannels => ("RxChannels", value.to_string()),
            Knob::TxChannels => ("TxChannels", value.to_string()),
        }
    }

    /// The knob's current value on `iface`; `None` when the driver does not report it.
    pub fn read(self, e: &dyn Ethtool, iface: &str) -> Result<Option<u32>, EthtoolError> {
        let b = |v: Option<bool>| v.map(u32::from);
        Ok(match self {
            Knob::RxRing => e.rings(iface)?.rx,
            Knob::TxRing => e.rings(iface)?.tx,
            Knob::Gro | Knob::Lro | Knob::Tso | Knob::Gso => {
                let f = e.features(iface)?;
                let main = self.features()[0];
                Some(u32::from(f.active.contains(main)))
            }
            Knob::AdaptiveRx => b(e.coalesce(iface)?.adaptive_rx),
            Knob::AdaptiveTx => b(e.coalesce(iface)?.adaptive_tx),
            Knob::RxUsecs => e.coalesce(iface)?.rx_usecs,
            Knob::PauseRx => b(e.pause(iface)?.rx),
            Knob::PauseTx => b(e.pause(iface)?.tx),
            Knob::CombinedChannels => e.channels(iface)?.combined,
            Knob::RxChannels => e.channels(iface)?.rx,
            Knob::TxChannels => e.channels(iface)?.tx,
        })
    }
}

impl std::fmt::Display for Knob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_every_knob_has_its_spellings() {
        for k in Knob::ALL {
            assert_eq!(Knob::from_key(k.key()), Some(*k));
            assert!(k.command("eth0", 1).starts_with("ethtool -"));
            assert!(!k.link_setting(1).0.is_empty());
            assert_eq!(
                k.is_bool(),
                !k.features().is_empty()
                    || k.key().contains("adaptive")
                    || k.key().starts_with("pause")
            );
        }
        assert_eq!(Knob::from_key("ring.jumbo"), None);
        assert_eq!(
            Knob::RxUsecs.link_setting(8),
            ("RxCoalesceSec", "8us".into())
        );
        assert_eq!(Knob::Gro.command("ens1", 0), "ethtool -K ens1 gro off");
    }
}
