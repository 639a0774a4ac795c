//! NVIDIA Xid events in the kernel log (`NVRM: Xid (PCI:0000:3b:00): 79, ...`): the driver's
//! report of a GPU error. The Xids NVIDIA's Xid catalog says need action on the node (a GPU
//! reset, a reboot, service) fail with the GPU's PCI address and the catalog's meaning; the
//! others (mostly an application's fault) warn. Live facts: read on the running node or
//! from a captured log under `--root`, never in an image.

use std::collections::BTreeMap;

use crate::finding::{Area, Check, Finding, Status};
use crate::host::kmsg::{self, KernelLog};
use crate::inventory::Inventory;

use super::super::Context;

/// One Xid line of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XidEvent {
    pub xid: u32,
    /// The GPU as the driver names it: `0000:3b:00` (domain, bus, device; function 0).
    pub pci: String,
    /// The driver's text after the number (pid, process, details), control characters removed.
    pub detail: String,
    /// Microseconds since boot, when the line says.
    pub usec: Option<u64>,
}

/// Parses one log line in any of the forms the driver's lines reach us in (`/dev/kmsg`
/// records, `dmesg`, `journalctl`); `None` for a line that is no Xid. Old drivers write
/// the address without `PCI:`.
pub(crate) fn parse_line(line: &str) -> Option<XidEvent> {
    const MARK: &str = "NVRM: Xid (";
    let at = line.find(MARK)?;
    let rest = &line[at + MARK.len()..];
    let (inside, after) = rest.split_once("):")?;
    let pci = inside
        .trim()
        .trim_start_matches("PCI:")
        .to_ascii_lowercase();
    let parts: Vec<&str> = pci.split(':').collect();
    let hex = |p: &&str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
    let pci = match parts.as_slice() {
        [d, b, s] if hex(d, 4) && hex(b, 2) && hex(s, 2) => pci.clone(),
        // `0000:3b:00.0`: the full address; the function is dropped to match the short form.
        [d, b, s] if hex(d, 4) && hex(b, 2) && s.len() == 4 && hex(&&s[..2], 2) => {
            format!("{d}:{b}:{}", &s[..2])
        }
        _ => return None,
    };
    let after = after.trim_start();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    let xid = digits.parse().ok()?;
    let detail = after[digits.len()..]
        .trim_start_matches(',')
        .trim()
        .to_string();
    Some(XidEvent {
        xid,
        pci,
        detail: crate::say::clean_line(&detail),
        usec: kmsg::timestamp_usec(line),
    })
}

/// The Xids of a log's lines, in order, with the driver's "fallen off the bus" messages that
/// carry no Xid number counted as Xid 79 (newer drivers print them alone, on one record or
/// over three lines: `NVRM: The NVIDIA GPU 0000:b3:00.0` ... `NVRM: fallen off the bus and
/// is not responding to commands.`), unless an Xid 79 of that GPU is logged too.
pub(crate) fn events(lines: &[String]) -> Vec<XidEvent> {
    let mut out: Vec<XidEvent> = Vec::new();
    let mut fallen: Vec<XidEvent> = Vec::new();
    // The address a multi-line message named, and how many lines ago.
    let mut named: Option<(String, Option<u64>, usize)> = None;
    for line in lines {
        if let Some(e) = parse_line(line) {
            out.push(e);
            continue;
        }
        let address = gpu_address(line);
        if line.contains("fallen off the bus") {
            let found = address
                .clone()
                .map(|a| (a, kmsg::timestamp_usec(line)))
                .or_else(|| named.take().map(|(a, u, _)| (a, u)));
            if let Some((pci, usec)) = found {
                fallen.push(XidEvent {
                    xid: 79,
                    pci,
                    detail: "the driver says the GPU has fallen off the bus (a message without an Xid number)".into(),
                    usec,
                });
            }
            named = None;
            continue;
        }
        named = match (address, named) {
            (Some(a), _) => Some((a, kmsg::timestamp_usec(line), 0)),
            (None, Some((a, u, n))) if n < 2 => Some((a, u, n + 1)),
            _ => None,
        };
    }
    for f in fallen {
        if !out.iter().any(|e| e.xid == 79 && e.pci == f.pci) {
            out.push(f);
        }
    }
    out
}

/// The GPU a driver message names after `GPU` (`GPU at 0000:01:00.0`, `GPU 0000:b3:00.0`,
/// `GPU at PCI:0000:01:00:`), in the Xid lines' short form `0000:01:00`.
fn gpu_address(line: &str) -> Option<String> {
    let at = line.find("NVRM:")?;
    let mut words = line[at..].split_whitespace().skip_while(|w| *w != "GPU");
    words.next()?;
    let word = match words.next()? {
        "at" => words.next()?,
        w => w,
    };
    let word = word
        .trim_start_matches("PCI:")
        .trim_end_matches([':', '.', ','])
        .to_ascii_lowercase();
    let short = word.get(..10)?;
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit());
    let parts: Vec<&str> = short.split(':').collect();
    match parts.as_slice() {
        [d, b, s] if d.len() == 4 && b.len() == 2 && s.len() == 2 && hex(d) && hex(b) && hex(s) => {
            Some(short.to_string())
        }
        _ => None,
    }
}

/// What NVIDIA's Xid catalog says of an Xid, and whether it needs action on the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XidInfo {
    pub xid: u32,
    pub meaning: &'static str,
    /// `Some(fix)`: the catalog's resolution is a GPU reset, a reboot or service, so the
    /// node should not take jobs until it is done.
    pub action: Option<&'static str>,
}

const RESET: &str = "drain the node; reset the GPU (`nvidia-smi -r -i BUS_ID`, or reboot) before it takes jobs again; if the Xid returns, run NVIDIA's field diagnostics and contact NVIDIA support";

/// NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors), for the Xids a training node
/// meets; one not listed is shown by number with a pointer to the catalog.
pub(crate) const CATALOG: &[XidInfo] = &[
    XidInfo {
        xid: 13,
        meaning: "graphics engine exception (usually the application: an out-of-range access or illegal instruction)",
        action: None,
    },
    XidInfo {
        xid: 31,
        meaning: "GPU memory page fault (MMU fault; usually the application's invalid address)",
        action: None,
    },
    XidInfo {
        xid: 43,
        meaning: "GPU stopped processing (the application hit an error and its channel was stopped)",
        action: None,
    },
    XidInfo {
        xid: 45,
        meaning: "preemptive cleanup, due to previous errors (a process was killed or an earlier Xid tore its channels down)",
        action: None,
    },
    XidInfo {
        xid: 48,
        meaning: "double bit ECC error (DBE): an uncorrectable error in GPU memory",
        action: Some(RESET),
    },
    XidInfo {
        xid: 61,
        meaning: "internal micro-controller breakpoint/warning",
        action: None,
    },
    XidInfo {
        xid: 62,
        meaning: "internal micro-controller halt",
        action: None,
    },
    XidInfo {
        xid: 63,
        meaning: "ECC page retirement or row remapping recording event: a memory row was marked for remapping, which takes effect at the next GPU reset",
        action: Some(
            "drain the node and reset the GPU (`nvidia-smi -r -i BUS_ID`, or reboot) so the remapping takes effect",
        ),
    },
    XidInfo {
        xid: 64,
        meaning: "ECC page retirement or row remapper recording failure: a failing memory row could not be remapped",
        action: Some(RESET),
    },
    XidInfo {
        xid: 69,
        meaning: "graphics engine class error",
        action: None,
    },
    XidInfo {
        xid: 74,
        meaning: "NVLink error: a link reported an error it could not recover from",
        action: Some(
            "drain the node; reset the GPU (or reboot); check the NVLink connections and `nvidia-smi nvlink -e`; if the Xid returns, run NVIDIA's field diagnostics and contact NVIDIA support",
        ),
    },
    XidInfo {
        xid: 79,
        meaning: "GPU has fallen off the bus: it stopped answering on PCIe",
        action: Some(
            "drain the node and reboot it (a GPU off the bus needs a power cycle); if it recurs, check the GPU's power, cooling and seating, and the PCIe errors (AER) in the log",
        ),
    },
    XidInfo {
        xid: 92,
        meaning: "high single-bit ECC error rate",
        action: Some(RESET),
    },
    XidInfo {
        xid: 94,
        meaning: "contained ECC error: an uncorrectable memory error stopped the applications using that memory",
        action: Some(
            "restart the affected job; drain the node and reset the GPU (`nvidia-smi -r -i BUS_ID`, or reboot) soon, so the failing row is remapped",
        ),
    },
    XidInfo {
        xid: 95,
        meaning: "uncontained ECC error: an uncorrectable memory error that can affect every application on the GPU",
        action: Some(RESET),
    },
    XidInfo {
        xid: 109,
        meaning: "context switch timeout",
        action: None,
    },
    XidInfo {
        xid: 119,
        meaning: "GSP RPC timeout: the GPU System Processor stopped answering the driver",
        action: Some(
            "drain the node; reset the GPU (or reboot); if it recurs, update the driver and contact NVIDIA support",
        ),
    },
    XidInfo {
        xid: 120,
        meaning: "GSP error: the GPU System Processor hit an error",
        action: Some(
            "drain the node; reset the GPU (or reboot); if it recurs, update the driver and contact NVIDIA support",
        ),
    },
    XidInfo {
        xid: 140,
        meaning: "unrecovered ECC error",
        action: Some(RESET),
    },
];

/// The catalog's entry for `xid`.
pub(crate) fn info(xid: u32) -> Option<&'static XidInfo> {
    CATALOG.iter().find(|i| i.xid == xid)
}

/// The Xid findings for the node `ctx` describes: one per GPU (`gpuN.xid`), one per address
/// the node no longer lists (`gpu.xid.0000:3b:00.0`: a GPU that fell off the bus), or one
/// `gpu.xid` skip when the log cannot be read.
pub(crate) fn audit(ctx: &Context, inv: &Inventory) -> Vec<Finding> {
    let check = || Check::new("gpu.xid", Area::Gpu).expected("no Xid that needs action");
    let driver = ctx.root.exists("/sys/module/nvidia") || ctx.root.exists("/proc/driver/nvidia");
    let gpu_node = !inv.gpus.is_empty() || driver;
    if ctx.options.image() || ctx.options.persisted {
        // An image or a node's files hold no events; on a node without GPUs, nothing to say.
        if !gpu_node {
            return vec![];
        }
        let why = if ctx.options.image() {
            "Xids are events of a running node"
        } else {
            "--persisted judges configuration files; Xids are events of the running node"
        };
        return vec![check().skip(why)];
    }
    let boot = kmsg::boot_time(ctx.root);
    if ctx.options.since.is_some() && boot.is_none() {
        return vec![
            check().skip("--since cannot be placed in the kernel log: no `btime` in /proc/stat"),
        ];
    }
    match kmsg::read(ctx.root) {
        Ok(log) => judge(inv, &log, ctx.options.since, boot),
        Err(_) if !gpu_node => vec![],
        Err(e) => vec![check().skip(e.0)],
    }
}

/// Judges the Xids of `log`: those logged at or after `since` (seconds since the epoch),
/// when given, placed by the node's `boot` time; lines without a timestamp always count.
pub(crate) fn judge(
    inv: &Inventory,
    log: &KernelLog,
    since: Option<u64>,
    boot: Option<u64>,
) -> Vec<Finding> {
    let since_usec = since
        .zip(boot)
        .map(|(s, b)| s.saturating_sub(b).saturating_mul(1_000_000));
    let mut by_gpu: BTreeMap<String, Vec<XidEvent>> = BTreeMap::new();
    for event in events(&log.lines) {
        if since_usec.is_some_and(|s| event.usec.is_some_and(|u| u < s)) {
            continue;
        }
        by_gpu.entry(event.pci.clone()).or_default().push(event);
    }
    let window = match since {
        Some(s) => format!("since {} (--since)", kmsg::utc(s)),
        None => "in the kernel log since boot".to_string(),
    };
    let read = format!(
        "{} ({} records{})",
        log.source,
        log.records,
        log.truncated
            .as_ref()
            .map_or(String::new(), |t| format!("; {t}"))
    );
    let mut out = Vec::new();
    for g in &inv.gpus {
        let short = g
            .pci_address
            .rsplit_once('.')
            .map_or(g.pci_address.as_str(), |s| s.0);
        let events = by_gpu.remove(short).unwrap_or_default();
        let id = format!("gpu{}.xid", g.index);
        out.push(verdict(
            &id,
            &g.pci_address,
            &events,
            (&window, &read, boot),
            true,
        ));
    }
    for (pci, events) in by_gpu {
        let address = format!("{pci}.0");
        let id = format!("gpu.xid.{address}");
        out.push(verdict(
            &id,
            &address,
            &events,
            (&window, &read, boot),
            false,
        ));
    }
    out
}

/// The finding of one GPU's `events`; `about` is the window judged, where the log was read
/// and when the node booted.
fn verdict(
    id: &str,
    address: &str,
    events: &[XidEvent],
    about: (&str, &str, Option<u64>),
    listed: bool,
) -> Finding {
    let (window, read, boot) = about;
    let check = Check::new(id, Area::Gpu).expected("no Xid that needs action");
    if events.is_empty() {
        return check
            .why(format!("{address}: no Xid {window}; read {read}"))
            .pass("none");
    }
    // Count per Xid, in the order first seen, with its last line's detail.
    let mut seen: Vec<(u32, usize, &XidEvent)> = Vec::new();
    for e in events {
        match seen.iter_mut().find(|s| s.0 == e.xid) {
            Some(s) => {
                s.1 += 1;
                s.2 = e;
            }
            None => seen.push((e.xid, 1, e)),
        }
    }
    let actual = seen
        .iter()
        .map(|(x, n, _)| format!("Xid {x} x{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut lines = Vec::new();
    let mut fixes = Vec::new();
    for (xid, n, last) in &seen {
        let meaning = info(*xid).map_or(
            "not in gputune's table: see NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
            |i| i.meaning,
        );
        let at = match (last.usec, boot) {
            (Some(u), Some(b)) => format!(
                " at {} ({:.1} s after boot)",
                kmsg::utc(b + u / 1_000_000),
                u as f64 / 1e6
            ),
            (Some(u), None) => format!(" at {:.1} s after boot", u as f64 / 1e6),
            (None, _) => String::new(),
        };
        lines.push(format!(
            "Xid {xid} ({meaning}) x{n}; last{at}: \"{}\"",
            last.detail
        ));
        if let Some(fix) = info(*xid).and_then(|i| i.action) {
            let fix = fix.replace("BUS_ID", address);
            if !fixes.contains(&fix) {
                fixes.push(fix);
            }
        }
    }
    let gone = if listed {
        String::new()
    } else {
        " (a GPU this node no longer lists: it may have fallen off the bus)".to_string()
    };
    let why = format!(
        "{address}{gone}: {}; {window}, read {read}",
        lines.join("; ")
    );
    let check = check.why(why);
    if fixes.is_empty() {
        check.judge(
            Status::Warn,
            actual,
            "these Xids are usually the application's (a bad address, a killed process); if they repeat on this GPU across jobs, run NVIDIA's diagnostics (`dcgmi diag -r 2`)",
        )
    } else {
        check.judge(Status::Fail, actual, fixes.join("; then "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_in_every_form() {
        // Lines quoted from public bug reports (see tests/fixtures/xid/README.md for the
        // thread of each) plus the forms the readers add around them.
        /// The Xid, the GPU's address and the timestamp a line should give.
        type Parsed = Option<(u32, &'static str, Option<u64>)>;
        let cases: &[(&str, Parsed)] = &[
            (
                "[22859.081860] NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ 0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
                Some((31, "0000:01:00", Some(22_859_081_860))),
            ),
            (
                "4,812,1843308145,-;NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus",
                Some((79, "0000:44:00", Some(1_843_308_145))),
            ),
            (
                "kernel: NVRM: Xid (PCI:0000:DC:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
                Some((45, "0000:dc:00", None)),
            ),
            (
                "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
                Some((149, "0019:01:00", None)),
            ),
            (
                "[Fri Jan 18 11:38:05 2013] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007",
                Some((3, "0000:01:00", None)),
            ),
            (
                "NVRM: Xid (PCI:0000:3b:00.0): 48, DBE",
                Some((48, "0000:3b:00", None)),
            ),
            ("NVRM: Xid (PCI:zz:01:00): 79, x", None),
            ("NVRM: Xid (PCI:0000:01:00): , no number", None),
            ("NVRM: GPU at PCI:0000:01:00: GPU-af4f89ae", None),
            ("NVRM: Xid (PCI:0000:01:00", None),
            ("", None),
        ];
        for (line, want) in cases {
            let got = parse_line(line).map(|e| (e.xid, e.pci.clone(), e.usec));
            let want = want.map(|(x, p, u)| (x, p.to_string(), u));
            assert_eq!(got, want, "{line:?}");
        }
        let e = parse_line(
            "NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error\u{1b}[2J",
        )
        .unwrap();
        assert_eq!(e.detail, "pid=1234, name=python3, Contained ECC error[2J");
    }

    #[test]
    fn fallen_off_the_bus_without_an_xid_counts_as_xid_79() {
        let lines = |text: &str| text.lines().map(str::to_string).collect::<Vec<_>>();
        // https://github.com/NVIDIA/NVSentinel/issues/155: three dmesg lines, no Xid.
        let split = lines(
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n               NVRM: (PCI ID: 10de:26b5) installed in this system has\n               NVRM: fallen off the bus and is not responding to commands.\n[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).",
        );
        let e = events(&split);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!((e[0].xid, e[0].pci.as_str()), (79, "0000:b3:00"));
        assert_eq!(e[0].usec, Some(1_843_308_145));
        // The same message as one /dev/kmsg record (the kernel escapes its newlines).
        let record = lines(
            "3,77,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.",
        );
        assert_eq!(events(&record)[0].pci, "0000:b3:00");
        // https://pastebin.com/xJaypMZt: the one-line form, beside an Xid of the same GPU.
        let one = lines(
            "[  269.516977] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff",
        );
        let e = events(&one);
        assert_eq!(e.iter().map(|e| e.xid).collect::<Vec<_>>(), [3, 79]);
        // An Xid 79 of the GPU already says it: not counted twice.
        let both = lines(
            "NVRM: GPU at PCI:0000:44:00: GPU-1\nNVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\nNVRM: GPU 0000:44:00.0: GPU has fallen off the bus.",
        );
        assert_eq!(events(&both).len(), 1);
        // A message about the bus that names no GPU is no event.
        assert!(events(&lines("NVRM: something fallen off the bus")).is_empty());
    }

    #[test]
    fn xids_are_not_judged_from_files_alone_and_not_at_all_without_gpus() {
        use crate::checks::AuditOptions;
        use crate::testing::Tree;
        let run = |tree: &Tree, options: &AuditOptions| {
            let probes = crate::probe::Probes::absent("in a test");
            crate::testing::audit(&tree.root(), "base", options, probes, Area::Gpu)
        };
        let gpu = Tree::new();
        for (f, v) in [
            ("vendor", "0x10de"),
            ("class", "0x030200"),
            ("device", "0x2330"),
        ] {
            gpu.file(&format!("/sys/bus/pci/devices/0000:3b:00.0/{f}"), v);
        }
        gpu.file(
            "/dev/kmsg",
            "4,1,5,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus\n",
        );
        let live = run(&gpu, &AuditOptions::default());
        assert_eq!(live["gpu0.xid"].status, Status::Fail);
        let persisted = AuditOptions {
            persisted: true,
            ..AuditOptions::default()
        };
        let f = run(&gpu, &persisted);
        assert_eq!(f["gpu.xid"].status, Status::Skip, "{f:#?}");
        assert!(!f.contains_key("gpu0.xid"));
        // No GPU, no driver, no log: nothing to say, in any mode.
        let plain = Tree::new();
        plain.file("/proc/cpuinfo", "processor : 0\n");
        for options in [AuditOptions::default(), persisted] {
            let f = run(&plain, &options);
            assert!(!f.keys().any(|id| id.contains("xid")), "{f:#?}");
        }
    }

    #[test]
    fn the_xids_nvidia_says_need_action_fail_the_rest_warn() {
        for xid in [48, 63, 64, 74, 79, 92, 94, 95, 119, 120] {
            assert!(info(xid).and_then(|i| i.action).is_some(), "Xid {xid}");
        }
        for xid in [13, 31, 43, 45, 61, 62, 69, 109] {
            assert!(info(xid).is_some_and(|i| i.action.is_none()), "Xid {xid}");
        }
        let mut xids: Vec<u32> = CATALOG.iter().map(|i| i.xid).collect();
        xids.dedup();
        assert_eq!(xids.len(), CATALOG.len(), "one entry per Xid, in order");
    }
}
