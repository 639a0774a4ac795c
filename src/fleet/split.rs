//! Cutting a stream into JSON documents without parsing them, as fast as the bytes arrive:
//! documents one after another (concatenated or one per line), with lines between them that
//! open none (`clush -b` banners, shell noise) passed over, or every line prefixed `host: `
//! (`pdsh`, `clush` without `-b`), whose hosts' lines may interleave and are regrouped per
//! host. Each document keeps the byte offset it starts at, so a bad one is named exactly;
//! nothing but the document being cut is held, so a stream of any length fits in memory.

use std::collections::HashMap;
use std::io::{self, BufRead, Read};

/// The most one document may hold: an audit report is a few tens of KiB. A larger one is
/// named and skipped (the stream itself may be any length).
pub(crate) const MAX_DOCUMENT: usize = 64 << 20;

/// What the splitter finds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// One document's bytes: from its `{` to the matching `}`.
    Document {
        /// Byte offset of the `{` in the input.
        offset: u64,
        /// The `host: ` prefix its lines carried, in the prefixed shape.
        prefix: Option<String>,
        bytes: Vec<u8>,
    },
    /// Something that cannot be a document: too large, or cut off by the end of the input.
    Problem { offset: u64, problem: String },
}

/// Finds document boundaries in one stream (one per host in the prefixed shape): braces and
/// brackets counted outside strings, escapes inside them honoured.
#[derive(Debug, Default)]
struct Scanner {
    /// Inside a document: its start offset, nesting depth and string state.
    open: Option<Open>,
    /// Passing over a line that does not open a document.
    skipping_line: bool,
}

#[derive(Debug)]
struct Open {
    offset: u64,
    depth: u64,
    in_string: bool,
    escaped: bool,
    /// `None` once the document outgrew [`MAX_DOCUMENT`]: scanned to its end, not kept.
    bytes: Option<Vec<u8>>,
}

impl Scanner {
    /// Scans `chunk`, which starts at byte `base` of the input.
    fn feed(&mut self, chunk: &[u8], base: u64, prefix: Option<&str>, out: &mut dyn FnMut(Piece)) {
        let mut i = 0;
        while i < chunk.len() {
            let Some(open) = &mut self.open else {
                if self.skipping_line {
                    match chunk[i..].iter().position(|&b| b == b'\n') {
                        Some(n) => {
                            i += n + 1;
                            self.skipping_line = false;
                        }
                        None => return,
                    }
                    continue;
                }
                match chunk[i] {
                    b' ' | b'\t' | b'\r' | b'\n' => i += 1,
                    b'{' => {
                        self.open = Some(Open {
                            offset: base + i as u64,
                            depth: 0,
                            in_string: false,
                            escaped: false,
                            bytes: Some(Vec::new()),
                        });
                    }
                    _ => self.skipping_line = true,
                }
                continue;
            };
            let start = i;
            let mut end = None;
            while i < chunk.len() {
                let b = chunk[i];
                if open.in_string {
                    if open.escaped {
                        open.escaped = false;
                    } else if b == b'\\' {
                        open.escaped = true;
                    } else if b == b'"' {
                        open.in_string = false;
                    } else {
                        // The rest of a plain string run in one step.
                        let run = chunk[i..]
                            .iter()
                            .position(|&b| b == b'"' || b == b'\\')
                            .unwrap_or(chunk.len() - i);
                        i += run.max(1);
                        continue;
                    }
                } else if !STRUCTURAL[b as usize] {
                    // Whitespace, numbers, literals: on to the next byte that matters.
                    i += chunk[i..]
                        .iter()
                        .position(|&b| STRUCTURAL[b as usize])
                        .unwrap_or(chunk.len() - i);
                    continue;
                } else {
                    match b {
                        b'"' => open.in_string = true,
                        b'{' | b'[' => open.depth += 1,
                        b'}' | b']' => {
                            open.depth = open.depth.saturating_sub(1);
                            if open.depth == 0 {
                                end = Some(i + 1);
                                i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            let stop = end.unwrap_or(chunk.len());
            if let Some(bytes) = &mut open.bytes {
                if bytes.len() + (stop - start) > MAX_DOCUMENT {
                    open.bytes = None;
                } else {
                    bytes.extend_from_slice(&chunk[start..stop]);
                }
            }
            if end.is_some()
                && let Some(done) = self.open.take()
            {
                out(match done.bytes {
                    Some(bytes) => Piece::Document {
                        offset: done.offset,
                        prefix: prefix.map(str::to_string),
                        bytes,
                    },
                    None => Piece::Problem {
                        offset: done.offset,
                        problem: format!("a document larger than {MAX_DOCUMENT} bytes"),
                    },
                });
            }
        }
    }

    /// The end of the input: a document still open was cut off.
    fn finish(&mut self, out: &mut dyn FnMut(Piece)) {
        if let Some(open) = self.open.take() {
            out(Piece::Problem {
                offset: open.offset,
                problem: "a document cut off by the end of the input".into(),
            });
        }
        self.skipping_line = false;
    }
}

/// The bytes that open or close a string, an object or an array.
static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table
};

/// The longest line the prefixed shape takes: one document's worth plus its prefix.
const MAX_LINE: u64 = MAX_DOCUMENT as u64 + 4096;

/// Every document of `input`, in order, to `out`; an I/O error ends the stream (what was
/// found before it is kept).
pub(crate) fn split(mut input: impl Read, out: &mut dyn FnMut(Piece)) -> io::Result<()> {
    // Enough of the start to see the first line whole, however a pipe delivers it.
    let mut head = Vec::new();
    loop {
        let had = head.len();
        (&mut input).take(4096).read_to_end(&mut head)?;
        let first_line = head
            .split(|&b| b == b'\n')
            .position(|l| l.iter().any(|b| !b.is_ascii_whitespace()));
        let complete = first_line.is_some_and(|n| head.split(|&b| b == b'\n').count() > n + 1);
        if complete || head.len() == had || head.len() >= 1 << 16 {
            break;
        }
    }
    let is_prefixed = prefixed(&head);
    let mut reader = io::BufReader::with_capacity(1 << 20, io::Cursor::new(head).chain(input));
    if is_prefixed {
        return demultiplex(reader, out);
    }
    let mut scanner = Scanner::default();
    let mut base = 0u64;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        scanner.feed(chunk, base, None, out);
        let n = chunk.len();
        base += n as u64;
        reader.consume(n);
    }
    scanner.finish(out);
    Ok(())
}

/// [`split`] of input already in memory (a report file read whole), without copying it
/// through a buffer first.
pub(crate) fn split_bytes(input: &[u8], out: &mut dyn FnMut(Piece)) {
    if prefixed(input) {
        // Reading from a slice cannot fail.
        let _ = demultiplex(input, out);
        return;
    }
    let mut scanner = Scanner::default();
    scanner.feed(input, 0, None, out);
    scanner.finish(out);
}

/// `host: {` on the first non-blank line: the prefixed shape of pdsh and clush.
fn prefixed(start: &[u8]) -> bool {
    let first = start
        .split(|&b| b == b'\n')
        .find(|l| l.iter().any(|b| !b.is_ascii_whitespace()));
    first.and_then(split_prefix).is_some_and(|(_, rest)| {
        rest.iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{')
    })
}

/// `host: rest` (or `host:` alone, a host's empty line): a host is a word without spaces
/// that does not start a JSON value.
fn split_prefix(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().take(256).position(|&b| b == b':')?;
    let (host, rest) = (&line[..colon], &line[colon + 1..]);
    let rest = match rest.first() {
        Some(b' ') => &rest[1..],
        Some(b'\n' | b'\r') | None => &[][..],
        Some(_) => return None,
    };
    let word = !host.is_empty()
        && !host.iter().any(u8::is_ascii_whitespace)
        && !matches!(host[0], b'{' | b'"' | b'[');
    word.then_some((host, rest))
}

/// The prefixed shape: each host's lines fed to that host's own scanner.
fn demultiplex(mut reader: impl BufRead, out: &mut dyn FnMut(Piece)) -> io::Result<()> {
    let mut hosts: HashMap<Vec<u8>, Scanner> = HashMap::new();
    let mut line = Vec::new();
    let mut base = 0u64;
    loop {
        line.clear();
        let n = (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line)?;
        if n == 0 {
            break;
        }
        let at = base;
        base += n as u64;
        if n as u64 == MAX_LINE && line.last() != Some(&b'\n') {
            out(Piece::Problem {
                offset: at,
                problem: format!("a line longer than {MAX_LINE} bytes"),
            });
            // The rest of that line is passed over.
            loop {
                let chunk = reader.fill_buf()?;
                if chunk.is_empty() {
                    break;
                }
                match chunk.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        reader.consume(nl + 1);
                        base += nl as u64 + 1;
                        break;
                    }
                    None => {
                        let len = chunk.len();
                        reader.consume(len);
                        base += len as u64;
                    }
                }
            }
            continue;
        }
        let Some((host, rest)) = split_prefix(&line) else {
            continue;
        };
        let skip = (line.len() - rest.len()) as u64;
        let label = String::from_utf8_lossy(host).into_owned();
        let scanner = hosts.entry(host.to_vec()).or_default();
        scanner.feed(rest, at + skip, Some(&label), out);
        if !rest.ends_with(b"\n") {
            scanner.feed(b"\n", at + n as u64, Some(&label), out);
        }
    }
    let mut names: Vec<Vec<u8>> = hosts.keys().cloned().collect();
    names.sort();
    for name in names {
        if let Some(scanner) = hosts.get_mut(&name) {
            scanner.finish(out);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each document as `(offset, prefix, text)`, each problem as `(offset, "!problem")`.
    fn pieces(input: &[u8]) -> Vec<(u64, Option<String>, String)> {
        let mut got = Vec::new();
        split(input, &mut |p| {
            got.push(match p {
                Piece::Document {
                    offset,
                    prefix,
                    bytes,
                } => (offset, prefix, String::from_utf8_lossy(&bytes).into_owned()),
                Piece::Problem { offset, problem } => (offset, None, format!("!{problem}")),
            })
        })
        .unwrap();
        got
    }

    fn texts(input: &str) -> Vec<String> {
        let streamed: Vec<String> = pieces(input.as_bytes()).into_iter().map(|p| p.2).collect();
        let mut whole = Vec::new();
        split_bytes(input.as_bytes(), &mut |p| {
            if let Piece::Document { bytes, .. } = p {
                whole.push(String::from_utf8_lossy(&bytes).into_owned());
            }
        });
        assert_eq!(streamed, whole, "split and split_bytes differ on {input:?}");
        streamed
    }

    #[test]
    fn the_collectors_shapes() {
        // Concatenated, one per line, pretty-printed, and with strings that hold braces.
        assert_eq!(
            texts("{}{\"a\":1}\n{\"b\":\"}{\\\"\"}"),
            ["{}", "{\"a\":1}", "{\"b\":\"}{\\\"\"}"]
        );
        assert_eq!(
            texts("{\n \"h\": [1, {}]\n}\n{\"h\": 2}\n"),
            ["{\n \"h\": [1, {}]\n}", "{\"h\": 2}"]
        );
        // clush -b banners between documents are passed over.
        let clush = "---------------\nn1\n---------------\n{\"h\": 1}\n---------------\nn[2-3] (2)\n---------------\n{\n\"h\": 2\n}\n";
        assert_eq!(texts(clush), ["{\"h\": 1}", "{\n\"h\": 2\n}"]);
        // pdsh: interleaved prefixed lines, regrouped per host, offsets into the stream.
        let pdsh = "n2: {\nn1: {\nn1:  \"h\": 1\nn2:  \"h\": 2\nn2: }\nn1: }\n";
        let got = pieces(pdsh.as_bytes());
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1.as_deref()), (4, Some("n2")));
        assert_eq!(got[0].2, "{\n \"h\": 2\n}");
        assert_eq!((got[1].0, got[1].1.as_deref()), (10, Some("n1")));
    }

    #[test]
    fn offsets_and_problems() {
        let got = pieces(b"junk line\n  {\"a\": 1}  {\"b\": [\n");
        assert_eq!(got[0].0, 12);
        assert_eq!(
            got[1],
            (
                22,
                None,
                "!a document cut off by the end of the input".into()
            )
        );
        assert!(pieces(b"").is_empty());
        assert!(pieces(b"no json here\n").is_empty());
        // A document outgrowing the cap is named and passed over; the next one is found.
        let mut big = b"{\"a\": \"".to_vec();
        big.resize(MAX_DOCUMENT + 10, b'x');
        big.extend_from_slice(b"\"}\n{\"b\": 1}");
        let got = pieces(&big);
        assert!(
            got[0].2.starts_with("!a document larger than"),
            "{:?}",
            got[0].2
        );
        assert_eq!(got[1].2, "{\"b\": 1}");
    }

    #[test]
    fn many_tiny_documents_are_linear() {
        let input = "{}\n".repeat(200_000);
        let start = std::time::Instant::now();
        assert_eq!(pieces(input.as_bytes()).len(), 200_000);
        // Generous: quadratic counting took minutes for half this many.
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
    }
}
