//! Finding a profile's file: built-in names, the site directory inside the root, or a path
//! on the invoking host, and where its path includes resolve.

use super::*;
use crate::host::HostError;

/// The text of one profile file and how to name it in messages.
pub(super) struct SourceFile {
    pub(super) name: String,
    pub(super) display: String,
    /// The file itself (canonical path), so `./a.toml` and `../dir/a.toml` are one file
    /// for include-cycle detection.
    pub(super) identity: String,
    /// Directory relative includes given as paths resolve against.
    pub(super) dir: Option<Base>,
    pub(super) text: String,
}

/// Where a profile's path includes resolve: beside a file the user named (on the invoking
/// host, which they trust), or beside a site profile inside the root (an image's file: its
/// includes resolve inside the root too, never on the host).
#[derive(Debug, Clone)]
pub(super) enum Base {
    Host(PathBuf),
    InRoot(String),
}

impl Loader<'_> {
    pub(super) fn find(
        &self,
        ident: &str,
        relative_to: Option<&Base>,
    ) -> Result<SourceFile, FindError> {
        if (ident.contains('/') || ident.ends_with(".toml"))
            && let Some(Base::InRoot(dir)) = relative_to
        {
            let host = if ident.starts_with('/') {
                ident.to_string()
            } else {
                format!("{dir}/{ident}")
            };
            let text = self
                .root
                .read_capped(&host, MAX_PROFILE_BYTES)
                .map_err(FindError::Unreadable)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .ok_or_else(|| FindError::Missing(self.root.path(&host)))?;
            let path = Path::new(&host);
            return Ok(SourceFile {
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                display: self.root.path(&host).display().to_string(),
                identity: self
                    .root
                    .canonicalize(&host)
                    .map_or_else(|| host.clone(), |p| p.display().to_string()),
                dir: Some(Base::InRoot(
                    path.parent()
                        .map_or_else(|| "/".into(), |p| p.display().to_string()),
                )),
                text,
            });
        }
        if ident.contains('/') || ident.ends_with(".toml") {
            let path = match relative_to {
                Some(Base::Host(dir)) if Path::new(ident).is_relative() => dir.join(ident),
                _ => PathBuf::from(ident),
            };
            let text = crate::host::confine::read_regular(&path, MAX_PROFILE_BYTES)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .map_err(|e| FindError::Unreadable(HostError::new(&path, e)))?;
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Ok(SourceFile {
                name,
                display: path.display().to_string(),
                identity: identity_of(&path),
                dir: path.parent().map(|p| Base::Host(p.to_path_buf())),
                text,
            });
        }
        if !ident
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || ident.is_empty()
        {
            return Err(FindError::NotAName(ident.to_string()));
        }
        let site = format!("{SITE_DIR}/{ident}.toml");
        match self.root.read_optional(&site) {
            Ok(Some(text)) => {
                let path = self.root.path(&site);
                return Ok(SourceFile {
                    name: ident.into(),
                    display: path.display().to_string(),
                    identity: self
                        .root
                        .canonicalize(&site)
                        .map_or_else(|| site.clone(), |p| p.display().to_string()),
                    // Includes written as paths resolve beside the site profile, in the root.
                    dir: Some(Base::InRoot(SITE_DIR.into())),
                    text,
                });
            }
            Ok(None) => {}
            Err(e) => return Err(FindError::Site(e)),
        }
        match BUILTIN.iter().find(|(name, _)| *name == ident) {
            Some((name, text)) => Ok(SourceFile {
                name: name.to_string(),
                display: format!("profiles/{name}.toml"),
                identity: format!("built-in {name}"),
                dir: None,
                text: text.to_string(),
            }),
            None => {
                let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                let site: Vec<String> = self
                    .root
                    .list_dir(SITE_DIR)
                    .ok()
                    .flatten()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|f| f.strip_suffix(".toml").map(str::to_string))
                    .filter(|n| {
                        n.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    })
                    .collect();
                let known = names.iter().copied().chain(site.iter().map(String::as_str));
                Err(FindError::NoSuchProfile {
                    name: ident.to_string(),
                    closest: super::suggest::closest(ident, known).map(str::to_string),
                    builtin: names,
                })
            }
        }
    }
}

/// Why a name or path given as a profile (or an include) leads to no profile text.
#[derive(Debug, thiserror::Error)]
pub(super) enum FindError {
    /// A path, inside the root or on the invoking host, that cannot be read.
    #[error("cannot read {0}")]
    Unreadable(HostError),
    /// A path inside the root that does not exist.
    #[error("cannot read {}: no such file", .0.display())]
    Missing(PathBuf),
    #[error("`{0}` is not a profile name (letters, digits, - and _) or a path")]
    NotAName(String),
    /// The site profile of that name exists but cannot be read.
    #[error(transparent)]
    Site(HostError),
    #[error(
        "no profile named `{name}` ({}built-in: {}; site profiles go in {SITE_DIR})",
        closest.as_ref().map_or(String::new(), |c| format!("did you mean `{c}`? ")),
        builtin.join(", ")
    )]
    NoSuchProfile {
        name: String,
        closest: Option<String>,
        builtin: Vec<&'static str>,
    },
}

/// A file's canonical path, or the path as given when it cannot be resolved.
pub(super) fn identity_of(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}
