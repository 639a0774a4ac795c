//! NIC driver and firmware versions through the ethtool `ETHTOOL_GDRVINFO` ioctl, the
//! same call `ethtool -i` makes. sysfs does not carry the firmware version.

use std::os::fd::AsFd;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};

use crate::ffi::linux;
use crate::probe_error::ProbeError;

/// What `ethtool -i` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    pub driver: String,
    pub version: String,
    pub firmware: String,
    pub bus_info: String,
}

/// A source of driver info: the real ioctl, or fixed answers in tests.
pub trait EthtoolProbe {
    /// Driver info of interface `name`, or why it cannot be read.
    fn driver_info(&self, name: &str) -> Result<DriverInfo, ProbeError>;
}

/// The real ioctl on an `AF_INET` datagram socket.
pub(crate) struct RealEthtool;

impl EthtoolProbe for RealEthtool {
    fn driver_info(&self, name: &str) -> Result<DriverInfo, ProbeError> {
        let socket = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|e| ProbeError::Failed(format!("socket: {}", std::io::Error::from(e))))?;
        let info = linux::ethtool_drvinfo(socket.as_fd(), name)
            .map_err(|e| ProbeError::of_io(format!("ETHTOOL_GDRVINFO on {name}: {e}"), &e))?;
        Ok(DriverInfo {
            driver: info.driver(),
            version: info.version(),
            firmware: info.firmware(),
            bus_info: info.bus_info(),
        })
    }
}

/// No ioctl possible (not the live node), with the reason.
pub(crate) struct NoEthtool(pub String);

impl EthtoolProbe for NoEthtool {
    fn driver_info(&self, _name: &str) -> Result<DriverInfo, ProbeError> {
        Err(ProbeError::NotLive(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_ioctl_answers_for_loopback_and_refuses_unknown_names() {
        let lo = RealEthtool.driver_info("lo");
        // Loopback has no ethtool driver info on most kernels: either answer is a result.
        if let Ok(info) = &lo {
            assert!(!info.driver.is_empty());
        }
        let err = RealEthtool
            .driver_info("gputune-none0")
            .expect_err("no such interface");
        assert!(err.to_string().contains("gputune-none0"), "{err}");
        // No such interface is an absence, not a failure of the call.
        assert!(matches!(err, ProbeError::Absent(_)), "{err:?}");
        assert!(RealEthtool.driver_info("").is_err());
    }

    #[test]
    fn the_real_ioctl_agrees_with_sysfs_on_this_machines_nics() {
        // Every device-backed interface here (virtio_net on CI) answers ETHTOOL_GDRVINFO
        // with the driver sysfs links to and its PCI function as bus_info.
        let mut checked = 0;
        for entry in std::fs::read_dir("/sys/class/net").unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let device = std::path::Path::new("/sys/class/net")
                .join(&name)
                .join("device");
            let Ok(driver) = std::fs::read_link(device.join("driver")) else {
                continue;
            };
            let info = RealEthtool.driver_info(&name).unwrap();
            assert_eq!(
                info.driver,
                driver.file_name().unwrap().to_string_lossy(),
                "{name}"
            );
            checked += 1;
        }
        assert!(
            checked > 0,
            "this machine has at least one device-backed NIC"
        );
    }
}
