//! The live [`Ethtool`]: requests to the kernel's `ethtool` generic-netlink family over a
//! blocking `netlink-sys` socket, the family id resolved by name through the controller
//! (`CTRL_CMD_GETFAMILY`), as ethtool(8) does. Requests carry the interface by name in
//! `ETHTOOL_A_*_HEADER`; bitsets are asked for in their verbose form (feature names).

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_GENERIC};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::genl::{self, Attr, Attrs, Message};
use super::{Channels, Coalesce, Ethtool, EthtoolError, Features, Knob, Pause, Rings};

/// `ETHTOOL_GENL_NAME` and `ETHTOOL_GENL_VERSION`.
const FAMILY: &str = "ethtool";
const VERSION: u8 = 1;

// Commands (kernel-bound message ids of `ethtool_netlink.h`).
const FEATURES_GET: u8 = 11;
const FEATURES_SET: u8 = 12;
const RINGS_GET: u8 = 15;
const RINGS_SET: u8 = 16;
const CHANNELS_GET: u8 = 17;
const CHANNELS_SET: u8 = 18;
const COALESCE_GET: u8 = 19;
const COALESCE_SET: u8 = 20;
const PAUSE_GET: u8 = 21;
const PAUSE_SET: u8 = 22;

/// `ETHTOOL_A_*_HEADER` (attribute 1 of every request) and its `DEV_NAME`.
const A_HEADER: u16 = 1;
const A_HEADER_DEV_NAME: u16 = 2;

const RINGS_RX_MAX: u16 = 2;
const RINGS_TX_MAX: u16 = 5;
const RINGS_RX: u16 = 6;
const RINGS_TX: u16 = 9;

const CHANNELS_RX_MAX: u16 = 2;
const CHANNELS_TX_MAX: u16 = 3;
const CHANNELS_COMBINED_MAX: u16 = 5;
const CHANNELS_RX_COUNT: u16 = 6;
const CHANNELS_TX_COUNT: u16 = 7;
const CHANNELS_COMBINED_COUNT: u16 = 9;

const COALESCE_RX_USECS: u16 = 2;
const COALESCE_USE_ADAPTIVE_RX: u16 = 11;
const COALESCE_USE_ADAPTIVE_TX: u16 = 12;

const PAUSE_AUTONEG: u16 = 2;
const PAUSE_RX: u16 = 3;
const PAUSE_TX: u16 = 4;

const FEATURES_HW: u16 = 2;
const FEATURES_WANTED: u16 = 3;
const FEATURES_ACTIVE: u16 = 4;

// Bitsets: `ETHTOOL_A_BITSET_*`, its `BITS` nest of `BIT` nests.
const BITSET_NOMASK: u16 = 1;
const BITSET_BITS: u16 = 3;
const BITS_BIT: u16 = 1;
const BIT_NAME: u16 = 2;
const BIT_VALUE: u16 = 3;

/// The longest the kernel may take to answer before a read gives up.
const ANSWER_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
const ENODEV: i32 = libc::ENODEV;

/// The kernel, over generic netlink.
pub struct Netlink;

/// One conversation with the kernel: a socket and the ethtool family's id.
struct Session {
    socket: Socket,
    family: u16,
    seq: u32,
}

impl Session {
    fn open() -> Result<Session, EthtoolError> {
        let failed = |what: &str, e: std::io::Error| EthtoolError::Failed(format!("{what}: {e}"));
        let mut socket =
            Socket::new(NETLINK_GENERIC).map_err(|e| failed("generic netlink socket", e))?;
        socket
            .bind_auto()
            .map_err(|e| failed("generic netlink bind", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| failed("generic netlink connect", e))?;
        // Error answers carry the kernel's own text ("requested ring size exceeds maximum").
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        let tv = TimeVal::new(ANSWER_LIMIT.as_secs() as libc::time_t, 0);
        setsockopt(&socket, sockopt::ReceiveTimeout, &tv)
            .map_err(|e| failed("generic netlink timeout", e.into()))?;
        let mut s = Session {
            socket,
            family: genl::GENL_ID_CTRL,
            seq: 0,
        };
        let mut name = Attrs::new();
        name.string(genl::CTRL_ATTR_FAMILY_NAME, FAMILY);
        let reply = s
            .ask(genl::CTRL_CMD_GETFAMILY, &name)
            .map_err(|e| match e {
                Refused { errno, .. } if errno == libc::ENOENT => EthtoolError::Failed(
                    "the kernel has no ethtool netlink family (CONFIG_ETHTOOL_NETLINK, Linux 5.6+)"
                        .into(),
                ),
                other => other.into_error("resolving the ethtool netlink family", ""),
            })?;
        let attrs = genl::attrs(&reply)?;
        s.family = genl::find(&attrs, genl::CTRL_ATTR_FAMILY_ID)
            .and_then(Attr::u16)
            .ok_or_else(|| {
                EthtoolError::Failed("the controller named no ethtool family id".into())
            })?;
        Ok(s)
    }

    /// Sends one request and returns the payload of its reply (empty for a SET that only
    /// acknowledges).
    fn ask(&mut self, cmd: u8, attrs: &Attrs) -> Result<Vec<u8>, Refused> {
        self.seq += 1;
        let version = if self.family == genl::GENL_ID_CTRL {
            1
        } else {
            VERSION
        };
        let req = genl::request(
            self.family,
            cmd,
            version,
            genl::NLM_F_REQUEST | genl::NLM_F_ACK,
            self.seq,
            attrs,
        );
        self.socket
            .send(&req, 0)
            .map_err(|e| Refused::io("send", e))?;
        let mut payload = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self
                .socket
                .recv(&mut &mut buf[..], 0)
                .map_err(|e| Refused::io("recv", e))?;
            if n == 0 {
                return Err(Refused::text("the kernel closed the netlink socket"));
            }
            let messages = genl::messages(&buf[..n.min(buf.len())])
                .map_err(|e| Refused::text(e.to_string()))?;
            for m in messages {
                match m {
                    Message::Genl { payload: p, .. } => payload = p.to_vec(),
                    Message::Error { errno, text } => return Err(Refused { errno, text }),
                    Message::Ack | Message::Done => return Ok(payload),
                }
            }
        }
    }
}

/// A request the kernel refused (errno and its extended-ack text), or a socket error
/// (errno 0, text says what).
#[derive(Debug)]
struct Refused {
    errno: i32,
    text: Option<String>,
}

impl Refused {
    fn io(what: &str, e: std::io::Error) -> Refused {
        Refused {
            errno: e.raw_os_error().unwrap_or(0),
            text: Some(format!("netlink {what}: {e}")),
        }
    }

    fn text(t: impl Into<String>) -> Refused {
        Refused {
            errno: 0,
            text: Some(t.into()),
        }
    }

    /// The error for `what` on `iface` (empty when no interface is involved).
    fn into_error(self, what: &str, iface: &str) -> EthtoolError {
        match self.errno {
            EOPNOTSUPP => EthtoolError::Unsupported {
                iface: iface.into(),
                what: what.into(),
            },
            ENODEV => EthtoolError::NoDevice(iface.into()),
            errno => {
                let mut msg = what.to_string();
                if !iface.is_empty() {
                    msg.push_str(&format!(" on {iface}"));
                }
                if errno != 0 {
                    msg.push_str(&format!(": {}", std::io::Error::from_raw_os_error(errno)));
                }
                if let Some(t) = self.text {
                    msg.push_str(&format!(" ({})", crate::say::clean_line(&t)));
                }
                EthtoolError::Failed(msg)
            }
        }
    }
}

/// The request header naming `iface`, as the first attribute.
fn header(iface: &str) -> Attrs {
    let mut a = Attrs::new();
    a.begin(A_HEADER).string(A_HEADER_DEV_NAME, iface).end();
    a
}

fn check_name(iface: &str) -> Result<(), EthtoolError> {
    // IFNAMSIZ is 16 with the NUL; the kernel would refuse, this says why.
    if iface.is_empty() || iface.len() > 15 || iface.contains(['/', '\0']) {
        return Err(EthtoolError::NoDevice(iface.into()));
    }
    Ok(())
}

impl Netlink {
    fn get(&self, cmd: u8, iface: &str, what: &str) -> Result<Vec<u8>, EthtoolError> {
        check_name(iface)?;
        let mut s = Session::open()?;
        s.ask(cmd, &header(iface))
            .map_err(|e| e.into_error(what, iface))
    }

    fn put(&self, cmd: u8, iface: &str, what: &str, attrs: Attrs) -> Result<(), EthtoolError> {
        check_name(iface)?;
        let mut s = Session::open()?;
        s.ask(cmd, &attrs)
            .map(|_| ())
            .map_err(|e| e.into_error(what, iface))
    }
}

impl Ethtool for Netlink {
    fn rings(&self, iface: &str) -> Result<Rings, EthtoolError> {
        decode_rings(&self.get(RINGS_GET, iface, "ring parameters (ethtool -g)")?)
    }

    fn features(&self, iface: &str) -> Result<Features, EthtoolError> {
        decode_features(&self.get(FEATURES_GET, iface, "offload features (ethtool -k)")?)
    }

    fn coalesce(&self, iface: &str) -> Result<Coalesce, EthtoolError> {
        decode_coalesce(&self.get(COALESCE_GET, iface, "interrupt coalescing (ethtool -c)")?)
    }

    fn pause(&self, iface: &str) -> Result<Pause, EthtoolError> {
        decode_pause(&self.get(PAUSE_GET, iface, "pause frames (ethtool -a)")?)
    }

    fn channels(&self, iface: &str) -> Result<Channels, EthtoolError> {
        decode_channels(&self.get(CHANNELS_GET, iface, "channels (ethtool -l)")?)
    }

    fn set(&self, iface: &str, knob: Knob, value: u32) -> Result<(), EthtoolError> {
        let mut a = header(iface);
        let what = knob.command(iface, value);
        let cmd = match knob {
            Knob::RxRing => {
                a.u32(RINGS_RX, value);
                RINGS_SET
            }
            Knob::TxRing => {
                a.u32(RINGS_TX, value);
                RINGS_SET
            }
            Knob::AdaptiveRx => {
                a.u8(COALESCE_USE_ADAPTIVE_RX, u8::from(value != 0));
                COALESCE_SET
            }
            Knob::AdaptiveTx => {
                a.u8(COALESCE_USE_ADAPTIVE_TX, u8::from(value != 0));
                COALESCE_SET
            }
            Knob::RxUsecs => {
                a.u32(COALESCE_RX_USECS, value);
                COALESCE_SET
            }
            Knob::PauseRx => {
                a.u8(PAUSE_RX, u8::from(value != 0));
                PAUSE_SET
            }
            Knob::PauseTx => {
                a.u8(PAUSE_TX, u8::from(value != 0));
                PAUSE_SET
            }
            Knob::CombinedChannels => {
                a.u32(CHANNELS_COMBINED_COUNT, value);
                CHANNELS_SET
            }
            Knob::RxChannels => {
                a.u32(CHANNELS_RX_COUNT, value);
                CHANNELS_SET
            }
            Knob::TxChannels => {
                a.u32(CHANNELS_TX_COUNT, value);
                CHANNELS_SET
            }
            Knob::Gro | Knob::Lro | Knob::Tso | Knob::Gso => {
                let current = self.features(iface)?;
                let names = changeable_members(knob, &current).ok_or_else(|| {
                    EthtoolError::Failed(format!(
                        "{what}: {} is fixed by the driver of {iface} (`ethtool -k {iface}` shows it [fixed])",
                        knob.features()[0]
                    ))
                })?;
                wanted(&mut a, &names, value != 0);
                FEATURES_SET
            }
        };
        self.put(cmd, iface, &what, a)
    }
}

/// The features of `knob` the driver lets users change; `None` when its main one is fixed.
pub fn changeable_members(knob: Knob, f: &Features) -> Option<Vec<&'static str>> {
    let members = knob.features();
    if !members.first().is_some_and(|m| f.changeable.contains(*m)) {
        return None;
    }
    Some(
        members
            .iter()
            .copied()
            .filter(|m| f.changeable.contains(*m))
            .collect(),
    )
}

/// `ETHTOOL_A_FEATURES_WANTED` as a verbose bitset: each named bit is in the mask, and on
/// when it carries `VALUE`.
fn wanted(a: &mut Attrs, names: &[&str], on: bool) {
    a.begin(FEATURES_WANTED).begin(BITSET_BITS);
    for name in names {
        a.begin(BITS_BIT).string(BIT_NAME, name);
        if on {
            a.flag(BIT_VALUE);
        }
        a.end();
    }
    a.end().end();
}

fn parsed(payload: &[u8]) -> Result<Vec<Attr<'_>>, EthtoolError> {
    Ok(genl::attrs(payload)?)
}

fn u32_of(attrs: &[Attr], kind: u16) -> Option<u32> {
    genl::find(attrs, kind).and_then(Attr::u32)
}

fn bool_of(attrs: &[Attr], kind: u16) -> Option<bool> {
    genl::find(attrs, kind).and_then(Attr::u8).map(|v| v != 0)
}

/// A `RINGS_GET` reply.
pub fn decode_rings(payload: &[u8]) -> Result<Rings, EthtoolError> {
    let a = parsed(payload)?;
    Ok(Rings {
        rx: u32_of(&a, RINGS_RX),
        rx_max: u32_of(&a, RINGS_RX_MAX),
        tx: u32_of(&a, RINGS_TX),
        tx_max: u32_of(&a, RINGS_TX_MAX),
    })
}

/// A `CHANNELS_GET` reply.
pub fn decode_channels(payload: &[u8]) -> Result<Channels, EthtoolError> {
    let a = parsed(payload)?;
    Ok(Channels {
        rx: u32_of(&a, CHANNELS_RX_COUNT),
        rx_max: u32_of(&a, CHANNELS_RX_MAX),
        tx: u32_of(&a, CHANNELS_TX_COUNT),
        tx_max: u32_of(&a, CHANNELS_TX_MAX),
        combined: u32_of(&a, CHANNELS_COMBINED_COUNT),
        combined_max: u32_of(&a, CHANNELS_COMBINED_MAX),
    })
}

/// A `COALESCE_GET` reply.
pub fn decode_coalesce(payload: &[u8]) -> Result<Coalesce, EthtoolError> {
    let a = parsed(payload)?;
    Ok(Coalesce {
        adaptive_rx: bool_of(&a, COALESCE_USE_ADAPTIVE_RX),
        adaptive_tx: bool_of(&a, COALESCE_USE_ADAPTIVE_TX),
        rx_usecs: u32_of(&a, COALESCE_RX_USECS),
    })
}

/// A `PAUSE_GET` reply.
pub fn decode_pause(payload: &[u8]) -> Result<Pause, EthtoolError> {
    let a = parsed(payload)?;
    Ok(Pause {
        autoneg: bool_of(&a, PAUSE_AUTONEG),
        rx: bool_of(&a, PAUSE_RX),
        tx: bool_of(&a, PAUSE_TX),
    })
}

/// A `FEATURES_GET` reply: `HW` is what users may change, `ACTIVE` what is on.
pub fn decode_features(payload: &[u8]) -> Result<Features, EthtoolError> {
    let a = parsed(payload)?;
    let set = |kind: u16| -> Result<_, EthtoolError> {
        match genl::find(&a, kind) {
            Some(bitset) => Ok(bits_set(bitset)?),
            None => Err(EthtoolError::Failed(format!(
                "the features reply has no bitset {kind}"
            ))),
        }
    };
    Ok(Features {
        changeable: set(FEATURES_HW)?,
        active: set(FEATURES_ACTIVE)?,
    })
}

/// The names of the bits that are set in a verbose bitset: every listed bit of a list
/// (`NOMASK`), else those carrying `VALUE`.
fn bits_set(bitset: &Attr) -> Result<std::collections::BTreeSet<String>, genl::Malformed> {
    let attrs = bitset.nested()?;
    let nomask = genl::find(&attrs, BITSET_NOMASK).is_some();
    let mut out = std::collections::BTreeSet::new();
    let Some(bits) = genl::find(&attrs, BITSET_BITS) else {
        return Ok(out);
    };
    for bit in bits.nested()?.iter().filter(|b| b.kind == BITS_BIT) {
        let fields = bit.nested()?;
        let on = nomask || genl::find(&fields, BIT_VALUE).is_some();
        if let (true, Some(name)) = (on, genl::find(&fields, BIT_NAME)) {
            out.insert(name.string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_answers_features_and_refuses_rings_as_unsupported() {
        // The real kernel: lo has features but no ring parameters (its driver has no
        // get_ringparam), which must come back as "unsupported", not a failure.
        let f = Netlink.features("lo").unwrap();
        assert!(
            f.active.contains("rx-gro") || f.changeable.contains("rx-gro"),
            "{f:?}"
        );
        assert!(f.active.iter().any(|n| n.starts_with("tx-")), "{f:?}");
        match Netlink.rings("lo") {
            Err(EthtoolError::Unsupported { iface, .. }) => assert_eq!(iface, "lo"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Netlink.channels("gputune-none0"),
            Err(EthtoolError::NoDevice("gputune-none0".into()))
        );
        assert!(matches!(
            Netlink.pause("lo"),
            Err(EthtoolError::Unsupported { .. })
        ));
    }

    #[test]
    fn verbose_bitsets_list_or_mask() {
        let mut a = Attrs::new();
        a.begin(FEATURES_HW).flag(BITSET_NOMASK).begin(BITSET_BITS);
        a.begin(BITS_BIT).string(BIT_NAME, "rx-gro").end();
        a.end().end();
        a.begin(FEATURES_ACTIVE).begin(BITSET_BITS);
        a.begin(BITS_BIT)
            .string(BIT_NAME, "rx-gro")
            .flag(BIT_VALUE)
            .end();
        a.begin(BITS_BIT).string(BIT_NAME, "rx-lro").end();
        a.end().end();
        let f = decode_features(a.bytes()).unwrap();
        assert_eq!(f.changeable.iter().collect::<Vec<_>>(), ["rx-gro"]);
        assert_eq!(f.active.iter().collect::<Vec<_>>(), ["rx-gro"]);
        assert!(decode_features(&[]).is_err());
        assert_eq!(
            changeable_members(Knob::Tso, &f),
            None,
            "tso's main feature is not changeable here"
        );
        assert_eq!(changeable_members(Knob::Gro, &f), Some(vec!["rx-gro"]));
    }
}
