//! A steady send schedule: message `i` (from 0) is due `i / qps` seconds after the
//! start, so the rate is even at millisecond scale rather than a burst per second.
//! Pure arithmetic; the caller supplies the elapsed time.

/// How far behind the schedule a sender may fall before it is reported as unable to keep up.
pub const BEHIND_LIMIT_S: f64 = 1.0;

/// The schedule for a target rate and an optional message limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    qps: f64,
    limit: Option<u64>,
}

impl Schedule {
    /// `qps` > 0 messages per second; `limit` messages in all (None = unlimited).
    pub fn new(qps: f64, limit: Option<u64>) -> Schedule {
        assert!(qps > 0.0 && qps.is_finite(), "qps must be positive");
        Schedule { qps, limit }
    }

    /// How many messages should have been sent `elapsed_s` seconds after the start.
    pub fn due(&self, elapsed_s: f64) -> u64 {
        let n = (elapsed_s.max(0.0) * self.qps).floor() as u64 + 1;
        self.limit.map_or(n, |l| n.min(l))
    }

    /// Seconds after the start at which message `i` is due.
    pub fn due_at(&self, i: u64) -> f64 {
        i as f64 / self.qps
    }

    /// Whether every message has been sent.
    pub fn done(&self, sent: u64) -> bool {
        self.limit.is_some_and(|l| sent >= l)
    }

    /// Seconds the sender is behind the schedule (0 when on time).
    pub fn behind_s(&self, sent: u64, elapsed_s: f64) -> f64 {
        let due = self.due(elapsed_s);
        if due > sent {
            (due - sent) as f64 / self.qps
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_spread_evenly() {
        let s = Schedule::new(1000.0, None);
        assert_eq!(s.due(0.0), 1);
        assert_eq!(s.due(0.0105), 11);
        assert_eq!(s.due(1.0), 1001);
        assert!((s.due_at(500) - 0.5).abs() < 1e-12);
        // No burst: within any 10 ms at most 11 messages are due.
        for ms in 0..1000 {
            let a = s.due(ms as f64 / 1000.0);
            let b = s.due((ms + 10) as f64 / 1000.0);
            assert!(b - a <= 11);
        }
    }

    #[test]
    fn limit_and_lag() {
        let s = Schedule::new(100.0, Some(50));
        assert_eq!(s.due(10.0), 50);
        assert!(s.done(50) && !s.done(49));
        let s = Schedule::new(100.0, None);
        assert!((s.behind_s(51, 1.0) - 0.5).abs() < 1e-9);
        assert_eq!(s.behind_s(500, 1.0), 0.0);
    }
}
