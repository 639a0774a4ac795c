//! Kernel network settings: socket buffer limits, TCP autotuning ranges and the TCP
//! behaviours that decide how fast NCCL's socket transport and PyTorch's rendezvous run.

use crate::finding::{Area, Finding};
use crate::profile::setting::{KeySpec, ValueKind::Number};

use super::Context;

pub(crate) const KEYS: &[KeySpec] = &[
    KeySpec {
        key: "net.core.rmem_max",
        kind: Number,
        why: "Caps the receive buffer a socket may ask for; NCCL's socket transport and Gloo cannot reach line rate when it is small.",
    },
    KeySpec {
        key: "net.core.wmem_max",
        kind: Number,
        why: "Caps the send buffer a socket may ask for; a small cap limits each NCCL socket's bandwidth.",
    },
    KeySpec {
        key: "net.core.rmem_default",
        kind: Number,
        why: "Starting receive buffer of sockets that do not autotune.",
    },
    KeySpec {
        key: "net.core.wmem_default",
        kind: Number,
        why: "Starting send buffer of sockets that do not autotune.",
    },
    KeySpec {
        key: "net.core.netdev_max_backlog",
        kind: Number,
        why: "Packets queued per CPU between the NIC and the stack; too few drop bursts at high link speeds and TCP backs off.",
    },
    KeySpec {
        key: "net.core.somaxconn",
        kind: Number,
        why: "Listen backlog; rank 0's TCPStore takes a connection from every rank at once, and overflowing it times out the rendezvous.",
    },
    KeySpec {
        key: "net.ipv4.tcp_rmem.min",
        kind: Number,
        why: "Smallest TCP receive buffer under memory pressure.",
    },
    KeySpec {
        key: "net.ipv4.tcp_rmem.default",
        kind: Number,
        why: "Initial TCP receive buffer; autotuning grows it from here.",
    },
    KeySpec {
        key: "net.ipv4.tcp_rmem.max",
        kind: Number,
        why: "Ceiling of TCP receive-buffer autotuning; below the bandwidth-delay product a single NCCL socket cannot fill the link.",
    },
    KeySpec {
        key: "net.ipv4.tcp_wmem.min",
        kind: Number,
        why: "Smallest TCP send buffer under memory pressure.",
    },
    KeySpec {
        key: "net.ipv4.tcp_wmem.default",
        kind: Number,
        why: "Initial TCP send buffer; autotuning grows it from here.",
    },
    KeySpec {
        key: "net.ipv4.tcp_wmem.max",
        kind: Number,
        why: "Ceiling of TCP send-buffer autotuning; below the bandwidth-delay product a single NCCL socket cannot fill the link.",
    },
    KeySpec {
        key: "net.ipv4.tcp_window_scaling",
        kind: Number,
        why: "Without window scaling a TCP window stops at 64 KiB whatever the buffers, capping every connection far below 10 Gb/s.",
    },
    KeySpec {
        key: "net.ipv4.tcp_timestamps",
        kind: Number,
        why: "Timestamps give accurate RTT estimates and protect against wrapped sequence numbers at high rates.",
    },
    KeySpec {
        key: "net.ipv4.tcp_sack",
        kind: Number,
        why: "Selective acknowledgements recover a lost packet without resending the whole window.",
    },
    KeySpec {
        key: "net.ipv4.tcp_fin_timeout",
        kind: Number,
        why: "How long orphaned sockets of a killed job linger; long values pile them up across restarts.",
    },
    KeySpec {
        key: "net.ipv4.tcp_slow_start_after_idle",
        kind: Number,
        why: "DDP sends gradient buckets in bursts with idle gaps; slow start after each gap throttles every burst.",
    },
    KeySpec {
        key: "net.ipv4.tcp_mtu_probing",
        kind: Number,
        why: "Recovers from ICMP black holes that otherwise stall connections when jumbo frames are used.",
    },
    KeySpec {
        key: "net.ipv4.ip_local_port_range.low",
        kind: Number,
        why: "Ephemeral ports inside the rendezvous range (29500-29550) let an outgoing connection steal MASTER_PORT.",
    },
    KeySpec {
        key: "net.ipv4.ip_local_port_range.high",
        kind: Number,
        why: "Top of the ephemeral port range; NCCL opens sockets from it and a firewall must let the range through.",
    },
];

pub(crate) fn audit(ctx: &Context) -> Vec<Finding> {
    super::sysctl::audit(ctx, Area::Network, |_| true)
}
