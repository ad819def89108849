//! The lean parser for the usual message: a flat JSON object whose values are plain
//! strings (no escapes), integers, `true`, `false` or `null`, read in one pass with no
//! allocation, straight from the message's bytes. It only ever *accepts* what it fully
//! understands: any other input (an escape, a float, a nested value, a syntax error,
//! invalid UTF-8, more than [`MAX_FIELDS`] keys) returns `None`, and the caller takes
//! the serde_json paths, which give the reason. So for every input both give the same
//! row and the same error; `transform`'s property tests compare them byte for byte. Pure.
//!
//! A string is read by one pass that stops at the first byte that is a quote, a
//! backslash, a control character or not ASCII ([`super::ascii_run`]); in the usual (ASCII)
//! string that byte is its closing quote, and that one pass has found its end, checked
//! it for control characters and proved it valid UTF-8. Only a string with other bytes
//! takes a second look (`memchr` for its end, simdutf8 for its UTF-8). Every byte
//! outside strings is checked against JSON's ASCII syntax, so a message the parser
//! accepts is valid UTF-8 without a separate pass over it.
//!
//! ```
//! use flexrun::kafka_to_bq::map::json_flat::scan;
//! let f = scan(br#"{"b": 1, "a": "x", "b": 2}"#).unwrap();
//! // Sorted by key, the last of duplicate keys winning, as serde_json's map keeps them.
//! let pairs: Vec<_> = f.iter().map(|f| (f.key, f.raw)).collect();
//! assert_eq!(pairs, [("a", "\"x\""), ("b", "2")]);
//! assert!(scan(br#"{"a": 1.5}"#).is_none()); // a float: the full path
//! assert!(scan(b"{\"a\": \"\xff\"}").is_none()); // not UTF-8: the full path names it
//! ```

use super::ascii_run::ascii_run;
use memchr::memchr2;

/// Keys the lean parser takes; a wider object goes to the full path.
pub const MAX_FIELDS: usize = 16;

/// One top-level `key: value` pair of a message, borrowed from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Field<'a> {
    /// The key, without its quotes (it has no escapes).
    pub key: &'a str,
    /// The value's JSON text exactly as in the message (a string with its quotes).
    pub raw: &'a str,
    /// For a string value without escapes: its contents, which are its value.
    pub plain: Option<&'a str>,
}

/// A message's top-level fields in key order, on the stack.
#[derive(Clone, Copy, Debug)]
pub struct Fields<'a> {
    items: [Field<'a>; MAX_FIELDS],
    len: usize,
}

impl<'a> Fields<'a> {
    /// The fields, sorted by key, one per key.
    pub fn iter(&self) -> impl Iterator<Item = &Field<'a>> {
        self.items[..self.len].iter()
    }

    fn push(&mut self, f: Field<'a>) -> Option<()> {
        *self.items.get_mut(self.len)? = f;
        self.len += 1;
        Some(())
    }

    /// Sort by key (stable) and keep the last of equal keys, as a map built by
    /// inserting the pairs in order would hold them.
    fn sort_and_dedupe(&mut self) {
        let items = &mut self.items[..self.len];
        for i in 1..items.len() {
            let mut j = i;
            while j > 0 && items[j - 1].key > items[j].key {
                items.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut kept = 0;
        for i in 0..self.len {
            let last_of_its_key = i + 1 == self.len || self.items[i + 1].key != self.items[i].key;
            if last_of_its_key {
                self.items[kept] = self.items[i];
                kept += 1;
            }
        }
        self.len = kept;
    }
}

/// Scan `b` as a flat JSON object; `None` for anything else, invalid UTF-8 included.
pub fn scan(b: &[u8]) -> Option<Fields<'_>> {
    let mut fields = Fields { items: [Field::default(); MAX_FIELDS], len: 0 };
    let mut i = ws(b, 0);
    (b.get(i) == Some(&b'{')).then_some(())?;
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (ws(b, i + 1) == b.len()).then_some(fields);
    }
    loop {
        let (_, key, end) = string(b, i)?;
        i = ws(b, end);
        (b.get(i) == Some(&b':')).then_some(())?;
        i = ws(b, i + 1);
        let (raw, plain, end) = value(b, i)?;
        fields.push(Field { key, raw, plain })?;
        i = ws(b, end);
        match b.get(i)? {
            b',' => i = ws(b, i + 1),
            b'}' => break,
            _ => return None,
        }
    }
    (ws(b, i + 1) == b.len()).then_some(())?;
    fields.sort_and_dedupe();
    Some(fields)
}

/// The first index at or after `i` that is not JSON whitespace.
fn ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// A string without escapes or control characters starting at `i` (its opening quote),
/// checked to be UTF-8: its text with the quotes, its contents, and the index after it.
fn string(b: &[u8], i: usize) -> Option<(&str, &str, usize)> {
    (b.get(i) == Some(&b'"')).then_some(())?;
    let at = i + 1 + ascii_run(&b[i + 1..]);
    let raw = match *b.get(at)? {
        b'"' => ascii(&b[i..=at]),
        c if c >= 0x80 => {
            let end = at + memchr2(b'"', b'\\', &b[at..])?;
            (b[end] == b'"' && !has_control(&b[at..end])).then_some(())?;
            simdutf8::basic::from_utf8(&b[i..=end]).ok()?
        }
        _ => return None, // an escape or a control character
    };
    Some((raw, &raw[1..raw.len() - 1], i + raw.len()))
}

/// `b` as text, for bytes the caller has checked are all ASCII.
fn ascii(b: &[u8]) -> &str {
    debug_assert!(b.is_ascii());
    // SAFETY: every caller passes bytes it has checked one by one to be below 0x80
    // (`ascii_run`'s printable ASCII and the quotes around it, an integer's digits and
    // sign, or `true`/`false`/`null` matched byte for byte), and ASCII is valid UTF-8.
    unsafe { std::str::from_utf8_unchecked(b) }
}

/// Whether any byte is a control character, which JSON forbids unescaped in a string.
/// Written as a fold so that it compiles to SIMD compares.
fn has_control(s: &[u8]) -> bool {
    s.iter().fold(false, |any, &c| any | (c < 0x20))
}

/// A value starting at `i`: its raw text, its contents if it is a plain string, and the
/// index after it. Only strings, integers, `true`, `false` and `null`.
pub(super) fn value(b: &[u8], i: usize) -> Option<(&str, Option<&str>, usize)> {
    let end = match *b.get(i)? {
        b'"' => {
            let (raw, s, end) = string(b, i)?;
            return Some((raw, Some(s), end));
        }
        b'-' | b'0'..=b'9' => integer(b, i)?,
        b't' => word(b, i, b"true")?,
        b'f' => word(b, i, b"false")?,
        b'n' => word(b, i, b"null")?,
        _ => return None,
    };
    Some((ascii(&b[i..end]), None, end))
}

/// A JSON integer (`-?(0|[1-9][0-9]*)`, not followed by a fraction or an exponent):
/// the index after it.
fn integer(b: &[u8], i: usize) -> Option<usize> {
    let start = i + usize::from(b[i] == b'-');
    let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
    let end = start + digits;
    let leading_zero = digits > 1 && b[start] == b'0';
    (digits > 0 && !leading_zero && !matches!(b.get(end), Some(b'.' | b'e' | b'E'))).then_some(end)
}

fn word(b: &[u8], i: usize, w: &[u8]) -> Option<usize> {
    b[i..].starts_with(w).then_some(i + w.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(s: &str) -> Option<Vec<(&str, &str)>> {
        scan(s.as_bytes()).map(|f| f.iter().map(|f| (f.key, f.raw)).collect())
    }

    #[test]
    fn flat_objects_are_read_and_everything_else_is_left_to_the_full_path() {
        assert_eq!(pairs(" {} "), Some(vec![]));
        assert_eq!(
            pairs("{\"id\":-12,\n\"m\" : \"héllo\", \"t\":true,\"f\":false,\"n\":null}\r\n"),
            Some(vec![("f", "false"), ("id", "-12"), ("m", "\"héllo\""), ("n", "null"), ("t", "true")])
        );
        for other in [
            "",
            "[]",
            "{\"a\":1.5}",
            "{\"a\":1e3}",
            "{\"a\":01}",
            "{\"a\":-}",
            "{\"a\":\"x\\ny\"}",
            "{\"a\\u0062\":1}",
            "{\"a\":\"tab\tinside\"}",
            "{\"a\":{}}",
            "{\"a\":[1]}",
            "{\"a\":1,}",
            "{\"a\":1} x",
            "{\"a\" 1}",
            "{\"a\":tru}",
            "{\"a\":\"open}",
            "{a:1}",
        ] {
            assert_eq!(pairs(other), None, "{other:?}");
        }
    }

    #[test]
    fn strings_are_checked_as_utf8_on_either_side_of_a_chunk_boundary() {
        for at in [0, 1, 31, 32, 33, 63, 64, 100] {
            let pad = "x".repeat(at);
            let ok = format!("{{\"k\":\"{pad}é{pad}\",\"é\":\"{pad}\"}}");
            let f = scan(ok.as_bytes()).unwrap_or_else(|| panic!("{ok}"));
            let got: Vec<_> = f.iter().map(|f| (f.key, f.plain.unwrap())).collect();
            assert_eq!(got, [("k", format!("{pad}é{pad}").as_str()), ("é", pad.as_str())], "{at}");
            for bad in [&[0xff][..], &[0xc3], &[0xc0, 0x80], &[0xed, 0xa0, 0x80], &[0xe9, b'"'], &[0x1f], b"\\n"] {
                let mut msg = format!("{{\"k\":\"{pad}").into_bytes();
                msg.extend_from_slice(bad);
                msg.extend_from_slice(format!("{pad}\"}}").as_bytes());
                assert!(scan(&msg).is_none(), "{at} {bad:?}");
            }
        }
    }

    #[test]
    fn duplicate_keys_keep_the_last_and_more_than_max_fields_is_left_alone() {
        assert_eq!(pairs(r#"{"a":1,"b":2,"a":3,"a":4}"#), Some(vec![("a", "4"), ("b", "2")]));
        let wide = (0..=MAX_FIELDS).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>().join(",");
        assert_eq!(pairs(&format!("{{{wide}}}")), None);
    }
}
