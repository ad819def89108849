//! Recorded traffic: the CSV of timestamped rates that `flexrun local topic-rates`
//! writes from a topic's own message timestamps, and that `--profile-file` reads back
//! (as it reads a rate exported from Prometheus), so last week's traffic can be replayed
//! against any configuration.
//!
//! The format: an optional header row, then one row per bucket:
//!
//! ```text
//! timestamp,records_per_s,bytes_per_s
//! 2026-11-23T00:00:00Z,812.5,790312.0
//! 2026-11-23T00:01:00Z,840.0,817440.0
//! ```
//!
//! - **timestamp**: RFC 3339, or Unix seconds (Prometheus' CSV), or Unix milliseconds.
//! - **records_per_s**: the rate from that time until the next row.
//! - **bytes_per_s** (optional): used only to report the mean message size.
//!
//! ```
//! use flexrun_simulate::traffic::Buckets;
//! let mut b = Buckets::new(60_000);
//! b.add(1_000, 100);
//! b.add(59_000, 300);
//! b.add(125_000, 50);
//! let csv = b.to_csv();
//! // Three minutes: 2 records, none, then 1; the empty minute is written too.
//! assert_eq!(csv.lines().count(), 4);
//! let rec = flexrun_simulate::traffic::Recorded::parse("t.csv", &csv).unwrap();
//! assert_eq!(rec.rates, [2.0 / 60.0, 0.0, 1.0 / 60.0]);
//! assert_eq!(rec.mean_message_bytes(), Some(150.0));
//! ```

use std::collections::BTreeMap;

/// Counts of records and bytes per time bucket, from message timestamps.
#[derive(Debug, Clone, Default)]
pub struct Buckets {
    bucket_ms: i64,
    counts: BTreeMap<i64, (u64, u64)>,
}

impl Buckets {
    /// Buckets of `bucket_ms` milliseconds (at least 1).
    pub fn new(bucket_ms: i64) -> Buckets {
        Buckets { bucket_ms: bucket_ms.max(1), counts: BTreeMap::new() }
    }

    /// Count one record of `bytes` with a timestamp in Unix milliseconds.
    pub fn add(&mut self, ts_ms: i64, bytes: u64) {
        let start = ts_ms.div_euclid(self.bucket_ms) * self.bucket_ms;
        let c = self.counts.entry(start).or_default();
        c.0 += 1;
        c.1 += bytes;
    }

    /// Records counted.
    pub fn records(&self) -> u64 {
        self.counts.values().map(|c| c.0).sum()
    }

    /// The CSV, one row per bucket from the first to the last (empty ones as zeros).
    pub fn to_csv(&self) -> String {
        let mut out = String::from("timestamp,records_per_s,bytes_per_s\n");
        let (Some(first), Some(last)) = (self.counts.keys().next(), self.counts.keys().last()) else {
            return out;
        };
        let secs = self.bucket_ms as f64 / 1000.0;
        let mut t = *first;
        while t <= *last {
            let (n, b) = self.counts.get(&t).copied().unwrap_or_default();
            let when = chrono::DateTime::from_timestamp_millis(t)
                .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true));
            out.push_str(&format!(
                "{},{},{}\n",
                when.unwrap_or_else(|| t.to_string()),
                n as f64 / secs,
                b as f64 / secs
            ));
            t += self.bucket_ms;
        }
        out
    }
}

/// Rates read from a CSV, as a load profile: each row's rate holds until the next.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Seconds from the first row to each row.
    pub at_s: Vec<f64>,
    /// Records per second from each row on.
    pub rates: Vec<f64>,
    /// Bytes per second, when the file gives them.
    pub bytes: Option<Vec<f64>>,
    /// The span the rows cover: the last row lasts as long as the one before it.
    pub span_s: f64,
    mean: f64,
}

/// A CSV of rates that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid traffic file {file}: {problem}; expected rows of timestamp,records_per_s[,bytes_per_s] (RFC 3339 or Unix seconds, rising)")]
pub struct TrafficError {
    /// The file.
    pub file: String,
    /// What is wrong, with the line.
    pub problem: String,
}

fn time_ms(cell: &str) -> Option<f64> {
    if let Ok(v) = cell.parse::<f64>() {
        // Unix milliseconds are above 1e11 for any time after 1973.
        return v.is_finite().then_some(if v.abs() > 1e11 { v } else { v * 1000.0 });
    }
    chrono::DateTime::parse_from_rfc3339(cell).ok().map(|d| d.timestamp_millis() as f64)
}

impl Recorded {
    /// Parse the CSV text of `file` (named in errors).
    pub fn parse(file: &str, text: &str) -> Result<Recorded, TrafficError> {
        let err = |problem: String| TrafficError { file: file.into(), problem };
        let (mut times, mut rates, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
        for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let cells: Vec<&str> = line.split(',').map(|c| c.trim().trim_matches('"')).collect();
            let Some(t) = time_ms(cells[0]) else {
                if i == 0 {
                    continue; // a header
                }
                return Err(err(format!("line {}: {:?} is not a timestamp", i + 1, cells[0])));
            };
            let num = |j: usize| -> Result<Option<f64>, TrafficError> {
                match cells.get(j) {
                    None | Some(&"") => Ok(None),
                    Some(c) => match c.parse::<f64>() {
                        Ok(v) if v >= 0.0 && v.is_finite() => Ok(Some(v)),
                        _ => Err(err(format!("line {}: {c:?} is not a rate of 0 or more", i + 1))),
                    },
                }
            };
            let r = num(1)?.ok_or_else(|| err(format!("line {}: no records_per_s", i + 1)))?;
            if times.last().is_some_and(|&p| t <= p) {
                return Err(err(format!("line {}: timestamps must rise", i + 1)));
            }
            times.push(t);
            rates.push(r);
            bytes.push(num(2)?);
        }
        if times.len() < 2 {
            return Err(err(format!("{} rows; at least 2 are needed", times.len())));
        }
        if rates.iter().all(|r| *r == 0.0) {
            return Err(err("every rate is 0".into()));
        }
        let at_s: Vec<f64> = times.iter().map(|t| (t - times[0]) / 1000.0).collect();
        let n = at_s.len();
        let span_s = at_s[n - 1] + (at_s[n - 1] - at_s[n - 2]);
        let bytes = bytes.iter().all(Option::is_some).then(|| bytes.into_iter().flatten().collect());
        let mean = Self::time_weighted_mean(&at_s, &rates, span_s);
        Ok(Recorded { at_s, rates, bytes, span_s, mean })
    }

    fn time_weighted_mean(at_s: &[f64], rates: &[f64], span_s: f64) -> f64 {
        let mut sum = 0.0;
        for (i, r) in rates.iter().enumerate() {
            let end = at_s.get(i + 1).copied().unwrap_or(span_s);
            sum += r * (end - at_s[i]);
        }
        sum / span_s
    }

    /// The time-weighted mean rate, records per second.
    pub fn mean_rate(&self) -> f64 {
        self.mean
    }

    /// Bytes ÷ records over the file, when it gives bytes.
    pub fn mean_message_bytes(&self) -> Option<f64> {
        let b = self.bytes.as_ref()?;
        let records: f64 = self.rates.iter().sum();
        (records > 0.0).then(|| b.iter().sum::<f64>() / records)
    }

    /// The rate at `t` seconds, the file repeating after its span.
    pub fn rate_at(&self, t: f64) -> f64 {
        let t = t.rem_euclid(self.span_s);
        let i = self.at_s.partition_point(|&a| a <= t).saturating_sub(1);
        self.rates[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_style_unix_seconds_and_rfc3339_both_read() {
        let prom = "timestamp,value\n1700000000,10\n1700000060,30\n1700000120,20\n";
        let r = Recorded::parse("p.csv", prom).unwrap();
        assert_eq!(r.at_s, [0.0, 60.0, 120.0]);
        assert_eq!(r.span_s, 180.0);
        assert_eq!(r.mean_rate(), 20.0);
        assert_eq!((r.rate_at(59.0), r.rate_at(60.0), r.rate_at(170.0), r.rate_at(185.0)), (10.0, 30.0, 20.0, 10.0));
        let iso = "2026-11-23T00:00:00Z,5\n2026-11-23T00:00:30+00:00,15\n";
        assert_eq!(Recorded::parse("i.csv", iso).unwrap().mean_rate(), 10.0);
    }

    #[test]
    fn bad_files_say_which_line_and_why() {
        for (text, needle) in [
            ("t,r\n1700000000,1\nyesterday,2\n", "line 3: \"yesterday\" is not a timestamp"),
            ("1700000000,1\n1700000060,-2\n", "line 2: \"-2\" is not a rate"),
            ("1700000060,1\n1700000000,2\n", "line 2: timestamps must rise"),
            ("1700000000,1\n", "1 rows; at least 2"),
            ("1700000000,0\n1700000060,0\n", "every rate is 0"),
            ("1700000000\n1700000060,1\n", "line 1: no records_per_s"),
        ] {
            let e = Recorded::parse("x.csv", text).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("x.csv"), "{e}");
        }
    }
}
