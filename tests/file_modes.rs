//! Files gputune writes are readable by the users who need them whatever the umask. The
//! umask is process-wide, so this test lives alone in its own test binary.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use gputune::host::atomic::write_output as write_atomic;

#[test]
fn new_files_are_world_readable_and_replaced_ones_keep_their_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // SAFETY: umask only changes this process's file-creation mask.
    let old = unsafe { libc::umask(0o077) };
    let fresh = dir.path().join("nccl.conf");
    write_atomic(&fresh, b"NCCL_SOCKET_IFNAME=eth0\n").unwrap();
    let kept = dir.path().join("private.conf");
    fs::write(&kept, b"x").unwrap();
    fs::set_permissions(&kept, fs::Permissions::from_mode(0o600)).unwrap();
    write_atomic(&kept, b"y").unwrap();
    // SAFETY: restores the mask set above.
    unsafe { libc::umask(old) };
    assert_eq!(mode(&fresh), 0o644);
    assert_eq!(mode(&kept), 0o600);
}
