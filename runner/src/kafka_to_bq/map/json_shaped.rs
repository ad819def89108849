//! The shaped path: a topic's messages usually share one layout (the same keys, in the
//! same order, with the same spacing), and only their values differ. The first message
//! the lean parser ([`super::json_flat`]) maps is learned as a [`Shape`]: the text
//! before each value (`{"logStreamId":`, then `,"message":`), the text after the last
//! value, and the column each value goes to. A later message is then read by comparing
//! those bytes and reading each value in place, with no key scan, no sort and no
//! column lookup. A message that differs anywhere (another key, other spacing, a value
//! that is not a plain string or integer) returns `None`, and the caller takes the lean
//! parser, which gives the reason. Pure.
//!
//! The shaped path writes a row only where the lean parser would write the very same
//! bytes: the same fields in the same key order, each encoded by the same function
//! (`json_row::encode_plain`). `transform`'s property tests compare both byte for byte.
//! On the seed's messages `map_floor` puts the mapping at 0.146 CPU-ns per byte with it
//! against 0.200 with the lean parser alone (in cache; 0.206 against 0.259 out of it), and
//! the exactly-once stats job fell from 1.43 to 1.36 CPU-s/GB (medians of eight
//! alternated runs; BENCHMARKS.md, "Hot path").
//!
//! ```
//! use flexrun::bigquery::schema::Schema;
//! use flexrun::kafka_to_bq::map::json_flat::scan;
//! use flexrun::kafka_to_bq::map::json_shaped::Shape;
//! let schema = Schema::from_json(&serde_json::json!([
//!     {"name": "id", "type": "INTEGER", "mode": "REQUIRED"}, {"name": "m", "type": "STRING"}
//! ])).unwrap();
//! let first = br#"{"id":1,"m":"a"}"#;
//! let shape = Shape::learn(&schema, first, &scan(first).unwrap()).unwrap();
//! let mut row = Vec::new();
//! assert!(shape.map(&schema, br#"{"id":22,"m":"bc"}"#, &mut row).is_some());
//! assert_eq!(row, b"\x08\x16\x12\x02bc");
//! assert!(shape.map(&schema, br#"{"id": 22,"m":"bc"}"#, &mut Vec::new()).is_none()); // other spacing
//! ```

use super::json_flat::{self, Field, Fields, MAX_FIELDS};
use super::json_row::{encode_plain, plain_integer};
use crate::bigquery::schema::{ColumnType, Mode, Schema};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// One value's place in a [`Shape`].
#[derive(Debug, Clone)]
struct Step {
    /// The exact text between the previous value (or the start) and this value.
    lead: Box<[u8]>,
    /// The key, without its quotes.
    key: Box<str>,
    /// The column the value goes to.
    col: usize,
}

/// A learned message layout; see the module's documentation.
#[derive(Debug, Clone)]
pub struct Shape {
    steps: Vec<Step>,
    /// The exact text after the last value.
    tail: Box<[u8]>,
    /// Whether the keys appear in key order, so that fields are written as they are read.
    sorted: bool,
    /// The steps in key order (the order the lean parser writes fields in).
    order: Vec<usize>,
}

impl Shape {
    /// The layout of `text`, a message the lean parser read as `fields` and that mapped
    /// onto `schema`. None when the shaped path could not serve messages like it: a key
    /// that appears twice, a value other than a plain string in a STRING column or an
    /// integer (or a plain string) in an INT64 column, a REQUIRED column it lacks, or no
    /// key at all.
    pub fn learn(schema: &Schema, text: &[u8], fields: &Fields<'_>) -> Option<Shape> {
        // The lean parser accepted `text`, so it is UTF-8.
        let text = std::str::from_utf8(text).ok()?;
        let mut found: Vec<(usize, Field<'_>)> = fields.iter().map(|f| (offset(text, f.raw), *f)).collect();
        found.sort_by_key(|(at, _)| *at);
        let (mut steps, mut pos) = (Vec::with_capacity(found.len()), 0);
        for (i, (at, f)) in found.iter().enumerate() {
            let lead = &text[pos..*at];
            (lead_holds(lead, i == 0, f.key) && servable(schema, f)?).then_some(())?;
            steps.push(Step { lead: lead.as_bytes().into(), key: f.key.into(), col: schema.lookup(f.key)? });
            pos = at + f.raw.len();
        }
        let tail = &text[pos..];
        (!found.is_empty() && trim_ws(tail) == "}").then_some(())?;
        let required = schema.columns.iter().enumerate().filter(|(_, c)| c.mode == Mode::Required);
        for (idx, _) in required {
            steps.iter().any(|s| s.col == idx).then_some(())?;
        }
        let mut order: Vec<usize> = (0..steps.len()).collect();
        order.sort_by(|a, b| steps[*a].key.cmp(&steps[*b].key));
        let sorted = order.iter().enumerate().all(|(i, s)| i == *s);
        Some(Shape { steps, tail: tail.as_bytes().into(), sorted, order })
    }

    /// Write `text`'s row into `out` when `text` has this layout (then `out` holds what
    /// the lean parser would write); None otherwise, with `out` possibly half written.
    /// `text` need not have been checked as UTF-8: the learned text between values is,
    /// and every value is read by the lean parser's reader, which checks it.
    pub fn map(&self, schema: &Schema, text: &[u8], out: &mut Vec<u8>) -> Option<()> {
        if self.sorted {
            return self.map_in_order(schema, text, out);
        }
        let mut held = [Field::default(); MAX_FIELDS];
        let end = self.read(text, |i, f| held[i] = f)?;
        (text[end..] == *self.tail).then_some(())?;
        for &i in &self.order {
            let col = self.steps[i].col;
            encode_plain(&schema.columns[col], col, &held[i], out).then_some(())?;
        }
        Some(())
    }

    /// [`Shape::map`] for keys that appear in key order: each field is written as it is read.
    fn map_in_order(&self, schema: &Schema, text: &[u8], out: &mut Vec<u8>) -> Option<()> {
        let mut written = true;
        let end = self.read(text, |i, f| {
            let col = self.steps[i].col;
            written &= encode_plain(&schema.columns[col], col, &f, out);
        })?;
        (written && text[end..] == *self.tail).then_some(())
    }

    /// Read `text`'s values step by step, handing each to `each`; the index after the
    /// last value, or None where `text` leaves the layout.
    fn read<'a>(&'a self, b: &'a [u8], mut each: impl FnMut(usize, Field<'a>)) -> Option<usize> {
        let mut pos = 0;
        for (i, step) in self.steps.iter().enumerate() {
            b[pos..].starts_with(&step.lead).then_some(())?;
            pos += step.lead.len();
            let (raw, plain, end) = json_flat::value(b, pos)?;
            each(i, Field { key: &step.key, raw, plain });
            pos = end;
        }
        Some(pos)
    }
}

/// Where `part` (a slice of `text`) starts in `text`.
fn offset(text: &str, part: &str) -> usize {
    part.as_ptr() as usize - text.as_ptr() as usize
}

/// JSON's whitespace.
fn trim_ws(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r'])
}

/// Whether `lead` is exactly what JSON allows before a value: `{` (the first) or `,`,
/// then `"key"` and `:`, with JSON whitespace around each.
fn lead_holds(lead: &str, first: bool, key: &str) -> bool {
    let opener = if first { '{' } else { ',' };
    let rest = trim_ws(lead).strip_prefix(opener).map(trim_ws);
    let rest = rest.and_then(|r| r.strip_prefix('"')).and_then(|r| r.strip_prefix(key));
    let rest = rest.and_then(|r| r.strip_prefix('"')).map(trim_ws);
    rest.is_some_and(|r| r.strip_suffix(':').is_some_and(|r| trim_ws(r).is_empty()))
}

/// Whether messages with `f`'s key can take the shaped path: its column is not
/// REPEATED, and is STRING (a plain string) or INT64 (an integer or a plain string).
/// None when the key names no column.
fn servable(schema: &Schema, f: &Field<'_>) -> Option<bool> {
    let col = &schema.columns[schema.lookup(f.key)?];
    let typed = match col.typ {
        ColumnType::String | ColumnType::StringLike => f.plain.is_some(),
        ColumnType::Int64 => f.plain.is_some() || plain_integer(f.raw).is_some(),
        _ => false,
    };
    Some(typed && col.mode != Mode::Repeated)
}

/// How many messages a mapper offers to [`Shapes`] before it stops trying.
pub const LEARN_TRIES: u32 = 64;

/// The layout a mapper learned, shared by its clones: set once, from the first of the
/// first [`LEARN_TRIES`] messages offered that has a servable layout.
#[derive(Debug, Default)]
pub struct Shapes {
    learned: OnceLock<Shape>,
    tries: AtomicU32,
}

impl Shapes {
    /// The learned layout, if any.
    pub fn get(&self) -> Option<&Shape> {
        self.learned.get()
    }

    /// Offer a message the lean parser mapped (as `fields`) onto `schema`.
    /// Once it has learned or given up, this only reads: no write to the shared count.
    pub fn offer(&self, schema: &Schema, text: &[u8], fields: &Fields<'_>) {
        let given_up = || self.tries.load(Ordering::Relaxed) >= LEARN_TRIES;
        if self.learned.get().is_some() || given_up() || self.tries.fetch_add(1, Ordering::Relaxed) >= LEARN_TRIES {
            return;
        }
        if let Some(shape) = Shape::learn(schema, text, fields) {
            let _ = self.learned.set(shape);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_json(&json!([
            {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "m", "type": "STRING"},
            {"name": "f", "type": "FLOAT"},
            {"name": "tags", "type": "STRING", "mode": "REPEATED"}
        ]))
        .unwrap()
    }

    fn learn(text: &str) -> Option<Shape> {
        Shape::learn(&schema(), text.as_bytes(), &json_flat::scan(text.as_bytes()).unwrap())
    }

    #[test]
    fn layouts_are_learned_only_where_the_shaped_path_can_serve_them() {
        assert!(learn(r#"{"id":1,"m":"a"}"#).is_some());
        assert!(learn(" {\n \"m\" : \"a\" ,\t\"id\":\"7\" } ").is_some(), "spacing and a quoted integer");
        assert!(learn(r#"{"m":"a"}"#).is_none(), "the REQUIRED id is missing");
        assert!(learn(r#"{"id":1,"f":1}"#).is_none(), "a FLOAT column");
        assert!(learn(r#"{"id":1,"m":null}"#).is_none(), "a null");
        assert!(learn(r#"{"id":1,"m":5}"#).is_none(), "a number in a STRING column");
        assert!(learn(r#"{"id":1,"id":2}"#).is_none(), "a key twice");
        assert!(learn(r#"{"id":1,"tags":"x"}"#).is_none(), "a REPEATED column");
    }

    #[test]
    fn a_message_of_another_layout_is_left_to_the_lean_parser() {
        let s = schema();
        let shape = learn(r#"{"m":"a","id":1}"#).unwrap();
        let mut row = Vec::new();
        assert!(shape.map(&s, br#"{"m":"xyz","id":-5}"#, &mut row).is_some());
        // Written in key order (id, then m), as the lean parser writes them.
        let mut want = Vec::new();
        crate::bigquery::proto::put_varint(1, -5i64 as u64, &mut want);
        crate::bigquery::proto::put_bytes(2, b"xyz", &mut want);
        assert_eq!(row, want);
        for other in [
            r#"{"m":"a","id":1,"f":2}"#,
            r#"{"m":"a", "id":1}"#,
            r#"{"m":"a","id":1} "#,
            r#"{"m":"a\"b","id":1}"#,
            r#"{"m":"a","id":1.5}"#,
            r#"{"m":"a","id":null}"#,
            r#"{"m":"a","ID":1}"#,
            r#"{"m":"a"}"#,
        ] {
            assert!(shape.map(&s, other.as_bytes(), &mut Vec::new()).is_none(), "{other}");
        }
    }

    #[test]
    fn shapes_learn_once_and_stop_trying_after_a_bound() {
        let (s, shapes) = (schema(), Shapes::default());
        for _ in 0..LEARN_TRIES {
            let text = r#"{"id":1,"f":2}"#;
            shapes.offer(&s, text.as_bytes(), &json_flat::scan(text.as_bytes()).unwrap());
        }
        let text = r#"{"id":1,"m":"a"}"#;
        shapes.offer(&s, text.as_bytes(), &json_flat::scan(text.as_bytes()).unwrap());
        assert!(shapes.get().is_none(), "past the bound");
        let fresh = Shapes::default();
        fresh.offer(&s, text.as_bytes(), &json_flat::scan(text.as_bytes()).unwrap());
        assert!(fresh.get().is_some());
    }
}
