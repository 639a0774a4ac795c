//! Integration tests of the firewall checks and apply's nftables table against the kernel: real
//! nft and iptables rulesets in network namespaces, and the differential suite; sysctls that
//! are read-only in a network namespace or under a read-only `/proc/sys`; NIC settings over
//! ethtool netlink on a veth pair.

mod common;

mod apply_readonly;
mod firewall;
mod firewall_diff;
mod firewall_nft;
mod nic_ethtool;
mod preflight_cli;
mod preflight_html;
mod preflight_netns;
