//! The profile `gputune audit` uses when none is named, chosen from the node:
//!
//! 1. an RDMA device in `/sys/class/infiniband` → `ddp-infiniband`;
//! 2. otherwise the fastest physical interface that is up: 100 Gb/s or more → `ddp-100gbe`,
//!    25 Gb/s or more → `ddp-25gbe`, 10 Gb/s or more → `ddp-10gbe`;
//! 3. an up physical interface whose driver reports no speed (virtio and most cloud NICs)
//!    → `ddp-10gbe`, since cloud GPU nodes train across such links;
//! 4. anything else (no physical link up, or only links under 10 Gb/s) → `single-node`.
//!
//! A site default the root carries ([`SITE_DEFAULT`], one profile name) comes before the
//! rule. An image has no links or devices to read, so the rule would judge it against
//! `single-node`, the weakest profile: an image without a site default needs `--profile`.

use crate::error::Error;
use crate::host::Root;
use crate::host::net::{self, Link};

/// The file naming the site's profile for a node or an image built for it (under the root):
/// one profile name, built-in or under `/etc/gputune/profiles/`; `#` comments and blank
/// lines are ignored.
pub(crate) const SITE_DEFAULT: &str = "/etc/gputune/default-profile";

/// The chosen profile name and the reason, shown to the user. An image without a site
/// default is a usage error (exit 2) that names the built-in profiles.
pub(crate) fn choose(root: &Root) -> Result<(String, String), Error> {
    if let Some((name, line)) = site_default(root)? {
        return Ok((name, format!("site default, {SITE_DEFAULT}:{line}")));
    }
    if crate::image::is_image(root) {
        let names: Vec<&str> = crate::profile::BUILTIN.iter().map(|(n, _)| *n).collect();
        return Err(Error::Usage(format!(
            "{} is an image: it has no links or devices to choose a profile from, so name the profile it is built for with --profile NAME|FILE (built-in: {}), or write its name into {} in the image",
            root.dir().display(),
            names.join(", "),
            root.path(SITE_DEFAULT).display()
        )));
    }
    let rdma = net::rdma_devices(root)?;
    let links = net::links(root)?;
    let (name, reason) = choose_from(&rdma, &links);
    Ok((name.to_string(), reason))
}

/// The site default under `root` and its 1-based line; `None` when the file is absent.
/// More than one name, or a name that is no profile name, is an error naming file and line.
pub(crate) fn site_default(root: &Root) -> Result<Option<(String, usize)>, Error> {
    let Some(text) = root.read_optional(SITE_DEFAULT)? else {
        return Ok(None);
    };
    parse_site_default(&text)
        .map_err(|(line, why)| Error::Usage(format!("{SITE_DEFAULT}:{line}: {why}")))
}

/// The one profile name of a site default file, or the line and what is wrong with it.
pub(crate) fn parse_site_default(text: &str) -> Result<Option<(String, usize)>, (usize, String)> {
    let mut found: Option<(String, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let word = line.split('#').next().unwrap_or("").trim();
        if word.is_empty() {
            continue;
        }
        let shown: String = word.chars().filter(|c| !c.is_control()).collect();
        let name_like = word.len() <= 64
            && !word.starts_with(['.', '-'])
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_like {
            return Err((
                i + 1,
                format!(
                    "`{shown}` is not a profile name (letters, digits, `-`, `_`, `.`; a profile of the site goes in /etc/gputune/profiles/NAME.toml)"
                ),
            ));
        }
        if let Some((first, at)) = &found {
            return Err((
                i + 1,
                format!("a second profile name `{shown}`: line {at} already names `{first}`"),
            ));
        }
        found = Some((word.to_string(), i + 1));
    }
    match found {
        Some(f) => Ok(Some(f)),
        None => Err((1, "names no profile (write one profile name)".into())),
    }
}

/// The rule above over facts already read.
pub(crate) fn choose_from(rdma: &[String], links: &[Link]) -> (&'static str, String) {
    if let Some(first) = rdma.first() {
        return ("ddp-infiniband", format!("RDMA device {first} present"));
    }
    let up: Vec<&Link> = links.iter().filter(|l| l.physical && l.up).collect();
    if let Some(fastest) = up
        .iter()
        .filter(|l| l.speed_mbps.is_some())
        .max_by_key(|l| l.speed_mbps)
    {
        let speed = fastest.speed_mbps.unwrap_or(0);
        let reason = format!("fastest link {} at {} Mb/s", fastest.name, speed);
        let name = match speed {
            s if s >= 100_000 => "ddp-100gbe",
            s if s >= 25_000 => "ddp-25gbe",
            s if s >= 10_000 => "ddp-10gbe",
            _ if up.iter().any(|l| l.speed_mbps.is_none()) => {
                return unreported(&up);
            }
            _ => "single-node",
        };
        return (name, reason);
    }
    if !up.is_empty() {
        return unreported(&up);
    }
    ("single-node", "no physical network link is up".into())
}

fn unreported(up: &[&Link]) -> (&'static str, String) {
    let name = up
        .iter()
        .find(|l| l.speed_mbps.is_none())
        .map_or("?", |l| l.name.as_str());
    (
        "ddp-10gbe",
        format!(
            "link {name} is up but reports no speed (virtual NIC); assuming a 10 Gb/s or faster fabric"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, physical: bool, up: bool, speed: Option<u64>) -> Link {
        Link {
            name: name.into(),
            physical,
            up,
            speed_mbps: speed,
        }
    }

    /// A physical link that is up.
    fn up(name: &str, speed: Option<u64>) -> Link {
        link(name, true, true, speed)
    }

    /// A physical link that is down.
    fn down(name: &str, speed: Option<u64>) -> Link {
        link(name, true, false, speed)
    }

    /// A virtual interface (lo, docker0) that is up.
    fn virtual_up(name: &str, speed: Option<u64>) -> Link {
        link(name, false, true, speed)
    }

    #[test]
    fn site_default_files() {
        /// The text, and its name and line or the line of the error.
        type Case = (&'static str, Result<Option<(&'static str, usize)>, usize>);
        let cases: &[Case] = &[
            ("ddp-25gbe\n", Ok(Some(("ddp-25gbe", 1)))),
            (
                "# our fleet\n\n  site-h100  # 8x H100\n",
                Ok(Some(("site-h100", 3))),
            ),
            ("", Err(1)),
            ("# nothing\n", Err(1)),
            ("a\nb\n", Err(2)),
            ("../../etc/shadow\n", Err(1)),
            ("/etc/gputune/x.toml\n", Err(1)),
            ("two words\n", Err(1)),
            ("-x\n", Err(1)),
        ];
        for (text, want) in cases {
            let got = parse_site_default(text).map_err(|(line, _)| line);
            let want = want.map(|o| o.map(|(n, l)| (n.to_string(), l)));
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn rule() {
        let cases: &[(&[&str], Vec<Link>, &str)] = &[
            (&["mlx5_0"], vec![], "ddp-infiniband"),
            (&[], vec![up("eth0", Some(100_000))], "ddp-100gbe"),
            (
                &[],
                vec![up("eth0", Some(10_000)), up("eth1", Some(25_000))],
                "ddp-25gbe",
            ),
            (&[], vec![up("eth0", Some(10_000))], "ddp-10gbe"),
            (
                &[],
                vec![down("eth0", Some(100_000)), up("eth1", Some(1_000))],
                "single-node",
            ),
            (&[], vec![up("eth0", None)], "ddp-10gbe"),
            (
                &[],
                vec![virtual_up("lo", None), virtual_up("docker0", Some(100_000))],
                "single-node",
            ),
            (&[], vec![], "single-node"),
        ];
        for (rdma, links, want) in cases {
            let rdma: Vec<String> = rdma.iter().map(|s| s.to_string()).collect();
            assert_eq!(choose_from(&rdma, links).0, *want, "{links:?}");
        }
    }

    #[test]
    fn the_site_default_comes_first_and_an_image_without_one_is_refused() {
        let tree = crate::testing::Tree::with(&[(SITE_DEFAULT, "# fleet\nsite-h100\n")]);
        let (name, reason) = choose(&tree.root()).unwrap();
        assert_eq!(name, "site-h100");
        assert_eq!(reason, format!("site default, {SITE_DEFAULT}:2"));

        let tree = crate::testing::Tree::with(&[(SITE_DEFAULT, "a\nb\n")]);
        let err = choose(&tree.root()).unwrap_err().to_string();
        assert!(
            err.contains("default-profile:2: a second profile name"),
            "{err}"
        );

        let image = crate::testing::Tree::new();
        image.dir("/etc");
        let err = choose(&image.root()).unwrap_err().to_string();
        assert!(err.contains("is an image"), "{err}");

        let snapshot = crate::testing::Tree::new();
        snapshot.dir("/sys/class/infiniband/mlx5_0");
        let (name, reason) = choose(&snapshot.root()).unwrap();
        assert_eq!(
            (name.as_str(), reason.as_str()),
            ("ddp-infiniband", "RDMA device mlx5_0 present")
        );
    }
}
