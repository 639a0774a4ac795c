//! Sysctl values as the kernel's handlers parse them, so `--persisted` and the live "lost
//! at reboot" check judge what a sysctl.d line really does at boot.
//!
//! systemd-sysctl writes the text after `=` to `/proc/sys/...`; the kernel's integer
//! handlers (`proc_dointvec_minmax`, `proc_dou8vec_minmax`, `proc_doulongvec_minmax`,
//! `proc_dointvec_jiffies`, kernel/sysctl.c) read each field with `proc_get_long`: an
//! optional `-`, then `strtoul` in base 0 (`0x` hex, a leading `0` octal, else decimal),
//! followed by white space or the end. `64M`, `unlimited`, `+5` and `1.5` are rejected
//! (EINVAL), as are values outside the knob's range (`vm.swappiness = -1`): systemd-sysctl
//! then logs a failure and the kernel keeps its default.

/// How the kernel parses one knob: how many fields it takes and each field's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handler {
    pub fields: usize,
    pub min: i64,
    pub max: i64,
}

const INT_MAX: i64 = i32::MAX as i64;
const INT_MIN: i64 = i32::MIN as i64;

/// The handler of the knobs gputune's checks judge (kernel 6.x sources); `None` for other
/// knobs, whose values are taken as written.
pub(crate) fn handler(name: &str) -> Option<Handler> {
    let h = |fields, min, max| Some(Handler { fields, min, max });
    match name {
        // proc_dointvec_minmax, 0..200 since 5.8.
        "vm.swappiness" => h(1, 0, 200),
        "vm.zone_reclaim_mode" => h(1, 0, INT_MAX),
        // NUMA_BALANCING_NORMAL | NUMA_BALANCING_MEMORY_TIERING.
        "kernel.numa_balancing" => h(1, 0, 3),
        // proc_doulongvec_minmax (unsigned long; negative rejected).
        "fs.file-max" => h(1, 0, i64::MAX),
        // proc_dointvec_minmax; the lower bounds (SOCK_MIN_RCVBUF/SNDBUF) depend on the
        // build's struct sizes, so only the int range is checked.
        "net.core.rmem_max"
        | "net.core.wmem_max"
        | "net.core.rmem_default"
        | "net.core.wmem_default"
        | "net.core.somaxconn" => h(1, 0, INT_MAX),
        // proc_dointvec: any int.
        "net.core.netdev_max_backlog" => h(1, INT_MIN, INT_MAX),
        "net.ipv4.tcp_rmem" | "net.ipv4.tcp_wmem" => h(3, 1, INT_MAX),
        // proc_dou8vec_minmax.
        "net.ipv4.tcp_window_scaling"
        | "net.ipv4.tcp_sack"
        | "net.ipv4.tcp_slow_start_after_idle" => h(1, 0, 1),
        "net.ipv4.tcp_timestamps" | "net.ipv4.tcp_mtu_probing" => h(1, 0, 2),
        // proc_dointvec_jiffies: seconds times HZ must fit an int (HZ up to 1000).
        "net.ipv4.tcp_fin_timeout" => h(1, -(INT_MAX / 1000), INT_MAX / 1000),
        // ipv4_local_port_range: two ports, low <= high (checked below).
        "net.ipv4.ip_local_port_range" => h(2, 1, 65535),
        _ => None,
    }
}

/// Why systemd-sysctl's write of a value would fail: the kernel's handler rejects it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("an empty value")]
    Empty,
    #[error("{given} values where the kernel takes {takes}")]
    TooMany { given: usize, takes: usize },
    #[error(
        "`{0}` is not an integer the kernel reads (decimal, 0x hex or 0 octal, no sign but -, no units)"
    )]
    NotInteger(String),
    #[error("{value} is outside {min}..={max}")]
    OutOfRange { value: i64, min: i64, max: i64 },
    #[error("the low port {low} is above the high port {high}")]
    PortsReversed { low: i64, high: i64 },
}

/// What the kernel sets for `raw` written to knob `name`: the fields in decimal, separated
/// by single spaces (`010` is 8, `0x10` is 16). Knobs without a known handler come back as
/// written (white space folded).
pub fn kernel_value(name: &str, raw: &str) -> Result<String, Rejected> {
    let Some(h) = handler(name) else {
        return Ok(crate::host::sysctl::normalize(raw));
    };
    let fields: Vec<&str> = raw
        .split([' ', '\t', '\n'])
        .filter(|f| !f.is_empty())
        .collect();
    if fields.is_empty() {
        return Err(Rejected::Empty);
    }
    if fields.len() > h.fields {
        return Err(Rejected::TooMany {
            given: fields.len(),
            takes: h.fields,
        });
    }
    let mut values = Vec::with_capacity(fields.len());
    for f in &fields {
        let v = parse_long(f).ok_or_else(|| Rejected::NotInteger(f.to_string()))?;
        if v < h.min || v > h.max {
            return Err(Rejected::OutOfRange {
                value: v,
                min: h.min,
                max: h.max,
            });
        }
        values.push(v);
    }
    if name == "net.ipv4.ip_local_port_range" && values.len() == 2 && values[0] > values[1] {
        return Err(Rejected::PortsReversed {
            low: values[0],
            high: values[1],
        });
    }
    Ok(values
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(" "))
}

/// `proc_get_long`: `-`? then base-0 `strtoul`, the whole field consumed; `None` on any
/// other character or overflow.
fn parse_long(field: &str) -> Option<i64> {
    let (neg, digits) = match field.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, field),
    };
    let (radix, body) = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, hex)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(body, radix).ok()?;
    let magnitude = i64::try_from(magnitude).ok()?;
    Some(if neg { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_the_kernel_accepts_and_sets() {
        let cases: &[(&str, &str, &str)] = &[
            ("vm.swappiness", "10", "10"),
            ("vm.swappiness", "010", "8"),
            ("net.core.rmem_max", "0x1000000", "16777216"),
            (
                "net.ipv4.tcp_rmem",
                "4096\t131072  16777216",
                "4096 131072 16777216",
            ),
            ("net.ipv4.tcp_rmem", "4096", "4096"),
            ("net.ipv4.ip_local_port_range", "50000 51000", "50000 51000"),
            ("net.ipv4.tcp_fin_timeout", "-5", "-5"),
            ("net.ipv4.tcp_congestion_control", "bbr", "bbr"),
        ];
        for (name, raw, want) in cases {
            assert_eq!(
                kernel_value(name, raw).as_deref(),
                Ok(*want),
                "{name} = {raw}"
            );
        }
    }

    #[test]
    fn values_systemd_sysctl_could_not_set() {
        use Rejected::*;
        let not = |f: &str| NotInteger(f.into());
        let range = |value, min, max| OutOfRange { value, min, max };
        let cases: &[(&str, &str, Rejected)] = &[
            ("net.core.rmem_max", "64M", not("64M")),
            ("net.core.rmem_max", "unlimited", not("unlimited")),
            ("net.ipv4.tcp_fin_timeout", "+5", not("+5")),
            ("vm.swappiness", "-1", range(-1, 0, 200)),
            ("vm.swappiness", "201", range(201, 0, 200)),
            ("vm.swappiness", "1.5", not("1.5")),
            ("vm.swappiness", "09", not("09")),
            ("vm.swappiness", "", Empty),
            ("vm.swappiness", " \t\n", Empty),
            ("fs.file-max", "-1", range(-1, 0, i64::MAX)),
            (
                "fs.file-max",
                "99999999999999999999",
                not("99999999999999999999"),
            ),
            (
                "net.ipv4.tcp_rmem",
                "4096 131072 16777216 1",
                TooMany { given: 4, takes: 3 },
            ),
            (
                "net.ipv4.tcp_rmem",
                "0 131072 16777216",
                range(0, 1, INT_MAX),
            ),
            (
                "net.ipv4.ip_local_port_range",
                "51000 50000",
                PortsReversed {
                    low: 51000,
                    high: 50000,
                },
            ),
            (
                "net.ipv4.ip_local_port_range",
                "0 50000",
                range(0, 1, 65535),
            ),
            ("net.ipv4.tcp_sack", "2", range(2, 0, 1)),
            ("net.core.somaxconn", "4096,", not("4096,")),
        ];
        for (name, raw, want) in cases {
            assert_eq!(
                kernel_value(name, raw).as_ref(),
                Err(want),
                "{name} = {raw:?}"
            );
        }
    }

    /// What systemd-sysctl's failure is reported as, word for word.
    #[test]
    fn rejections_read_as_before() {
        let cases: &[(&str, &str, &str)] = &[
            ("vm.swappiness", "", "an empty value"),
            ("vm.swappiness", "1 2", "2 values where the kernel takes 1"),
            (
                "net.core.rmem_max",
                "64M",
                "`64M` is not an integer the kernel reads (decimal, 0x hex or 0 octal, no sign but -, no units)",
            ),
            ("vm.swappiness", "201", "201 is outside 0..=200"),
            (
                "net.ipv4.ip_local_port_range",
                "50001 50000",
                "the low port 50001 is above the high port 50000",
            ),
        ];
        for (name, raw, want) in cases {
            let got = kernel_value(name, raw).map_err(|e| e.to_string());
            assert_eq!(got, Err(want.to_string()), "{name} = {raw:?}");
        }
    }

    /// Each judged knob's range, ends included: the lowest and highest values are set, one
    /// past either end is refused, and the value is read the kernel's way (`01` is 1), so a
    /// knob whose handler went missing (its value taken as written) fails here.
    #[test]
    fn every_handler_at_its_edges() {
        const JIFFY_MAX: i64 = 2_147_483;
        let cases: &[(&str, i64, i64)] = &[
            ("vm.swappiness", 0, 200),
            ("vm.zone_reclaim_mode", 0, INT_MAX),
            ("kernel.numa_balancing", 0, 3),
            ("fs.file-max", 0, i64::MAX),
            ("net.core.rmem_max", 0, INT_MAX),
            ("net.core.wmem_max", 0, INT_MAX),
            ("net.core.rmem_default", 0, INT_MAX),
            ("net.core.wmem_default", 0, INT_MAX),
            ("net.core.somaxconn", 0, INT_MAX),
            ("net.core.netdev_max_backlog", INT_MIN, INT_MAX),
            ("net.ipv4.tcp_rmem", 1, INT_MAX),
            ("net.ipv4.tcp_wmem", 1, INT_MAX),
            ("net.ipv4.tcp_window_scaling", 0, 1),
            ("net.ipv4.tcp_sack", 0, 1),
            ("net.ipv4.tcp_slow_start_after_idle", 0, 1),
            ("net.ipv4.tcp_timestamps", 0, 2),
            ("net.ipv4.tcp_mtu_probing", 0, 2),
            ("net.ipv4.tcp_fin_timeout", -JIFFY_MAX, JIFFY_MAX),
            ("net.ipv4.ip_local_port_range", 1, 65535),
        ];
        for &(name, min, max) in cases {
            for v in [min, max] {
                assert_eq!(
                    kernel_value(name, &v.to_string()),
                    Ok(v.to_string()),
                    "{name} = {v}"
                );
            }
            if min > i64::MIN {
                let below = (min - 1).to_string();
                assert!(kernel_value(name, &below).is_err(), "{name} = {below}");
            }
            let above = i128::from(max) + 1;
            assert!(
                kernel_value(name, &above.to_string()).is_err(),
                "{name} = {above}"
            );
            assert_eq!(kernel_value(name, "01").as_deref(), Ok("1"), "{name}");
            assert!(kernel_value(name, "1k").is_err(), "{name}");
        }
    }

    #[test]
    fn port_range_ends_may_be_equal() {
        let range = |raw| kernel_value("net.ipv4.ip_local_port_range", raw);
        assert_eq!(range("50000 50000").as_deref(), Ok("50000 50000"));
        assert_eq!(range("1 65535").as_deref(), Ok("1 65535"));
        assert_eq!(range("50000").as_deref(), Ok("50000"));
        assert_eq!(
            range("50001 50000"),
            Err(Rejected::PortsReversed {
                low: 50001,
                high: 50000
            })
        );
        // Only the port range orders its fields.
        assert_eq!(
            kernel_value("net.ipv4.tcp_rmem", "9 5 1").as_deref(),
            Ok("9 5 1")
        );
    }

    #[test]
    fn numbers_in_every_base_the_kernel_reads() {
        let swap = |raw| kernel_value("vm.swappiness", raw);
        assert_eq!(swap("0").as_deref(), Ok("0"));
        assert_eq!(swap("0x10").as_deref(), Ok("16"));
        assert_eq!(swap("0X1f").as_deref(), Ok("31"));
        assert_eq!(swap("07").as_deref(), Ok("7"));
        assert_eq!(swap("-0").as_deref(), Ok("0"));
        for bad in ["0x", "0xg", "-", "08", "1-", "\u{0664}"] {
            assert!(swap(bad).is_err(), "{bad:?}");
        }
        assert_eq!(swap("1 2"), Err(Rejected::TooMany { given: 2, takes: 1 }));
    }
}
