//! Cgroup limits: where a slice lives in cgroupfs and how a cgroup v2 file (`memory.max`)
//! is written as a systemd slice directive (`MemoryMax=`) for the drop-in.

/// The cgroupfs directory of a systemd slice: `a-b.slice` → `a.slice/a-b.slice` (systemd
/// nests slices by their dash-separated prefixes).
pub(crate) fn slice_dir(slice: &str) -> String {
    let name = unit_name(slice);
    let stem = name.trim_end_matches(".slice");
    let parts: Vec<&str> = stem.split('-').collect();
    (1..=parts.len())
        .map(|n| format!("{}.slice", parts[..n].join("-")))
        .collect::<Vec<_>>()
        .join("/")
}

/// The slice's unit name, `.slice` added when missing.
pub(crate) fn unit_name(slice: &str) -> String {
    if slice.ends_with(".slice") {
        slice.to_string()
    } else {
        format!("{slice}.slice")
    }
}

/// The systemd directives equivalent to writing `value` to the cgroup v2 file `key`;
/// keys already in systemd form (`MemoryMax`) pass through. `None` for keys systemd has
/// no directive for.
pub(crate) fn directives(key: &str, value: &str) -> Option<Vec<(String, String)>> {
    let value = value.trim();
    let infinity = |v: &str| {
        if v == "max" {
            "infinity".to_string()
        } else {
            v.to_string()
        }
    };
    let one = |name: &str, v: String| Some(vec![(name.to_string(), v)]);
    if key.starts_with(|c: char| c.is_ascii_uppercase()) && !key.contains('.') {
        return one(key, value.to_string());
    }
    match key {
        "memory.max" => one("MemoryMax", infinity(value)),
        "memory.high" => one("MemoryHigh", infinity(value)),
        "memory.low" => one("MemoryLow", value.to_string()),
        "memory.min" => one("MemoryMin", value.to_string()),
        "memory.swap.max" => one("MemorySwapMax", infinity(value)),
        "pids.max" => one("TasksMax", infinity(value)),
        "cpu.weight" => one("CPUWeight", value.to_string()),
        "io.weight" => one(
            "IOWeight",
            value.trim_start_matches("default").trim().to_string(),
        ),
        "cpuset.cpus" => one("AllowedCPUs", value.to_string()),
        "cpuset.mems" => one("AllowedMemoryNodes", value.to_string()),
        "cpu.max" => {
            let mut fields = value.split_whitespace();
            let quota = fields.next()?;
            let period: u64 = fields.next().map_or(Some(100_000), |p| p.parse().ok())?;
            if period == 0 {
                return None;
            }
            let quota_directive = if quota == "max" {
                String::new()
            } else {
                let q: u64 = quota.parse().ok()?;
                format!("{}%", q * 100 / period)
            };
            Some(vec![
                ("CPUQuota".into(), quota_directive),
                ("CPUQuotaPeriodSec".into(), format!("{period}us")),
            ])
        }
        _ => None,
    }
}

/// True for keys that name a cgroupfs file (as opposed to a systemd directive).
pub(crate) fn is_cgroupfs_key(key: &str) -> bool {
    key.contains('.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::assert_cases;

    #[test]
    fn slices_nest_by_prefix() {
        let cases = [
            ("training", "training.slice"),
            ("training.slice", "training.slice"),
            ("user-1000.slice", "user.slice/user-1000.slice"),
            ("a-b-c", "a.slice/a-b.slice/a-b-c.slice"),
        ];
        assert_cases(cases, slice_dir);
    }

    #[test]
    fn cgroup_files_become_directives() {
        let d = |k: &str, v: &str| directives(k, v);
        let one = |n: &str, v: &str| Some(vec![(n.to_string(), v.to_string())]);
        assert_eq!(d("memory.max", "max"), one("MemoryMax", "infinity"));
        assert_eq!(
            d("memory.max", "1073741824"),
            one("MemoryMax", "1073741824")
        );
        assert_eq!(d("pids.max", "4096"), one("TasksMax", "4096"));
        assert_eq!(d("cpu.weight", "200"), one("CPUWeight", "200"));
        assert_eq!(d("io.weight", "default 300"), one("IOWeight", "300"));
        assert_eq!(d("cpuset.cpus", "0-15"), one("AllowedCPUs", "0-15"));
        assert_eq!(d("MemoryMax", "8G"), one("MemoryMax", "8G"));
        assert_eq!(
            d("cpu.max", "200000 100000"),
            Some(vec![
                ("CPUQuota".into(), "200%".into()),
                ("CPUQuotaPeriodSec".into(), "100000us".into())
            ])
        );
        assert_eq!(d("cpu.max", "max 100000").unwrap()[0].1, "");
        assert_eq!(d("cpu.max", "x 100000"), None);
        assert_eq!(d("cpu.max", "100 0"), None);
        assert_eq!(d("memory.stat", "1"), None);
        assert!(is_cgroupfs_key("memory.max") && !is_cgroupfs_key("MemoryMax"));
    }
}
