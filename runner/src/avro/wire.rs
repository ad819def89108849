//! The framings Google's template reads, and the decoder that holds writer schemas.
//!
//! - `AVRO_CONFLUENT_WIRE_FORMAT`: byte 0 is the magic byte, "currently always 0",
//!   bytes 1–4 the "4-byte schema ID as returned by Schema Registry" (big-endian),
//!   then the Avro binary encoding of the datum (Confluent, *Wire format*,
//!   docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop).
//!   A wrong first byte is Confluent's `"Unknown magic byte!"`.
//! - `AVRO_BINARY_ENCODING`: the datum alone, decoded with the schema file as both
//!   writer and reader schema (Google's `BinaryAvroDeserializer`).
//!
//! With `schemaFormat=SINGLE_SCHEMA_FILE` every message is decoded with the file's
//! schema whatever id it carries. Google's template registers the file as id 1 in a
//! mock registry, which (by our reading of Confluent's `MockSchemaRegistryClient`)
//! would refuse other ids; flexrun does not, and docs/guide/kafka-to-bq.md says so.
//! With `schemaFormat=SCHEMA_REGISTRY` the writer schema is fetched by id
//! ([`super::registry`]) before a batch is mapped, and cached: ids never change meaning.

use super::registry::Registry;
use super::WriterSchema;
use crate::record::RecordError;
use apache_avro::types::Value;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// How a message's bytes carry the datum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Magic byte 0, a 4-byte schema id, then the datum.
    Confluent,
    /// The datum alone.
    Binary,
}

/// The Confluent magic byte.
pub const MAGIC: u8 = 0;

/// Frame a datum in Confluent wire format with `id`.
pub fn confluent_frame(id: u32, datum: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(datum);
}

/// The schema id of a Confluent-framed message, or why it is not one.
pub fn confluent_id(bytes: &[u8]) -> Result<u32, RecordError> {
    match bytes {
        [MAGIC, a, b, c, d, ..] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        [MAGIC, ..] => Err(RecordError::Avro(format!(
            "Error deserializing Avro message: {} bytes, too short for the 5-byte Confluent header",
            bytes.len()
        ))),
        _ => Err(RecordError::Avro("Error deserializing Avro message: Unknown magic byte!".into())),
    }
}

/// One id's registry answer: the schema, or why it cannot be used (deterministic).
pub type CachedSchema = Result<Arc<WriterSchema>, String>;

async fn fetch_with_retry(client: &Registry, id: u32) -> CachedSchema {
    use crate::avro::registry::{until_answered, Definitive};
    match until_answered(client, &format!("schema id {id}"), || client.schema_by_id(id)).await {
        Ok(text) => WriterSchema::parse(&text).map(Arc::new).map_err(|e| format!("registry schema id {id}: {e}")),
        Err(e @ Definitive::NotFound { .. }) => Err(format!("Error retrieving Avro schema for id {id}: {e}")),
        Err(Definitive::Refused(e)) => Err(format!("Error retrieving Avro schema for id {id}: {e}")),
    }
}

/// Where writer schemas come from.
#[derive(Debug)]
pub enum Schemas {
    /// One schema file for every message.
    File(Arc<WriterSchema>),
    /// A Schema Registry, with the schemas fetched so far by id.
    Registry {
        /// The client.
        client: Registry,
        /// Answers so far, by id.
        cache: RwLock<HashMap<u32, CachedSchema>>,
    },
}

/// Decodes message values into Avro records.
#[derive(Debug)]
pub struct AvroDecoder {
    /// The framing.
    pub framing: Framing,
    /// The writer schemas.
    pub schemas: Schemas,
}

impl AvroDecoder {
    /// A decoder with one schema for every message.
    pub fn with_file(framing: Framing, schema: WriterSchema) -> AvroDecoder {
        AvroDecoder { framing, schemas: Schemas::File(Arc::new(schema)) }
    }

    /// The one schema every message has, when it comes from a file.
    pub fn schema_file(&self) -> Option<&WriterSchema> {
        match &self.schemas {
            Schemas::File(w) => Some(w),
            Schemas::Registry { .. } => None,
        }
    }

    /// A Confluent-framed decoder that looks schemas up in `client`.
    pub fn with_registry(client: Registry) -> AvroDecoder {
        let schemas = Schemas::Registry { client, cache: RwLock::default() };
        AvroDecoder { framing: Framing::Confluent, schemas }
    }

    /// Fetch the schemas of these messages that are not cached yet.
    ///
    /// An id the registry does not know (HTTP 404) is remembered as unknown, and
    /// mapping its messages reports it, so they are dead-lettered the same way on every
    /// replay. A registry that cannot be reached, or answers 5xx, is retried until it
    /// answers: dead-lettering good records because of an outage would lose them, and
    /// a replay would then map them differently.
    pub async fn prefetch<'a>(&self, values: impl Iterator<Item = &'a [u8]>) {
        let Schemas::Registry { client, cache } = &self.schemas else { return };
        let mut missing: Vec<u32> = values.filter_map(|v| confluent_id(v).ok()).collect();
        missing.sort_unstable();
        missing.dedup();
        missing.retain(|id| !cache.read().expect("schema cache").contains_key(id));
        for id in missing {
            let entry = fetch_with_retry(client, id).await;
            cache.write().expect("schema cache").insert(id, entry);
        }
    }

    /// A message value's writer schema and its datum bytes (framing removed).
    pub fn split<'b>(&self, bytes: &'b [u8]) -> Result<(Arc<WriterSchema>, &'b [u8]), RecordError> {
        let (schema, datum) = match self.framing {
            Framing::Binary => (self.file_schema(), bytes),
            Framing::Confluent => {
                let id = confluent_id(bytes)?;
                (self.schema_for(id)?, &bytes[5..])
            }
        };
        Ok((schema, datum))
    }

    /// Decode one message value: its writer schema and the record.
    pub fn decode(&self, bytes: &[u8]) -> Result<(Arc<WriterSchema>, Value), RecordError> {
        let (schema, mut datum) = self.split(bytes)?;
        let before = datum.len();
        let v = apache_avro::from_avro_datum(&schema.schema, &mut datum, None)
            .map_err(|e| RecordError::Avro(format!("Error deserializing Avro message: {e}")))?;
        if !datum.is_empty() {
            return Err(RecordError::Avro(format!(
                "Error deserializing Avro message: {} of {before} bytes are left over after the record (a different schema, or a different framing?)",
                datum.len()
            )));
        }
        Ok((schema, v))
    }

    fn file_schema(&self) -> Arc<WriterSchema> {
        match &self.schemas {
            Schemas::File(w) => w.clone(),
            Schemas::Registry { .. } => unreachable!("binary framing always has a schema file"),
        }
    }

    fn schema_for(&self, id: u32) -> Result<Arc<WriterSchema>, RecordError> {
        match &self.schemas {
            Schemas::File(w) => Ok(w.clone()),
            Schemas::Registry { client, cache } => match cache.read().expect("schema cache").get(&id) {
                Some(Ok(w)) => Ok(w.clone()),
                Some(Err(e)) => Err(RecordError::Avro(e.clone())),
                None => Err(RecordError::Avro(format!(
                    "Error retrieving Avro schema for id {id}: not fetched from {} (prefetch was not called)",
                    client.url()
                ))),
            },
        }
    }
}

/// `namespace.name`, or `name` without a namespace.
pub fn full_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"}]}"#;

    fn datum(id: i64) -> Vec<u8> {
        let w = WriterSchema::parse(S).unwrap();
        apache_avro::to_avro_datum(&w.schema, Value::Record(vec![("id".into(), Value::Long(id))])).unwrap()
    }

    /// A registry stand-in answering 503 to the first `failures` requests, then `answer`.
    async fn flaky_registry(
        failures: usize,
        status: u16,
        body: &'static str,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        refusing_registry(503, failures, status, body).await
    }

    /// A registry stand-in answering `refusal` to the first `failures` requests, then `answer`.
    async fn refusing_registry(
        refusal: u16,
        failures: usize,
        status: u16,
        body: &'static str,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = calls.clone();
        tokio::spawn(async move {
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (code, text) = if n < failures { (refusal, "{}") } else { (status, body) };
                let resp =
                    format!("HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}", text.len());
                let _ = sock.write_all(resp.as_bytes()).await;
            }
        });
        (url, calls)
    }

    #[tokio::test]
    async fn a_registry_outage_is_waited_out_and_an_unknown_id_is_remembered() {
        let body =
            r#"{"schema":"{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}"#;
        let (url, calls) = flaky_registry(2, 200, body).await;
        let d = AvroDecoder::with_registry(Registry::new(&url));
        let mut framed = Vec::new();
        confluent_frame(7, &datum(5), &mut framed);
        let before = crate::retry::retries()["retries_registry"];
        d.prefetch([framed.as_slice()].into_iter()).await;
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3, "two 503s retried, then the schema");
        // Counted for /metrics (the counter is process-wide: other tests may add to it).
        assert!(crate::retry::retries()["retries_registry"] >= before + 2);
        assert_eq!(d.decode(&framed).unwrap().1, Value::Record(vec![("id".into(), Value::Long(5))]));
        // 404: remembered as unknown (no further calls), and the message says so.
        let (url, calls) = flaky_registry(0, 404, r#"{"error_code":40403,"message":"Schema not found"}"#).await;
        let d = AvroDecoder::with_registry(Registry::new(&url));
        d.prefetch([framed.as_slice()].into_iter()).await;
        d.prefetch([framed.as_slice()].into_iter()).await;
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        let e = d.decode(&framed).unwrap_err().to_string();
        assert!(e.contains("id 7") && e.contains("not found") && e.contains("40403"), "{e}");
    }

    #[tokio::test]
    async fn auth_timeout_and_rate_limit_answers_are_retried_not_cached_as_unknown() {
        let body =
            r#"{"schema":"{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}"#;
        let mut framed = Vec::new();
        confluent_frame(7, &datum(5), &mut framed);
        for refusal in [401, 403, 408, 429] {
            let (url, calls) = refusing_registry(refusal, 2, 200, body).await;
            let d = AvroDecoder::with_registry(Registry::new(&url));
            d.prefetch([framed.as_slice()].into_iter()).await;
            assert_eq!(
                calls.load(std::sync::atomic::Ordering::SeqCst),
                3,
                "{refusal}: two refusals retried, then the schema"
            );
            assert!(d.decode(&framed).is_ok(), "{refusal}: the id is known once the registry answers");
        }
    }

    #[test]
    fn both_framings_decode_and_bad_bytes_say_why() {
        let d = AvroDecoder::with_file(Framing::Confluent, WriterSchema::parse(S).unwrap());
        let mut framed = Vec::new();
        confluent_frame(1, &datum(9), &mut framed);
        assert_eq!(framed[..5], [0, 0, 0, 0, 1]);
        assert_eq!(d.decode(&framed).unwrap().1, Value::Record(vec![("id".into(), Value::Long(9))]));
        let e = d.decode(b"{\"id\":1}").unwrap_err().to_string();
        assert!(e.contains("Unknown magic byte!"), "{e}");
        assert!(d.decode(&[0, 0, 1]).unwrap_err().to_string().contains("too short"));
        let b = AvroDecoder::with_file(Framing::Binary, WriterSchema::parse(S).unwrap());
        assert_eq!(b.decode(&datum(3)).unwrap().1, Value::Record(vec![("id".into(), Value::Long(3))]));
        // A framed message read as plain binary does not pass silently.
        let e = b.decode(&framed).unwrap_err().to_string();
        assert!(e.contains("left over"), "{e}");
    }
}
