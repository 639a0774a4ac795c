//! The kernel log, read for the NVIDIA driver's lines (`NVRM: ...`): on the live node from
//! `/dev/kmsg` (non-blocking, bounded in bytes and time, so a health check never hangs on a
//! log that keeps growing), else `journalctl -k` of this boot; under `--root` only from a
//! regular file at `dev/kmsg` (a captured log in a fixture or snapshot), never the host's.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

use super::Root;

/// The most bytes read from the log: a kernel ring buffer is at most 32 MiB (`log_buf_len`
/// maximum), so this reads a whole one and stops a runaway source.
pub(crate) const MAX_BYTES: u64 = 32 << 20;

/// How long reading may take before what was read is judged.
pub(crate) const MAX_TIME: Duration = Duration::from_secs(3);

/// The host path of the kernel's log device (and of a captured log under `--root`).
pub(crate) const KMSG: &str = "/dev/kmsg";

/// The driver's lines of the kernel log, and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelLog {
    /// Lines whose message holds `NVRM:`, as the source wrote them (a `/dev/kmsg` record's
    /// first line `PRI,SEQ,USEC,FLAGS;text`, or a `journalctl`/`dmesg` line).
    pub lines: Vec<String>,
    /// `/dev/kmsg`, `journalctl -k`, or the captured file's path.
    pub source: String,
    /// How many records (or lines) the source gave, the driver's and all others.
    pub records: usize,
    /// Why reading stopped early (the byte or time cap), when it did.
    pub truncated: Option<String>,
}

/// Why the log could not be read; the text says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unreadable(pub String);

/// Why `/dev/kmsg` could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeviceError {
    #[error("{0}")]
    Open(#[source] io::Error),
    #[error("lseek: {0}")]
    Seek(#[source] nix::errno::Errno),
    #[error("{0}")]
    Read(#[source] io::Error),
}

/// Why `journalctl -k` gave no log.
#[derive(Debug, thiserror::Error)]
enum JournalError {
    #[error(transparent)]
    Exec(#[from] super::exec::ExecError),
    /// It ran and failed: the first line of its standard error, cleaned.
    #[error("{0}")]
    Failed(String),
}

/// Why `--since` is not a time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SinceError {
    #[error("{SINCE_FORMS}")]
    Form,
    #[error("{0} ago is before 1970")]
    BeforeEpoch(String),
    #[error("`{0}` is not a valid date and time; {SINCE_FORMS}")]
    Invalid(String),
}

const SINCE_FORMS: &str =
    "expected @SECONDS, a duration ago (30m, 2h, 1d) or a UTC time (2026-11-25 14:00[:00])";

/// Keeps the driver's lines only: the rest of a busy log is never held in memory.
fn wanted(message: &str) -> bool {
    message.contains("NVRM:")
}

/// Reads the kernel log of the node `root` describes.
pub(crate) fn read(root: &Root) -> Result<KernelLog, Unreadable> {
    if !root.is_live() {
        return read_captured(root);
    }
    match read_device(root, MAX_BYTES, MAX_TIME) {
        Ok(log) => Ok(log),
        Err(kmsg) => read_journal().map_err(|journal| {
            Unreadable(format!(
                "cannot read the kernel log: {KMSG}: {kmsg}; journalctl -k: {journal} (run as root, or lower kernel.dmesg_restrict)"
            ))
        }),
    }
}

/// A captured log under a fixture or snapshot root: a regular file only (a device node in
/// an image would be the host's log, not the image's).
fn read_captured(root: &Root) -> Result<KernelLog, Unreadable> {
    match root.read_capped(KMSG, MAX_BYTES) {
        Ok(Some(bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            Ok(KernelLog {
                lines: text
                    .lines()
                    .filter(|l| wanted(l))
                    .map(str::to_string)
                    .collect(),
                source: root.path(KMSG).display().to_string(),
                records: text.lines().count(),
                truncated: None,
            })
        }
        Ok(None) => Err(Unreadable(format!(
            "no kernel log under --root {} (a captured log is read from {KMSG} when it is a regular file)",
            root.dir().display()
        ))),
        Err(e) => Err(Unreadable(format!(
            "{e}: only a captured log (a regular file) is read under --root, never the host's"
        ))),
    }
}

/// `/dev/kmsg` from the oldest record the ring buffer still holds after the last
/// `dmesg --clear` (`SEEK_DATA`), one record per `read`, until `EAGAIN` (the end), the byte
/// cap or the time cap.
pub(crate) fn read_device(
    root: &Root,
    max_bytes: u64,
    max_time: Duration,
) -> Result<KernelLog, DeviceError> {
    let fd = root
        .open(KMSG, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .map_err(|e| DeviceError::Open(e.source))?;
    // Records cleared by `dmesg --clear` are skipped, as dmesg skips them: an administrator
    // who cleared the log after servicing a GPU has answered its old errors.
    nix::unistd::lseek(fd.as_fd(), 0, nix::unistd::Whence::SeekData).map_err(DeviceError::Seek)?;
    let mut file = std::fs::File::from(fd);
    let started = Instant::now();
    // A record is at most 1 KiB of text plus its dictionary; a short buffer is EINVAL.
    let mut buf = vec![0u8; 16 * 1024];
    let mut read = 0u64;
    let mut lines = Vec::new();
    let mut records = 0;
    let mut truncated = None;
    loop {
        if read >= max_bytes {
            truncated = Some(format!("stopped after {max_bytes} bytes"));
            break;
        }
        if started.elapsed() >= max_time {
            truncated = Some(format!("stopped after {:.1} s", max_time.as_secs_f64()));
            break;
        }
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                read += n as u64;
                records += 1;
                let record = String::from_utf8_lossy(&buf[..n]);
                // The first line is the record; lines after it (indented) its dictionary.
                let first = record.lines().next().unwrap_or_default();
                if wanted(first) {
                    lines.push(first.to_string());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EPIPE: the record was overwritten while reading; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
            Err(e) => return Err(DeviceError::Read(e)),
        }
    }
    Ok(KernelLog {
        lines,
        source: KMSG.into(),
        records,
        truncated,
    })
}

/// `journalctl -k` of this boot, with the kernel's monotonic timestamps, within the time cap.
fn read_journal() -> Result<KernelLog, JournalError> {
    let mut cmd = Command::new("journalctl");
    cmd.args(["-k", "-b", "-q", "--no-pager", "-o", "short-monotonic"]);
    let out = super::exec::run(cmd, MAX_TIME)?;
    if !out.success {
        let why = out.stderr.lines().next().unwrap_or("failed").to_string();
        return Err(JournalError::Failed(crate::say::clean_line(&why)));
    }
    Ok(KernelLog {
        lines: out
            .stdout
            .lines()
            .filter(|l| wanted(l))
            .map(str::to_string)
            .collect(),
        source: "journalctl -k".into(),
        records: out.stdout.lines().count(),
        truncated: None,
    })
}

/// When a log line was written, in microseconds since boot: a `/dev/kmsg` record's third
/// field, or a `dmesg`/`journalctl -o short-monotonic` line's leading `[seconds]`.
pub(crate) fn timestamp_usec(line: &str) -> Option<u64> {
    if let Some((header, _)) = line.split_once(';') {
        let fields: Vec<&str> = header.split(',').collect();
        if fields.len() >= 3 && fields[..3].iter().all(|f| f.parse::<u64>().is_ok()) {
            return fields[2].parse().ok();
        }
    }
    let rest = line.trim_start().strip_prefix('[')?;
    let (secs, _) = rest.split_once(']')?;
    let (whole, frac) = secs.trim().split_once('.').unwrap_or((secs.trim(), ""));
    let whole: u64 = whole.parse().ok()?;
    let frac = format!("{frac:0<6}");
    let micros: u64 = frac.get(..6)?.parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(micros)
}

/// `--since`: a time the Xids are judged from, as seconds since the epoch. Takes
/// `@SECONDS` (epoch), `N{s,m,h,d}` (that long ago) or a UTC date and time
/// `YYYY-MM-DD[ T]HH:MM[:SS][Z]`.
pub(crate) fn parse_since(text: &str) -> Result<u64, SinceError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    parse_since_at(text, now)
}

/// [`parse_since`] with `now` given (tests).
pub(crate) fn parse_since_at(text: &str, now: u64) -> Result<u64, SinceError> {
    let t = text.trim();
    if let Some(epoch) = t.strip_prefix('@') {
        return epoch.parse().map_err(|_| SinceError::Form);
    }
    if let Some(unit) = t.chars().last().filter(|c| "smhd".contains(*c)) {
        let n: u64 = t[..t.len() - 1].parse().map_err(|_| SinceError::Form)?;
        let secs = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => 86_400,
        };
        return n
            .checked_mul(secs)
            .and_then(|ago| now.checked_sub(ago))
            .ok_or_else(|| SinceError::BeforeEpoch(t.to_string()));
    }
    let t = t.trim_end_matches('Z');
    let (date, time) = t.split_once(['T', ' ']).ok_or(SinceError::Form)?;
    let num = |s: &str| s.parse::<i64>().map_err(|_| SinceError::Form);
    let d: Vec<&str> = date.split('-').collect();
    let h: Vec<&str> = time.split(':').collect();
    let ([y, mo, da], [hh, mm, rest @ ..]) = (d.as_slice(), h.as_slice()) else {
        return Err(SinceError::Form);
    };
    let (y, mo, da, hh, mm) = (num(y)?, num(mo)?, num(da)?, num(hh)?, num(mm)?);
    let ss = match rest {
        [] => 0,
        [s] => num(s)?,
        _ => return Err(SinceError::Form),
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || hh > 23 || mm > 59 || ss > 60 {
        return Err(SinceError::Invalid(text.to_string()));
    }
    if !(0..=59).contains(&mm) || hh < 0 || ss < 0 || y < 1970 {
        return Err(SinceError::Form);
    }
    // Days from the civil date (Howard Hinnant's algorithm), UTC.
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).map_err(|_| SinceError::Form)
}

pub(crate) use super::clock::utc;

/// When the node booted, in seconds since the epoch (`btime` of `/proc/stat`), to place
/// `--since` among the log's timestamps (microseconds since boot).
pub(crate) fn boot_time(root: &Root) -> Option<u64> {
    let stat = root.read_optional("/proc/stat").ok()??;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn timestamps_of_each_log_format() {
        let cases: &[(&str, Option<u64>)] = &[
            ("4,1234,22859081860,-;NVRM: Xid", Some(22_859_081_860)),
            ("[22859.081860] NVRM: Xid", Some(22_859_081_860)),
            ("[    5.1] host kernel: NVRM: Xid", Some(5_100_000)),
            ("[Fri Aug 30 11:43:09 2024] NVRM: Xid", None),
            ("Nov 25 10:00:00 host kernel: NVRM: Xid", None),
            ("a,b,c;NVRM", None),
            ("", None),
        ];
        for (line, want) in cases {
            assert_eq!(timestamp_usec(line), *want, "{line:?}");
        }
    }

    #[test]
    fn since_forms() {
        let now = 1_764_080_000; // 2025-11-25 14:13:20 UTC
        assert_eq!(parse_since_at("@1700000000", now), Ok(1_700_000_000));
        assert_eq!(parse_since_at("2h", now), Ok(now - 7200));
        assert_eq!(parse_since_at("30m", now), Ok(now - 1800));
        assert_eq!(parse_since_at("1d", now), Ok(now - 86_400));
        assert_eq!(parse_since_at("2025-11-25 14:13:20", now), Ok(now));
        assert_eq!(parse_since_at("2025-11-25T14:13Z", now), Ok(now - 20));
        assert_eq!(parse_since_at("1970-01-01 00:00", now), Ok(0));
        assert_eq!(parse_since_at("2024-02-29 00:00", now), Ok(1_709_164_800));
        for bad in [
            "",
            "yesterday",
            "2h ago",
            "2025-13-01 00:00",
            "2025-11-25",
            "@-1",
            "99999999999999999d",
            "2025-11-25 24:00",
        ] {
            assert!(parse_since_at(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn boot_time_from_proc_stat() {
        let tree = Tree::new();
        assert_eq!(boot_time(&tree.root()), None);
        tree.file("/proc/stat", "cpu  1 2 3\nbtime 1764000000\nprocesses 5\n");
        assert_eq!(boot_time(&tree.root()), Some(1_764_000_000));
    }

    #[test]
    fn a_captured_log_is_read_only_when_it_is_a_regular_file() {
        let tree = Tree::new();
        let err = read(&tree.root()).unwrap_err();
        assert!(err.0.contains("no kernel log under --root"), "{err}");
        tree.file(
            KMSG,
            "6,1,5,-;Linux version 6.8\n4,2,9,-;NVRM: Xid (PCI:0000:01:00): 31, pid=1\n",
        );
        let log = read(&tree.root()).unwrap();
        assert_eq!(log.lines, ["4,2,9,-;NVRM: Xid (PCI:0000:01:00): 31, pid=1"]);
        // A FIFO where the log belongs is refused, never waited on.
        let fifo = tree.root().path(KMSG);
        std::fs::remove_file(&fifo).unwrap();
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read(&tree.root()).unwrap_err();
        assert!(err.0.contains("never the host's"), "{err}");
    }

    /// This machine's real `/dev/kmsg` (readable as root): records come back, the read ends
    /// at EAGAIN instead of blocking, and the caps stop it.
    #[test]
    fn the_live_kernel_log_is_read_to_its_end_without_blocking() {
        let live = Root::live();
        let started = Instant::now();
        let full = match read_device(&live, MAX_BYTES, MAX_TIME) {
            Ok(log) => log,
            // Not root, or no /dev/kmsg in this container: the reason is given.
            Err(e) => return assert!(!e.to_string().is_empty()),
        };
        assert!(started.elapsed() < MAX_TIME + Duration::from_secs(1));
        assert_eq!(full.source, KMSG);
        assert!(full.lines.iter().all(|l| l.contains("NVRM:")));
        if full.records > 1 {
            let capped = read_device(&live, 1, MAX_TIME).unwrap();
            assert_eq!(capped.records, 1);
            assert_eq!(capped.truncated.as_deref(), Some("stopped after 1 bytes"));
        }
    }
}
