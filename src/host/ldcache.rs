//! The dynamic linker's cache (`/etc/ld.so.cache`), read directly so a library can be found
//! under `--root` the way `ld.so` would find it on that node, without running `ldconfig`.

use std::collections::BTreeMap;

const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const HEADER_LEN: usize = 48;
const ENTRY_LEN: usize = 24;

/// Library file name (`libnccl.so.2`) → the paths the cache lists for it, in cache order.
pub(crate) type Cache = BTreeMap<String, Vec<String>>;

/// Why bytes are not a cache `ld.so` could use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    #[error("no glibc-ld.so.cache1.1 header")]
    NoHeader,
    #[error("truncated at byte {0}")]
    Truncated(usize),
    #[error("{count} entries do not fit in {bytes} bytes")]
    TooMany { count: usize, bytes: usize },
    #[error("string offset {0} out of range")]
    Offset(u32),
    #[error("unterminated string")]
    Unterminated,
}

/// Parses the glibc "new format" cache (also found after an old-format prefix).
pub fn parse(bytes: &[u8]) -> Result<Cache, CacheError> {
    let start = find(bytes, MAGIC).ok_or(CacheError::NoHeader)?;
    let data = &bytes[start..];
    let u32_at = |offset: usize| {
        data.get(offset..offset + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(CacheError::Truncated(start + offset))
    };
    let count = u32_at(MAGIC.len())? as usize;
    if HEADER_LEN + count.saturating_mul(ENTRY_LEN) > data.len() {
        return Err(CacheError::TooMany {
            count,
            bytes: data.len(),
        });
    }
    let string_at = |offset: u32| {
        let tail = data
            .get(offset as usize..)
            .ok_or(CacheError::Offset(offset))?;
        let end = tail
            .iter()
            .position(|b| *b == 0)
            .ok_or(CacheError::Unterminated)?;
        Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
    };
    let mut cache = Cache::new();
    for i in 0..count {
        let entry = HEADER_LEN + i * ENTRY_LEN;
        let key = string_at(u32_at(entry + 4)?)?;
        let value = string_at(u32_at(entry + 8)?)?;
        cache.entry(key).or_default().push(value);
    }
    Ok(cache)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a cache file with the given (name, path) entries.
    fn cache_bytes(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let mut offsets = Vec::new();
        let strings_start = HEADER_LEN + entries.len() * ENTRY_LEN;
        for (key, value) in entries {
            let k = strings_start + strings.len();
            strings.extend_from_slice(key.as_bytes());
            strings.push(0);
            let v = strings_start + strings.len();
            strings.extend_from_slice(value.as_bytes());
            strings.push(0);
            offsets.push((k as u32, v as u32));
        }
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        out.resize(HEADER_LEN, 0);
        for (k, v) in offsets {
            out.extend_from_slice(&0x303i32.to_le_bytes());
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
            out.extend_from_slice(&[0; 12]);
        }
        out.extend_from_slice(&strings);
        out
    }

    #[test]
    fn parses_entries() {
        let bytes = cache_bytes(&[
            ("libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
            ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        ]);
        let cache = parse(&bytes).unwrap();
        assert_eq!(
            cache["libnccl.so.2"],
            vec!["/usr/lib/x86_64-linux-gnu/libnccl.so.2"]
        );
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn malformed_caches_are_errors() {
        let good = cache_bytes(&[("libc.so.6", "/lib/libc.so.6")]);
        assert!(parse(b"").is_err());
        assert!(parse(b"ld.so-1.7.0 and nothing else").is_err());
        assert!(parse(&good[..40]).is_err());
        assert!(parse(&good[..good.len() - 3]).is_err());
    }

    #[test]
    fn reads_this_machines_cache() {
        // Every glibc system caches libc; a parser that cannot find it is wrong.
        let bytes = std::fs::read("/etc/ld.so.cache").expect("a glibc system has /etc/ld.so.cache");
        let cache = parse(&bytes).unwrap();
        assert!(
            cache.contains_key("libc.so.6"),
            "{:?}",
            cache.keys().take(5).collect::<Vec<_>>()
        );
    }
}
