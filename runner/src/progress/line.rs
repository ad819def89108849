//! The line format of every fsynced log flexrun keeps (the shards' offset and commit
//! logs, kafka-to-gcs's window log): one entry per line, `<crc32c as 8 hex digits>
//! <JSON>`. The checksum tells a torn or damaged line from a good one, so a reader cuts
//! a torn tail (a crash mid-write) and reports damage anywhere else; plain JSON lines
//! from before checksums still read.
//!
//! ```
//! use flexrun::progress::line::{decode_line, encode_line};
//! let line = encode_line(&serde_json::json!({"batch": 7}));
//! let v: serde_json::Value = decode_line(&line[..line.len() - 1]).unwrap();
//! assert_eq!(v["batch"], 7);
//! let mut torn = line.clone();
//! torn[12] ^= 1;
//! assert!(decode_line::<serde_json::Value>(&torn[..torn.len() - 1]).is_err());
//! ```

use super::{io, ProgressError};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::Path;

/// Encode one entry as a checksummed line.
pub fn encode_line<T: Serialize>(e: &T) -> Vec<u8> {
    let json = serde_json::to_vec(e).expect("log entries serialize");
    let mut line = format!("{:08x} ", crate::checksum::crc32c(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    line
}

/// Decode one line: `<crc32c hex> <json>`, or plain JSON from before checksums.
/// `Err(None)` means the checksum does not match (a torn or damaged line).
pub fn decode_line<T: for<'de> Deserialize<'de>>(line: &[u8]) -> Result<T, Option<serde_json::Error>> {
    if line.first() == Some(&b'{') {
        return serde_json::from_slice(line).map_err(Some);
    }
    let (sum, json) = match (line.get(..8), line.get(8), line.get(9..)) {
        (Some(h), Some(b' '), Some(j)) => (h, j),
        _ => return Err(None),
    };
    let want = std::str::from_utf8(sum).ok().and_then(|h| u32::from_str_radix(h, 16).ok());
    if want != Some(crate::checksum::crc32c(json)) {
        return Err(None);
    }
    serde_json::from_slice(json).map_err(Some)
}

/// The entries of one segment file and the byte length of its good prefix. In the
/// newest segment (`last_segment`) a bad final line is a torn write and ends the
/// prefix; anywhere else it is corruption.
pub fn read_segment<T: for<'de> Deserialize<'de>>(
    path: &Path,
    last_segment: bool,
) -> Result<(Vec<T>, u64), ProgressError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(io(path)(e)),
    };
    let mut out = Vec::new();
    let mut good = 0usize;
    let mut start = 0usize;
    let mut line_no = 0usize;
    while start < bytes.len() {
        line_no += 1;
        let end = bytes[start..].iter().position(|b| *b == b'\n').map(|i| start + i);
        let line = &bytes[start..end.unwrap_or(bytes.len())];
        let is_last = end.is_none_or(|e| e + 1 >= bytes.len());
        let parsed = if line.iter().all(u8::is_ascii_whitespace) { None } else { Some(decode_line::<T>(line)) };
        match parsed {
            None => {}
            Some(Ok(v)) if end.is_some() => out.push(v),
            // A complete JSON value without its newline: the write was cut just before it.
            Some(Ok(_)) => break,
            Some(Err(_)) if last_segment && is_last => break,
            Some(Err(source)) => {
                return Err(ProgressError::Corrupt {
                    path: path.to_path_buf(),
                    line: line_no,
                    reason: corrupt_reason(source),
                })
            }
        }
        good = end.map_or(bytes.len(), |e| e + 1);
        start = good;
    }
    Ok((out, good as u64))
}

fn corrupt_reason(e: Option<serde_json::Error>) -> String {
    match e {
        Some(e) => format!("not a log entry: {e}"),
        None => "checksum mismatch (the line is damaged)".into(),
    }
}

pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path, last_segment: bool) -> Result<Vec<T>, ProgressError> {
    read_segment(path, last_segment).map(|(v, _)| v)
}
