//! The record stream a full checkpoint of the heap backend is written in: a magic
//! line, then per record `start_ms i64 | end_ms i64 | key u32 | partition i32 |
//! offset i64 | len u32 | bytes`, little-endian, split into parts of at most
//! [`PART_BYTES`] so that parts upload in parallel. Uncompressed, as Flink's full
//! snapshots are by default: its cost is the state's size, which is the point of the
//! comparison.
//!
//! ```
//! use flexrun::state::{format, Slot, Window};
//! let w = Window { start_ms: 0, end_ms: 10 };
//! let recs = vec![(Slot { window: w, key: 1, partition: 0, offset: 7 }, bytes::Bytes::from_static(b"{}"))];
//! let parts = format::write(&recs);
//! assert_eq!(format::read(&parts[0]).unwrap(), recs);
//! ```

use super::{Record, Slot, StateError, Window};
use bytes::Bytes;

/// The first bytes of every part.
pub const MAGIC: &[u8] = b"FLEXRUN-STATE-1\n";

/// The largest part, before its last record.
pub const PART_BYTES: usize = 64 << 20;

const HEADER: usize = 8 + 8 + 4 + 4 + 8 + 4;

/// Encode `records` as parts.
pub fn write(records: &[Record]) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut cur = MAGIC.to_vec();
    for (s, v) in records {
        if cur.len() > MAGIC.len() && cur.len() + HEADER + v.len() > PART_BYTES {
            parts.push(std::mem::replace(&mut cur, MAGIC.to_vec()));
        }
        cur.extend_from_slice(&s.window.start_ms.to_le_bytes());
        cur.extend_from_slice(&s.window.end_ms.to_le_bytes());
        cur.extend_from_slice(&s.key.to_le_bytes());
        cur.extend_from_slice(&s.partition.to_le_bytes());
        cur.extend_from_slice(&s.offset.to_le_bytes());
        cur.extend_from_slice(&(v.len() as u32).to_le_bytes());
        cur.extend_from_slice(v);
    }
    parts.push(cur);
    parts
}

/// Decode one part.
pub fn read(part: &[u8]) -> Result<Vec<Record>, StateError> {
    let bad = |why: &str| StateError::Corrupt(format!("a state part is not flexrun's record stream: {why}"));
    let mut rest = part.strip_prefix(MAGIC).ok_or_else(|| bad("no magic line"))?;
    let mut out = Vec::new();
    let whole = Bytes::copy_from_slice(part);
    while !rest.is_empty() {
        if rest.len() < HEADER {
            return Err(bad("a record header is cut off"));
        }
        let i64_at = |at: usize| i64::from_le_bytes(rest[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        let window = Window { start_ms: i64_at(0), end_ms: i64_at(8) };
        let slot = Slot { window, key: u32_at(16), partition: u32_at(20) as i32, offset: i64_at(24) };
        let len = u32_at(32) as usize;
        if rest.len() < HEADER + len {
            return Err(bad("a record's bytes are cut off"));
        }
        let start = part.len() - rest.len() + HEADER;
        out.push((slot, whole.slice(start..start + len)));
        rest = &rest[HEADER + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_round_trips_and_a_cut_is_detected() {
        let recs = super::super::tests::sample();
        let parts = write(&recs);
        assert_eq!(parts.len(), 1);
        assert_eq!(read(&parts[0]).unwrap(), recs);
        let cut = &parts[0][..parts[0].len() - 3];
        assert!(read(cut).unwrap_err().to_string().contains("cut off"));
        assert!(read(b"hello").is_err());
    }
}
