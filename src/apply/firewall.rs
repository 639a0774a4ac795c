//! Persisting the `inet gputune` table across reboots without editing the distribution's
//! files: gputune's own rules file and its own systemd unit, enabled by its own link.
//!
//! Why a unit of its own: Debian's `nftables.service` loads `/etc/nftables.conf`, whose
//! stock first line is `flush ruleset`; RHEL's loads `/etc/sysconfig/nftables.conf`;
//! firewalld keeps its own table. None has a drop-in directory gputune could add a file
//! to, and editing theirs would break "never edit files it did not create". The unit
//! loads after `nftables.service` and `firewalld.service` (so a `flush ruleset` at boot
//! cannot remove the table), before `network-pre.target` (so the ports are open before
//! interfaces come up), and is `PartOf=nftables.service` so restarting that reloads ours.

use super::owned::HEADER;

/// The rules file the unit loads.
pub const RULES_FILE: &str = "/etc/gputune/nftables.conf";
/// gputune's unit.
pub const UNIT_FILE: &str = "/etc/systemd/system/gputune-firewall.service";
/// The link that enables it at boot (what `systemctl enable` would create).
pub const UNIT_LINK: &str = "/etc/systemd/system/sysinit.target.wants/gputune-firewall.service";

/// The rules file: the same atomic replace-table script apply runs live.
pub(crate) fn rules_file(table: &str) -> String {
    format!("{HEADER}{}", super::nft::replace_script(Some(table)))
}

/// The unit that loads the rules file at boot and removes the table when stopped.
pub(crate) fn unit_file() -> String {
    format!(
        "{HEADER}[Unit]
Description=gputune firewall rules (nftables table inet gputune)
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target shutdown.target
After=nftables.service firewalld.service
PartOf=nftables.service
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f {RULES_FILE}
ExecStop=/usr/sbin/nft delete table inet gputune

[Install]
WantedBy=sysinit.target
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_file_replaces_the_table_and_loads_its_ports() {
        let table = super::super::nft::render_table(&[(29500, 29550)]);
        let text = rules_file(&table);
        assert!(super::super::owned::is_ours(&text));
        assert!(text.contains("delete table inet gputune\ntable inet gputune {"));
        assert_eq!(
            super::super::nft::accepted_ports(&text).unwrap(),
            vec![(29500, 29550)]
        );
        assert!(unit_file().contains(&format!("ExecStart=/usr/sbin/nft -f {RULES_FILE}")));
    }
}
