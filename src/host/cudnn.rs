//! cuDNN found the way the NCCL lookup finds NCCL (`LD_LIBRARY_PATH` on the live node, the
//! dynamic linker's cache, then Python installs' `nvidia-cudnn-cu*` wheels), its version
//! read without loading it: the wheel's metadata, `cudnn_version.h` (`CUDNN_MAJOR`...)
//! next to the library or in the system include directories, else the library's file
//! name (`libcudnn.so.9.1.0`).

use std::path::Path;

use super::Root;
use super::libsearch::{self, SearchEnv};

/// The library names cuDNN 9 and 8 install under, newest first.
pub(crate) const SONAMES: &[&str] = &["libcudnn.so.9", "libcudnn.so.8"];

/// cuDNN as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The library (host path), or the wheel directory.
    pub path: String,
    /// How it was found (`the dynamic linker's cache`).
    pub origin: String,
    /// `9.1.0.70`, or `None` when nothing says.
    pub version: Option<String>,
    /// Where the version was read (`.../cudnn_version.h`).
    pub version_source: String,
}

/// Parses `cudnn_version.h` (or the pre-8 `cudnn.h`): `#define CUDNN_MAJOR 9` and friends.
pub(crate) fn parse_header(text: &str) -> Option<String> {
    let define = |name: &str| {
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(name))
                .then(|| w.next()?.parse::<u32>().ok())
                .flatten()
        })
    };
    let major = define("CUDNN_MAJOR")?;
    let minor = define("CUDNN_MINOR")?;
    Some(match define("CUDNN_PATCHLEVEL") {
        Some(p) => format!("{major}.{minor}.{p}"),
        None => format!("{major}.{minor}"),
    })
}

/// The version in a wheel's `.dist-info` directory name
/// (`nvidia_cudnn_cu12-9.1.0.70.dist-info` → `9.1.0.70`).
pub(crate) fn dist_info_version(dir_name: &str, package: &str) -> Option<String> {
    let rest = dir_name.strip_suffix(".dist-info")?;
    let (name, version) = rest.split_once('-')?;
    let name = name.to_ascii_lowercase().replace('-', "_");
    (name.starts_with(package) && version.starts_with(|c: char| c.is_ascii_digit()))
        .then(|| version.to_string())
}

/// The version a library's file name carries (`libcudnn.so.9.1.0` → `9.1.0`); a bare
/// soname (`libcudnn.so.9`) says only the major version.
pub(crate) fn file_name_version(name: &str) -> Option<String> {
    let v = name.split_once(".so.")?.1;
    (!v.is_empty() && v.split('.').all(|p| p.parse::<u32>().is_ok())).then(|| v.to_string())
}

/// The first cuDNN in lookup order with its version, or every place searched.
pub(crate) fn locate(root: &Root, env: &SearchEnv) -> Result<Found, Vec<String>> {
    let mut searched = Vec::new();
    match libsearch::find_any(root, env, SONAMES) {
        Ok(found) => return Ok(with_version(root, found.path, found.origin.to_string())),
        Err(s) => searched.extend(s),
    }
    for site in libsearch::site_packages(root, env) {
        let lib = format!("{site}/nvidia/cudnn/lib");
        let Some(name) = SONAMES.iter().find(|n| root.is_file(&format!("{lib}/{n}"))) else {
            continue;
        };
        let wheel = root
            .list_dir(&site)
            .ok()
            .flatten()
            .unwrap_or_default()
            .into_iter()
            .find_map(|d| dist_info_version(&d, "nvidia_cudnn_cu").map(|v| (d, v)));
        let path = format!("{lib}/{name}");
        return Ok(match wheel {
            Some((dir, version)) => Found {
                path,
                origin: "a Python site-packages (nvidia-cudnn-cu* wheel)".into(),
                version: Some(version),
                version_source: format!("{site}/{dir}"),
            },
            None => with_version(root, path, "a Python site-packages".into()),
        });
    }
    searched.push(format!(
        "{}/nvidia/cudnn/lib",
        libsearch::site_packages_pattern()
    ));
    Err(searched)
}

/// Reads the version of a library found at `path` (host path): headers first, then the
/// file name of what the soname link points to.
fn with_version(root: &Root, path: String, origin: String) -> Found {
    let dir = Path::new(&path)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = Path::new(&dir)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut headers = vec![
        format!("{parent}/include/cudnn_version.h"),
        "/usr/include/cudnn_version.h".to_string(),
        "/usr/local/cuda/include/cudnn_version.h".to_string(),
    ];
    // Debian/Ubuntu's cudnn packages: /usr/include/<triplet>/cudnn_version_v9.h.
    for triplet in ["x86_64-linux-gnu", "aarch64-linux-gnu"] {
        for major in ["9", "8"] {
            headers.push(format!("/usr/include/{triplet}/cudnn_version_v{major}.h"));
        }
    }
    for header in headers {
        if let Some(version) = root
            .read_optional(&header)
            .ok()
            .flatten()
            .as_deref()
            .and_then(parse_header)
        {
            return Found {
                path,
                origin,
                version: Some(version),
                version_source: header,
            };
        }
    }
    let target = root.read_link(&path).ok().flatten().and_then(|t| {
        Path::new(&t)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    });
    let by_name = target
        .as_deref()
        .into_iter()
        .chain(Path::new(&path).file_name().and_then(|n| n.to_str()))
        .find_map(file_name_version);
    Found {
        version_source: match &target {
            Some(t) => format!("the file name {t}"),
            None => "the file name".into(),
        },
        path,
        origin,
        version: by_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_wheels_and_file_names() {
        let h = "#ifndef CUDNN_VERSION_H_\n#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n";
        assert_eq!(parse_header(h).as_deref(), Some("9.1.0"));
        assert_eq!(parse_header("#define CUDNN_MAJOR 8\n").as_deref(), None);
        assert_eq!(
            dist_info_version("nvidia_cudnn_cu12-9.1.0.70.dist-info", "nvidia_cudnn_cu").as_deref(),
            Some("9.1.0.70")
        );
        assert_eq!(
            dist_info_version("nvidia_nccl_cu12-2.21.5.dist-info", "nvidia_cudnn_cu"),
            None
        );
        assert_eq!(
            file_name_version("libcudnn.so.9.1.0").as_deref(),
            Some("9.1.0")
        );
        assert_eq!(file_name_version("libcudnn.so.8").as_deref(), Some("8"));
        assert_eq!(file_name_version("libcudnn.so"), None);
    }
}
