//! A NIC's ring sizes, offloads, interrupt coalescing, pause frames and channels, read and
//! set through the kernel's ethtool generic-netlink family exactly as `ethtool -g/-k/-c/-a/-l`
//! and `-G/-K/-C/-A/-L` do (never by running the program and parsing its text). The
//! [`Ethtool`] trait has the kernel behind it on a live node ([`netlink::Netlink`]), nothing
//! under `--root` ([`NoNic`]), and captured `ethtool` outputs of real NICs in tests.

#[cfg(test)]
pub mod captured;
pub mod genl;
pub mod knob;
pub mod netlink;

use std::collections::BTreeSet;

pub use knob::Knob;

/// Why a NIC setting could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EthtoolError {
    /// The driver does not implement this group (`EOPNOTSUPP`): not a fault of the node.
    #[error("the driver of {iface} does not support {what}")]
    Unsupported { iface: String, what: String },
    /// No such interface (`ENODEV`).
    #[error("no interface {0}")]
    NoDevice(String),
    /// Not the live node: nothing to ask.
    #[error("{0}")]
    NotLive(String),
    /// The kernel refused or the answer could not be read (or was malformed netlink,
    /// [`genl::Malformed`]); the text says which.
    #[error("{0}")]
    Failed(String),
}

/// Malformed netlink is a read that failed, as the kernel's refusals are.
impl From<genl::Malformed> for EthtoolError {
    fn from(e: genl::Malformed) -> EthtoolError {
        EthtoolError::Failed(e.to_string())
    }
}

/// `ethtool -g`: descriptor ring sizes and their maxima (`None`: the driver has no such ring).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rings {
    pub rx: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx: Option<u32>,
    pub tx_max: Option<u32>,
}

/// `ethtool -k`: the kernel feature names (`rx-gro`, `tx-tcp-segmentation`) that are on,
/// and those the driver lets users change (the rest are `[fixed]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    pub active: BTreeSet<String>,
    pub changeable: BTreeSet<String>,
}

/// `ethtool -c`: interrupt coalescing (`None`: the driver does not report it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coalesce {
    pub adaptive_rx: Option<bool>,
    pub adaptive_tx: Option<bool>,
    pub rx_usecs: Option<u32>,
}

/// `ethtool -a`: 802.3x pause frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pause {
    pub autoneg: Option<bool>,
    pub rx: Option<bool>,
    pub tx: Option<bool>,
}

/// `ethtool -l`: queue pairs (`combined`) or separate rx/tx queues, with their maxima.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Channels {
    pub rx: Option<u32>,
    pub rx_max: Option<u32>,
    pub tx: Option<u32>,
    pub tx_max: Option<u32>,
    pub combined: Option<u32>,
    pub combined_max: Option<u32>,
}

impl Channels {
    /// Whether the driver counts queue pairs (`combined`) rather than separate rx/tx queues
    /// (veth, some virtual functions).
    pub fn has_combined(&self) -> bool {
        self.combined_max.unwrap_or(0) > 0
    }
}

/// The kernel's ethtool settings of network interfaces: read, and written by `apply`.
pub trait Ethtool {
    fn rings(&self, iface: &str) -> Result<Rings, EthtoolError>;
    fn features(&self, iface: &str) -> Result<Features, EthtoolError>;
    fn coalesce(&self, iface: &str) -> Result<Coalesce, EthtoolError>;
    fn pause(&self, iface: &str) -> Result<Pause, EthtoolError>;
    fn channels(&self, iface: &str) -> Result<Channels, EthtoolError>;
    /// Sets one knob (`ethtool -G/-K/-C/-A/-L`); booleans are 0 or 1.
    fn set(&self, iface: &str, knob: Knob, value: u32) -> Result<(), EthtoolError>;
}

/// Not the live node (`--root`, an image): every answer says why.
pub struct NoNic(pub String);

impl Ethtool for NoNic {
    fn rings(&self, _: &str) -> Result<Rings, EthtoolError> {
        Err(EthtoolError::NotLive(self.0.clone()))
    }
    fn features(&self, _: &str) -> Result<Features, EthtoolError> {
        Err(EthtoolError::NotLive(self.0.clone()))
    }
    fn coalesce(&self, _: &str) -> Result<Coalesce, EthtoolError> {
        Err(EthtoolError::NotLive(self.0.clone()))
    }
    fn pause(&self, _: &str) -> Result<Pause, EthtoolError> {
        Err(EthtoolError::NotLive(self.0.clone()))
    }
    fn channels(&self, _: &str) -> Result<Channels, EthtoolError> {
        Err(EthtoolError::NotLive(self.0.clone()))
    }
    fn set(&self, _: &str, _: Knob, _: u32) -> Result<(), EthtoolError> {
        Err(EthtoolError::NotLive(self.0.clone()))
    }
}
