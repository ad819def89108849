//! The capacity-boundary search (Dropbox's method, seed 004): fix the message size,
//! binary-search the offered rate until congestion indicators trip, and report the
//! highest rate that did not trip them.
//!
//! Pure: the caller supplies a probe that runs one trial at a rate and says whether it
//! was sustainable (and which indicator tripped if not). The search only decides which
//! rate to try next, so it is tested against synthetic systems with known boundaries.

use serde::{Deserialize, Serialize};

/// What one trial at an offered rate showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// Offered rate, messages per second.
    pub offered: f64,
    /// Rate actually achieved, messages per second.
    pub achieved: f64,
    /// The congestion indicator that tripped, or None when the rate was sustained.
    pub tripped: Option<String>,
}

impl Trial {
    /// Whether the rate was sustained.
    pub fn ok(&self) -> bool {
        self.tripped.is_none()
    }
}

/// Search bounds and precision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SearchSpace {
    /// Lowest rate to consider (assumed sustainable if never tried).
    pub low: f64,
    /// Highest rate to consider.
    pub high: f64,
    /// Stop when the bracket is narrower than this, messages per second.
    pub tolerance: f64,
}

/// Bad search bounds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearchError {
    /// The bounds do not make a range.
    #[error("invalid search range {low}..{high}: expected 0 < low < high")]
    Range {
        /// Low end.
        low: f64,
        /// High end.
        high: f64,
    },
    /// The tolerance is not a positive number below the range.
    #[error("invalid tolerance {0}: expected a number above 0 and below the range")]
    Tolerance(f64),
}

/// The outcome of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Boundary {
    /// The highest rate that was sustained (the safe value), messages per second; the
    /// low end of the range when every trial tripped.
    pub safe: f64,
    /// The lowest rate that tripped, if any did (the boundary is between the two).
    pub failed: Option<f64>,
    /// The indicator that tripped at `failed`.
    pub tripped: Option<String>,
    /// Whether even the low end tripped (the boundary is below the range).
    pub below_range: bool,
    /// Whether the high end was sustained (the boundary is above the range).
    pub above_range: bool,
    /// Every trial, in order.
    pub trials: Vec<Trial>,
}

impl SearchSpace {
    /// Check the bounds.
    pub fn validate(&self) -> Result<(), SearchError> {
        if !(self.low > 0.0 && self.low < self.high && self.high.is_finite()) {
            return Err(SearchError::Range { low: self.low, high: self.high });
        }
        if !(self.tolerance > 0.0 && self.tolerance < self.high - self.low) {
            return Err(SearchError::Tolerance(self.tolerance));
        }
        Ok(())
    }

    /// The most trials [`search`] makes: ⌈log2(range / tolerance)⌉ halvings of the
    /// bracket, plus one trial at an end of the range when every halving went the same
    /// way (to tell a boundary just inside the range from one outside it).
    pub fn max_trials(&self) -> u32 {
        ((self.high - self.low) / self.tolerance).log2().ceil().max(0.0) as u32 + 1
    }
}

/// Binary-search the highest sustainable rate in `space`, calling `probe` once per trial.
///
/// The bracket starts as `[low, high]` and is halved at each trial: a sustained rate
/// raises the low side, a tripped one lowers the high side, until the bracket is
/// narrower than the tolerance. If every trial was sustained the high end is tried (is
/// the boundary above the range?); if every trial tripped the low end is (is it below?).
pub fn search(space: SearchSpace, mut probe: impl FnMut(f64) -> Trial) -> Result<Boundary, SearchError> {
    space.validate()?;
    let mut trials: Vec<Trial> = Vec::new();
    let (mut lo, mut hi) = (space.low, space.high);
    let mut failed: Option<(f64, Option<String>)> = None;
    while hi - lo > space.tolerance {
        let mid = (lo + hi) / 2.0;
        let t = probe(mid);
        if t.ok() {
            lo = mid;
        } else {
            hi = mid;
            failed = Some((mid, t.tripped.clone()));
        }
        trials.push(t);
    }
    let (mut above_range, mut below_range) = (false, false);
    if trials.iter().all(Trial::ok) {
        let t = probe(space.high);
        if t.ok() {
            above_range = true;
            lo = space.high;
        } else {
            failed = Some((space.high, t.tripped.clone()));
        }
        trials.push(t);
    } else if !trials.iter().any(Trial::ok) {
        let t = probe(space.low);
        if !t.ok() {
            below_range = true;
            failed = Some((space.low, t.tripped.clone()));
        }
        trials.push(t);
    }
    let (failed, tripped) = failed.map_or((None, None), |(f, why)| (Some(f), why));
    Ok(Boundary { safe: lo, failed, tripped, below_range, above_range, trials })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic system that carries up to `limit` messages/s.
    fn system(limit: f64) -> impl FnMut(f64) -> Trial {
        move |rate| Trial {
            offered: rate,
            achieved: rate.min(limit),
            tripped: (rate > limit).then(|| "achieved rate below offered".to_string()),
        }
    }

    #[test]
    fn converges_within_tolerance_in_the_promised_number_of_trials() {
        for limit in [1_234.0, 50_000.0, 77_777.7, 99_000.0, 99_900.0, 1_001.0, 12_345.6] {
            let space = SearchSpace { low: 1_000.0, high: 100_000.0, tolerance: 500.0 };
            let b = search(space, system(limit)).unwrap();
            assert!(b.safe <= limit && limit - b.safe <= space.tolerance, "limit {limit}: safe {}", b.safe);
            assert!(b.failed.unwrap() > limit, "limit {limit}: {b:?}");
            assert!(
                b.trials.len() as u32 <= space.max_trials(),
                "limit {limit}: {} trials > {}",
                b.trials.len(),
                space.max_trials()
            );
            assert_eq!(b.tripped.as_deref(), Some("achieved rate below offered"));
            assert!(!b.below_range && !b.above_range);
        }
        assert_eq!(SearchSpace { low: 1_000.0, high: 100_000.0, tolerance: 500.0 }.max_trials(), 9);
    }

    #[test]
    fn reports_boundaries_outside_the_range() {
        let space = SearchSpace { low: 100.0, high: 1_000.0, tolerance: 10.0 };
        let above = search(space, system(5_000.0)).unwrap();
        assert!(above.above_range && above.safe == 1_000.0 && above.failed.is_none(), "{above:?}");
        assert!(above.trials.len() as u32 <= space.max_trials());
        let below = search(space, system(50.0)).unwrap();
        assert!(below.below_range && below.failed == Some(100.0), "{below:?}");
        assert!(below.trials.len() as u32 <= space.max_trials());
    }

    #[test]
    fn a_noisy_system_still_brackets_its_boundary() {
        // Trips 5% below its limit on every third trial: the bracket stays consistent.
        let mut n = 0;
        let b = search(SearchSpace { low: 1_000.0, high: 64_000.0, tolerance: 1_000.0 }, |rate| {
            n += 1;
            let limit = if n % 3 == 0 { 30_000.0 * 0.95 } else { 30_000.0 };
            Trial { offered: rate, achieved: rate.min(limit), tripped: (rate > limit).then(|| "lag".into()) }
        })
        .unwrap();
        assert!(b.safe >= 27_000.0 && b.safe <= 30_000.0, "{b:?}");
    }

    #[test]
    fn bad_bounds_are_named() {
        assert!(search(SearchSpace { low: 0.0, high: 10.0, tolerance: 1.0 }, system(5.0))
            .unwrap_err()
            .to_string()
            .contains("0 < low < high"));
        assert!(search(SearchSpace { low: 10.0, high: 5.0, tolerance: 1.0 }, system(5.0)).is_err());
        assert!(search(SearchSpace { low: 1.0, high: 10.0, tolerance: 20.0 }, system(5.0))
            .unwrap_err()
            .to_string()
            .contains("tolerance"));
    }
}
