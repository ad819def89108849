//! `rate-to-stats`: a source that creates records at a constant rate, each stamped with
//! its scheduled creation time, and a sink that only records latency.

use super::{now_us, Batch, Latencies, Record, Sink, Source};
use anyhow::Result;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// rate-to-stats' settings, from its template parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RateConfig {
    /// `rowsPerSecond`.
    pub rows_per_second: f64,
    /// `messageBytes` (at least 16: the record carries its creation time).
    pub message_bytes: usize,
    /// `messagesLimit` (None: unlimited).
    pub limit: Option<u64>,
}

impl RateConfig {
    /// From validated parameters, or the parameter that is wrong and why.
    pub fn from_params(p: &flexrun_templates::ResolvedParams) -> Result<RateConfig, String> {
        let num = |k: &str| p.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let rate = num("rowsPerSecond");
        if rate <= 0.0 {
            return Err("rowsPerSecond must be above 0".into());
        }
        let bytes = num("messageBytes") as usize;
        if bytes < 16 {
            return Err(format!("messageBytes={bytes}: expected at least 16"));
        }
        let limit = num("messagesLimit") as u64;
        Ok(RateConfig { rows_per_second: rate, message_bytes: bytes, limit: (limit > 0).then_some(limit) })
    }
}

/// The constant-rate source (Spark's `rate` source): record `i` is created `i / rate`
/// seconds after the source starts (or resumes), in partition 0 at offset `i`.
pub struct RateSource {
    rate: f64,
    bytes: usize,
    limit: Option<u64>,
    /// Offset of the first record of this run, and when the run started.
    origin: (u64, Instant, u64),
    next: u64,
}

impl RateSource {
    /// `rate` records/s of `bytes` bytes, `limit` records in all (None: unlimited).
    pub fn new(rate: f64, bytes: usize, limit: Option<u64>) -> RateSource {
        RateSource { rate, bytes: bytes.max(16), limit, origin: (0, Instant::now(), now_us()), next: 0 }
    }

    fn created_us(&self, i: u64) -> u64 {
        self.origin.2 + ((i - self.origin.0) as f64 / self.rate * 1e6) as u64
    }
}

impl Source for RateSource {
    fn seek(&mut self, positions: &BTreeMap<i32, i64>) -> Result<()> {
        self.next = positions.get(&0).copied().unwrap_or(0).max(0) as u64;
        self.origin = (self.next, Instant::now(), now_us());
        Ok(())
    }

    fn next_batch(&mut self, max: usize, wait: Duration) -> Result<Option<Batch>> {
        if self.limit.is_some_and(|l| self.next >= l) {
            return Ok(None);
        }
        let due = |s: &RateSource| {
            let n = s.origin.0 + (s.origin.1.elapsed().as_secs_f64() * s.rate).floor() as u64 + 1;
            s.limit.map_or(n, |l| n.min(l))
        };
        let deadline = Instant::now() + wait;
        let mut upto = due(self);
        while upto <= self.next {
            // Sleep until the next record is due (or the wait ends).
            let next_at = Duration::from_secs_f64((self.next - self.origin.0) as f64 / self.rate);
            let now = self.origin.1.elapsed();
            if Instant::now() >= deadline {
                return Ok(Some(Batch::default()));
            }
            std::thread::sleep(
                next_at
                    .saturating_sub(now)
                    .min(deadline.saturating_duration_since(Instant::now()))
                    .max(Duration::from_micros(50)),
            );
            upto = due(self);
        }
        let to = upto.min(self.next + max as u64);
        let read_us = now_us();
        let records = (self.next..to)
            .map(|i| {
                let mut payload = vec![b'r'; self.bytes];
                payload[..8].copy_from_slice(&i.to_le_bytes());
                Record { created_us: self.created_us(i), read_us, payload }
            })
            .collect();
        let batch = Batch { records, ranges: BTreeMap::from([(0, (self.next as i64, to as i64))]) };
        self.next = to;
        Ok(Some(batch))
    }
}

/// The stats sink: records each record's latency and nothing else.
#[derive(Default)]
pub struct StatsSink {
    /// Records seen.
    pub records: u64,
    /// Bytes seen.
    pub bytes: u64,
}

impl Sink for StatsSink {
    fn write(&mut self, batch: &Batch, latency: &mut Latencies) -> Result<()> {
        let now = now_us();
        for r in &batch.records {
            latency.record(r, now);
            self.bytes += r.payload.len() as u64;
        }
        self.records += batch.records.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_source_keeps_its_rate_and_limit_and_resumes_at_an_offset() {
        let mut s = RateSource::new(10_000.0, 32, Some(3_000));
        s.seek(&BTreeMap::new()).unwrap();
        let t = Instant::now();
        let mut n = 0u64;
        let mut last_to = 0i64;
        while let Some(b) = s.next_batch(500, Duration::from_millis(50)).unwrap() {
            if let Some((from, to)) = b.ranges.get(&0) {
                assert_eq!(*from, last_to, "contiguous offsets");
                last_to = *to;
            }
            n += b.records.len() as u64;
        }
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(n, 3_000);
        assert!((0.25..0.6).contains(&secs), "3000 at 10k/s took {secs} s");
        let mut r = RateSource::new(1_000.0, 32, Some(1_010));
        r.seek(&BTreeMap::from([(0, 1_000)])).unwrap();
        let b = r.next_batch(100, Duration::from_millis(200)).unwrap().unwrap();
        assert_eq!(b.ranges[&0].0, 1_000);
    }
}
