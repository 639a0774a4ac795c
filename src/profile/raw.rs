//! A profile file as written: its top-level keys with the span of every area key and bench
//! value, so errors name the line. The area tables are the names in [`Area::ALL`], so a new
//! area needs no edit here.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use super::job::RawJob;
use crate::finding::Area;

/// One area's table: each key and its setting, both with their place in the file.
type RawArea = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

#[derive(Default)]
pub(super) struct RawProfile {
    pub(super) description: Option<String>,
    pub(super) include: Vec<Spanned<String>>,
    /// The areas the file has a table for, in report order.
    pub(super) areas: BTreeMap<Area, RawArea>,
    pub(super) bench: Option<RawBench>,
    pub(super) job: Option<RawJob>,
}

/// `[bench]` as written, with the span of each value for error messages.
pub(super) type RawBench = super::Bench<Spanned<toml::Value>, super::bandwidth::RawBaseline>;

/// A top-level key of a profile file.
enum TopKey {
    Description,
    Include,
    Area(Area),
    Bench,
    Job,
}

/// Every top-level key, in the order an unknown key's error lists them.
static TOP_KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut keys = vec!["description", "include"];
    keys.extend(Area::ALL.iter().map(|a| a.name()));
    keys.extend(["bench", "job"]);
    keys
});

impl<'de> Deserialize<'de> for TopKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Refused here, while toml reads the key, an unknown key's error carries its line.
        let name = String::deserialize(deserializer)?;
        Ok(match name.as_str() {
            "description" => TopKey::Description,
            "include" => TopKey::Include,
            "bench" => TopKey::Bench,
            "job" => TopKey::Job,
            _ => match Area::ALL.iter().find(|a| a.name() == name) {
                Some(&area) => TopKey::Area(area),
                None => return Err(de::Error::unknown_field(&name, TOP_KEYS.as_slice())),
            },
        })
    }
}

impl<'de> Deserialize<'de> for RawProfile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("RawProfile", TOP_KEYS.as_slice(), ProfileVisitor)
    }
}

struct ProfileVisitor;

impl<'de> Visitor<'de> for ProfileVisitor {
    type Value = RawProfile;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("struct RawProfile")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<RawProfile, M::Error> {
        let mut raw = RawProfile::default();
        // TOML refuses a key given twice before this sees it.
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::Description => raw.description = Some(map.next_value()?),
                TopKey::Include => raw.include = map.next_value()?,
                TopKey::Area(area) => {
                    raw.areas.insert(area, map.next_value()?);
                }
                TopKey::Bench => raw.bench = Some(map.next_value()?),
                TopKey::Job => raw.job = Some(map.next_value()?),
            }
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_area_is_a_table_and_other_keys_are_refused_with_their_line() {
        let text: String = Area::ALL
            .iter()
            .map(|a| format!("[{a}]\n\"k\" = 1\n"))
            .collect();
        let raw: RawProfile = toml::from_str(&text).expect("every area's table reads");
        assert_eq!(raw.areas.keys().copied().collect::<Vec<_>>(), Area::ALL);

        let err = toml::from_str::<RawProfile>("description = \"d\"\n\n[colour]\n")
            .err()
            .expect("an unknown table is refused");
        assert_eq!(
            err.span().map(|s| &"description = \"d\"\n\n[colour]\n"[s]),
            Some("colour")
        );
        assert!(
            err.message().starts_with(
                "unknown field `colour`, expected one of `description`, `include`, `network`"
            ),
            "{}",
            err.message()
        );
    }
}
