//! Which resource limits a Slurm job takes from the session that submitted it:
//! `PropagateResourceLimits` / `PropagateResourceLimitsExcept` in slurm.conf. srun and sbatch
//! send the submitting session's soft limits; slurmstepd sets each propagated one as the
//! task's soft limit, lowered to its own hard limit (`_set_limit` in slurmstepd's
//! `ulimits.c`); a limit that is not propagated stays what slurmd has.

use crate::host::{HostError, Root};

/// Why slurm.conf does not say which limits a job takes; each names the file (and line).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SlurmConfError {
    #[error("SLURM_CONF={0:?} is not an absolute path")]
    Relative(String),
    #[error("SLURM_CONF={0}: no such file")]
    NoConf(String),
    #[error(transparent)]
    Unreadable(#[from] HostError),
    /// A file an `Include` names is missing.
    #[error("{0}: no such file")]
    NoInclude(String),
    #[error("{0}: Include nested deeper than {MAX_INCLUDE_DEPTH}")]
    TooDeep(String),
    #[error(
        "{0} and {1}: PropagateResourceLimits and PropagateResourceLimitsExcept are mutually exclusive (Slurm refuses such a slurm.conf)"
    )]
    Both(String, String),
    #[error("{place}: {word:?} is not a resource limit Slurm propagates (one of ALL, NONE, {names})", names = NAMES.join(", "))]
    NotALimit { place: String, word: String },
}

/// The resource names slurm.conf accepts (`slurm_rlimits_info.c`).
const NAMES: &[&str] = &[
    "AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "NOFILE", "NPROC", "RSS", "STACK",
];

/// Where slurm.conf is looked for when `SLURM_CONF` does not say: Slurm's default, Debian's
/// before 20.11, and the copy slurmd keeps in configless mode.
const CANDIDATES: &[&str] = &[
    "/etc/slurm/slurm.conf",
    "/etc/slurm-llnl/slurm.conf",
    "/run/slurm/conf/slurm.conf",
];

/// `Include` depth slurm.conf may nest to before gputune stops following it.
const MAX_INCLUDE_DEPTH: usize = 8;

/// What a job gets from the submitting session, and the line that says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Propagation {
    /// Upper-case resource names whose soft limit the job takes from the submitting session.
    propagated: Vec<&'static str>,
    /// `PropagateResourceLimitsExcept=MEMLOCK (/etc/slurm/slurm.conf:12)`, or Slurm's default.
    pub source: String,
}

impl Propagation {
    /// True when the job's soft limit of `resource` (`nofile`) comes from the submitting session.
    pub(crate) fn carries(&self, resource: &str) -> bool {
        self.propagated
            .iter()
            .any(|n| n.eq_ignore_ascii_case(resource))
    }
}

/// One `Key=Value` of slurm.conf and where it was written.
#[derive(Debug, Clone)]
struct Line {
    value: String,
    place: String,
}

/// Reads the node's slurm.conf: `explicit` (`SLURM_CONF`) when given, else the first that
/// exists of [`CANDIDATES`]. No slurm.conf at all is Slurm's default (every limit propagated),
/// said in the source. Errors name the file and line.
pub(crate) fn read(root: &Root, explicit: Option<&str>) -> Result<Propagation, SlurmConfError> {
    let path = match explicit {
        Some(path) if !path.starts_with('/') => {
            return Err(SlurmConfError::Relative(path.to_string()));
        }
        Some(path) => {
            if root.read_optional(path)?.is_none() {
                return Err(SlurmConfError::NoConf(path.to_string()));
            }
            Some(path.to_string())
        }
        None => {
            let mut found = None;
            for candidate in CANDIDATES {
                if root.read_optional(candidate)?.is_some() {
                    found = Some(candidate.to_string());
                    break;
                }
            }
            found
        }
    };
    let Some(path) = path else {
        return Ok(Propagation {
            propagated: NAMES.to_vec(),
            source: "PropagateResourceLimits=ALL (Slurm's default; no slurm.conf found)".into(),
        });
    };
    let mut only = None;
    let mut except = None;
    collect(root, &path, 0, &mut only, &mut except)?;
    resolve(&path, only, except)
}

/// Slurm's rule: `PropagateResourceLimits` lists what is propagated (`ALL`, `NONE` or names),
/// `PropagateResourceLimitsExcept` what is not; both at once is an error slurmctld refuses.
fn resolve(
    path: &str,
    only: Option<Line>,
    except: Option<Line>,
) -> Result<Propagation, SlurmConfError> {
    match (only, except) {
        (Some(a), Some(b)) => Err(SlurmConfError::Both(a.place, b.place)),
        (None, None) => Ok(Propagation {
            propagated: NAMES.to_vec(),
            source: format!("PropagateResourceLimits=ALL (Slurm's default; {path} sets neither)"),
        }),
        (Some(line), None) => {
            let listed = names(&line)?;
            Ok(Propagation {
                propagated: listed,
                source: format!("PropagateResourceLimits={} ({})", line.value, line.place),
            })
        }
        (None, Some(line)) => {
            let listed = names(&line)?;
            Ok(Propagation {
                propagated: NAMES
                    .iter()
                    .copied()
                    .filter(|n| !listed.contains(n))
                    .collect(),
                source: format!(
                    "PropagateResourceLimitsExcept={} ({})",
                    line.value, line.place
                ),
            })
        }
    }
}

/// The names of a comma list; `ALL` and `NONE` stand alone.
fn names(line: &Line) -> Result<Vec<&'static str>, SlurmConfError> {
    let mut out = Vec::new();
    for word in line.value.split(',').map(str::trim) {
        if word.eq_ignore_ascii_case("ALL") {
            out.extend(NAMES);
        } else if word.eq_ignore_ascii_case("NONE") {
        } else if let Some(name) = NAMES.iter().find(|n| n.eq_ignore_ascii_case(word)) {
            out.push(*name);
        } else {
            return Err(SlurmConfError::NotALimit {
                place: line.place.clone(),
                word: word.to_string(),
            });
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Reads `path` and the files it `Include`s, keeping the last value of each key (as Slurm
/// does when a key is repeated).
fn collect(
    root: &Root,
    path: &str,
    depth: usize,
    only: &mut Option<Line>,
    except: &mut Option<Line>,
) -> Result<(), SlurmConfError> {
    if depth > MAX_INCLUDE_DEPTH {
        return Err(SlurmConfError::TooDeep(path.to_string()));
    }
    let text = root
        .read_optional(path)?
        .ok_or_else(|| SlurmConfError::NoInclude(path.to_string()))?;
    for (index, raw) in text.lines().enumerate() {
        let place = format!("{path}:{}", index + 1);
        let line = raw.split('#').next().unwrap_or("").trim();
        if let Some(rest) = strip_word(line, "include") {
            let target = rest.trim();
            let target = if target.starts_with('/') {
                target.to_string()
            } else {
                let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
                format!("{dir}/{target}")
            };
            collect(root, &target, depth + 1, only, except)?;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let slot = match key.trim() {
            k if k.eq_ignore_ascii_case("PropagateResourceLimits") => &mut *only,
            k if k.eq_ignore_ascii_case("PropagateResourceLimitsExcept") => &mut *except,
            _ => continue,
        };
        *slot = Some(Line {
            value: value.trim().trim_matches('"').to_string(),
            place,
        });
    }
    Ok(())
}

/// `line` after a leading keyword (any case) and the whitespace that must follow it.
fn strip_word<'a>(line: &'a str, word: &str) -> Option<&'a str> {
    let head = line.get(..word.len())?;
    let rest = &line[word.len()..];
    (head.eq_ignore_ascii_case(word) && rest.starts_with([' ', '\t'])).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Tree;

    fn conf(files: &[(&str, &str)]) -> Result<Propagation, SlurmConfError> {
        let tree = Tree::new();
        for (path, text) in files {
            tree.file(path, text);
        }
        read(&tree.root(), None)
    }

    #[test]
    fn slurms_default_propagates_everything() {
        let none = conf(&[]).unwrap();
        assert!(none.carries("nofile") && none.carries("memlock") && none.carries("stack"));
        assert!(
            none.source.contains("no slurm.conf found"),
            "{}",
            none.source
        );
        let silent = conf(&[("etc/slurm/slurm.conf", "ClusterName=x\n")]).unwrap();
        assert!(silent.carries("memlock"));
        assert!(silent.source.contains("sets neither"), "{}", silent.source);
    }

    #[test]
    fn lists_and_exceptions() {
        let except = conf(&[(
            "etc/slurm/slurm.conf",
            "# comment\nPropagateResourceLimitsExcept=MEMLOCK,nofile # RDMA\n",
        )])
        .unwrap();
        assert!(!except.carries("memlock") && !except.carries("nofile"));
        assert!(except.carries("stack"));
        assert_eq!(
            except.source,
            "PropagateResourceLimitsExcept=MEMLOCK,nofile (/etc/slurm/slurm.conf:2)"
        );
        let none = conf(&[("etc/slurm/slurm.conf", "propagateresourcelimits=NONE\n")]).unwrap();
        assert!(!none.carries("stack") && !none.carries("nofile"));
        let some = conf(&[(
            "etc/slurm-llnl/slurm.conf",
            "PropagateResourceLimits=STACK,CORE\n",
        )])
        .unwrap();
        assert!(some.carries("stack") && !some.carries("memlock"));
        // The last of repeated keys wins, includes are followed, relative to the file.
        let included = conf(&[
            (
                "etc/slurm/slurm.conf",
                "PropagateResourceLimits=ALL\ninclude limits.conf\n",
            ),
            ("etc/slurm/limits.conf", "PropagateResourceLimits=NOFILE\n"),
        ])
        .unwrap();
        assert!(included.carries("nofile") && !included.carries("memlock"));
        assert!(
            included.source.contains("/etc/slurm/limits.conf:1"),
            "{}",
            included.source
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let both = conf(&[(
            "etc/slurm/slurm.conf",
            "PropagateResourceLimits=ALL\nPropagateResourceLimitsExcept=MEMLOCK\n",
        )])
        .unwrap_err();
        assert!(
            matches!(&both, SlurmConfError::Both(a, b)
                if a == "/etc/slurm/slurm.conf:1" && b == "/etc/slurm/slurm.conf:2"),
            "{both:?}"
        );
        let bad =
            conf(&[("etc/slurm/slurm.conf", "PropagateResourceLimits=NOFILES\n")]).unwrap_err();
        assert!(
            matches!(&bad, SlurmConfError::NotALimit { place, word }
                if place == "/etc/slurm/slurm.conf:1" && word == "NOFILES"),
            "{bad:?}"
        );
        assert_eq!(
            bad.to_string(),
            "/etc/slurm/slurm.conf:1: \"NOFILES\" is not a resource limit Slurm propagates (one of ALL, NONE, AS, CORE, CPU, DATA, FSIZE, MEMLOCK, NOFILE, NPROC, RSS, STACK)"
        );
        let missing =
            conf(&[("etc/slurm/slurm.conf", "Include /etc/slurm/gone.conf\n")]).unwrap_err();
        assert!(
            matches!(&missing, SlurmConfError::NoInclude(p) if p == "/etc/slurm/gone.conf"),
            "{missing:?}"
        );
        let looped = conf(&[("etc/slurm/slurm.conf", "Include slurm.conf\n")]).unwrap_err();
        assert!(
            matches!(&looped, SlurmConfError::TooDeep(p) if p == "/etc/slurm/slurm.conf"),
            "{looped:?}"
        );
        assert!(looped.to_string().contains("nested deeper"), "{looped}");
        let tree = Tree::new();
        assert!(matches!(
            read(&tree.root(), Some("relative.conf")),
            Err(SlurmConfError::Relative(p)) if p == "relative.conf"
        ));
        let gone = read(&tree.root(), Some("/etc/slurm/nope.conf")).unwrap_err();
        assert!(
            matches!(&gone, SlurmConfError::NoConf(p) if p == "/etc/slurm/nope.conf"),
            "{gone:?}"
        );
        assert_eq!(
            gone.to_string(),
            "SLURM_CONF=/etc/slurm/nope.conf: no such file"
        );
    }
}
