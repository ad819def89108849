//! A batch's encoded rows, written once in the bytes an AppendRows request carries
//! them as (issue 29, step 5).
//!
//! `ProtoRows.serialized_rows` is a repeated `bytes` field: on the wire each row is its
//! field tag, its length as a varint, then its bytes. [`Rows`] keeps a batch's rows
//! back to back in exactly that form, in one buffer, so the rows of any request (a run
//! of consecutive rows) are one contiguous slice of it. [`super::framed`] hands that
//! slice to HTTP/2 as it is: no row is copied on its way out. Each row is still
//! readable on its own ([`Rows::get`]) for the exactly-once digest, the dead letters
//! and the tests.
//!
//! ```
//! use flexrun::bigquery::rows::Rows;
//! let mut rows = Rows::new();
//! rows.push(b"\x08\x01");
//! rows.push(b"\x08\x02");
//! assert_eq!((rows.len(), &rows[1]), (2, &b"\x08\x02"[..]));
//! // Each row framed as field 1 (length-delimited): tag 0x0a, length 2, the bytes.
//! assert_eq!(rows.framed(0..2), b"\x0a\x02\x08\x01\x0a\x02\x08\x02");
//! ```

use prost::encoding::{encode_varint, encoded_len_varint};
use std::ops::{Index, Range};

/// `ProtoRows.serialized_rows`' key: field 1, length-delimited.
const SERIALIZED_ROWS_KEY: u8 = (1 << 3) | 2;

/// Where one row sits in [`Rows`]' buffer: its frame (key and length) starts at
/// `frame`, its bytes at `data`; they end where the next row's frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    frame: usize,
    data: usize,
}

/// A batch's rows, back to back in their AppendRows wire form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rows {
    buf: Vec<u8>,
    at: Vec<Span>,
}

static EMPTY: Rows = Rows::new();

impl Rows {
    /// No rows.
    pub const fn new() -> Rows {
        Rows { buf: Vec::new(), at: Vec::new() }
    }

    /// A shared empty set of rows.
    pub fn empty() -> &'static Rows {
        &EMPTY
    }

    /// Append one row's bytes (copied, framed).
    pub fn push(&mut self, row: &[u8]) {
        let frame = self.buf.len();
        self.buf.reserve(1 + encoded_len_varint(row.len() as u64) + row.len());
        self.buf.push(SERIALIZED_ROWS_KEY);
        encode_varint(row.len() as u64, &mut self.buf);
        let data = self.buf.len();
        self.buf.extend_from_slice(row);
        self.at.push(Span { frame, data });
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Row `i`'s bytes, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let s = self.at.get(i)?;
        Some(&self.buf[s.data..self.end(i)])
    }

    /// Every row's bytes, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { rows: self, next: 0 }
    }

    /// Rows `range` in wire form: each row's key, length and bytes, back to back.
    pub fn framed(&self, range: Range<usize>) -> &[u8] {
        &self.buf[self.framed_range(range)]
    }

    /// Where [`Rows::framed`]'s bytes for `range` sit in [`Rows::as_wire`].
    pub fn framed_range(&self, range: Range<usize>) -> Range<usize> {
        if range.is_empty() {
            return 0..0;
        }
        self.at[range.start].frame..self.frame_start(range.end)
    }

    /// Every row in wire form.
    pub fn as_wire(&self) -> &[u8] {
        &self.buf
    }

    /// Remove row `k` (the rows after it move up).
    pub fn remove(&mut self, k: usize) {
        let (start, end) = (self.at[k].frame, self.frame_start(k + 1));
        let n = end - start;
        self.buf.drain(start..end);
        self.at.remove(k);
        for s in &mut self.at[k..] {
            s.frame -= n;
            s.data -= n;
        }
    }

    /// Remove every row, keeping the buffers.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.at.clear();
    }

    /// The bytes the buffers hold room for.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Every row as its own `Vec` (for tests and one-off appends).
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }

    fn frame_start(&self, i: usize) -> usize {
        self.at.get(i).map_or(self.buf.len(), |s| s.frame)
    }

    fn end(&self, i: usize) -> usize {
        self.frame_start(i + 1)
    }
}

impl Index<usize> for Rows {
    type Output = [u8];

    fn index(&self, i: usize) -> &[u8] {
        self.get(i).unwrap_or_else(|| panic!("row {i} of {}", self.len()))
    }
}

/// The rows of a [`Rows`], in order ([`Rows::iter`]).
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    rows: &'a Rows,
    next: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let r = self.rows.get(self.next)?;
        self.next += 1;
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.rows.len() - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Rows {
    type Item = &'a [u8];
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl<R: AsRef<[u8]>> FromIterator<R> for Rows {
    fn from_iter<I: IntoIterator<Item = R>>(iter: I) -> Rows {
        let mut rows = Rows::new();
        iter.into_iter().for_each(|r| rows.push(r.as_ref()));
        rows
    }
}

impl From<Vec<Vec<u8>>> for Rows {
    fn from(v: Vec<Vec<u8>>) -> Rows {
        v.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn rows_read_back_and_frame_as_prost_encodes_serialized_rows() {
        let vecs: Vec<Vec<u8>> = (0..40usize).map(|i| vec![i as u8; (i * 37) % 300]).collect();
        let rows = Rows::from(vecs.clone());
        assert_eq!(rows.to_vecs(), vecs);
        for (lo, hi) in [(0, 40), (3, 17), (39, 40), (5, 5)] {
            let want = gcp_bigquery_client::google::cloud::bigquery::storage::v1::ProtoRows {
                serialized_rows: vecs[lo..hi].to_vec(),
            };
            assert_eq!(rows.framed(lo..hi), &want.encode_to_vec()[..], "rows {lo}..{hi}");
        }
    }

    #[test]
    fn a_removed_row_leaves_the_others_as_they_were() {
        let mut vecs: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + i as usize * 20]).collect();
        let mut rows = Rows::from(vecs.clone());
        for k in [0, 4, 7] {
            rows.remove(k);
            vecs.remove(k);
            assert_eq!(rows, Rows::from(vecs.clone()));
        }
    }
}
