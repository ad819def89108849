//! Java date patterns (`dd-MM-yyyy HH:mm:ss`, `EEE, d MMM yyyy`, `h[:mm][ ]a`, ...)
//! mapped onto chrono, for the generator's date functions. All times are UTC.

use crate::functions::Func;
use chrono::{DateTime, Months, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta};

/// The library's default input format.
pub const DEFAULT_INPUT: &str = "dd-MM-yyyy HH:mm:ss";
/// `date()`'s default output format.
pub const DEFAULT_DATE_OUTPUT: &str = "EEE, d MMM yyyy HH:mm:ss z";
/// `time()`'s default format.
pub const DEFAULT_TIME: &str = "h[:mm][ ]a";

/// Convert a Java pattern to a chrono format string (`parse` drops padding flags).
pub fn to_chrono(pattern: &str, parse: bool) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let pad = |s: &str| if parse { s.replace('-', "") } else { s.to_string() };
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            // Quoted literal; '' is a single quote.
            if chars.get(i + 1) == Some(&'\'') {
                out.push('\'');
                i += 2;
                continue;
            }
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '%' {
                    out.push_str("%%");
                } else {
                    out.push(chars[i]);
                }
                i += 1;
            }
            i += 1;
            continue;
        }
        if c == '[' || c == ']' {
            i += 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            if c == '%' {
                out.push_str("%%");
            } else {
                out.push(c);
            }
            i += 1;
            continue;
        }
        let mut n = 1;
        while chars.get(i + n) == Some(&c) {
            n += 1;
        }
        let spec = match (c, n) {
            ('y' | 'u' | 'Y', 2) => "%y".to_string(),
            ('y' | 'Y', _) => "%Y".to_string(),
            ('M' | 'L', 1) => pad("%-m"),
            ('M' | 'L', 2) => "%m".to_string(),
            ('M' | 'L', 3) => "%b".to_string(),
            ('M' | 'L', _) => "%B".to_string(),
            ('d', 1) => pad("%-d"),
            ('d', _) => "%d".to_string(),
            ('H', 1) => pad("%-H"),
            ('H', _) => "%H".to_string(),
            ('h', 1) => pad("%-I"),
            ('h', _) => "%I".to_string(),
            ('m', 1) => pad("%-M"),
            ('m', _) => "%M".to_string(),
            ('s', 1) => pad("%-S"),
            ('s', _) => "%S".to_string(),
            ('S', 1..=3) => "%3f".to_string(),
            ('S', 4..=6) => "%6f".to_string(),
            ('S', _) => "%9f".to_string(),
            ('a', _) => "%p".to_string(),
            ('E', 1..=3) => "%a".to_string(),
            ('E', _) => "%A".to_string(),
            ('D', _) => "%j".to_string(),
            ('u', 1) => "%u".to_string(),
            ('z', _) => "%Z".to_string(),
            ('Z', _) | ('X', 2) => "%z".to_string(),
            ('X', _) => "%:z".to_string(),
            _ => return Err(format!("unsupported date pattern letter {:?} in {pattern:?}", c.to_string().repeat(n))),
        };
        out.push_str(&spec);
        i += n;
    }
    Ok(out)
}

/// Format epoch milliseconds with a Java pattern.
pub fn format_ms(ms: i64, pattern: &str) -> Result<String, String> {
    let f = to_chrono(pattern, false)?;
    let t = DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("timestamp {ms} is out of range"))?;
    let mut s = String::new();
    use std::fmt::Write;
    write!(s, "{}", t.format(&f)).map_err(|_| format!("cannot format with {pattern:?}"))?;
    Ok(s)
}

/// Parse text with a Java pattern into epoch milliseconds (date-only patterns mean midnight).
pub fn parse_ms(s: &str, pattern: &str) -> Result<i64, String> {
    let f = to_chrono(pattern, true)?;
    let s = s.trim();
    if let Ok(t) = NaiveDateTime::parse_from_str(s, &f) {
        return Ok(t.and_utc().timestamp_millis());
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, &f) {
        return Ok(d.and_time(NaiveTime::MIN).and_utc().timestamp_millis());
    }
    Err(format!("{s:?} does not match the date format {pattern:?}"))
}

/// Parse a time of day with a Java pattern into milliseconds after the epoch's midnight.
pub fn parse_time_ms(s: &str, pattern: &str) -> Result<i64, String> {
    let f = to_chrono(pattern, true)?;
    let t = NaiveTime::parse_from_str(s.trim(), &f)
        .map_err(|_| format!("{s:?} does not match the time format {pattern:?}"))?;
    Ok((t - NaiveTime::MIN).num_milliseconds())
}

/// `addDays` and friends.
pub fn add(ms: i64, f: Func, amount: i64) -> Result<i64, String> {
    let t = DateTime::from_timestamp_millis(ms).ok_or("timestamp out of range")?;
    let r = match f {
        Func::AddSeconds => t.checked_add_signed(TimeDelta::seconds(amount)),
        Func::AddMinutes => t.checked_add_signed(TimeDelta::minutes(amount)),
        Func::AddHours => t.checked_add_signed(TimeDelta::hours(amount)),
        Func::AddDays => t.checked_add_signed(TimeDelta::days(amount)),
        Func::AddWeeks => t.checked_add_signed(TimeDelta::weeks(amount)),
        Func::AddMonths | Func::AddYears => {
            let months = if f == Func::AddYears { amount.saturating_mul(12) } else { amount };
            let m = Months::new(months.unsigned_abs().min(u32::MAX as u64) as u32);
            if months >= 0 {
                t.checked_add_months(m)
            } else {
                t.checked_sub_months(m)
            }
        }
        _ => None,
    };
    r.map(|t| t.timestamp_millis()).ok_or_else(|| "date arithmetic out of range".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_round_trip() {
        let ms = parse_ms("31-01-2024 13:05:09", DEFAULT_INPUT).unwrap();
        assert_eq!(format_ms(ms, DEFAULT_INPUT).unwrap(), "31-01-2024 13:05:09");
        assert_eq!(format_ms(ms, DEFAULT_DATE_OUTPUT).unwrap(), "Wed, 31 Jan 2024 13:05:09 UTC");
        assert_eq!(format_ms(ms, DEFAULT_TIME).unwrap(), "1:05 PM");
        assert_eq!(format_ms(ms, "yyyy-MM-dd'T'HH:mm:ss.SSS").unwrap(), "2024-01-31T13:05:09.000");
        assert_eq!(
            parse_ms("2024-01-31", "yyyy-MM-dd").unwrap(),
            parse_ms("31-01-2024 00:00:00", DEFAULT_INPUT).unwrap()
        );
        assert!(to_chrono("QQQ", false).unwrap_err().contains("unsupported"));
        assert!(parse_ms("yesterday", DEFAULT_INPUT).is_err());
    }

    #[test]
    fn date_arithmetic() {
        let ms = parse_ms("31-01-2024 00:00:00", DEFAULT_INPUT).unwrap();
        assert_eq!(format_ms(add(ms, Func::AddMonths, 1).unwrap(), DEFAULT_INPUT).unwrap(), "29-02-2024 00:00:00");
        assert_eq!(format_ms(add(ms, Func::AddDays, -31).unwrap(), DEFAULT_INPUT).unwrap(), "31-12-2023 00:00:00");
        assert_eq!(format_ms(add(ms, Func::AddYears, 1).unwrap(), DEFAULT_INPUT).unwrap(), "31-01-2025 00:00:00");
    }
}
