//! Where reports come from: files, directories of `*.json`, or a stream on stdin, cut into
//! documents ([`super::split`]) and handed on in batches to the parsing threads. Reports are
//! hostile input: in a directory only regular files are read (a `x.json -> /proc/kmsg` link,
//! a FIFO or a device there is named and passed over, never opened to block), and files on
//! the kernel's pseudo file systems are not read through a directory either; a FIFO or device
//! is read only when the user names it directly.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::split::{self, Piece};

/// One unit of work for a parsing thread: documents (and problems, kept in order with them).
#[derive(Debug)]
pub(crate) struct Batch {
    /// Batches are numbered in input order, so reports fold in the order they were given.
    pub seq: u64,
    pub items: Vec<Item>,
}

#[derive(Debug)]
pub(crate) enum Item {
    Document {
        /// The file or stream (with the pdsh host when prefixed).
        origin: Arc<str>,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// A whole small file, cut into documents by the parsing thread (so cutting, too, runs
    /// on every core).
    File { origin: Arc<str>, bytes: Vec<u8> },
    /// A file or document that cannot be read, named.
    Problem(String),
}

/// A regular file up to this size is read whole and cut by a parsing thread; a larger one
/// is cut as it is read.
const WHOLE_FILE: u64 = 8 << 20;

/// A batch is handed on when it holds this many documents or bytes: small enough that the
/// threads share work evenly and little waits in memory, large enough to cost nothing.
const BATCH_DOCUMENTS: usize = 64;
const BATCH_BYTES: usize = 1 << 20;

/// Collects items into batches and hands each on; stops early when the receiver is gone.
struct Batcher<'a> {
    seq: u64,
    items: Vec<Item>,
    bytes: usize,
    send: &'a mut dyn FnMut(Batch) -> bool,
    open: bool,
}

impl Batcher<'_> {
    fn push(&mut self, item: Item) {
        if let Item::Document { bytes, .. } | Item::File { bytes, .. } = &item {
            self.bytes += bytes.len();
        }
        self.items.push(item);
        if self.items.len() >= BATCH_DOCUMENTS || self.bytes >= BATCH_BYTES {
            self.flush();
        }
    }

    fn problem(&mut self, text: String) {
        self.push(Item::Problem(text));
    }

    fn flush(&mut self) {
        if self.items.is_empty() || !self.open {
            return;
        }
        let batch = Batch {
            seq: self.seq,
            items: std::mem::take(&mut self.items),
        };
        self.seq += 1;
        self.bytes = 0;
        self.open = (self.send)(batch);
    }
}

/// Reads every argument in order (`-` is `stdin`) and hands on its documents in batches;
/// `send` returns false when no one takes them any more.
pub(crate) fn produce(args: &[PathBuf], stdin: &mut dyn Read, send: &mut dyn FnMut(Batch) -> bool) {
    let mut out = Batcher {
        seq: 0,
        items: Vec::new(),
        bytes: 0,
        send,
        open: true,
    };
    for arg in args {
        if !out.open {
            return;
        }
        if arg.as_os_str() == "-" {
            stream("<stdin>", &mut *stdin, &mut out);
            continue;
        }
        let shown = crate::say::cleaned_line(&arg.display().to_string()).into_owned();
        match std::fs::metadata(arg) {
            Err(e) => out.problem(format!("{shown}: {e}")),
            Ok(meta) if meta.is_dir() => directory(arg, &shown, &mut out),
            // Named directly: a FIFO or device is what the user asked to read.
            Ok(meta) if meta.is_file() || meta.file_type().is_fifo() => {
                let named = if meta.is_file() {
                    open_regular(arg, &shown, false)
                } else {
                    File::open(arg).map_err(|e| format!("{shown}: {e}"))
                };
                match named {
                    Ok(file) if meta.is_file() => regular(&shown, file, &mut out),
                    Ok(file) => stream(&shown, file, &mut out),
                    Err(problem) => out.problem(problem),
                }
            }
            Ok(meta) if meta.file_type().is_char_device() || meta.file_type().is_block_device() => {
                match File::open(arg) {
                    Ok(file) => stream(&shown, file, &mut out),
                    Err(e) => out.problem(format!("{shown}: {e}")),
                }
            }
            Ok(_) => out.problem(format!("{shown}: not a file, directory, FIFO or device")),
        }
    }
    out.flush();
}

/// The `*.json` files of `dir`, sorted by name.
fn directory(dir: &Path, shown: &str, out: &mut Batcher) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return out.problem(format!("{shown}: {e}")),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return out.problem(format!("{shown}: no *.json files"));
    }
    for file in files {
        if !out.open {
            return;
        }
        let shown = crate::say::cleaned_line(&file.display().to_string()).into_owned();
        match open_regular(&file, &shown, true) {
            Ok(f) => regular(&shown, f, out),
            Err(problem) => out.problem(problem),
        }
    }
}

/// Opens a regular file without ever blocking on what is not one: the type is checked before
/// the open (which does not wait: `O_NONBLOCK`) and again on what was opened. Through a
/// directory, a file of procfs, sysfs and their kind is refused too (`/proc/kmsg` is a
/// "regular" file whose read waits for the kernel and takes its messages from syslog).
fn open_regular(path: &Path, shown: &str, via_directory: bool) -> Result<File, String> {
    let refuse = |what: &str| format!("{shown}: {what}, passed over (name it directly to read it)");
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_file() {
        return Err(refuse("not a regular file"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    let opened = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !opened.is_file() {
        return Err(refuse("not a regular file"));
    }
    if via_directory && pseudo_file_system(&file) {
        return Err(refuse("a file of the kernel's pseudo file systems"));
    }
    Ok(file)
}

/// procfs, sysfs and the other kernel file systems whose "files" are interfaces.
fn pseudo_file_system(file: &File) -> bool {
    use nix::sys::statfs::{self, FsType};
    let Ok(fs) = statfs::fstatfs(file) else {
        return true;
    };
    const PSEUDO: &[FsType] = &[
        statfs::PROC_SUPER_MAGIC,
        statfs::SYSFS_MAGIC,
        statfs::DEBUGFS_MAGIC,
        statfs::TRACEFS_MAGIC,
        statfs::SECURITYFS_MAGIC,
        statfs::CGROUP_SUPER_MAGIC,
        statfs::BPF_FS_MAGIC,
        statfs::SELINUX_MAGIC,
        statfs::SMACK_MAGIC,
        statfs::DEVPTS_SUPER_MAGIC,
        statfs::NSFS_MAGIC,
    ];
    // cgroup2, configfs, pstore and efivarfs have no constant in nix.
    const MORE: &[u64] = &[0x6367_7270, 0x6265_6570, 0x6165_676c, 0xde5e_81e4];
    let kind = fs.filesystem_type();
    PSEUDO.contains(&kind) || MORE.contains(&(kind.0 as u64))
}

/// A regular file: read whole when small (cut by a parsing thread), else cut as it is read.
fn regular(origin: &str, mut file: File, out: &mut Batcher) {
    let size = file.metadata().map_or(u64::MAX, |m| m.len());
    if size > WHOLE_FILE {
        return stream(origin, file, out);
    }
    let mut bytes = Vec::with_capacity(size as usize + 1);
    // A file that grows while it is read is read to its end, cut as it is read past the limit.
    match (&mut file).take(WHOLE_FILE + 1).read_to_end(&mut bytes) {
        Err(e) => out.problem(format!("{origin}: {e}")),
        Ok(_) if bytes.len() as u64 > WHOLE_FILE => {
            stream(origin, std::io::Cursor::new(bytes).chain(file), out)
        }
        Ok(_) => out.push(Item::File {
            origin: Arc::from(origin),
            bytes,
        }),
    }
}

/// Cuts one file or stream into documents, each named by `origin`.
fn stream(origin: &str, input: impl Read, out: &mut Batcher) {
    let plain: Arc<str> = Arc::from(origin);
    let mut prefixed: Option<(String, Arc<str>)> = None;
    let result = split::split(input, &mut |piece| match piece {
        Piece::Document {
            offset,
            prefix,
            bytes,
        } => {
            let origin = match prefix {
                None => plain.clone(),
                Some(host) => match &prefixed {
                    Some((last, origin)) if *last == host => origin.clone(),
                    _ => {
                        let origin: Arc<str> =
                            Arc::from(format!("{origin} ({})", crate::say::cleaned_line(&host)));
                        prefixed = Some((host, origin.clone()));
                        origin
                    }
                },
            };
            out.push(Item::Document {
                origin,
                offset,
                bytes,
            });
        }
        Piece::Problem { offset, problem } => {
            out.problem(format!("{origin}: byte {offset}: {problem}"));
        }
    });
    if let Err(e) = result {
        out.problem(format!("{origin}: {e}"));
    }
}
