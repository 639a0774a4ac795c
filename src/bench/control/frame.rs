//! The control protocol between ranks: length-prefixed JSON frames. Frames come from the
//! network, so every read is bounded: a peer that announces more than [`MAX_FRAME`] bytes, or
//! sends something that is not a frame, is dropped before anything is allocated for it.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::rendezvous::{Member, Transport};
use crate::bench::Settings;

/// Marks a gputune bench frame; anything else on the port is refused at once.
pub const MAGIC: [u8; 4] = *b"GTB1";
/// Largest frame accepted (a Welcome for a few thousand ranks fits).
pub(crate) const MAX_FRAME: usize = 1 << 20;
/// Header: magic and a big-endian u32 length.
pub(crate) const HEADER: usize = 8;

/// Every message ranks exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Message {
    /// A rank asks to join: its nonce (hex), who it is, where its data port is. The token
    /// is never sent: the rank proves it with [`Message::Proof`] (see [`super::auth`]).
    Hello {
        nonce: String,
        rank: usize,
        world: usize,
        member: Member,
        data_port: u16,
        backend: Transport,
        settings: Settings,
    },
    /// Rank 0 accepts: every member and its data address (`ip:port`), NCCL's id if used.
    Welcome {
        members: Vec<Member>,
        data_addrs: Vec<String>,
        nccl_id: Option<Vec<u8>>,
    },
    /// Rank 0 refuses a connection (bad token, wrong world size, duplicate rank).
    Reject { reason: String },
    /// Opening of a data connection: the sender's nonce (hex), rank and stream.
    DataHello {
        nonce: String,
        rank: usize,
        stream: usize,
    },
    /// The accepting side's answer to an opening: its own nonce and its proof of the token.
    Challenge { nonce: String, proof: String },
    /// The opening side's proof of the token, over both nonces and its opening.
    Proof { proof: String },
    /// A rank reached barrier `seq`.
    Arrive { seq: u64 },
    /// Everyone reached barrier `seq`.
    Release { seq: u64 },
    /// A rank's figures for row `seq`: µs per operation and wrong elements, out-of-place
    /// then in-place.
    Report {
        seq: u64,
        times: [f64; 2],
        wrong: [Option<u64>; 2],
    },
    /// A rank hit an error; rank 0 decides who to blame and aborts the job. `suspect` is
    /// the rank at the other end of a failed transfer, when it was one.
    Failed {
        reason: String,
        #[serde(default)]
        suspect: Option<usize>,
    },
    /// Rank 0 stops the job: every rank exits 3 with this reason.
    Abort { reason: String },
    /// The run is over; every rank exits with this code.
    Done { exit_code: u8 },
    /// `gputune preflight`: a rank asks to join the check (its nonce, place and host name).
    PreflightHello {
        nonce: String,
        rank: usize,
        world: usize,
        host: String,
    },
    /// `gputune preflight`'s own messages after the handshake (`crate::preflight::wire`).
    Preflight { body: serde_json::Value },
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("not a gputune bench frame")]
    BadMagic,
    #[error("frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("connection closed")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl FrameError {
    /// A read that gave up because the socket's timeout passed.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// The body of the frame carrying `message` (what a handshake's proof covers).
pub(crate) fn body(message: &Message) -> Vec<u8> {
    // Serialising plain data to a Vec cannot fail.
    serde_json::to_vec(message).unwrap_or_default()
}

/// The frame carrying `message`.
pub(crate) fn encode(message: &Message) -> Vec<u8> {
    framed(&body(message))
}

/// A frame around an already encoded body.
pub(crate) fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The body length a header announces, checked against the limit.
pub(crate) fn parse_header(header: &[u8; HEADER]) -> Result<usize, FrameError> {
    if header[..4] != MAGIC {
        return Err(FrameError::BadMagic);
    }
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    Ok(len)
}

/// Decodes a frame body.
pub(crate) fn parse_body(body: &[u8]) -> Result<Message, FrameError> {
    serde_json::from_slice(body).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Reads one frame (blocking, within the socket's timeout).
pub fn read(from: &mut impl Read) -> Result<Message, FrameError> {
    read_raw(from).map(|(_, m)| m)
}

/// Reads one frame and keeps its body's bytes, which a handshake's proof covers.
pub(crate) fn read_raw(from: &mut impl Read) -> Result<(Vec<u8>, Message), FrameError> {
    let mut header = [0u8; HEADER];
    read_exact(from, &mut header)?;
    let len = parse_header(&header)?;
    let mut body = vec![0u8; len];
    read_exact(from, &mut body)?;
    let message = parse_body(&body)?;
    Ok((body, message))
}

/// Reads one frame that must be complete by `deadline`. A socket timeout alone bounds each
/// `read()`, so a peer dripping one byte at a time would never be timed out; here the timeout
/// is re-armed before each read with what is left of the one deadline.
pub(crate) fn read_by(stream: &TcpStream, deadline: Instant) -> Result<Message, FrameError> {
    read(&mut ByDeadline { stream, deadline })
}

/// [`read_by`], keeping the body's bytes.
pub(crate) fn read_raw_by(
    stream: &TcpStream,
    deadline: Instant,
) -> Result<(Vec<u8>, Message), FrameError> {
    read_raw(&mut ByDeadline { stream, deadline })
}

struct ByDeadline<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for ByDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the frame was not complete in time",
            ));
        }
        self.stream.set_read_timeout(Some(remaining))?;
        (&mut &*self.stream).read(buf)
    }
}

fn read_exact(from: &mut impl Read, buf: &mut [u8]) -> Result<(), FrameError> {
    from.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            FrameError::Closed
        } else {
            FrameError::Io(e)
        }
    })
}

/// Writes one frame.
pub(crate) fn write(to: &mut impl Write, message: &Message) -> io::Result<()> {
    to.write_all(&encode(message))?;
    to.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn round_trip() {
        for m in [
            Message::Arrive { seq: 7 },
            Message::Report {
                seq: 1,
                times: [1.5, 2.5],
                wrong: [Some(0), None],
            },
            Message::Abort {
                reason: "rank 2 left".into(),
            },
            Message::DataHello {
                nonce: "00".into(),
                rank: 1,
                stream: 0,
            },
            Message::Challenge {
                nonce: "ab".into(),
                proof: "cd".into(),
            },
            Message::Proof { proof: "ef".into() },
        ] {
            let bytes = encode(&m);
            assert_eq!(read(&mut Cursor::new(&bytes)).unwrap(), m);
        }
    }

    #[test]
    fn a_dripping_peer_is_timed_out_by_the_one_deadline() {
        use std::net::{TcpListener, TcpStream};
        use std::time::Duration;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let dripper = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            // A valid header announcing 4 KiB, then one body byte every 200 ms: each read
            // sees data well within any per-read timeout.
            let _ = s.write_all(b"GTB1\x00\x00\x10\x00");
            for _ in 0..100 {
                if s.write_all(b" ").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let (stream, _) = listener.accept().unwrap();
        let start = Instant::now();
        let err = read_by(&stream, start + Duration::from_secs(1)).unwrap_err();
        let took = start.elapsed();
        assert!(err.is_timeout(), "{err}");
        // The dripper would keep going for 20 s; the deadline stops the read near 1 s.
        assert!(took < Duration::from_secs(8), "took {took:?}");
        drop(stream);
        dripper.join().unwrap();
    }

    #[test]
    fn refused_input() {
        let cases: &[(&[u8], &str)] = &[
            (b"GET / HTTP/1.1\r\n\r\n", "not a gputune"),
            (b"GTB1\xff\xff\xff\xff", "over the"),
            (b"GTB1\x00\x00\x00\x05hello", "malformed"),
            (b"GTB1\x00\x00\x00\x02{}", "malformed"),
            (b"GTB1\x00\x00\x00\x10{\"kind\":", "closed"),
            (b"GT", "closed"),
            (b"", "closed"),
        ];
        for (bytes, want) in cases {
            let err = read(&mut Cursor::new(bytes)).unwrap_err().to_string();
            assert!(err.contains(want), "{bytes:?}: {err}");
        }
    }

    mod arbitrary_bytes {
        use super::*;
        use proptest::prelude::*;
        use std::time::{Duration, Instant};

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Whatever a peer sends, the parsers answer (a message or a refusal) without
            /// panicking, and quickly: nothing is allocated past what arrived or the limit.
            #[test]
            fn never_panic_and_end_quickly(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let start = Instant::now();
                let _ = read(&mut Cursor::new(&bytes));
                let _ = parse_body(&bytes);
                if let Ok(header) = <[u8; HEADER]>::try_from(&bytes[..bytes.len().min(HEADER)]) {
                    let _ = parse_header(&header);
                }
                prop_assert!(start.elapsed() < Duration::from_secs(2));
            }

            /// A valid header in front of arbitrary bytes reaches the body parser.
            #[test]
            fn framed_garbage_is_refused_not_panicked(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
                let start = Instant::now();
                let bytes = framed(&body);
                match read_raw(&mut Cursor::new(&bytes)) {
                    Ok((raw, _)) => prop_assert_eq!(raw, body),
                    Err(e) => prop_assert!(matches!(e, FrameError::Malformed(_)), "{e}"),
                }
                prop_assert!(start.elapsed() < Duration::from_secs(2));
            }

            /// Messages that look like a handshake but carry arbitrary text round-trip.
            #[test]
            fn handshake_messages_round_trip(nonce in ".{0,80}", proof in ".{0,80}", rank in any::<usize>()) {
                for m in [
                    Message::Challenge { nonce: nonce.clone(), proof: proof.clone() },
                    Message::Proof { proof: proof.clone() },
                    Message::DataHello { nonce: nonce.clone(), rank, stream: rank / 2 },
                ] {
                    prop_assert_eq!(read(&mut Cursor::new(encode(&m))).unwrap(), m);
                }
            }
        }
    }
}
