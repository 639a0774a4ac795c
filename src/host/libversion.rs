//! A library's version read from its file, without loading it.
//!
//! Loading a shared object runs its constructors, as root, inside gputune. For a library
//! found in an image (`--root`), that would run the image's code on the host, so the
//! version is read instead: from the version string NCCL embeds in `.rodata`
//! (`NCCL version 2.32.3+cuda12.9`), else the Python wheel's metadata next to it
//! (`nvidia_nccl_cu12-2.32.3.dist-info`), else the file name a link points to
//! (`libnccl.so.2.21.5`).

use std::os::fd::AsFd;
use std::path::Path;

use super::Root;
use super::confine;

/// The most of `.rodata` scanned (NCCL 2.32's is under 1 MiB).
const RODATA_CAP: u64 = 64 << 20;

/// Why no version was found: what each way tried said, in order.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub(crate) struct Unversioned(Vec<String>);

/// Why a library's `.rodata` could not be read.
#[derive(Debug, thiserror::Error)]
enum ElfError {
    #[error(transparent)]
    Open(#[from] super::HostError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("it is a {0}")]
    NotRegular(&'static str),
    #[error("its ELF headers point past its end")]
    PastEnd,
    #[error("it is not a 64-bit little-endian ELF file")]
    NotElf,
    #[error("it has no section table")]
    NoSections,
    #[error("its section names are too large")]
    LargeNames,
    #[error("its .rodata is larger than {RODATA_CAP} bytes")]
    LargeRodata,
    #[error("it has no .rodata section")]
    NoRodata,
}

/// `(major, minor, patch)` of the NCCL library at `host_path` inside `root`, or why not.
pub(crate) fn nccl(root: &Root, host_path: &str) -> Result<(u32, u32, u32), Unversioned> {
    let mut tried = Vec::new();
    match rodata(root, host_path) {
        Ok(bytes) => match find_after(&bytes, b"NCCL version ") {
            Some(v) => return Ok(v),
            None => tried.push("no `NCCL version X.Y.Z` string in its .rodata".to_string()),
        },
        Err(e) => tried.push(e.to_string()),
    }
    if let Some(v) = wheel_metadata(root, host_path) {
        return Ok(v);
    }
    tried.push("no nvidia_nccl_cu*-X.Y.Z.dist-info beside it".into());
    if let Ok(Some(target)) = root.read_link(host_path) {
        let name = Path::new(&target)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(v) = name.strip_prefix("libnccl.so.").and_then(parse_triple) {
            return Ok(v);
        }
    }
    tried.push("its file name carries no version".into());
    Err(Unversioned(tried))
}

/// The first `X.Y.Z` right after `marker` anywhere in `bytes`.
pub fn find_after(bytes: &[u8], marker: &[u8]) -> Option<(u32, u32, u32)> {
    let mut from = 0;
    while let Some(pos) = bytes
        .get(from..)?
        .windows(marker.len())
        .position(|w| w == marker)
    {
        let start = from + pos + marker.len();
        let tail = &bytes[start..bytes.len().min(start + 32)];
        let end = tail
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .unwrap_or(tail.len());
        if let Some(v) = std::str::from_utf8(&tail[..end])
            .ok()
            .and_then(parse_triple)
        {
            return Some(v);
        }
        from = start;
    }
    None
}

/// `2.32.3` (trailing text after the patch number ignored by the caller).
pub(crate) fn parse_triple(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.trim_end_matches('.').split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = it.next()?.parse().ok()?;
    Some((major, minor, patch))
}

/// The `.rodata` section of a 64-bit little-endian ELF file inside the root.
fn rodata(root: &Root, host_path: &str) -> Result<Vec<u8>, ElfError> {
    let fd = root.open(
        host_path,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )?;
    let st = confine::fstat(fd.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(ElfError::NotRegular(confine::kind_name(st.st_mode)));
    }
    let file = std::fs::File::from(fd);
    let size = st.st_size as u64;
    let at = |off: u64, len: u64| -> Result<Vec<u8>, ElfError> {
        use std::os::unix::fs::FileExt;
        if off.checked_add(len).is_none_or(|end| end > size) {
            return Err(ElfError::PastEnd);
        }
        let mut buf = vec![0u8; len as usize];
        file.read_exact_at(&mut buf, off)?;
        Ok(buf)
    };
    let head = at(0, 64).map_err(|_| ElfError::NotElf)?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(ElfError::NotElf);
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(&head, 0x28),
        u64::from(u16_at(&head, 0x3a)),
        u64::from(u16_at(&head, 0x3c)),
        u64::from(u16_at(&head, 0x3e)),
    );
    if shentsize < 64 || shnum == 0 || shstrndx >= shnum {
        return Err(ElfError::NoSections);
    }
    let table = at(shoff, shentsize * shnum)?;
    let section = |i: u64| &table[(i * shentsize) as usize..(i * shentsize + 64) as usize];
    let strtab = section(shstrndx);
    let (str_off, str_size) = (u64_at(strtab, 24), u64_at(strtab, 32));
    if str_size > RODATA_CAP {
        return Err(ElfError::LargeNames);
    }
    let names = at(str_off, str_size)?;
    for i in 0..shnum {
        let sh = section(i);
        let name_at = u32_at(sh, 0) as usize;
        let name = names.get(name_at..).unwrap_or_default();
        if name.starts_with(b".rodata\0") {
            let (off, len) = (u64_at(sh, 24), u64_at(sh, 32));
            if len > RODATA_CAP {
                return Err(ElfError::LargeRodata);
            }
            return at(off, len);
        }
    }
    Err(ElfError::NoRodata)
}

/// `…/site-packages/nvidia/nccl/lib/libnccl.so.2` → the version in
/// `…/site-packages/nvidia_nccl_cu*-X.Y.Z.dist-info`.
fn wheel_metadata(root: &Root, host_path: &str) -> Option<(u32, u32, u32)> {
    let pkgs = host_path.strip_suffix("/nvidia/nccl/lib/libnccl.so.2")?;
    let names = root.list_dir(pkgs).ok()??;
    names.iter().find_map(|n| {
        let rest = n
            .strip_prefix("nvidia_nccl_cu")?
            .strip_suffix(".dist-info")?;
        let (_, version) = rest.split_once('-')?;
        parse_triple(version)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn version_strings_are_found_after_false_starts() {
        let text = b"xx NCCL version information\0NCCL version 2.32.3+cuda12.9\0";
        assert_eq!(find_after(text, b"NCCL version "), Some((2, 32, 3)));
        assert_eq!(find_after(b"NCCL version 2.x", b"NCCL version "), None);
        assert_eq!(find_after(b"", b"NCCL version "), None);
        assert_eq!(parse_triple("2.21.5"), Some((2, 21, 5)));
        assert_eq!(parse_triple("2.21"), None);
    }

    #[test]
    fn wheel_metadata_and_link_names_give_the_version() {
        let tree = Tree::new();
        let pkgs = "/usr/lib/python3.11/site-packages";
        tree.dir(&format!("{pkgs}/nvidia_nccl_cu12-2.19.3.dist-info"))
            .file(&format!("{pkgs}/nvidia/nccl/lib/libnccl.so.2"), "not elf");
        let root = tree.root();
        let host = "/usr/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2";
        assert_eq!(nccl(&root, host), Ok((2, 19, 3)));

        tree.file("/usr/lib/x86_64-linux-gnu/libnccl.so.2.18.1", "x")
            .link(
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
                "libnccl.so.2.18.1",
            );
        assert_eq!(
            nccl(&root, "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
            Ok((2, 18, 1))
        );
        tree.file("/plain", "x");
        let err = nccl(&root, "/plain").unwrap_err().to_string();
        assert!(err.contains("not a 64-bit"), "{err}");
    }
}
