//! Rates and sizes with units: `100MiB/s`, `1.5GB/s`, `5000msg/s`, `1KiB`.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A rate as given: bytes per second, or messages per second (which need a size).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Rate {
    /// Bytes per second.
    BytesPerSecond(f64),
    /// Messages per second.
    MessagesPerSecond(f64),
}

/// A value with a unit that does not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {what} {given:?}: expected {expected}")]
pub struct UnitError {
    /// What was being parsed.
    pub what: &'static str,
    /// The text given.
    pub given: String,
    /// The accepted form.
    pub expected: &'static str,
}

const RATE_FORM: &str =
    "a positive number with a unit: B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s or msg/s (e.g. 100MiB/s)";
const SIZE_FORM: &str = "a positive number of bytes, optionally with KB, MB, KiB or MiB (e.g. 1KiB)";

fn split_number(s: &str) -> Option<(f64, &str)> {
    let t = s.trim();
    let end = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let v: f64 = t[..end].parse().ok()?;
    (v > 0.0 && v.is_finite()).then(|| (v, t[end..].trim()))
}

fn byte_multiplier(unit: &str) -> Option<f64> {
    Some(match unit {
        "B" | "" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    })
}

impl Rate {
    /// Parse a rate.
    pub fn parse(s: &str) -> Result<Rate, UnitError> {
        let err = || UnitError { what: "rate", given: s.to_string(), expected: RATE_FORM };
        let (v, unit) = split_number(s).ok_or_else(err)?;
        if matches!(unit, "msg/s" | "msgs/s" | "messages/s") {
            return Ok(Rate::MessagesPerSecond(v));
        }
        let unit = unit.strip_suffix("/s").ok_or_else(err)?;
        if unit.is_empty() {
            return Err(err());
        }
        Ok(Rate::BytesPerSecond(v * byte_multiplier(unit).ok_or_else(err)?))
    }

    /// Bytes per second, using `message_bytes` for a message rate.
    pub fn bytes_per_second(&self, message_bytes: f64) -> f64 {
        match self {
            Rate::BytesPerSecond(b) => *b,
            Rate::MessagesPerSecond(m) => m * message_bytes,
        }
    }
}

/// Parse a size such as `1KiB`, `962`, `1.5MB` into bytes.
pub fn parse_size(s: &str) -> Result<f64, UnitError> {
    let err = || UnitError { what: "size", given: s.to_string(), expected: SIZE_FORM };
    let (v, unit) = split_number(s).ok_or_else(err)?;
    Ok(v * byte_multiplier(unit).ok_or_else(err)?)
}

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// A duration as [`parse_duration`] takes it, or zero ("0", "0s").
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    if s.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse::<f64>() == Ok(0.0) {
        return Ok(Duration::ZERO);
    }
    parse_duration(s)
}

/// Parse `500ms`, `5s`, `2m`, `1h`, `7d` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else if let Some(n) = s.strip_suffix('d') {
        (n, 86400.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Duration::from_secs_f64(v * mult)),
        _ => Err(format!("invalid duration {s:?}: expected a positive number with ms, s, m, h or d (e.g. 5s)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_sizes() {
        assert_eq!(Rate::parse("100MiB/s").unwrap(), Rate::BytesPerSecond(100.0 * MIB));
        assert_eq!(Rate::parse("1GB/s").unwrap(), Rate::BytesPerSecond(1e9));
        assert_eq!(Rate::parse(" 2.5 KiB/s").unwrap(), Rate::BytesPerSecond(2560.0));
        assert_eq!(Rate::parse("5000msg/s").unwrap().bytes_per_second(1024.0), 5000.0 * 1024.0);
        assert_eq!(parse_size("1KiB").unwrap(), 1024.0);
        assert_eq!(parse_size("962").unwrap(), 962.0);
        for bad in ["", "100", "-1MB/s", "0MB/s", "100MiB", "fast", "100 furlongs/s", "/s", "1e3MB/s"] {
            let e = Rate::parse(bad).unwrap_err().to_string();
            assert!(e.contains("expected a positive number with a unit"), "{bad}: {e}");
        }
        assert!(parse_size("-5").is_err());
        assert!(parse_size("1 parsec").is_err());
    }
}
