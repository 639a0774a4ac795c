//! Bandwidth as nccl-tests defines it: `algbw = S / t`, `busbw = algbw · 2(n−1)/n` for
//! AllReduce (the share of the data each rank's link really carries), GB = 1e9 bytes.

use serde::Serialize;

/// AllReduce's bus-bandwidth factor for `ranks` ranks.
#[cfg(test)]
pub(crate) fn busbw_factor(ranks: usize) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    2.0 * (ranks as f64 - 1.0) / ranks as f64
}

/// One half of a row (out-of-place or in-place), named as nccl-tests' JSON.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Half {
    /// Microseconds per operation, averaged across ranks.
    pub time: f64,
    /// GB/s.
    pub alg_bw: f64,
    /// GB/s.
    pub bus_bw: f64,
    /// Wrong elements summed across ranks; `None` when not checked (`-c 0`).
    pub nwrong: Option<u64>,
}

impl Half {
    /// From every rank's time per operation (µs) and wrong-element count.
    #[cfg(test)]
    pub(crate) fn from_ranks(bytes: u64, times_us: &[f64], wrong: &[Option<u64>]) -> Half {
        Half::with_factor(bytes, busbw_factor(times_us.len()), times_us, wrong)
    }

    /// [`Half::from_ranks`] for a collective whose bus-bandwidth factor is `factor`.
    pub(crate) fn with_factor(
        bytes: u64,
        factor: f64,
        times_us: &[f64],
        wrong: &[Option<u64>],
    ) -> Half {
        let ranks = times_us.len();
        let time = if ranks == 0 {
            0.0
        } else {
            times_us.iter().sum::<f64>() / ranks as f64
        };
        let alg_bw = if time > 0.0 {
            bytes as f64 / (time * 1e-6) / 1e9
        } else {
            0.0
        };
        let nwrong = wrong.iter().try_fold(0u64, |acc, w| w.map(|w| acc + w));
        Half {
            time,
            alg_bw,
            bus_bw: alg_bw * factor,
            nwrong,
        }
    }
}

/// One printed row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub dtype: &'static str,
    pub redop: &'static str,
    pub root: i32,
    pub out_of_place: Half,
    pub in_place: Half,
    /// The algorithm that ran this size, where the backend chooses one (TCP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algo: Option<&'static str>,
}

/// The closing `# Avg bus bandwidth`: the plain mean of every busbw printed (both halves).
pub(crate) fn average_busbw(rows: &[Row]) -> f64 {
    if rows.is_empty() {
        return 0.0;
    }
    let sum: f64 = rows
        .iter()
        .map(|r| r.out_of_place.bus_bw + r.in_place.bus_bw)
        .sum();
    sum / (2 * rows.len()) as f64
}

/// Wrong elements over the whole run.
pub(crate) fn total_wrong(rows: &[Row]) -> u64 {
    rows.iter()
        .map(|r| r.out_of_place.nwrong.unwrap_or(0) + r.in_place.nwrong.unwrap_or(0))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row of 8 bytes (2 floats, sum) with these two halves.
    fn row(out_of_place: Half, in_place: Half) -> Row {
        Row {
            algo: None,
            size: 8,
            count: 2,
            dtype: "float",
            redop: "sum",
            root: -1,
            out_of_place,
            in_place,
        }
    }

    #[test]
    fn factors() {
        assert_eq!(busbw_factor(1), 0.0);
        assert_eq!(busbw_factor(2), 1.0);
        assert!((busbw_factor(8) - 1.75).abs() < 1e-12);
    }

    #[test]
    fn bandwidth_from_times() {
        // 1 MB in 100 µs averaged over two ranks (50 and 150): 10 GB/s algbw, 10 busbw.
        let h = Half::from_ranks(1_000_000, &[50.0, 150.0], &[Some(1), Some(2)]);
        assert_eq!(h.time, 100.0);
        assert!((h.alg_bw - 10.0).abs() < 1e-9);
        assert!((h.bus_bw - 10.0).abs() < 1e-9);
        assert_eq!(h.nwrong, Some(3));
        let unchecked = Half::from_ranks(8, &[1.0, 1.0, 1.0, 1.0], &[None, None, None, None]);
        assert_eq!(unchecked.nwrong, None);
        assert!((unchecked.bus_bw - 0.008 * 1.5).abs() < 1e-12);
    }

    #[test]
    fn average_is_over_both_halves() {
        let half = |bus_bw| Half {
            time: 1.0,
            alg_bw: 0.0,
            bus_bw,
            nwrong: Some(0),
        };
        let row = |a, b| row(half(a), half(b));
        assert_eq!(average_busbw(&[row(1.0, 3.0), row(5.0, 7.0)]), 4.0);
        // Three rows: the mean over six halves (2·3), not over five.
        let three = [row(1.0, 3.0), row(5.0, 7.0), row(9.0, 11.0)];
        assert_eq!(average_busbw(&three), 6.0);
        assert_eq!(average_busbw(&[]), 0.0);
    }

    /// Every wrong element of every row and half counts, and an unchecked half counts none.
    #[test]
    fn wrong_elements_are_summed_over_rows_and_halves() {
        let half = |nwrong| Half {
            time: 1.0,
            alg_bw: 1.0,
            bus_bw: 1.0,
            nwrong,
        };
        let row = |a, b| row(half(a), half(b));
        assert_eq!(total_wrong(&[row(Some(3), Some(4))]), 7);
        assert_eq!(total_wrong(&[row(Some(0), Some(1))]), 1);
        assert_eq!(total_wrong(&[row(Some(2), None), row(None, Some(5))]), 7);
        assert_eq!(total_wrong(&[row(Some(0), Some(0)), row(None, None)]), 0);
        assert_eq!(total_wrong(&[]), 0);
    }

    /// No time measured (or no ranks): no bandwidth, never infinity.
    #[test]
    fn a_zero_time_has_no_bandwidth() {
        let h = Half::from_ranks(1_000, &[0.0, 0.0], &[Some(0), Some(0)]);
        assert_eq!((h.time, h.alg_bw, h.bus_bw), (0.0, 0.0, 0.0));
        let none = Half::from_ranks(1_000, &[], &[]);
        assert_eq!((none.time, none.alg_bw, none.bus_bw), (0.0, 0.0, 0.0));
        assert_eq!(none.nwrong, Some(0));
        assert_eq!(busbw_factor(0), 0.0);
        assert_eq!(busbw_factor(3), 4.0 / 3.0);
    }
}
