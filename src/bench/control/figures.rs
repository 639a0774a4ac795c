//! Checking the figures another rank reports before rank 0 averages them into the verdict.
//! A rank that passed the handshake is a rank of this job, but a broken or tampered build
//! could still report a negative, NaN or absurd time (which would inflate the average bus
//! bandwidth into a pass) or a wrong-element count that overflows the sum. Such a report
//! stops the job (exit 3) naming the rank, instead of being printed as a result.

/// Longest credible time for one operation: a day, in µs. Anything longer is not a
/// measurement (the job's `--timeout` would have stopped it long before).
pub const MAX_TIME_US: f64 = 86_400.0 * 1e6;

const HALVES: [&str; 2] = ["out-of-place", "in-place"];

/// What is wrong with a report.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadFigures {
    #[error(
        "{half} time {value} µs per operation is not a measurement (it must be finite, not \
         negative and under a day)"
    )]
    Time { half: &'static str, value: f64 },
    #[error("{half}: {count} wrong elements, more than the {max} it checked")]
    Wrong {
        half: &'static str,
        count: u64,
        max: u64,
    },
    #[error("{half}: {} results when rank 0 {} them", if *.reported { "reported checked" } else { "did not report" }, if *.reported { "did not check" } else { "checked" })]
    Checked { half: &'static str, reported: bool },
}

/// Checks one rank's `times` (µs per operation) and `wrong` counts against what the plan
/// allows: `own_wrong` is rank 0's own (which says whether results were checked), and
/// `max_wrong` the most wrong elements a rank can find (elements × check runs).
pub fn check(
    times: [f64; 2],
    wrong: [Option<u64>; 2],
    own_wrong: [Option<u64>; 2],
    max_wrong: u64,
) -> Result<(), BadFigures> {
    for (h, half) in HALVES.into_iter().enumerate() {
        let t = times[h];
        // NaN is in no range, infinities are past the bound.
        if !(0.0..=MAX_TIME_US).contains(&t) {
            return Err(BadFigures::Time { half, value: t });
        }
        match (wrong[h], own_wrong[h]) {
            (Some(count), Some(_)) if count > max_wrong => {
                return Err(BadFigures::Wrong {
                    half,
                    count,
                    max: max_wrong,
                });
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(BadFigures::Checked {
                    half,
                    reported: wrong[h].is_some(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECKED: [Option<u64>; 2] = [Some(0), Some(0)];

    #[test]
    fn measurements_pass() {
        for t in [0.0, 1e-3, 12.5, 1e9, MAX_TIME_US] {
            assert_eq!(check([t, t], [Some(0), Some(3)], CHECKED, 3), Ok(()), "{t}");
        }
        assert_eq!(check([1.0, 1.0], [None, None], [None, None], 0), Ok(()));
    }

    #[test]
    fn impossible_times_are_refused() {
        for t in [
            -1.0,
            -0.000_1,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            MAX_TIME_US * 2.0,
            1e300,
        ] {
            let err = check([1.0, t], CHECKED, CHECKED, 10).unwrap_err();
            assert!(
                matches!(
                    err,
                    BadFigures::Time {
                        half: "in-place",
                        ..
                    }
                ),
                "{t}: {err}"
            );
        }
        let err = check([-5.0, 1.0], CHECKED, CHECKED, 10).unwrap_err();
        assert!(
            err.to_string().starts_with("out-of-place time -5 µs"),
            "{err}"
        );
    }

    #[test]
    fn impossible_wrong_counts_are_refused() {
        let err = check([1.0, 1.0], [Some(u64::MAX), Some(0)], CHECKED, 100).unwrap_err();
        assert_eq!(
            err,
            BadFigures::Wrong {
                half: "out-of-place",
                count: u64::MAX,
                max: 100
            }
        );
        // Hiding wrong elements by claiming nothing was checked.
        let err = check([1.0, 1.0], [Some(0), None], CHECKED, 100).unwrap_err();
        assert!(err.to_string().contains("did not report"), "{err}");
        let err = check([1.0, 1.0], [Some(0), None], [None, None], 100).unwrap_err();
        assert!(err.to_string().contains("did not check"), "{err}");
    }

    /// The whole path on rank 0: a rank's Report arrives over a real control connection,
    /// the job stops with exit 3 naming that rank, and the rank is told why.
    #[test]
    fn a_bad_report_stops_the_job_naming_the_rank() {
        use crate::bench::control::frame::{self, Message};
        use crate::bench::control::group::Group;
        use crate::bench::control::rendezvous::Member;
        use crate::error::ExitCode;
        use std::net::{TcpListener, TcpStream};
        use std::time::Duration;

        for bad in [-3.0, f64::NAN, 1e300] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut rank1 = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (root_side, _) = listener.accept().unwrap();
            let member = |rank: usize, host: &str| Member {
                rank,
                host: host.into(),
                pid: 1,
                device: "cpu".into(),
            };
            let mut group = Group::root(
                2,
                vec![member(0, "a"), member(1, "b")],
                vec![(1, root_side)],
                Duration::from_secs(5),
            )
            .unwrap();
            // JSON has no NaN: a rank that sends one sends null, which the frame refuses;
            // the others arrive as numbers.
            let report = Message::Report {
                seq: 0,
                times: [bad, 10.0],
                wrong: [Some(0), Some(0)],
            };
            frame::write(&mut rank1, &report).unwrap();
            let err = group
                .report(0, [10.0, 10.0], [Some(0), Some(0)], 1024)
                .unwrap_err();
            assert_eq!(err.exit_code(), ExitCode::Runtime, "{bad}: {err}");
            let text = err.to_string();
            assert!(text.contains("rank 1 (b)"), "{bad}: {text}");
            let _ = rank1.set_read_timeout(Some(Duration::from_secs(5)));
            match frame::read(&mut rank1) {
                Ok(Message::Abort { reason }) => assert!(reason.contains("rank 1"), "{reason}"),
                other => panic!("{bad}: rank 1 was not told: {other:?}"),
            }
        }
    }
}
