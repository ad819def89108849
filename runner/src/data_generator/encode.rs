//! How a generated JSON document goes out: compact JSON (as Google's Kafka and Cloud
//! Storage writers send it), as rendered, as an Avro record, or as a Protobuf message
//! (the document read as the message's proto3 JSON form).
//!
//! Avro to Kafka is framed as kafka-to-bq's `messageFormat` expects: Confluent wire
//! format (magic byte 0, the schema id, the datum) or the datum alone. With a Schema
//! Registry the schema is registered under `<topic>-value` and its id is used;
//! without one the id is 1, the id Google's `SINGLE_SCHEMA_FILE` mode registers.

use super::AvroOutput;
use crate::avro::registry::Registry;
use crate::avro::wire::confluent_frame;
use crate::avro::{from_json::to_avro, WriterSchema};
use anyhow::{anyhow, Context, Result};
use apache_avro::types::Value;

/// Turns generated documents into message bytes.
pub enum Encoder {
    /// The JSON text: compacted ([`compact_json`]) or as rendered.
    Json {
        /// Remove the whitespace between tokens.
        compact: bool,
    },
    /// An Avro record.
    Avro {
        /// The schema.
        schema: Box<WriterSchema>,
        /// The Confluent schema id, when framed.
        id: Option<u32>,
        /// Scratch space for the datum.
        datum: Vec<u8>,
    },
    /// A Protobuf message of this type, alone (no framing).
    Proto(prost_reflect::MessageDescriptor),
}

impl Encoder {
    /// The encoder for `avro` (None: JSON, `compact` or not); registers the schema for
    /// `topic` if asked.
    pub async fn new(avro: Option<&AvroOutput>, topic: Option<&str>, compact: bool) -> Result<Encoder> {
        let Some(a) = avro else { return Ok(Encoder::Json { compact }) };
        let schema = WriterSchema::parse(&a.schema).with_context(|| a.schema_path.clone())?;
        let id = match (a.confluent, &a.registry, topic) {
            (false, _, _) => None,
            (true, Some(url), Some(topic)) => {
                let subject = format!("{topic}-value");
                let id = Registry::new(url).register(&subject, &a.schema).await?;
                tracing::info!(subject, id, "schema registered");
                Some(id)
            }
            (true, _, _) => Some(1),
        };
        Ok(Encoder::Avro { schema: Box::new(schema), id, datum: Vec::new() })
    }

    /// The record for one document (Avro only).
    pub fn record(&self, json: &str) -> Result<Option<Value>> {
        let Encoder::Avro { schema, .. } = self else { return Ok(None) };
        let doc: serde_json::Value =
            serde_json::from_str(json).map_err(|e| anyhow!("the generated document is not JSON: {e}"))?;
        Ok(Some(
            to_avro(schema, &doc).map_err(|e| anyhow!("the generated document does not fit the Avro schema: {e}"))?,
        ))
    }

    /// The message bytes for one document, written into `out`.
    pub fn encode<'a>(&mut self, json: &'a str, out: &'a mut Vec<u8>) -> Result<&'a [u8]> {
        let record = self.record(json)?;
        match (self, record) {
            (Encoder::Avro { schema, id, datum }, Some(v)) => {
                *datum = apache_avro::to_avro_datum(&schema.schema, v).map_err(|e| anyhow!("Avro encoding: {e}"))?;
                match id {
                    Some(id) => confluent_frame(*id, datum, out),
                    None => {
                        out.clear();
                        out.extend_from_slice(datum);
                    }
                }
                Ok(out.as_slice())
            }
            (Encoder::Proto(desc), _) => {
                let mut de = serde_json::Deserializer::from_str(json);
                let msg = prost_reflect::DynamicMessage::deserialize(desc.clone(), &mut de).map_err(|e| {
                    anyhow!("the generated document does not fit the Protobuf message {}: {e}", desc.full_name())
                })?;
                out.clear();
                prost::Message::encode(&msg, out).map_err(|e| anyhow!("Protobuf encoding: {e}"))?;
                Ok(out.as_slice())
            }
            (Encoder::Json { compact: true }, _) => {
                compact_json(json, out)?;
                Ok(out.as_slice())
            }
            _ => Ok(json.as_bytes()),
        }
    }
}

/// `doc` without the whitespace between its tokens, into `out`, as Google's generator
/// sends JSON to Kafka and Cloud Storage: it parses each rendered document with Gson
/// and writes `JsonParser.parseString(..).toString()` (`StreamingDataGeneratorWriteToKafka`).
/// Strings are kept byte for byte (Gson would also rewrite escapes such as `\/`,
/// which generated text rarely has). A document that is not JSON is an error, as it
/// is for Gson.
///
/// ```
/// let mut out = Vec::new();
/// flexrun::data_generator::encode::compact_json("{\n  \"a\": \"x y\",\n  \"b\": [1, 2]\n}\n", &mut out).unwrap();
/// assert_eq!(out, br#"{"a":"x y","b":[1,2]}"#);
/// assert!(flexrun::data_generator::encode::compact_json("{\"a\": }", &mut out).is_err());
/// ```
pub fn compact_json(doc: &str, out: &mut Vec<u8>) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(doc)
        .map_err(|e| anyhow!("the generated document is not JSON ({e}), so it cannot be sent compacted as Google's generator sends it; fix the schema, or set compactJson=false to send the text as rendered"))?;
    out.clear();
    out.reserve(doc.len());
    let bytes = doc.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let end = string_end(bytes, i);
                out.extend_from_slice(&bytes[i..end]);
                i = end;
            }
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(())
}

/// The index just past the string that opens at `bytes[open]` (a `"`), found with
/// `memchr`: a generated string is most of a message's bytes, and it is copied in one
/// piece rather than byte by byte (BENCHMARKS.md, "streaming-data-generator").
fn string_end(bytes: &[u8], open: usize) -> usize {
    let mut i = open + 1;
    while let Some(k) = bytes.get(i..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) {
        match bytes[i + k] {
            b'\\' => i += k + 2,
            _ => return i + k + 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::compact_json;

    /// The byte-by-byte compaction the memchr version replaced: the reference.
    fn reference(doc: &str) -> Vec<u8> {
        let (mut out, mut in_string, mut escaped) = (Vec::new(), false, false);
        for &b in doc.as_bytes() {
            if in_string {
                out.push(b);
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
            } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                in_string = b == b'"';
                out.push(b);
            }
        }
        out
    }

    #[test]
    fn compacts_as_the_byte_by_byte_reference_does() {
        let docs = [
            "{}",
            "{ \"a\" : \"x y\" , \"b\" : [ 1 , 2.5e3 , true , null ] }",
            "{\"q\": \"a \\\" quote, a \\\\ backslash\\\\\", \"u\": \"\\u00e9 and é, \\n kept\"}",
            "[\"\\\\\", \"\\\"\", \"\"]",
            "\n\t{\"nested\": {\"deep\": [ {\"k\": \" spaced  out \"} ]}}\r\n",
            "\"just a string\"",
        ];
        for doc in docs {
            let mut out = Vec::new();
            compact_json(doc, &mut out).unwrap_or_else(|e| panic!("{doc}: {e}"));
            assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&reference(doc)), "{doc}");
            serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
        }
    }

    #[test]
    fn a_document_that_is_not_json_is_refused() {
        let mut out = Vec::new();
        for bad in ["{\"a\": }", "{\"a\": \"open", "[1, 2"] {
            assert!(compact_json(bad, &mut out).is_err(), "{bad}");
        }
    }
}
