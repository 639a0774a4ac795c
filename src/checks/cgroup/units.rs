//! A slice's resource settings as systemd will load them at boot from an image's unit
//! directories: the unit file (the first directory holding it wins, /etc first) and its
//! drop-ins `NAME.slice.d/*.conf` from every directory, applied in lexical order of their file
//! names (a same-named drop-in in an earlier directory masks the later one). The last
//! assignment of a property wins; an empty one resets it to systemd's default.

use std::collections::BTreeMap;

use crate::host::{HostError, Root};
use crate::profile::amount::Amount;

/// Where systemd loads system units from, highest precedence first (systemd.unit(5); /run
/// is empty in an image).
pub(crate) const UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// The slice properties judged, and the cgroup v2 key each sets.
pub(crate) const PROPERTIES: [(&str, &str); 4] = [
    ("MemoryMax", "memory.max"),
    ("MemoryHigh", "memory.high"),
    ("CPUQuota", "cpu.max"),
    ("TasksMax", "pids.max"),
];

/// The systemd property that sets a cgroup key (`memory.max` → `MemoryMax`).
pub(crate) fn property_of(key: &str) -> Option<&'static str> {
    PROPERTIES.iter().find(|(_, k)| *k == key).map(|(p, _)| *p)
}

/// One assignment of a property, where it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assignment {
    /// The value as written (trimmed; empty = reset to the default).
    pub value: String,
    /// The host path of the file (`/etc/systemd/system/training.slice.d/50-limits.conf`).
    pub file: String,
    /// 1-based line of the assignment.
    pub line: usize,
}

/// Why a unit's settings cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnitError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(
        "{unit} is masked ({file} links to /dev/null): systemd will not start it, so no job runs in it"
    )]
    Masked { unit: String, file: String },
}

/// The files systemd reads for `unit`, in the order it applies them.
pub(crate) fn unit_files(root: &Root, unit: &str) -> Result<Vec<String>, UnitError> {
    let mut files = Vec::new();
    for dir in UNIT_DIRS {
        let file = format!("{dir}/{unit}");
        if root.is_file(&file) {
            files.push(file);
            break;
        }
        if matches!(root.read_link(&file), Ok(Some(target)) if target == "/dev/null") {
            return Err(UnitError::Masked {
                unit: unit.into(),
                file,
            });
        }
    }
    let mut drop_ins: BTreeMap<String, String> = BTreeMap::new();
    for dir in UNIT_DIRS {
        let d = format!("{dir}/{unit}.d");
        for name in root.list_dir(&d)?.unwrap_or_default() {
            // A same-named entry masks the later directories' even when it is no file (a
            // link to /dev/null is how a drop-in is masked).
            if name.ends_with(".conf") {
                let path = format!("{d}/{name}");
                drop_ins.entry(name).or_insert(path);
            }
        }
    }
    files.extend(drop_ins.into_values().filter(|path| root.is_file(path)));
    Ok(files)
}

/// The last assignment of each judged property in the `[Slice]` section of `unit`'s files.
pub(crate) fn slice_settings(
    root: &Root,
    unit: &str,
) -> Result<BTreeMap<String, Assignment>, UnitError> {
    let mut out = BTreeMap::new();
    for file in unit_files(root, unit)? {
        let text = root.read(&file)?;
        for (line, key, value) in assignments(&text, "Slice") {
            if property_of_name(&key) {
                out.insert(
                    key,
                    Assignment {
                        value,
                        file: file.clone(),
                        line,
                    },
                );
            }
        }
    }
    Ok(out)
}

fn property_of_name(name: &str) -> bool {
    PROPERTIES.iter().any(|(p, _)| *p == name)
}

/// `(line, key, value)` of each assignment in `section`, continuation lines (a trailing `\`)
/// joined, comments (`#`, `;`) skipped.
fn assignments(text: &str, section: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, raw)) = lines.next() {
        let mut line = raw.trim().to_string();
        while let Some(stripped) = line.strip_suffix('\\') {
            line = stripped.to_string();
            match lines.next() {
                Some((_, more)) => {
                    line.push(' ');
                    line.push_str(more.trim());
                }
                None => break,
            }
        }
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
            continue;
        }
        if current != section {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            out.push((i + 1, key.trim().to_string(), value.trim().to_string()));
        }
    }
    out
}

/// A property's value in the unit of its cgroup key (bytes, tasks, thousandths of a CPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Amount(Amount),
    /// A percentage of something only the running node knows (RAM, the kernel's pid limit).
    Relative(String),
}

/// Why a property's value cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{property}={value} is not {wanted}")]
pub(crate) struct BadValue {
    pub property: String,
    pub value: String,
    wanted: &'static str,
}

/// Parses `value` of `property` as systemd does: `infinity`, bytes with a K/M/G/T/P/E suffix
/// (powers of 1024) or a percentage of RAM for Memory*, a count or a percentage of the pid
/// limit for TasksMax, a percentage of one CPU for CPUQuota. Empty is the default: no limit.
pub(crate) fn parse(property: &str, value: &str) -> Result<Value, BadValue> {
    let v = value.trim();
    let bad = |wanted| BadValue {
        property: property.into(),
        value: value.into(),
        wanted,
    };
    if v.is_empty() || (v == "infinity" && property != "CPUQuota") {
        return Ok(Value::Amount(Amount::Unlimited));
    }
    match property {
        "CPUQuota" => {
            let wanted = "a percentage of one CPU such as 400%";
            let percent = v.strip_suffix('%').ok_or_else(|| bad(wanted))?;
            let milli = decimal(percent, 10).ok_or_else(|| bad(wanted))?;
            if milli == 0 {
                return Err(bad(wanted));
            }
            Ok(Value::Amount(Amount::Finite(milli)))
        }
        _ if v.ends_with(['%', '‰', '‱']) => {
            let of = if property == "TasksMax" {
                "of the kernel's pid limit"
            } else {
                "of the node's RAM"
            };
            Ok(Value::Relative(format!("{v} {of}")))
        }
        "TasksMax" => v
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .map(|n| Value::Amount(Amount::Finite(n.into())))
            .ok_or_else(|| bad("a number of tasks, a percentage or infinity")),
        _ => {
            let wanted = "bytes (with K, M, G, T suffix), a percentage or infinity";
            let (number, unit) = v.split_at(
                v.find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(v.len()),
            );
            let shift = match unit.trim() {
                "" | "B" => 0,
                "K" => 10,
                "M" => 20,
                "G" => 30,
                "T" => 40,
                "P" => 50,
                "E" => 60,
                _ => return Err(bad(wanted)),
            };
            decimal(number, 1i128 << shift)
                .map(|n| Value::Amount(Amount::Finite(n)))
                .ok_or_else(|| bad(wanted))
        }
    }
}

/// `text` (digits, optionally with a fraction) times `scale`, rounded down.
fn decimal(text: &str, scale: i128) -> Option<i128> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty()
        || !(whole.chars().all(|c| c.is_ascii_digit()))
        || !fraction.chars().all(|c| c.is_ascii_digit())
        || fraction.len() > 9
    {
        return None;
    }
    let whole: i128 = whole.parse().ok()?;
    let mut result = whole.checked_mul(scale)?;
    if !fraction.is_empty() {
        let f: i128 = fraction.parse().ok()?;
        result = result.checked_add(f.checked_mul(scale)? / 10i128.pow(fraction.len() as u32))?;
    }
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    #[test]
    fn drop_ins_apply_in_name_order_across_directories_and_etc_masks() {
        let tree = Tree::with(&[
            (
                "usr/lib/systemd/system/t.slice",
                "[Slice]\nMemoryMax=1G\nTasksMax=100\n",
            ),
            (
                "etc/systemd/system/t.slice",
                "[Unit]\nMemoryMax=9G\n[Slice]\nMemoryHigh=2G\n",
            ),
            (
                "usr/lib/systemd/system/t.slice.d/10-a.conf",
                "[Slice]\nMemoryHigh=3G\n",
            ),
            (
                "lib/systemd/system/t.slice.d/20-b.conf",
                "[Slice]\n# c\nCPUQuota=\\\n 200%\n",
            ),
            (
                "usr/lib/systemd/system/t.slice.d/30-c.conf",
                "[Slice]\nTasksMax=5\n",
            ),
            (
                "etc/systemd/system/t.slice.d/30-c.conf",
                "[Slice]\nTasksMax=7\n",
            ),
            (
                "etc/systemd/system/t.slice.d/99-z.conf",
                "[Slice]\nMemoryHigh=\n",
            ),
            (
                "etc/systemd/system/t.slice.d/readme.txt",
                "[Slice]\nMemoryMax=1\n",
            ),
            (
                "usr/lib/systemd/system/t.slice.d/40-m.conf",
                "[Slice]\nMemoryMax=1\n",
            ),
        ]);
        // A drop-in masked by a link to /dev/null in /etc is not read.
        tree.link("/etc/systemd/system/t.slice.d/40-m.conf", "/dev/null");
        let root = tree.root();
        let files = unit_files(&root, "t.slice").unwrap();
        assert_eq!(
            files,
            [
                "/etc/systemd/system/t.slice",
                "/usr/lib/systemd/system/t.slice.d/10-a.conf",
                "/lib/systemd/system/t.slice.d/20-b.conf",
                "/etc/systemd/system/t.slice.d/30-c.conf",
                "/etc/systemd/system/t.slice.d/99-z.conf",
            ]
        );
        let s = slice_settings(&root, "t.slice").unwrap();
        // The /usr/lib unit file is masked by /etc's; [Unit] assignments do not count.
        assert!(!s.contains_key("MemoryMax"), "{s:?}");
        let at = |k: &str| (s[k].value.as_str(), s[k].file.as_str(), s[k].line);
        assert_eq!(
            at("MemoryHigh"),
            ("", "/etc/systemd/system/t.slice.d/99-z.conf", 2)
        );
        assert_eq!(
            at("CPUQuota"),
            ("200%", "/lib/systemd/system/t.slice.d/20-b.conf", 3)
        );
        assert_eq!(
            at("TasksMax"),
            ("7", "/etc/systemd/system/t.slice.d/30-c.conf", 2)
        );
        assert!(slice_settings(&root, "absent.slice").unwrap().is_empty());
        tree.link("/etc/systemd/system/m.slice", "/dev/null");
        assert!(matches!(
            slice_settings(&root, "m.slice"),
            Err(UnitError::Masked { .. })
        ));
    }

    #[test]
    fn values_in_cgroup_units() {
        let a = |n: i128| Ok(Value::Amount(Amount::Finite(n)));
        let max = Ok(Value::Amount(Amount::Unlimited));
        let share = |of: &str| Ok(Value::Relative(of.into()));
        let cases: &[(&str, &str, Result<Value, ()>)] = &[
            ("MemoryMax", "8G", a(8 << 30)),
            ("MemoryMax", "1.5K", a(1536)),
            ("MemoryMax", "4096", a(4096)),
            ("MemoryHigh", "infinity", max.clone()),
            ("MemoryHigh", "", max.clone()),
            ("MemoryMax", "50%", share("50% of the node's RAM")),
            ("MemoryMax", "8Q", Err(())),
            ("MemoryMax", "lots", Err(())),
            ("CPUQuota", "400%", a(4000)),
            ("CPUQuota", "12.5%", a(125)),
            ("CPUQuota", "", max.clone()),
            ("CPUQuota", "400", Err(())),
            ("CPUQuota", "0%", Err(())),
            ("TasksMax", "8192", a(8192)),
            ("TasksMax", "infinity", max.clone()),
            ("TasksMax", "15%", share("15% of the kernel's pid limit")),
            ("TasksMax", "4K", Err(())),
            ("TasksMax", "0", Err(())),
        ];
        for (p, v, want) in cases {
            assert_eq!(parse(p, v).map_err(|_| ()), *want, "{p}={v}");
        }
    }
}
