//! A fuzzing net in the normal test run: every parser of host or network input gets
//! arbitrary bytes and arbitrary structured input (proptest, 256 cases each) and must
//! return — a value or an error — without panicking, in bounded time.

use std::time::{Duration, Instant};

use gputune::checks::firewall::{iptables, model::Tool, nft};
use gputune::checks::limits::{logind, pam, shm};
use gputune::checks::sysctl::{boot, kernel};
use gputune::host::cpulist::CpuList;
use gputune::host::{Root, ldcache, libversion, mounts};
use gputune::profile::Loader;
use proptest::prelude::*;

/// Each case must finish well within this (a generous bound against hangs, not a timing).
const BOUND: Duration = Duration::from_secs(5);

fn bounded<T>(f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
    out
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(any::<u8>(), 0..512)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        "[ -~\t\n]{0,300}",
    ]
}

/// Lines that look like the format, so parsers get past their first check.
fn sysctl_lines() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            "-?[a-z_./*]{0,24}",
            prop_oneof![Just(" = ".to_string()), Just("=".into()), Just(" ".into())],
            "[-+0-9xXa-fA-FMk \t.]{0,24}",
        )
            .prop_map(|(k, eq, v)| format!("{k}{eq}{v}")),
        0..20,
    )
    .prop_map(|l| l.join("\n"))
}

fn cpu_lists() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (any::<u32>(), any::<u32>(), 0u32..5).prop_map(|(a, b, s)| match s {
            0 => a.to_string(),
            1 => format!("{}-{}", a % 70000, b % 70000),
            2 => format!("{}-{}:{}", a % 70000, b % 70000, b % 9),
            3 => format!("{a}-{b}"),
            _ => format!("{}", a % 70000),
        }),
        0..50,
    )
    .prop_map(|p| p.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sysctl_d_lines_and_kernel_values(t in prop_oneof![text(), sysctl_lines()]) {
        bounded(|| {
            for a in boot::parse(&t, "/etc/sysctl.d/x.conf") {
                let _ = kernel::kernel_value(&a.key, &a.value);
            }
            for key in ["vm.swappiness", "net.ipv4.tcp_rmem", "net.ipv4.ip_local_port_range", "fs.file-max", "x.y"] {
                let _ = kernel::kernel_value(key, &t);
            }
        });
    }

    #[test]
    fn cpu_lists_parse_or_fail(t in prop_oneof![text(), cpu_lists()]) {
        bounded(|| {
            if let Ok(list) = CpuList::parse(&t) {
                prop_assert!(list.0.iter().all(|c| *c <= gputune::host::cpulist::MAX_CPU_ID));
                prop_assert_eq!(CpuList::parse(&list.to_string()).ok(), Some(list));
            }
            let _ = CpuList::parse_nodes(&t);
            Ok(())
        })?;
    }

    #[test]
    fn limits_conf_logind_fstab_and_mounts(t in text()) {
        bounded(|| {
            let _ = pam::parse("/etc/security/limits.conf", &t);
            let _ = logind::parse_remove_ipc("/etc/systemd/logind.conf", &t);
            let _ = shm::fstab_entry(&t);
            let _ = mounts::parse(&t);
        });
    }

    #[test]
    fn structured_limits_and_mounts(
        fields in proptest::collection::vec("[-*@a-z0-9_ ]{0,12}", 0..8)
    ) {
        let line = fields.join(" ");
        bounded(|| {
            let _ = pam::parse("/etc/security/limits.d/x.conf", &line);
            let _ = mounts::parse(&line);
            let _ = shm::fstab_entry(&line);
        });
    }

    #[test]
    fn nft_json_and_iptables_save(t in text()) {
        bounded(|| {
            let _ = nft::parse(&t);
            for tool in [Tool::IptablesNft, Tool::IptablesLegacy] {
                let _ = iptables::parse(&t, tool);
            }
        });
    }

    #[test]
    fn structured_nft_json(
        family in "[a-z0-9]{0,6}", name in "[a-z]{0,6}", hook in "[a-z]{0,8}",
        prio in any::<i64>(), port in any::<i64>(), verdict in "[a-z]{0,7}"
    ) {
        let json = format!(
            r#"{{"nftables":[{{"table":{{"family":"{family}","name":"{name}"}}}},{{"chain":{{"family":"{family}","table":"{name}","name":"c","type":"filter","hook":"{hook}","prio":{prio},"policy":"{verdict}"}}}},{{"rule":{{"family":"{family}","table":"{name}","chain":"c","expr":[{{"match":{{"op":"==","left":{{"payload":{{"protocol":"tcp","field":"dport"}}}},"right":{port}}}}},{{"{verdict}":null}}]}}}}]}}"#
        );
        bounded(|| { let _ = nft::parse(&json); });
    }

    #[test]
    fn structured_iptables_save(
        chain in "[A-Z]{0,8}", policy in "[A-Z]{0,6}", args in proptest::collection::vec("-{0,2}[a-z0-9:!]{0,8}", 0..12)
    ) {
        let text = format!("*filter\n:{chain} {policy} [0:0]\n-A {chain} {}\nCOMMIT\n", args.join(" "));
        bounded(|| {
            let _ = iptables::parse(&text, Tool::IptablesLegacy);
        });
    }

    #[test]
    fn ld_so_cache_and_library_version_strings(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        bounded(|| {
            let _ = ldcache::parse(&bytes);
            let mut with_magic = b"glibc-ld.so.cache1.1".to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = ldcache::parse(&with_magic);
            let _ = libversion::find_after(&bytes, b"NCCL version ");
        });
    }

    #[test]
    fn profiles(t in prop_oneof![
        text(),
        ("[a-z]{0,8}", "[a-z._]{0,20}", "[a-z_]{0,8}", "[-0-9a-zA-Z.\"]{0,10}")
            .prop_map(|(area, key, field, value)| format!("include = []\n[{area}]\n\"{key}\" = {{ {field} = {value} }}\n")),
    ]) {
        let dir = tempfile::tempdir().unwrap();
        let profiles = dir.path().join("etc/gputune/profiles");
        std::fs::create_dir_all(&profiles).unwrap();
        std::fs::write(profiles.join("p.toml"), &t).unwrap();
        let root = Root::new(dir.path());
        bounded(|| {
            let _ = Loader::new(&root, &gputune::checks::keys).load("p");
        });
    }

    #[test]
    fn rendezvous_frames(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        bounded(|| {
            let _ = gputune::bench::control::frame::read(&mut &bytes[..]);
            let mut framed = gputune::bench::control::frame::MAGIC.to_vec();
            framed.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            framed.extend_from_slice(&bytes);
            let _ = gputune::bench::control::frame::read(&mut &framed[..]);
        });
    }
}
