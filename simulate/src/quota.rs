//! The Storage Write API's throughput quota as a token bucket.
//!
//! Google charges Storage Write throughput to the destination table's project, per
//! location (3 GiB/s in the US and EU multi-regions, 300 MiB/s in a region, by default;
//! `flexrun_estimator::limits`). A third-party run (github:johanesalxd/dataflow-pubsub-
//! perf-test, round 2) saw bursts near 1.8× the quota for minutes before throttling, so
//! the quota is enforced over time, not per second: a bucket refilled at the quota, whose
//! depth (`throughput_burst_s` seconds of quota) is calibrated to that run. While the
//! bucket is empty the job writes at the quota and its backlog grows in Kafka.

use flexrun_estimator::limits::{check_location, Limits};

/// The quota a simulated job writes under.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteQuota {
    /// The dataset's location (US, EU or a region).
    pub location: String,
    /// Bytes per second the bucket refills at.
    pub bytes_s: f64,
    /// The bucket's depth, seconds of quota.
    pub burst_s: f64,
}

impl WriteQuota {
    /// Google's default quota for a dataset in `location`, or why the location is not one.
    pub fn google(location: &str) -> Result<WriteQuota, String> {
        check_location(location)?;
        let sw = Limits::google().storage_write;
        Ok(WriteQuota {
            location: location.to_string(),
            bytes_s: sw.throughput_bytes_s.at(location),
            burst_s: sw.throughput_burst_s,
        })
    }
}

/// The bucket's state over a run.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    rate: f64,
    depth: f64,
    tokens: f64,
    /// Seconds (after warm-up) in which the bucket held writes back.
    pub throttled_s: f64,
}

impl Bucket {
    /// A full bucket for `q`.
    pub fn new(q: &WriteQuota) -> Bucket {
        let depth = q.bytes_s * q.burst_s;
        Bucket { rate: q.bytes_s, depth, tokens: depth, throttled_s: 0.0 }
    }

    /// Refill for a step of `dt` seconds. The job wants to write `want` bytes (what it
    /// has to read, within its capacity) and could write `capacity`: returns the share of
    /// its capacity left to it (1 when the bucket holds `want`); `counted` steps that are
    /// held back add to `throttled_s`.
    pub fn allow(&mut self, want: f64, capacity: f64, dt: f64, counted: bool) -> f64 {
        self.tokens = (self.tokens + self.rate * dt).min(self.depth);
        if want <= self.tokens || capacity <= 0.0 {
            return 1.0;
        }
        if counted {
            self.throttled_s += dt;
        }
        (self.tokens / capacity).min(1.0)
    }

    /// `bytes` were written.
    pub fn spend(&mut self, bytes: f64) {
        self.tokens = (self.tokens - bytes).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota() -> WriteQuota {
        WriteQuota { location: "asia-southeast1".into(), bytes_s: 100.0, burst_s: 288.0 }
    }

    /// Asks `demand` × the quota for `secs`; returns bytes written and the first second
    /// held back.
    fn run(demand: f64, secs: usize) -> (f64, Option<usize>) {
        let mut b = Bucket::new(&quota());
        let (mut written, mut first) = (0.0, None);
        for s in 0..secs {
            let (want, capacity) = (demand * 100.0, 1000.0);
            let share = b.allow(want, capacity, 1.0, true);
            if share < 1.0 && first.is_none() {
                first = Some(s);
            }
            let w = want.min(capacity * share);
            b.spend(w);
            written += w;
        }
        (written, first)
    }

    #[test]
    fn a_burst_of_1_8x_lasts_the_calibrated_six_minutes_then_writes_at_the_quota() {
        let (written, first) = run(1.8, 3600);
        // 288 s of quota spent at 0.8 x the quota over the refill: 360 s (less a step or
        // two: the full bucket cannot take the first steps' refill).
        assert!(first.is_some_and(|s| (357..=360).contains(&s)), "{first:?}");
        // An hour: the bucket's depth plus an hour of refill (less that first step's).
        assert!((written - (288.0 + 3600.0) * 100.0).abs() <= 100.0, "{written}");
    }

    #[test]
    fn a_load_under_the_quota_is_never_held_back() {
        let (written, first) = run(0.99, 86400);
        assert_eq!(first, None);
        assert!((written - 0.99 * 100.0 * 86400.0).abs() < 1e-3);
    }

    #[test]
    fn locations_pick_googles_quota_and_bad_ones_are_named() {
        assert_eq!(WriteQuota::google("US").unwrap().bytes_s, 3.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(WriteQuota::google("us-central1").unwrap().bytes_s, 300.0 * 1024.0 * 1024.0);
        assert!(WriteQuota::google("moon").unwrap_err().contains("invalid dataset location"));
    }
}
