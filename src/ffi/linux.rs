//! The Linux calls that neither nix nor socket2 offers safely, each behind one small safe
//! function: CPU affinity and NUMA memory masks of any width (nix's `CpuSet` stops at 1024
//! CPUs and nix has no `set_mempolicy`), the ethtool `ETHTOOL_GDRVINFO` ioctl and
//! `TCP_INFO`. Everything else gputune asks of the kernel goes through nix.

use std::ffi::{c_char, c_void};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A CPU or NUMA node set as the kernel takes it: a bitmask of unsigned longs, bit `n % 64`
/// of word `n / 64` for CPU or node `n`.
pub(crate) type Mask = [libc::c_ulong];

/// How [`set_mempolicy`] places memory (`MPOL_BIND`; `pin` binds and never merely prefers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemPolicy {
    /// Allocate from these nodes only (OOM rather than spill to another socket).
    Bind,
}

impl MemPolicy {
    fn mode(self) -> libc::c_int {
        match self {
            MemPolicy::Bind => libc::MPOL_BIND,
        }
    }
}

/// A `syscall(2)` return value as a result.
fn syscall_result(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `sched_setaffinity(0, …)`: restricts the calling thread (and what it execs) to the CPUs
/// in `cpus`.
pub(crate) fn sched_setaffinity(cpus: &Mask) -> io::Result<()> {
    // SAFETY: the kernel reads `size_of_val(cpus)` bytes from `cpus`, a live slice of that
    // size; pid 0 is the calling thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            0,
            size_of_val(cpus),
            cpus.as_ptr(),
        )
    };
    syscall_result(rc)
}

/// `set_mempolicy(2)`: the calling thread's NUMA memory policy over `nodes`.
pub(crate) fn set_mempolicy(policy: MemPolicy, nodes: &Mask) -> io::Result<()> {
    // The kernel reads `maxnode - 1` bits (its historical off-by-one): one more than the
    // mask holds, so it reads all of them and no further.
    let maxnode = size_of_val(nodes) as libc::c_ulong * 8 + 1;
    // SAFETY: the kernel reads at most `maxnode - 1` bits from `nodes`, a live slice that
    // holds exactly that many.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            policy.mode(),
            nodes.as_ptr(),
            maxnode,
        )
    };
    syscall_result(rc)
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;

/// `struct ethtool_drvinfo` of `<linux/ethtool.h>`: what `ethtool -i` shows, as
/// NUL-terminated fixed-size fields.
#[repr(C)]
pub(crate) struct EthtoolDrvinfo {
    cmd: u32,
    driver: [c_char; 32],
    version: [c_char; 32],
    fw_version: [c_char; 32],
    bus_info: [c_char; 32],
    erom_version: [c_char; 32],
    reserved2: [c_char; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

impl EthtoolDrvinfo {
    /// The kernel driver's name (`mlx5_core`).
    pub(crate) fn driver(&self) -> String {
        c_field(&self.driver)
    }

    /// The driver's version.
    pub(crate) fn version(&self) -> String {
        c_field(&self.version)
    }

    /// The device's firmware version.
    pub(crate) fn firmware(&self) -> String {
        c_field(&self.fw_version)
    }

    /// The bus address (`0000:3b:00.0`).
    pub(crate) fn bus_info(&self) -> String {
        c_field(&self.bus_info)
    }
}

/// Text of a NUL-terminated fixed-size C field.
fn c_field(field: &[c_char]) -> String {
    let bytes: Vec<u8> = field
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

// The kernel's sizes, checked when the crate compiles.
const _: () = assert!(std::mem::size_of::<EthtoolDrvinfo>() == 196);

/// `struct ifreq` with the `ifr_data` member of its union, padded to the kernel's 40 bytes.
#[repr(C)]
struct IfreqData {
    name: [c_char; libc::IFNAMSIZ],
    data: *mut c_void,
    _pad: [u8; 16],
}

/// The `ETHTOOL_GDRVINFO` ioctl for interface `name`, on `socket` (any `AF_INET` socket).
/// A name an `ifreq` cannot hold (empty, `IFNAMSIZ` bytes or more, or with a NUL) is
/// `InvalidInput` without a call.
pub(crate) fn ethtool_drvinfo(socket: BorrowedFd<'_>, name: &str) -> io::Result<EthtoolDrvinfo> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an interface name is 1 to 15 bytes without NUL",
        ));
    }
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    let mut req = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: (&raw mut info).cast(),
        _pad: [0; 16],
    };
    // The name is shorter than IFNAMSIZ (checked above), so it stays NUL-terminated.
    for (dst, src) in req.name.iter_mut().zip(name.bytes()) {
        *dst = src as c_char;
    }
    // SAFETY: SIOCETHTOOL reads `req` and writes at most one `ethtool_drvinfo` into `info`
    // through `req.data`; both are live, correctly laid out and outlive the call.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL as _, &raw mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// The kernel's `TCP_INFO` for a TCP socket. nix offers no such option (and its generic
/// struct getter panics when the kernel answers with fewer bytes); fields a kernel older
/// than libc's struct does not fill stay zero.
pub(crate) fn tcp_info(socket: BorrowedFd<'_>) -> io::Result<libc::tcp_info> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which is that large and
    // live, and writes the length it used into `len`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: tcp_info is plain integers, all valid at any value; what the kernel did not
    // write is still the zero it was created with.
    Ok(unsafe { info.assume_init() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn the_ifreq_has_the_kernels_size() {
        assert_eq!(size_of::<IfreqData>(), 40);
    }

    #[test]
    fn c_fields_end_at_the_nul_and_are_trimmed() {
        let mut field = [0 as c_char; 32];
        for (d, s) in field.iter_mut().zip(b"16.35.2000 (MT_0000000838) ") {
            *d = *s as c_char;
        }
        assert_eq!(c_field(&field), "16.35.2000 (MT_0000000838)");
        assert_eq!(c_field(&[0; 4]), "");
    }

    #[test]
    fn names_the_kernel_cannot_hold_are_refused_before_the_ioctl() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for name in ["", "a-name-of-sixteen", "lo\0"] {
            let err = ethtool_drvinfo(socket.as_fd(), name).err();
            assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
        }
    }

    #[test]
    fn tcp_info_of_a_connected_socket_has_a_segment_size() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let info = tcp_info(stream.as_fd()).unwrap();
        assert!(info.tcpi_snd_mss > 0);
    }

    #[test]
    fn a_tcp_info_of_a_non_tcp_socket_is_an_error() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_info(socket.as_fd()).is_err());
    }
}
