//! `/proc/mounts` (under the root): which file system is mounted where, with its options.
//! Both `/dev/shm` sizing and cgroup detection read it, so it works on a captured image too.

use super::{HostError, Root};

/// One line of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: String,
    pub target: String,
    pub fstype: String,
    pub options: Vec<String>,
}

impl Mount {
    /// The value of a `key=value` option, e.g. `size` of a tmpfs.
    pub(crate) fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    }

    /// True when a bare option such as `memory` (a cgroup v1 controller) is present.
    pub(crate) fn has_option(&self, word: &str) -> bool {
        self.options.iter().any(|o| o == word)
    }
}

/// Parses `/proc/mounts`: `source target fstype options dump pass`, with spaces in paths
/// written as `\040`. Malformed lines are errors naming the line.
pub fn parse(text: &str) -> Result<Vec<Mount>, MalformedLine> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 4 {
                return Err(MalformedLine {
                    line: i + 1,
                    text: line.to_string(),
                });
            }
            Ok(Mount {
                source: unescape(fields[0]),
                target: unescape(fields[1]),
                fstype: fields[2].to_string(),
                options: fields[3].split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// A line of a mount table with fewer than four fields; the caller names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: malformed line `{text}`")]
pub struct MalformedLine {
    /// 1-based, counting every line of the file.
    pub line: usize,
    pub text: String,
}

impl MalformedLine {
    /// The same line, naming the file it is in.
    pub(crate) fn in_file(self, file: &'static str) -> MalformedIn {
        MalformedIn { file, line: self }
    }
}

/// A malformed line of a named mount table: `PATH:LINE: malformed line `...``.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{}: malformed line `{}`", line.line, line.text)]
pub struct MalformedIn {
    /// The table as the node names it: `/proc/mounts`, `/etc/fstab`.
    pub file: &'static str,
    pub line: MalformedLine,
}

/// Why a root's mount table is not known: the file is unreadable, or a line is malformed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TableError {
    #[error(transparent)]
    Unreadable(#[from] HostError),
    #[error(transparent)]
    Malformed(#[from] MalformedIn),
}

/// Undoes the octal escapes the kernel writes for space, tab, newline and backslash.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The mounts of the node under `root`; `None` when the root has no `/proc/mounts`.
pub(crate) fn read(root: &Root) -> Result<Option<Result<Vec<Mount>, MalformedIn>>, HostError> {
    Ok(root
        .read_optional("/proc/mounts")?
        .map(|t| parse(&t).map_err(|e| e.in_file("/proc/mounts"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        let text = "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=65536k,inode64 0 0\n\
                    cgroup /sys/fs/cgroup/cpu\\040x cgroup rw,cpu 0 0\n";
        let mounts = parse(text).unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].option("size"), Some("65536k"));
        assert_eq!(mounts[0].option("mode"), None);
        assert!(mounts[1].has_option("cpu"));
        assert_eq!(mounts[1].target, "/sys/fs/cgroup/cpu x");
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(
            parse("proc /proc proc rw\ntmpfs /dev/shm\n").unwrap_err(),
            MalformedLine {
                line: 2,
                text: "tmpfs /dev/shm".into()
            }
        );
        let named = parse("tmpfs\n").unwrap_err().in_file("/proc/mounts");
        assert_eq!(named.to_string(), "/proc/mounts:1: malformed line `tmpfs`");
    }
}
