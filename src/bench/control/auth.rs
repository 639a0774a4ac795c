//! Proving the job's token without sending it. Every connection between ranks (the control
//! connection to rank 0 and each data connection of the TCP ring) opens with a
//! challenge-response over nonces from both sides:
//!
//! 1. the opening side sends its opening (`Hello` / `DataHello`) with a fresh nonce;
//! 2. the accepting side answers [`Message::Challenge`]: its own fresh nonce and
//!    `HMAC-SHA256(token, "acceptor" ‖ opening ‖ its nonce)`;
//! 3. the opening side checks that proof (so a rank never talks further to something that
//!    does not know the token) and answers [`Message::Proof`]:
//!    `HMAC-SHA256(token, "opener" ‖ opening ‖ acceptor's nonce)`.
//!
//! The token never crosses the wire, a captured exchange cannot be replayed (the acceptor's
//! nonce is new each time), one side's proof cannot be reflected as the other's (the role is
//! in the MAC), and the proof covers the whole opening, so its rank, world size and data port
//! cannot be altered in flight. Comparisons are constant-time (`Mac::verify_slice`). What it
//! does not give: secrecy or integrity after the handshake (no encryption), nor protection
//! when the token itself is guessable (see the README on tokens derived from the launcher).

use std::net::TcpStream;
use std::time::Instant;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::frame::{self, FrameError, Message};

/// Nonce length in bytes (hex on the wire).
pub(crate) const NONCE_BYTES: usize = 32;
/// Domain separation: the version of this exchange and each side's role.
const ACCEPTOR: &[u8] = b"gputune-bench/1 acceptor\0";
const OPENER: &[u8] = b"gputune-bench/1 opener\0";

/// Why a handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The peer's proof does not match this side's token.
    #[error("wrong job token (it could not prove GPUTUNE_BENCH_TOKEN)")]
    WrongToken,
    /// The peer sent something other than the next step of the handshake.
    #[error("expected {expected}, got {got}")]
    Unexpected { expected: &'static str, got: String },
    /// A nonce that is not [`NONCE_BYTES`] bytes of hex.
    #[error("malformed nonce")]
    BadNonce,
    #[error("{0}")]
    Frame(#[from] FrameError),
    #[error("cannot send: {0}")]
    Send(#[source] std::io::Error),
    #[error("no randomness for a nonce: {0}")]
    Random(String),
}

impl AuthError {
    /// The peer failed the handshake (as opposed to this host failing).
    pub(crate) fn is_peer_fault(&self) -> bool {
        !matches!(self, AuthError::Random(_) | AuthError::Send(_))
    }
}

/// Which side of the exchange a proof is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The side that accepted the connection (rank 0, or a ring neighbour's data port).
    Acceptor,
    /// The side that opened it.
    Opener,
}

/// A fresh nonce from the OS's randomness, as hex.
pub(crate) fn nonce() -> Result<String, AuthError> {
    let mut bytes = [0u8; NONCE_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(hex(&bytes))
}

fn mac(token: &str, role: Role, opening: &[u8], acceptor_nonce: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(token.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(match role {
        Role::Acceptor => ACCEPTOR,
        Role::Opener => OPENER,
    });
    mac.update(&(opening.len() as u64).to_be_bytes());
    mac.update(opening);
    mac.update(acceptor_nonce);
    mac
}

/// The proof `role` gives over `opening` (the opening frame's body) and the acceptor's nonce.
pub(crate) fn prove(token: &str, role: Role, opening: &[u8], acceptor_nonce: &str) -> String {
    hex(&mac(token, role, opening, acceptor_nonce.as_bytes())
        .finalize()
        .into_bytes())
}

/// Whether `proof` is `role`'s proof of `token`, compared in constant time.
pub(crate) fn verify(
    token: &str,
    role: Role,
    opening: &[u8],
    acceptor_nonce: &str,
    proof: &str,
) -> bool {
    match unhex(proof) {
        Some(bytes) => mac(token, role, opening, acceptor_nonce.as_bytes())
            .verify_slice(&bytes)
            .is_ok(),
        None => false,
    }
}

/// The opening side: sends `opening` (which carries a nonce from [`nonce`]), checks the
/// acceptor's proof, then proves its own knowledge of the token. Every read ends by `deadline`.
pub(crate) fn open(
    stream: &mut TcpStream,
    token: &str,
    opening: &Message,
    deadline: Instant,
) -> Result<(), AuthError> {
    let body = frame::body(opening);
    write(stream, &frame::framed(&body))?;
    let (nonce, proof) = match frame::read_by(stream, deadline)? {
        Message::Challenge { nonce, proof } => (nonce, proof),
        other => {
            return Err(AuthError::Unexpected {
                expected: "a challenge",
                got: kind(&other),
            });
        }
    };
    if !well_formed(&nonce) {
        return Err(AuthError::BadNonce);
    }
    if !verify(token, Role::Acceptor, &body, &nonce, &proof) {
        return Err(AuthError::WrongToken);
    }
    let proof = prove(token, Role::Opener, &body, &nonce);
    write(stream, &frame::encode(&Message::Proof { proof }))
}

/// The accepting side: reads an opening, challenges it, and returns it once the opener has
/// proved the token. The whole exchange ends by `deadline`, however slowly bytes arrive.
pub(crate) fn accept(
    stream: &mut TcpStream,
    token: &str,
    deadline: Instant,
) -> Result<Message, AuthError> {
    let (body, opening) = frame::read_raw_by(stream, deadline)?;
    let theirs = match &opening {
        Message::Hello { nonce, .. }
        | Message::DataHello { nonce, .. }
        | Message::PreflightHello { nonce, .. } => nonce,
        other => {
            return Err(AuthError::Unexpected {
                expected: "a Hello",
                got: kind(other),
            });
        }
    };
    if !well_formed(theirs) {
        return Err(AuthError::BadNonce);
    }
    let mine = nonce()?;
    let proof = prove(token, Role::Acceptor, &body, &mine);
    write(
        stream,
        &frame::encode(&Message::Challenge {
            nonce: mine.clone(),
            proof,
        }),
    )?;
    match frame::read_by(stream, deadline)? {
        Message::Proof { proof } if verify(token, Role::Opener, &body, &mine, &proof) => {
            Ok(opening)
        }
        Message::Proof { .. } => Err(AuthError::WrongToken),
        other => Err(AuthError::Unexpected {
            expected: "a proof",
            got: kind(&other),
        }),
    }
}

fn write(stream: &mut TcpStream, bytes: &[u8]) -> Result<(), AuthError> {
    use std::io::Write;
    stream
        .write_all(bytes)
        .and_then(|_| stream.flush())
        .map_err(AuthError::Send)
}

/// A message's kind for an error, without its contents (which a stranger chose).
fn kind(m: &Message) -> String {
    let json = frame::body(m);
    serde_json::from_slice::<serde_json::Value>(&json)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_else(|| "a message".to_string())
}

fn well_formed(nonce: &str) -> bool {
    nonce.len() == NONCE_BYTES * 2 && unhex(nonce).is_some()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn proofs_depend_on_token_role_opening_and_nonce() {
        let p = prove("s3cret", Role::Opener, b"hello", "n1");
        assert_eq!(p.len(), 64);
        assert!(verify("s3cret", Role::Opener, b"hello", "n1", &p));
        assert!(!verify("s3creT", Role::Opener, b"hello", "n1", &p));
        assert!(!verify("s3cret", Role::Acceptor, b"hello", "n1", &p));
        assert!(!verify("s3cret", Role::Opener, b"hellO", "n1", &p));
        assert!(!verify("s3cret", Role::Opener, b"hello", "n2", &p));
        assert!(!verify("s3cret", Role::Opener, b"hello", "n1", &p[..62]));
        assert!(!verify("s3cret", Role::Opener, b"hello", "n1", "zz"));
        assert!(!verify("s3cret", Role::Opener, b"hello", "n1", "é"));
        assert_ne!(nonce().unwrap(), nonce().unwrap());
        assert!(well_formed(&nonce().unwrap()));
        assert!(!well_formed("00"));
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn opening() -> Message {
        Message::DataHello {
            nonce: nonce().unwrap(),
            rank: 3,
            stream: 1,
        }
    }

    fn exchange(
        opener_token: &str,
        acceptor_token: &str,
    ) -> (Result<(), AuthError>, Result<Message, AuthError>) {
        let (mut a, mut b) = pair();
        let deadline = Instant::now() + Duration::from_secs(5);
        let acceptor_token = acceptor_token.to_string();
        let acceptor = thread::spawn(move || accept(&mut b, &acceptor_token, deadline));
        let opened = open(&mut a, opener_token, &opening(), deadline);
        drop(a);
        (opened, acceptor.join().unwrap())
    }

    #[test]
    fn the_same_token_completes_the_exchange() {
        let (opened, accepted) = exchange("t", "t");
        opened.unwrap();
        assert!(matches!(
            accepted.unwrap(),
            Message::DataHello {
                rank: 3,
                stream: 1,
                ..
            }
        ));
    }

    #[test]
    fn a_different_token_fails_on_both_sides_without_the_opener_proving_anything() {
        let (opened, accepted) = exchange("mine", "theirs");
        assert!(matches!(opened, Err(AuthError::WrongToken)), "{opened:?}");
        // The opener stopped before sending a proof: the acceptor saw the connection close.
        assert!(
            matches!(accepted, Err(AuthError::Frame(FrameError::Closed))),
            "{accepted:?}"
        );
    }

    #[test]
    fn a_replayed_exchange_is_refused() {
        use std::io::Write;
        // An eavesdropper saw a genuine exchange: the opening and the proof for that
        // acceptor's nonce. Replayed to a new acceptor, whose nonce is fresh, it fails.
        let body = frame::body(&opening());
        let seen_nonce = nonce().unwrap();
        let seen_proof = prove("t", Role::Opener, &body, &seen_nonce);
        let (mut c, mut d) = pair();
        let deadline = Instant::now() + Duration::from_secs(5);
        let acceptor = thread::spawn(move || accept(&mut d, "t", deadline));
        c.write_all(&frame::framed(&body)).unwrap();
        let Message::Challenge { nonce: fresh, .. } = frame::read_by(&c, deadline).unwrap() else {
            panic!("no challenge");
        };
        assert_ne!(fresh, seen_nonce);
        c.write_all(&frame::encode(&Message::Proof { proof: seen_proof }))
            .unwrap();
        assert!(matches!(
            acceptor.join().unwrap(),
            Err(AuthError::WrongToken)
        ));
    }

    #[test]
    fn a_silent_opener_is_dropped_at_the_deadline() {
        let (_a, mut b) = pair();
        let start = Instant::now();
        let err = accept(&mut b, "t", start + Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(&err, AuthError::Frame(e) if e.is_timeout()),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    /// The TCP ring's data port runs the same handshake: a stranger that connects first,
    /// claiming to be the left neighbour, is refused and the real ranks still reduce.
    #[test]
    fn a_stranger_on_a_data_port_does_not_take_a_neighbours_place() {
        use std::io::Write;
        use std::net::SocketAddr;

        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        // The stranger knows rank 1's data port and says it is rank 0, stream 0.
        let mut stranger = TcpStream::connect(addrs[1]).unwrap();
        let opening = Message::DataHello {
            nonce: nonce().unwrap(),
            rank: 0,
            stream: 0,
        };
        stranger.write_all(&frame::encode(&opening)).unwrap();
        stranger
            .write_all(&frame::encode(&Message::Proof {
                proof: prove("guess", Role::Opener, &frame::body(&opening), "x"),
            }))
            .unwrap();
        thread::sleep(Duration::from_millis(100));
        ring_of_two_reduces(listeners, &addrs);
        // The stranger got a challenge and then the door: never a data stream.
        stranger
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stranger, &mut rest);
        assert!(
            rest.len() < 1024,
            "the stranger received data: {} bytes",
            rest.len()
        );
    }

    /// Two ranks open the TCP ring over `listeners` and reduce exactly.
    fn ring_of_two_reduces(listeners: Vec<TcpListener>, addrs: &[std::net::SocketAddr]) {
        use crate::bench::Backend;
        use crate::bench::measure::data::{DType, Op};
        use crate::bench::tcp::{self, Options, TcpBackend};
        use std::sync::Arc;
        let hosts = vec!["a".to_string(), "b".to_string()];
        let ranks: Vec<_> = listeners
            .into_iter()
            .enumerate()
            .map(|(rank, listener)| {
                let (addrs, hosts) = (addrs.to_vec(), hosts.clone());
                thread::spawn(move || {
                    let options = Options {
                        streams: 1,
                        sockbuf: 0,
                        timeout: Duration::from_secs(10),
                        token: "job".into(),
                    };
                    let ring =
                        tcp::connect(rank, 2, listener, &addrs, &hosts, &options, Arc::default())
                            .unwrap();
                    let mut backend = TcpBackend::new(ring, crate::bench::Algo::Ring);
                    let input: Vec<u8> = (0..64)
                        .flat_map(|_| ((rank + 1) as f32).to_ne_bytes())
                        .collect();
                    use crate::bench::measure::collective::{Collective, Shape};
                    let shape = Shape::new(Collective::AllReduce, DType::F32, 64, 2);
                    backend.prepare(shape, &input).unwrap();
                    backend.run(Op::Sum, false, 1).unwrap();
                    backend.result(false).unwrap()
                })
            })
            .collect();
        for r in ranks {
            let out = r.join().unwrap();
            assert_eq!(out.len(), 256);
            for chunk in out.chunks(4) {
                assert_eq!(
                    f32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
                    3.0
                );
            }
        }
    }

    /// A flood of silent connections on a data port, more than it reads at once, delays
    /// the left neighbour by the handshake deadline at most: its dropped connection is
    /// retried, not a failure of the job.
    #[test]
    fn a_flood_on_a_data_port_is_outlasted() {
        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<std::net::SocketAddr> =
            listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let flood: Vec<TcpStream> = (0..100)
            .map(|_| TcpStream::connect(addrs[1]).unwrap())
            .collect();
        let start = Instant::now();
        ring_of_two_reduces(listeners, &addrs);
        assert!(
            start.elapsed() < Duration::from_secs(9),
            "{:?}",
            start.elapsed()
        );
        drop(flood);
    }

    mod arbitrary_proofs {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Whatever a peer puts in a nonce or a proof, checking it neither panics nor
            /// passes without the token.
            #[test]
            fn arbitrary_text_never_verifies(proof in ".{0,130}", nonce in ".{0,80}", opening in proptest::collection::vec(any::<u8>(), 0..256)) {
                prop_assert!(!verify("job", Role::Opener, &opening, &nonce, &proof));
                let _ = well_formed(&nonce);
                let real = prove("job", Role::Opener, &opening, &nonce);
                prop_assert!(verify("job", Role::Opener, &opening, &nonce, &real));
                prop_assert!(!verify("jo", Role::Opener, &opening, &nonce, &real));
            }
        }
    }
}
