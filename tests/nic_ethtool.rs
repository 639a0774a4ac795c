//! The NIC as ethtool sees it, against the real kernel: a veth pair in a network namespace of
//! its own, read and set over the kernel's ethtool netlink family (the genetlink codec on
//! real replies), and the journey of audit → apply → audit → rollback on it. veth has
//! features (`-K`) and rx/tx channels (`-L`) but no rings, coalescing or pause, which come
//! back as the kernel's "not supported" and are skipped.
//!
//! The nic area judges physical NICs only, so each gputune run dresses the veth end as a PCI
//! function in a mount namespace of its own (`ip netns exec`): a tmpfs over
//! `/sys/class/net` holding the veth's own attributes and a `device` link to a fake PCI
//! directory whose `local_cpulist` is CPU 0. `/run` and `/var/lib` are tmpfs (lock and
//! journal), and `/etc` is an overlay whose writes land in that tmpfs, so the `.link` file
//! and `/etc/nccl.conf` apply writes never reach the host.

use std::process::{Command, Output};

use gputune::host::ethtool::netlink::Netlink;
use gputune::host::ethtool::{Ethtool, EthtoolError, Knob};

use crate::common::{Namespaces, in_netns, ip};
use crate::common::{bin, text};

/// Private state, `/etc` as an overlay, and `gt0` dressed as a PCI NIC local to CPU 0.
const PRELUDE: &str = r#"set -e
mount -t tmpfs none /run
mount -t tmpfs none /var/lib
mkdir -p /run/etcu /run/etcw
mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/etcu,workdir=/run/etcw /etc
d=/run/gtpci/pci0000:00/0000:00:1f.0
mkdir -p $d /run/gtnet
echo 0 > $d/local_cpulist
echo 0 > $d/numa_node
for f in ifindex address operstate mtu type; do cat /sys/class/net/gt0/$f > /run/gtnet/$f; done
echo 100000 > /run/gtnet/speed
mount -t tmpfs none /sys/class/net
mkdir /sys/class/net/gt0
cp /run/gtnet/* /sys/class/net/gt0/
ln -s $d /sys/class/net/gt0/device
set +e
"#;

/// A namespace `gputune-eth-PID-TAG` with the veth pair gt0/gt1 (4 rx and 4 tx queues), up.
fn veth_namespace(tag: &str) -> (String, Namespaces) {
    let ns = format!("gputune-eth-{}-{tag}", std::process::id());
    let guard = Namespaces::add(vec![ns.clone()]);
    ip(&format!(
        "-n {ns} link add gt0 numtxqueues 4 numrxqueues 4 type veth peer name gt1 numtxqueues 4 numrxqueues 4"
    ));
    ip(&format!("-n {ns} link set gt0 up"));
    ip(&format!("-n {ns} link set gt1 up"));
    (ns, guard)
}

/// `SCRIPT` after the prelude, inside namespace `ns`, gputune as `$G`, the profile as `$P`.
fn in_ns(ns: &str, script: &str, profile: &std::path::Path, home: &std::path::Path) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c"])
        .arg(format!("{PRELUDE}{script}"))
        .env("G", bin())
        .env("P", profile)
        .env("HOME", home)
        .env_remove("GPUTUNE_ROOT")
        .env_remove("GPUTUNE_STATE_DIR")
        .env_remove("NCCL_SOCKET_IFNAME")
        .output()
        .unwrap()
}

fn finding<'a>(doc: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}: {doc}"))
}

fn json(part: &str) -> serde_json::Value {
    serde_json::from_str(part.trim()).unwrap_or_else(|e| panic!("{e}: {part}"))
}

#[test]
fn the_genetlink_codec_reads_and_sets_a_real_veth() {
    let (ns, _guard) = veth_namespace("codec");
    let result = in_netns(&ns, || {
        let e = Netlink;
        let before = e.channels("gt0").unwrap();
        assert_eq!(
            (before.rx_max, before.tx_max),
            (Some(4), Some(4)),
            "{before:?}"
        );
        assert!(
            !before.has_combined(),
            "veth has separate rx/tx queues: {before:?}"
        );
        e.set("gt0", Knob::RxChannels, 2).unwrap();
        e.set("gt0", Knob::TxChannels, 3).unwrap();
        let after = e.channels("gt0").unwrap();
        assert_eq!((after.rx, after.tx), (Some(2), Some(3)));
        // More than the maximum: the kernel's refusal, with its own words.
        let over = e.set("gt0", Knob::RxChannels, 9).unwrap_err();
        assert!(matches!(over, EthtoolError::Failed(_)), "{over:?}");
        assert!(over.to_string().contains("ethtool -L gt0 rx 9"), "{over}");

        let gro = e.features("gt0").unwrap();
        assert!(gro.changeable.contains("rx-gro"), "{gro:?}");
        let was = gro.active.contains("rx-gro");
        e.set("gt0", Knob::Gro, u32::from(!was)).unwrap();
        assert_eq!(
            Knob::Gro.read(&e, "gt0").unwrap(),
            Some(u32::from(!was)),
            "GRO flipped"
        );
        e.set("gt0", Knob::Gro, u32::from(was)).unwrap();
        assert_eq!(e.features("gt0").unwrap().active.contains("rx-gro"), was);

        // What veth does not implement is "not supported", not a failure.
        for err in [
            e.rings("gt0").map(|_| ()).unwrap_err(),
            e.coalesce("gt0").map(|_| ()).unwrap_err(),
            e.pause("gt0").map(|_| ()).unwrap_err(),
            e.set("gt0", Knob::RxRing, 512).unwrap_err(),
        ] {
            assert!(matches!(err, EthtoolError::Unsupported { .. }), "{err:?}");
        }
        assert_eq!(
            e.features("gt9").unwrap_err(),
            EthtoolError::NoDevice("gt9".into())
        );
    });
    result.join().unwrap();
}

#[test]
fn audit_apply_audit_rollback_on_a_veth() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _guard) = veth_namespace("journey");
    let host_link = std::path::Path::new("/etc/systemd/network/70-gputune-gt0.link");
    let host_nccl = std::path::Path::new("/etc/nccl.conf").exists();

    // Which way GRO starts decides what the profile asks for: the opposite.
    let probe = dir.path().join("probe.toml");
    std::fs::write(&probe, "[nic]\n\"offload.gro\" = { equals = 1 }\n").unwrap();
    let out = in_ns(
        &ns,
        "exec \"$G\" audit --profile \"$P\" --only nic --format json",
        &probe,
        dir.path(),
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)));
    let gro_on = finding(&doc, "offload.gro.gt0")["actual"] == "on";
    let (want, word) = if gro_on { (0, "off") } else { (1, "on") };

    let profile = dir.path().join("veth.toml");
    std::fs::write(
        &profile,
        format!(
            "[nic]\n\"offload.gro\" = {{ equals = {want} }}\n\"channels.combined\" = {{ equals = \"local_cpus\" }}\n\"ring.rx\" = {{ equals = \"max\" }}\n\"pause.rx\" = {{ equals = 0 }}\n"
        ),
    )
    .unwrap();
    let script = r#"
"$G" audit --profile "$P" --only nic --format json; echo "--- rc $?"
"$G" apply --profile "$P" --only nic --yes; echo "--- rc $?"
cat /etc/systemd/network/70-gputune-gt0.link; echo "--- link"
"$G" audit --profile "$P" --only nic --format json; echo "--- rc $?"
"$G" status; echo "--- rc $?"
"$G" rollback; echo "--- rc $?"
test -e /etc/systemd/network/70-gputune-gt0.link && echo "link left"; echo "--- gone"
"$G" audit --profile "$P" --only nic --format json; echo "--- rc $?"
"#;
    let out = in_ns(&ns, script, &profile, dir.path());
    let said = text(&out.stdout);
    let parts: Vec<&str> = said.split("--- ").collect();
    assert_eq!(parts.len(), 9, "{said}{}", text(&out.stderr));
    let rc = |i: usize| parts[i].lines().next().unwrap_or_default().to_string();

    // Before: GRO and the queue count fail with the ethtool fix; rings and pause skip.
    assert_eq!(rc(1), "rc 1", "{said}");
    let before = json(parts[0]);
    let gro = finding(&before, "offload.gro.gt0");
    assert_eq!(gro["status"], "fail", "{gro}");
    assert_eq!(gro["fix"], format!("ethtool -K gt0 gro {word}"));
    assert_eq!(gro["expected"], word);
    let ch = finding(&before, "channels.combined.gt0");
    assert_eq!(ch["status"], "fail", "{ch}");
    assert_eq!(ch["fix"], "ethtool -L gt0 rx 1 tx 1");
    assert_eq!(ch["actual"], "4 rx/tx (max 4)");
    for id in ["ring.rx.gt0", "pause.rx.gt0"] {
        let f = finding(&before, id);
        assert_eq!(f["status"], "skip", "{f}");
        assert!(
            f["message"].as_str().unwrap().contains("does not support"),
            "{f}"
        );
    }

    // apply sets them, verified, and writes the .link file for boot.
    let applied = parts[1];
    assert_eq!(rc(2), "rc 0", "{said}");
    assert!(applied.contains("ethtool -K gt0 gro"), "{applied}");
    assert!(applied.contains("applied and verified"), "{applied}");
    let link = parts[2];
    assert!(link.contains("# Written by gputune"), "{link}");
    assert!(link.contains("[Match]\nMACAddress="), "{link}");
    assert!(link.contains("[Link]\nName=gt0\n"), "{link}");
    let yes = if want == 1 { "yes" } else { "no" };
    for line in [
        format!("GenericReceiveOffload={yes}"),
        "RxChannels=1".into(),
        "TxChannels=1".into(),
    ] {
        assert!(link.lines().any(|l| l == line), "{line} in {link}");
    }

    // After: both pass.
    assert_eq!(rc(4), "rc 0", "{said}");
    let after = json(parts[3].split_once('\n').unwrap().1);
    assert_eq!(finding(&after, "offload.gro.gt0")["status"], "pass");
    assert_eq!(
        finding(&after, "channels.combined.gt0")["actual"],
        "1 rx/tx (max 4)"
    );

    // status reads the NIC settings back as live targets.
    assert_eq!(rc(5), "rc 0", "{said}");
    assert!(parts[4].contains("ethtool gt0 offload.gro"), "{said}");

    // rollback restores the live values and removes the file.
    assert_eq!(rc(6), "rc 0", "{said}");
    assert!(
        parts[5].contains("restored ethtool gt0 offload.gro"),
        "{said}"
    );
    assert!(!parts[6].contains("link left"), "{said}");
    let restored = json(parts[7].split_once('\n').unwrap().1);
    for id in ["offload.gro.gt0", "channels.combined.gt0"] {
        assert_eq!(
            finding(&restored, id)["actual"],
            finding(&before, id)["actual"],
            "{id}"
        );
    }

    // Nothing reached the host's /etc.
    assert!(!host_link.exists());
    assert_eq!(std::path::Path::new("/etc/nccl.conf").exists(), host_nccl);
}
