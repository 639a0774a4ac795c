//! A fleet at a glance: many nodes' audit reports folded into value groups per check and per
//! fact, nodes named as Slurm hostlists, what the profile judged failing first, and the
//! facts that must be alike on every node of a job (two NCCL versions in one job hang it).
//!
//! Built to stream: reports are cut from their files or stream by one thread, parsed by as
//! many threads as there are cores, and folded in input order by the caller's thread, so a
//! hundred thousand reports pass through in bounded memory with every core busy.

pub(crate) mod facts;
pub(crate) mod groups;
pub(crate) mod input;
pub(crate) mod parse;
pub(crate) mod render;
pub(crate) mod split;
pub(crate) mod verdict;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};

use groups::Fleet;
use input::{Batch, Item};
use parse::NodeDoc;

/// How many problems (unreadable files, malformed documents) are kept to be named one by
/// one; the rest are counted.
pub(crate) const PROBLEMS_NAMED: usize = 20;

/// Every report read: the folded fleet and what could not be read.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    pub fleet: Fleet,
    /// The first [`PROBLEMS_NAMED`] problems, in input order.
    pub problems: Vec<String>,
    /// All problems, named or not.
    pub skipped: usize,
}

impl Reading {
    fn problem(&mut self, text: String) {
        self.skipped += 1;
        if self.problems.len() < PROBLEMS_NAMED {
            self.problems.push(text);
        }
    }
}

/// What fleet passes over: a document it cannot read, or an input it cannot open (the
/// message naming it).
#[derive(Debug, thiserror::Error)]
enum Skip {
    #[error(transparent)]
    Doc(#[from] parse::Unread),
    #[error("{0}")]
    Input(String),
}

/// One parsed batch.
type Parsed = (u64, Vec<Result<NodeDoc, Skip>>);

/// Reads every argument (`-` is `stdin`) and folds every report in, in input order.
pub(crate) fn read(args: &[PathBuf], stdin: &mut (dyn Read + Send)) -> Reading {
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 16);
    let (job_tx, job_rx) = mpsc::sync_channel::<Batch>(workers * 2);
    let (done_tx, done_rx) = mpsc::sync_channel::<Parsed>(workers * 4);
    let job_rx = Arc::new(Mutex::new(job_rx));
    let mut reading = Reading::default();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            input::produce(args, stdin, &mut |batch| job_tx.send(batch).is_ok());
        });
        for _ in 0..workers {
            let (jobs, done) = (job_rx.clone(), done_tx.clone());
            scope.spawn(move || {
                loop {
                    let next = match jobs.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok(batch) = next else { return };
                    if done.send((batch.seq, parse_batch(batch.items))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        // Folded in input order: batches that finish early wait (a few, by the channels'
        // bounds) for the ones before them.
        let mut waiting: BTreeMap<u64, Vec<Result<NodeDoc, Skip>>> = BTreeMap::new();
        let mut next = 0u64;
        for (seq, docs) in done_rx {
            waiting.insert(seq, docs);
            while let Some(docs) = waiting.remove(&next) {
                for doc in docs {
                    match doc {
                        Ok(doc) => reading.fleet.fold(doc),
                        Err(skip) => reading.problem(skip.to_string()),
                    }
                }
                next += 1;
            }
        }
    });
    reading
}

fn parse_batch(items: Vec<Item>) -> Vec<Result<NodeDoc, Skip>> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Item::Document {
                origin,
                offset,
                bytes,
            } => out.push(parse::node_doc(&origin, offset, &bytes).map_err(Skip::from)),
            // A file that is one report (the usual case) is parsed as it is, not cut first.
            Item::File { origin, bytes } if let Some(doc) = whole(&origin, &bytes) => {
                out.push(Ok(doc));
            }
            Item::File { origin, bytes } => split::split_bytes(&bytes, &mut |piece| {
                out.push(match piece {
                    split::Piece::Document {
                        offset,
                        prefix: None,
                        bytes,
                    } => parse::node_doc(&origin, offset, &bytes).map_err(Skip::from),
                    split::Piece::Document {
                        offset,
                        prefix: Some(host),
                        bytes,
                    } => {
                        let origin = format!("{origin} ({})", crate::say::cleaned_line(&host));
                        parse::node_doc(&origin, offset, &bytes).map_err(Skip::from)
                    }
                    split::Piece::Problem { offset, problem } => {
                        Err(Skip::Input(format!("{origin}: byte {offset}: {problem}")))
                    }
                })
            }),
            Item::Problem(problem) => out.push(Err(Skip::Input(problem))),
        }
    }
    out
}

/// `bytes` as one report, when they are exactly one (surrounded by whitespace at most).
fn whole(origin: &str, bytes: &[u8]) -> Option<NodeDoc> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[start] != b'{' {
        return None;
    }
    parse::node_doc(origin, start as u64, &bytes[start..]).ok()
}
