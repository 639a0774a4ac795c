//! The PCI Express capability in a function's config space (`config` in sysfs): the few
//! bits gputune reports, read without `lspci`.

/// Offset of the PCI Express capability (id 0x10) in the standard capability list, when
/// the capability list is present and well formed (a loop or a short read ends the walk).
pub(crate) fn pcie_capability(config: &[u8]) -> Option<usize> {
    const STATUS_CAP_LIST: u8 = 1 << 4;
    if config.get(0x06)? & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut at = usize::from(*config.get(0x34)? & !3);
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        let id = *config.get(at)?;
        if id == 0x10 {
            return Some(at);
        }
        at = usize::from(*config.get(at + 1)? & !3);
    }
    None
}

/// Whether the function may issue relaxed-ordering writes (Device Control bit 4), which
/// some CPUs' root complexes mishandle: NCCL hangs or corrupts data behind them.
pub(crate) fn relaxed_ordering(config: &[u8]) -> Option<bool> {
    let cap = pcie_capability(config)?;
    let control = u16::from_le_bytes([*config.get(cap + 8)?, *config.get(cap + 9)?]);
    Some(control & (1 << 4) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 256 bytes with a power-management capability at 0x40 chaining to PCIe at 0x60.
    pub(crate) fn config(device_control: u16) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0x06] = 1 << 4;
        c[0x34] = 0x40;
        c[0x40] = 0x01;
        c[0x41] = 0x60;
        c[0x60] = 0x10;
        c[0x61] = 0x00;
        c[0x68..0x6a].copy_from_slice(&device_control.to_le_bytes());
        c
    }

    #[test]
    fn relaxed_ordering_bit() {
        assert_eq!(relaxed_ordering(&config(0x2810)), Some(true));
        assert_eq!(relaxed_ordering(&config(0x2800)), Some(false));
        // 64-byte config as an unprivileged read returns it: no capability list.
        assert_eq!(relaxed_ordering(&config(0x10)[..64]), None);
        let mut looped = config(0x10);
        looped[0x60] = 0x05;
        looped[0x61] = 0x40;
        assert_eq!(relaxed_ordering(&looped), None);
        assert_eq!(relaxed_ordering(&[]), None);
    }
}
