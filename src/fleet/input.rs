//! Reading many audit reports: files, directories of `*.json`, or one stream on stdin as
//! parallel shells collect it: documents one after another (`pdsh -N`, `srun`), with
//! `clush -b` banners between them, or with every line prefixed `host: ` (`pdsh`, `clush`
//! without gathering), whose lines of different hosts may interleave.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A single report or the whole stdin stream may not exceed this: an audit is a few tens of
/// KiB per node.
pub const MAX_INPUT: u64 = 256 << 20;

/// Why the reports could not be read; names the file or stream and where.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: larger than {MAX_INPUT} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{what}: line {line}: not a JSON document: {problem}")]
    Json {
        what: String,
        line: usize,
        problem: String,
    },
    #[error("{0}: no audit reports found")]
    Empty(String),
}

/// One document and where it came from (for messages).
#[derive(Debug, Clone)]
pub struct Document {
    pub origin: String,
    pub value: Value,
}

/// Reads every argument: `-` is stdin, a directory gives its `*.json` files (sorted).
pub fn read_all(args: &[PathBuf], stdin: &mut dyn Read) -> Result<Vec<Document>, InputError> {
    let mut docs = Vec::new();
    for arg in args {
        if arg.as_os_str() == "-" {
            let text = read_bounded(stdin, Path::new("<stdin>"))?;
            docs.extend(parse_stream("<stdin>", &text)?);
        } else if arg.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(arg)
                .map_err(|source| InputError::Io {
                    path: arg.clone(),
                    source,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(InputError::Empty(arg.display().to_string()));
            }
            for file in files {
                docs.extend(read_file(&file)?);
            }
        } else {
            docs.extend(read_file(arg)?);
        }
    }
    Ok(docs)
}

fn read_file(path: &Path) -> Result<Vec<Document>, InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let text = read_bounded(&mut file, path)?;
    parse_stream(&path.display().to_string(), &text)
}

fn read_bounded(reader: &mut dyn Read, path: &Path) -> Result<String, InputError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_INPUT {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Every JSON document in `text`, whichever of the collectors' shapes it has.
pub fn parse_stream(what: &str, text: &str) -> Result<Vec<Document>, InputError> {
    match demultiplex(text) {
        Some(hosts) => {
            let mut docs = Vec::new();
            for (host, body) in hosts {
                docs.extend(documents(&format!("{what} ({host})"), &body)?);
            }
            Ok(docs)
        }
        None => documents(what, text),
    }
}

/// `host: line` on every non-empty line, the first starting a document: the lines regrouped
/// per host (in the order hosts first appear, by name).
fn demultiplex(text: &str) -> Option<BTreeMap<String, String>> {
    let mut hosts: BTreeMap<String, String> = BTreeMap::new();
    let mut first = true;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (host, rest) = line.split_once(": ").or_else(|| {
            line.strip_suffix(':').map(|h| (h, "")) // an empty line of a host
        })?;
        if host.is_empty() || host.contains(char::is_whitespace) || host.starts_with(['{', '"']) {
            return None;
        }
        if first && !rest.trim_start().starts_with('{') {
            return None;
        }
        first = false;
        let body = hosts.entry(host.to_string()).or_default();
        body.push_str(rest);
        body.push('\n');
    }
    if hosts.is_empty() { None } else { Some(hosts) }
}

/// Documents one after another; lines between them that do not open one (banners such as
/// clush's `---------------` / `node[1-2] (2)`) are passed over.
fn documents(what: &str, text: &str) -> Result<Vec<Document>, InputError> {
    let mut docs = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        // The next line that opens an object.
        let Some(start) = line_starts(rest).find(|&i| rest[i..].trim_start().starts_with('{'))
        else {
            break;
        };
        let begin = at + start;
        let mut stream = serde_json::Deserializer::from_str(&text[begin..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => {
                let line = text[..begin].matches('\n').count() + 1;
                docs.push(Document {
                    origin: format!("{what}:{line}"),
                    value,
                });
                at = begin + stream.byte_offset();
            }
            Some(Err(e)) => {
                let line = text[..begin].matches('\n').count() + e.line();
                return Err(InputError::Json {
                    what: what.to_string(),
                    line,
                    problem: e.to_string(),
                });
            }
            None => break,
        }
    }
    if docs.is_empty() {
        return Err(InputError::Empty(what.to_string()));
    }
    Ok(docs)
}

fn line_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(docs: &[Document]) -> Vec<String> {
        docs.iter().map(|d| d.value["h"].to_string()).collect()
    }

    #[test]
    fn collectors_shapes() {
        let plain = "{\"h\": 1}\n{\n \"h\": 2\n}\n";
        assert_eq!(hosts(&parse_stream("s", plain).unwrap()), ["1", "2"]);
        let clush = "---------------\nn1\n---------------\n{\"h\": 1}\n---------------\nn[2-3] (2)\n---------------\n{\n\"h\": 2\n}\n";
        assert_eq!(hosts(&parse_stream("s", clush).unwrap()), ["1", "2"]);
        // pdsh's interleaved, prefixed lines.
        let pdsh = "n2: {\nn1: {\nn1:  \"h\": 1\nn2:  \"h\": 2\nn2: }\nn1: }\n";
        let docs = parse_stream("s", pdsh).unwrap();
        assert_eq!(hosts(&docs), ["1", "2"]);
        assert!(docs[0].origin.contains("(n1)"), "{}", docs[0].origin);
    }

    #[test]
    fn bad_streams_name_the_line() {
        let err = parse_stream("r.json", "{\"h\": 1}\n{\n\"h\": \n").unwrap_err();
        assert!(err.to_string().starts_with("r.json: line "), "{err}");
        let err = parse_stream("r.json", "no json here\n").unwrap_err();
        assert!(err.to_string().contains("no audit reports"), "{err}");
        assert!(parse_stream("r.json", "").is_err());
    }
}
