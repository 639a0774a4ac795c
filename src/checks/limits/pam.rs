//! `/etc/security/limits.conf` and `limits.d/*.conf` as pam_limits reads them, and the
//! resolver that says what a new login session would get. The parser is pure; the audit
//! reads the files.

/// Files pam_limits reads: the main file, then `*.conf` of the drop-in directory in C-locale
/// name order.
pub(crate) const MAIN_FILE: &str = "/etc/security/limits.conf";
/// See [`MAIN_FILE`].
pub(crate) const DROP_IN_DIR: &str = "/etc/security/limits.d";

/// Items pam_limits accepts (limits.conf(5)); anything else is a bad line.
const ITEMS: &[&str] = &[
    "core",
    "data",
    "fsize",
    "memlock",
    "nofile",
    "rss",
    "stack",
    "cpu",
    "nproc",
    "as",
    "maxlogins",
    "maxsyslogins",
    "nonewprivs",
    "priority",
    "locks",
    "sigpending",
    "msgqueue",
    "nice",
    "rtprio",
    "chroot",
];

/// Who a line applies to (the first column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Domain {
    User(String),
    /// `@group`.
    Group(String),
    /// `%group`: only maxlogins; pam_limits ranks it between groups and `*`.
    AllGroup(String),
    /// `*`: every user except root.
    Wildcard,
    /// `min:max` uid range (either end may be open).
    UidRange(Option<u32>, Option<u32>),
    /// `@min:max` gid range.
    GidRange(Option<u32>, Option<u32>),
}

/// `soft`, `hard` or `-` (both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Soft,
    Hard,
    Both,
}

/// A limit value in the item's own unit (KiB for memlock and stack, a count for nofile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    Unlimited,
    Finite(u64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Unlimited => f.write_str("unlimited"),
            Value::Finite(n) => write!(f, "{n}"),
        }
    }
}

/// One valid line, with where it was written so findings can point to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub file: String,
    pub line: usize,
    pub domain: Domain,
    pub kind: Kind,
    pub item: String,
    pub value: Value,
    /// How pam_limits reads a value that is not plain (`128k` is read as 128).
    pub note: Option<String>,
}

impl Entry {
    pub(crate) fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Parses one limits file. Bad lines are skipped, as pam_limits skips them, and returned as
/// `file:line: problem` so the finding can show them.
pub fn parse(file: &str, text: &str) -> (Vec<Entry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        // pam_limits cuts everything from the first `#`.
        let content = raw.split('#').next().unwrap_or_default();
        let fields: Vec<&str> = content.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        match parse_fields(&fields) {
            Ok((domain, kind, item, (value, note))) => entries.push(Entry {
                file: file.to_string(),
                line,
                domain,
                kind,
                item,
                value,
                note: note.map(|n| format!("{file}:{line}: {n}")),
            }),
            Err(problem) => problems.push(format!("{file}:{line}: {problem}")),
        }
    }
    (entries, problems)
}

type Fields = (Domain, Kind, String, (Value, Option<String>));

/// Why pam_limits would skip a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadLine {
    #[error("expected `<domain> <type> <item> <value>`, found {0} fields")]
    Fields(usize),
    #[error("type `{0}` is not soft, hard or -")]
    Kind(String),
    #[error("unknown item `{0}`")]
    Item(String),
    #[error("value `{0}` is not a number or unlimited")]
    Value(String),
    #[error("domain `{0}` has a bad id range")]
    IdRange(String),
    #[error("domain `@` names no group")]
    NoGroup,
}

fn parse_fields(fields: &[&str]) -> Result<Fields, BadLine> {
    let [domain, kind, item, value] = fields else {
        return Err(BadLine::Fields(fields.len()));
    };
    let domain = parse_domain(domain)?;
    let kind = match *kind {
        "soft" => Kind::Soft,
        "hard" => Kind::Hard,
        "-" => Kind::Both,
        other => return Err(BadLine::Kind(other.to_string())),
    };
    let item = item.to_ascii_lowercase();
    if !ITEMS.contains(&item.as_str()) {
        return Err(BadLine::Item(item));
    }
    Ok((domain, kind, item, parse_value(value)?))
}

/// A value as pam_limits reads it: `unlimited`, `infinity` or `-1`, else the leading number
/// (`strtoul`/`strtoull` in pam_limits.c's process_limit, which refuses the line only when no
/// digit is read). So `9000x` is 9000 and `128k` is 128, not 131072: the note says so. A
/// number too large saturates at ULLONG_MAX, which is RLIM_INFINITY.
fn parse_value(text: &str) -> Result<(Value, Option<String>), BadLine> {
    if matches!(
        text.to_ascii_lowercase().as_str(),
        "unlimited" | "infinity" | "-1"
    ) {
        return Ok((Value::Unlimited, None));
    }
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let digits = &text[..end];
    if digits.is_empty() {
        return Err(BadLine::Value(text.to_string()));
    }
    let value = digits
        .parse::<u64>()
        .map_or(Value::Unlimited, Value::Finite);
    let note = (end < text.len()).then(|| {
        format!(
            "value `{text}` is read as {value}: pam_limits ignores `{}` after the number",
            &text[end..]
        )
    });
    Ok((value, note))
}

fn parse_domain(text: &str) -> Result<Domain, BadLine> {
    let range = |t: &str| -> Result<(Option<u32>, Option<u32>), BadLine> {
        let (lo, hi) = t.split_once(':').unwrap_or((t, t));
        let bound = |s: &str| -> Result<Option<u32>, BadLine> {
            if s.is_empty() {
                Ok(None)
            } else {
                s.parse()
                    .map(Some)
                    .map_err(|_| BadLine::IdRange(text.to_string()))
            }
        };
        Ok((bound(lo)?, bound(hi)?))
    };
    if text == "*" {
        return Ok(Domain::Wildcard);
    }
    if let Some(group) = text.strip_prefix('@') {
        if group.contains(':') {
            let (lo, hi) = range(group)?;
            return Ok(Domain::GidRange(lo, hi));
        }
        if group.is_empty() {
            return Err(BadLine::NoGroup);
        }
        return Ok(Domain::Group(group.to_string()));
    }
    if let Some(group) = text.strip_prefix('%') {
        return Ok(Domain::AllGroup(group.to_string()));
    }
    if text.contains(':') {
        let (lo, hi) = range(text)?;
        return Ok(Domain::UidRange(lo, hi));
    }
    Ok(Domain::User(text.to_string()))
}

/// The account a new session is opened for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Subject {
    /// `None` for "an ordinary user" that no user or uid entry names.
    pub user: Option<String>,
    pub uid: Option<u32>,
    pub groups: Vec<String>,
    pub gids: Vec<u32>,
}

impl Subject {
    /// An ordinary (non-root) account that no user, group or id-range line names: the
    /// account a training job usually runs as, judged by the lines meant for everyone.
    pub(crate) fn ordinary() -> Self {
        Subject {
            user: None,
            uid: None,
            groups: Vec::new(),
            gids: Vec::new(),
        }
    }

    fn is_root(&self) -> bool {
        self.uid == Some(0) || self.user.as_deref() == Some("root")
    }

    /// pam_limits' rank of a matching line (lower wins), or `None` when it does not apply.
    fn rank(&self, domain: &Domain) -> Option<u8> {
        let in_range = |id: Option<u32>, lo: &Option<u32>, hi: &Option<u32>| {
            id.is_some_and(|id| lo.is_none_or(|lo| id >= lo) && hi.is_none_or(|hi| id <= hi))
        };
        match domain {
            Domain::User(name) => (self.user.as_deref() == Some(name)).then_some(0),
            Domain::UidRange(lo, hi) => in_range(self.uid, lo, hi).then_some(0),
            // Group and wildcard lines are not applied to root (limits.conf(5)).
            _ if self.is_root() => None,
            Domain::Group(name) => self.groups.contains(name).then_some(1),
            Domain::GidRange(lo, hi) => self
                .gids
                .iter()
                .any(|g| in_range(Some(*g), lo, hi))
                .then_some(1),
            Domain::AllGroup(name) => self.groups.contains(name).then_some(2),
            Domain::Wildcard => Some(3),
        }
    }
}

/// One side (soft or hard) of a resolved limit and the line that set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub value: Value,
    pub place: String,
}

/// What a new session of `subject` gets for `item`: `None` on a side means no line sets it,
/// so the session keeps what its login service passes on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Session {
    pub soft: Option<Resolved>,
    pub hard: Option<Resolved>,
}

/// Resolves `item` as pam_limits does: a more specific domain wins (user, then group, then
/// `%group`, then `*`); among equals, the line read last wins. `entries` must be in the order
/// pam_limits reads them.
pub(crate) fn resolve(entries: &[Entry], subject: &Subject, item: &str) -> Session {
    let mut session = Session::default();
    let mut ranks: (u8, u8) = (u8::MAX, u8::MAX);
    for entry in entries.iter().filter(|e| e.item == item) {
        let Some(rank) = subject.rank(&entry.domain) else {
            continue;
        };
        let resolved = Resolved {
            value: entry.value,
            place: entry.place(),
        };
        if matches!(entry.kind, Kind::Soft | Kind::Both) && rank <= ranks.0 {
            ranks.0 = rank;
            session.soft = Some(resolved.clone());
        }
        if matches!(entry.kind, Kind::Hard | Kind::Both) && rank <= ranks.1 {
            ranks.1 = rank;
            session.hard = Some(resolved);
        }
    }
    session
}

/// Lines for `item` that name specific users or groups, which `Subject::ordinary` does not
/// see; findings list them so a site's `@gpu` line is not silently ignored.
pub(crate) fn specific_entries<'a>(entries: &'a [Entry], item: &str) -> Vec<&'a Entry> {
    entries
        .iter()
        .filter(|e| e.item == item && e.domain != Domain::Wildcard)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(domain: Domain, kind: Kind, item: &str, value: Value, line: usize) -> Entry {
        Entry {
            file: "f".into(),
            line,
            domain,
            kind,
            item: item.into(),
            value,
            note: None,
        }
    }

    #[test]
    fn parsing() {
        // Variants by their short names, so the entries read like the file's lines.
        use {Domain::*, Kind::*, Value::*};
        let text = "\
# /etc/security/limits.conf
*               soft    core            0
*  -  memlock  unlimited   # RDMA
@gpu hard nofile 1048576
%admins - maxlogins 4
1000: soft nofile 4096
@100:200 hard stack 8192
root - nofile infinity
* soft stack -1

bob soft
* sometimes nofile 1
* soft colour 1
* soft nofile lots
@ - nofile 1
* soft nofile 1 extra
x:y soft nofile 1
";
        let (entries, problems) = parse("f", text);
        let want = vec![
            entry(Wildcard, Soft, "core", Finite(0), 2),
            entry(Wildcard, Both, "memlock", Unlimited, 3),
            entry(Group("gpu".into()), Hard, "nofile", Finite(1048576), 4),
            entry(AllGroup("admins".into()), Both, "maxlogins", Finite(4), 5),
            entry(UidRange(Some(1000), None), Soft, "nofile", Finite(4096), 6),
            entry(
                GidRange(Some(100), Some(200)),
                Hard,
                "stack",
                Finite(8192),
                7,
            ),
            entry(User("root".into()), Both, "nofile", Unlimited, 8),
            entry(Wildcard, Soft, "stack", Unlimited, 9),
        ];
        assert_eq!(entries, want);
        let lines: Vec<&str> = problems
            .iter()
            .map(|p| p.split(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            lines,
            ["f:11", "f:12", "f:13", "f:14", "f:15", "f:16", "f:17"],
            "{problems:#?}"
        );
        assert!(problems[1].contains("`sometimes`"), "{}", problems[1]);
        assert!(problems[2].contains("`colour`"), "{}", problems[2]);
    }

    #[test]
    fn values_are_read_up_to_the_first_non_digit_as_pam_limits_does() {
        let cases: &[(&str, Value, Option<&str>)] = &[
            ("4096", Value::Finite(4096), None),
            ("0", Value::Finite(0), None),
            ("unlimited", Value::Unlimited, None),
            ("Infinity", Value::Unlimited, None),
            ("-1", Value::Unlimited, None),
            ("9000x", Value::Finite(9000), Some("`x`")),
            ("128k", Value::Finite(128), Some("read as 128")),
            ("1m", Value::Finite(1), Some("`m`")),
            ("99999999999999999999999", Value::Unlimited, None),
        ];
        for (text, value, note) in cases {
            let (got, got_note) = parse_value(text).unwrap();
            assert_eq!(got, *value, "{text}");
            match note {
                Some(want) => {
                    let n = got_note.unwrap_or_default();
                    assert!(n.contains(want) && n.contains("ignores"), "{text}: {n}");
                }
                None => assert_eq!(got_note, None, "{text}"),
            }
        }
        for bad in ["lots", "k128", "-5", "", "x1"] {
            assert!(parse_value(bad).is_err(), "{bad}");
        }
        let (entries, problems) = parse("f", "* - nofile 128k\n* soft nofile 9000x\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(entries[0].value, Value::Finite(128));
        assert!(
            entries[0]
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("f:1: ")),
            "{:?}",
            entries[0].note
        );
        assert_eq!(entries[1].value, Value::Finite(9000));
    }

    #[test]
    fn missing_or_empty_input_has_no_entries() {
        assert_eq!(parse("f", ""), (vec![], vec![]));
        assert_eq!(parse("f", "# only comments\n\n   \n"), (vec![], vec![]));
    }

    #[test]
    fn resolving() {
        let conf = parse(
            "limits.conf",
            "* soft nofile 1024\n* hard nofile 4096\n@gpu - nofile 65536\nalice soft nofile 2048\n",
        )
        .0;
        let dropin = parse(
            "limits.d/90.conf",
            "* - nofile 131072\n* soft stack unlimited\n",
        )
        .0;
        let all: Vec<Entry> = conf.into_iter().chain(dropin).collect();
        let ordinary = Subject::ordinary();
        let gpu_user = Subject {
            user: Some("carol".into()),
            uid: Some(1001),
            groups: vec!["gpu".into()],
            gids: vec![1001],
        };
        let alice = Subject {
            user: Some("alice".into()),
            uid: Some(1002),
            groups: vec!["gpu".into()],
            gids: vec![],
        };
        let root = Subject {
            user: Some("root".into()),
            uid: Some(0),
            groups: vec!["gpu".into()],
            gids: vec![0],
        };
        let side = |v: Value, place: &str| {
            Some(Resolved {
                value: v,
                place: place.into(),
            })
        };
        // A later `*` line overrides an earlier one; a drop-in is read after limits.conf.
        assert_eq!(
            resolve(&all, &ordinary, "nofile"),
            Session {
                soft: side(Value::Finite(131072), "limits.d/90.conf:1"),
                hard: side(Value::Finite(131072), "limits.d/90.conf:1"),
            }
        );
        // A group line beats any `*` line, wherever it is.
        assert_eq!(
            resolve(&all, &gpu_user, "nofile"),
            Session {
                soft: side(Value::Finite(65536), "limits.conf:3"),
                hard: side(Value::Finite(65536), "limits.conf:3"),
            }
        );
        // A user line beats a group line, side by side.
        assert_eq!(
            resolve(&all, &alice, "nofile"),
            Session {
                soft: side(Value::Finite(2048), "limits.conf:4"),
                hard: side(Value::Finite(65536), "limits.conf:3"),
            }
        );
        // Group and wildcard lines do not apply to root.
        assert_eq!(resolve(&all, &root, "nofile"), Session::default());
        assert_eq!(
            resolve(&all, &ordinary, "stack"),
            Session {
                soft: side(Value::Unlimited, "limits.d/90.conf:2"),
                hard: None,
            }
        );
        assert_eq!(resolve(&all, &ordinary, "memlock"), Session::default());
        assert_eq!(specific_entries(&all, "nofile").len(), 2);
    }

    #[test]
    fn id_ranges() {
        let entries = parse("f", "1000:1999 - nofile 5\n@:99 - nofile 6\n").0;
        let user = |uid, gid| Subject {
            user: Some("u".into()),
            uid: Some(uid),
            groups: vec![],
            gids: vec![gid],
        };
        let soft = |s: Session| s.soft.map(|r| r.value);
        assert_eq!(
            soft(resolve(&entries, &user(1500, 500), "nofile")),
            Some(Value::Finite(5))
        );
        assert_eq!(
            soft(resolve(&entries, &user(2500, 50), "nofile")),
            Some(Value::Finite(6))
        );
        assert_eq!(soft(resolve(&entries, &user(2500, 500), "nofile")), None);
    }
}
