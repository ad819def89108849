//! The JSON Data Generator language (the language of Google's
//! streaming-data-generator template), as a pure library: a schema is compiled once,
//! with positioned errors, and then renders documents from a seeded random source. No
//! Kafka, files or clocks beyond reading the wall time for the date functions.
//!
//! # Layout
//! - [`language`]: parses a schema into a compiled form ([`language::compile`]).
//! - [`functions`]: the generator functions ([`functions::NAMES`] lists them);
//!   [`javatime`]: Java date patterns; [`words`]: built-in word lists.
//! - this file: [`Generator`] (compiled schema + state → documents).
//!
//! ```
//! let mut g = flexrun_generator::Generator::new(r#"{"id": {{index()}}}"#, 7).unwrap();
//! assert_eq!(g.next_string().unwrap(), r#"{"id": 0}"#);
//! assert_eq!(g.next_string().unwrap(), r#"{"id": 1}"#);
//! ```

pub mod functions;
pub mod javatime;
pub mod language;
pub mod words;

use functions::Ctx;
pub use language::CompileError;
use language::Node;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// A compiled schema plus the generator's state (random source, counters).
pub struct Generator {
    nodes: Vec<Node>,
    ctx: Ctx,
}

/// A document that could not be generated (for example a date that does not parse).
#[derive(Debug, thiserror::Error)]
#[error("generating a message failed at schema {pos}: {message}")]
pub struct GenError {
    /// Where in the schema.
    pub pos: language::Pos,
    /// Why.
    pub message: String,
}

impl Generator {
    /// Compile `schema`; `seed` makes the output reproducible (time functions aside).
    pub fn new(schema: &str, seed: u64) -> Result<Generator, CompileError> {
        Ok(Generator {
            nodes: language::compile(schema)?,
            ctx: Ctx {
                rng: rand::rngs::SmallRng::seed_from_u64(seed),
                indexes: HashMap::new(),
                cache: HashMap::new(),
                regexes: HashMap::new(),
                now_ms: 0,
            },
        })
    }

    /// Generate the next document into `out` (cleared first).
    pub fn next_into(&mut self, out: &mut String) -> Result<(), GenError> {
        out.clear();
        self.ctx.cache.clear();
        self.ctx.now_ms = chrono::Utc::now().timestamp_millis();
        let nodes = std::mem::take(&mut self.nodes);
        let r = render(&nodes, &mut self.ctx, out);
        self.nodes = nodes;
        r
    }

    /// Generate the next document as a new string.
    pub fn next_string(&mut self) -> Result<String, GenError> {
        let mut s = String::new();
        self.next_into(&mut s)?;
        Ok(s)
    }
}

fn render(nodes: &[Node], ctx: &mut Ctx, out: &mut String) -> Result<(), GenError> {
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Call(c) => functions::eval(c, ctx, out).map_err(|message| GenError { pos: c.pos, message })?,
            Node::Repeat { min, max, body } => {
                let k = if max > min { ctx.rng.random_range(*min..=*max) } else { *min };
                for i in 0..k {
                    if i > 0 {
                        out.push(',');
                    }
                    render(body, ctx, out)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_schema_makes_about_1kib_and_is_reproducible() {
        let schema = r#"{"logStreamId":"{{integer(1000001,2000000)}}","message":"{{alphaNumeric(962)}}"}"#;
        let mut a = Generator::new(schema, 7).unwrap();
        let mut b = Generator::new(schema, 7).unwrap();
        for _ in 0..100 {
            let x = a.next_string().unwrap();
            assert_eq!(x, b.next_string().unwrap());
            let v: serde_json::Value = serde_json::from_str(&x).unwrap();
            assert_eq!(v["message"].as_str().unwrap().len(), 962);
            assert!((1000..=1010).contains(&x.len()), "{} bytes", x.len());
        }
    }

    #[test]
    fn repeat_put_get_and_index_work_together() {
        let schema = r#"{"id": {{index()}}, "who": "{{put("n", firstName())}}", "again": "{{get("n")}}", "xs": ['{{repeat(3)}}', {{integer(0,10)}}]}"#;
        let mut g = Generator::new(schema, 1).unwrap();
        for i in 0..5 {
            let v: serde_json::Value = serde_json::from_str(&g.next_string().unwrap()).unwrap();
            assert_eq!(v["id"], i);
            assert_eq!(v["who"], v["again"]);
            assert_eq!(v["xs"].as_array().unwrap().len(), 3);
        }
    }
}
