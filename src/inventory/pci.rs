//! PCI devices from `/sys/bus/pci/devices`: identity, locality and link training. GPUs and
//! NICs are both PCI functions, so both inventories start here.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::host::cpulist::CpuList;
use crate::host::{HostError, Root};

/// A PCIe link as trained now and as the slot and device could train at best.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct PciLink {
    /// GT/s per lane now (`current_link_speed`); `None` when the kernel says "Unknown".
    pub current_gts: Option<f64>,
    pub max_gts: Option<f64>,
    pub current_width: Option<u32>,
    pub max_width: Option<u32>,
}

impl PciLink {
    /// PCIe generation of a per-lane rate (2.5 GT/s = Gen1 ... 64 GT/s = Gen6).
    pub(crate) fn generation(gts: f64) -> Option<u32> {
        const GENS: [(f64, u32); 6] = [
            (2.5, 1),
            (5.0, 2),
            (8.0, 3),
            (16.0, 4),
            (32.0, 5),
            (64.0, 6),
        ];
        GENS.iter()
            .find(|(rate, _)| (rate - gts).abs() < 0.01)
            .map(|(_, generation)| *generation)
    }

    /// `Gen4 x16` style text of one side of the link.
    pub(crate) fn describe(gts: Option<f64>, width: Option<u32>) -> String {
        let speed = match gts {
            Some(g) => match PciLink::generation(g) {
                Some(generation) => format!("Gen{generation}"),
                None => format!("{g} GT/s"),
            },
            None => "?".into(),
        };
        let width = width.map_or("x?".to_string(), |w| format!("x{w}"));
        format!("{speed} {width}")
    }

    pub(crate) fn current(&self) -> String {
        PciLink::describe(self.current_gts, self.current_width)
    }

    pub(crate) fn max(&self) -> String {
        PciLink::describe(self.max_gts, self.max_width)
    }

    /// True when the link trained narrower than it can.
    pub(crate) fn width_downtrained(&self) -> bool {
        matches!((self.current_width, self.max_width), (Some(c), Some(m)) if c < m)
    }

    /// True when the link runs slower per lane than it can.
    pub(crate) fn speed_downtrained(&self) -> bool {
        matches!((self.current_gts, self.max_gts), (Some(c), Some(m)) if c + 0.01 < m)
    }
}

/// Parses `current_link_speed`/`max_link_speed`: `8.0 GT/s PCIe`, `8 GT/s`, `2.5 GT/s`;
/// `Unknown` (and anything else) is `None`.
pub(crate) fn parse_link_speed(text: &str) -> Option<f64> {
    let first = text.split_whitespace().next()?;
    let value: f64 = first.parse().ok()?;
    (value > 0.0 && text.contains("GT/s")).then_some(value)
}

/// Parses `current_link_width`/`max_link_width`: `16`; `0` and garbage are `None`.
pub(crate) fn parse_link_width(text: &str) -> Option<u32> {
    text.trim().parse().ok().filter(|w| *w > 0)
}

/// Parses a hex id file such as `vendor` (`0x10de`) or `class` (`0x030200`).
pub(crate) fn parse_hex(text: &str) -> Option<u32> {
    let t = text.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// Parses `numa_node`: `-1` (firmware did not say) is `None`.
pub(crate) fn parse_numa_node(text: &str) -> Option<u32> {
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// True for a PCI address such as `0000:3b:00.0`. The domain may be wider than 16 bits
/// (`10000:00:04.0` under Intel VMD, Hyper-V's 32-bit domains): four hex digits or more.
pub(crate) fn is_pci_address(name: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    let Some((rest, function)) = name.rsplit_once('.') else {
        return false;
    };
    let mut parts = rest.split(':');
    let (Some(domain), Some(bus), Some(slot), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    (4..=8).contains(&domain.len())
        && hex(domain)
        && bus.len() == 2
        && hex(bus)
        && slot.len() == 2
        && hex(slot)
        && function.len() == 1
        && hex(function)
}

/// One PCI function as sysfs describes it; the default is one sysfs says nothing about.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PciDevice {
    pub address: String,
    pub vendor: Option<u32>,
    pub device: Option<u32>,
    pub class: Option<u32>,
    /// The bound kernel driver (`nvidia`, `mlx5_core`), from the `driver` link.
    pub driver: Option<String>,
    pub numa_node: Option<u32>,
    pub local_cpus: Option<CpuList>,
    pub link: PciLink,
    /// PCI addresses of the bridges between the root complex and this device, nearest last.
    pub bridges: Vec<String>,
    /// The PCIe host bridge (root complex) it hangs off, e.g. `pci0000:5d`.
    pub host_bridge: Option<String>,
}

/// Reads one PCI function from its sysfs directory (a host path such as
/// `/sys/bus/pci/devices/0000:3b:00.0`).
pub(crate) fn read_device(root: &Root, dir: &str) -> Result<PciDevice, HostError> {
    let file = |name: &str| root.read_optional(&format!("{dir}/{name}"));
    let real = root.canonicalize(dir).unwrap_or_else(|| root.path(dir));
    let address = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(PciDevice {
        vendor: file("vendor")?.as_deref().and_then(parse_hex),
        device: file("device")?.as_deref().and_then(parse_hex),
        class: file("class")?.as_deref().and_then(parse_hex),
        driver: link_name_in(root, &format!("{dir}/driver")),
        numa_node: file("numa_node")?.as_deref().and_then(parse_numa_node),
        local_cpus: match file("local_cpulist")? {
            Some(t) => CpuList::parse(&t).ok(),
            None => file("local_cpus")?.as_deref().and_then(CpuList::parse_mask),
        },
        link: PciLink {
            current_gts: link_attr(root, dir, "current_link_speed", parse_link_speed),
            max_gts: link_attr(root, dir, "max_link_speed", parse_link_speed),
            current_width: link_attr(root, dir, "current_link_width", parse_link_width),
            max_width: link_attr(root, dir, "max_link_width", parse_link_width),
        },
        bridges: bridges_above(&real, &address),
        host_bridge: real
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .find(|c| c.starts_with("pci") && c.contains(':'))
            .map(str::to_string),
        address,
    })
}

/// The link attribute `name` of the device in `dir`, parsed; link files fail with EINVAL on
/// devices without a PCIe capability, which is unknown, not an error.
fn link_attr<T>(root: &Root, dir: &str, name: &str, parse: fn(&str) -> Option<T>) -> Option<T> {
    parse(&super::attribute(root, &format!("{dir}/{name}"))?)
}

/// The last component of the target of a link inside the root (`driver ->
/// .../drivers/nvidia` → `nvidia`), the directories above it resolved inside the root too.
pub(crate) fn link_name_in(root: &Root, host_path: &str) -> Option<String> {
    root.read_link(host_path).ok().flatten().and_then(|t| {
        Path::new(&t)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    })
}

/// PCI addresses in a device's canonical sysfs path above it: its bridges and switch ports.
pub(crate) fn bridges_above(real: &Path, address: &str) -> Vec<String> {
    real.components()
        .filter_map(|c| c.as_os_str().to_str())
        .filter(|c| is_pci_address(c) && *c != address)
        .map(str::to_string)
        .collect()
}

/// Every PCI function of the node, sorted by address (CUDA's `PCI_BUS_ID` order).
pub(crate) fn devices(root: &Root) -> Result<Vec<PciDevice>, HostError> {
    let mut out = Vec::new();
    for name in root.list_dir("/sys/bus/pci/devices")?.unwrap_or_default() {
        out.push(read_device(root, &format!("/sys/bus/pci/devices/{name}"))?);
    }
    out.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(out)
}

/// The host path (`/sys/devices/...`) of a real path under the root, for messages.
pub(crate) fn host_path(root: &Root, real: &Path) -> PathBuf {
    let base = std::fs::canonicalize(root.dir()).unwrap_or_else(|_| root.dir().to_path_buf());
    match real.strip_prefix(&base) {
        Ok(rest) => Path::new("/").join(rest),
        Err(_) => real.to_path_buf(),
    }
}

/// The PCI function behind a device link: the device itself (`0000:3b:00.0`) or, for
/// virtio and similar buses, its parent (`.../0000:00:03.0/virtio2`).
pub(crate) fn pci_function(real_device: &Path) -> Option<&Path> {
    let is_pci = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(is_pci_address)
    };
    if is_pci(real_device) {
        return Some(real_device);
    }
    real_device.parent().filter(|p| is_pci(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_cases;

    #[test]
    fn link_speeds() {
        let cases = [
            ("8.0 GT/s PCIe\n", Some(8.0)),
            ("8 GT/s\n", Some(8.0)),
            ("2.5 GT/s", Some(2.5)),
            ("32.0 GT/s PCIe", Some(32.0)),
            ("Unknown", None),
            ("", None),
            ("16", None),
        ];
        assert_cases(cases, parse_link_speed);
    }

    #[test]
    fn widths_ids_and_nodes() {
        assert_eq!(parse_link_width("16\n"), Some(16));
        assert_eq!(parse_link_width("0"), None);
        assert_eq!(parse_link_width("x"), None);
        assert_eq!(parse_hex("0x10de\n"), Some(0x10de));
        assert_eq!(parse_hex("0x030200"), Some(0x030200));
        assert_eq!(parse_hex("zz"), None);
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node(""), None);
    }

    #[test]
    fn downtraining() {
        let link = |c, m, cw, mw| PciLink {
            current_gts: Some(c),
            max_gts: Some(m),
            current_width: Some(cw),
            max_width: Some(mw),
        };
        assert!(link(16.0, 16.0, 8, 16).width_downtrained());
        assert!(!link(16.0, 16.0, 16, 16).width_downtrained());
        assert!(link(8.0, 32.0, 16, 16).speed_downtrained());
        assert!(!link(32.0, 32.0, 16, 16).speed_downtrained());
        assert_eq!(link(8.0, 32.0, 16, 16).current(), "Gen3 x16");
        assert_eq!(link(8.0, 32.0, 16, 16).max(), "Gen5 x16");
    }

    #[test]
    fn addresses_and_bridges() {
        assert!(is_pci_address("0000:3b:00.0"));
        assert!(!is_pci_address("pci0000:00"));
        assert!(!is_pci_address("virtio2"));
        assert!(is_pci_address("10000:00:04.0"), "VMD domain");
        assert!(is_pci_address("c2a10001:00:02.0"), "Hyper-V domain");
        assert!(!is_pci_address("000:3b:00.0"));
        assert!(!is_pci_address("0000:3b:00.10"));
        assert!(!is_pci_address("0000:3b:00"));
        let vmd = Path::new(
            "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0",
        );
        assert_eq!(
            bridges_above(vmd, "10000:e1:00.0"),
            ["0000:00:0e.0", "10000:e0:06.0"]
        );
        let real = Path::new("/sys/devices/pci0000:5d/0000:5d:02.0/0000:5e:00.0/0000:60:00.0");
        assert_eq!(
            bridges_above(real, "0000:60:00.0"),
            ["0000:5d:02.0", "0000:5e:00.0"]
        );
    }
}
