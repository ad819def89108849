//! A message's descriptor, and decoding: a compiled descriptor set with the message's
//! full name (`messageFormat=PROTO`), or Confluent's Protobuf wire format through the
//! Schema Registry (`PROTO_CONFLUENT_WIRE_FORMAT`).
//!
//! Confluent's wire format ("Wire format", Confluent's Schema Registry documentation):
//! byte 0 is the magic byte 0, bytes 1–4 the schema id (big-endian), then the message
//! indexes (a zigzag varint count, then that many zigzag varints: the path to the message
//! among the file's messages and their nested messages; the common `[0]` is written as the
//! single byte 0), then the message. The schema is the `.proto` text the registry holds,
//! compiled here with `protox`: its imports resolve to the schemas its references name
//! (Confluent's "Schema references", fetched by subject and version) or to Google's
//! well-known types.

use crate::avro::registry::{until_answered, Reference, Registry};
use crate::record::RecordError;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use std::collections::HashMap;
use std::sync::RwLock;

/// Where a message's descriptor comes from.
#[derive(Debug)]
enum Source {
    /// One message type for every record.
    Fixed(MessageDescriptor),
    /// Per record, by its schema id and message indexes.
    Registry {
        client: Registry,
        /// Compiled schemas by id (or why an id cannot be used).
        pools: RwLock<HashMap<u32, Result<DescriptorPool, String>>>,
    },
}

/// Decodes Protobuf messages ([`super`]).
#[derive(Debug)]
pub struct ProtoDecoder {
    source: Source,
}

impl ProtoDecoder {
    /// Messages of `message` from the file at `path` ([`load_message`]).
    pub fn from_file(path: &str, message: &str) -> Result<ProtoDecoder, String> {
        Ok(ProtoDecoder { source: Source::Fixed(load_message(path, message)?) })
    }

    /// Messages of the type `desc` describes.
    pub fn with_message(desc: MessageDescriptor) -> ProtoDecoder {
        ProtoDecoder { source: Source::Fixed(desc) }
    }

    /// Messages in Confluent's wire format, their schemas from `client`.
    pub fn with_registry(client: Registry) -> ProtoDecoder {
        ProtoDecoder { source: Source::Registry { client, pools: RwLock::new(HashMap::new()) } }
    }

    /// The one message type, when the job has one (a table can be made from it).
    pub fn message(&self) -> Option<&MessageDescriptor> {
        match &self.source {
            Source::Fixed(d) => Some(d),
            Source::Registry { .. } => None,
        }
    }

    /// Fetch and compile the schemas of these values that are not known yet (before a
    /// batch is mapped; [`ProtoDecoder::decode`] does not wait on the network).
    ///
    /// As for Avro, only an answer that holds is kept: an id the registry does not know,
    /// or a schema that does not compile, dead-letters its records the same way on every
    /// replay; an outage or a refusal that says nothing about the id (5xx, 401, 403, 408,
    /// 429) is waited out ([`until_answered`]), never cached. The schemas a schema
    /// references are fetched too, by subject and version, and resolve its imports.
    pub async fn prefetch<'a>(&self, values: impl Iterator<Item = &'a [u8]>) {
        let Source::Registry { client, pools } = &self.source else { return };
        let mut ids: Vec<u32> = values.filter_map(|v| header(v).ok().map(|(id, _, _)| id)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|id| !pools.read().expect("pools lock").contains_key(id));
        for id in ids {
            let compiled = match fetch_with_references(client, id).await {
                Ok((text, imports)) => compile_with(&text, imports),
                Err(e) => Err(format!("schema id {id}: {e}")),
            };
            pools.write().expect("pools lock").insert(id, compiled);
        }
    }

    /// Decode one message.
    pub fn decode(&self, bytes: &[u8]) -> Result<DynamicMessage, RecordError> {
        let (desc, body) = match &self.source {
            Source::Fixed(d) => (d.clone(), bytes),
            Source::Registry { pools, .. } => {
                let (id, indexes, body) = header(bytes)?;
                let pools = pools.read().expect("pools lock");
                let pool = match pools.get(&id) {
                    Some(Ok(p)) => p,
                    Some(Err(e)) => return Err(RecordError::Proto(e.clone())),
                    None => return Err(RecordError::Proto(format!("schema id {id} was not fetched"))),
                };
                (message_at(pool, &indexes).map_err(|e| RecordError::Proto(format!("schema id {id}: {e}")))?, body)
            }
        };
        DynamicMessage::decode(desc.clone(), body)
            .map_err(|e| RecordError::Proto(format!("not a valid {} message: {e}", desc.full_name())))
    }
}

/// The message `message` from `path`: a compiled descriptor set (`protoc
/// --include_imports --descriptor_set_out=...`), or a `.proto` file, compiled here (its
/// imports of Google's well-known types resolve; others do not).
pub fn load_message(path: &str, message: &str) -> Result<MessageDescriptor, String> {
    let pool = if path.ends_with(".proto") {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the .proto file: {e}"))?;
        compile(&text)?
    } else {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read the descriptor set: {e}"))?;
        DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
            format!("not a compiled descriptor set (protoc --include_imports --descriptor_set_out): {e}")
        })?
    };
    pool.get_message_by_name(message).ok_or_else(|| {
        let names: Vec<String> = pool.all_messages().map(|m| m.full_name().to_string()).take(8).collect();
        format!("no message {message} in {path} (it has {})", names.join(", "))
    })
}

/// The most schemas one schema's references may reach, itself left out.
pub const MAX_REFERENCES: usize = 256;

/// Schema `id`'s text and, by import name, the text of every schema it references,
/// directly or through another (each fetched once).
async fn fetch_with_references(client: &Registry, id: u32) -> Result<(String, HashMap<String, String>), String> {
    let top = until_answered(client, &format!("schema id {id}"), || client.fetch_by_id(id))
        .await
        .map_err(|e| e.to_string())?;
    let mut imports = HashMap::new();
    let mut todo: Vec<Reference> = top.references.clone();
    while let Some(r) = todo.pop() {
        if imports.contains_key(&r.name) {
            continue;
        }
        if imports.len() >= MAX_REFERENCES {
            return Err(format!("its references reach more than {MAX_REFERENCES} schemas"));
        }
        let what = format!("reference {} ({} version {})", r.name, r.subject, r.version);
        let got = until_answered(client, &what, || client.fetch_version(&r.subject, r.version))
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        todo.extend(got.references);
        imports.insert(r.name, got.text);
    }
    Ok((top.text, imports))
}

/// Compile a registry's `.proto` text.
pub fn compile(text: &str) -> Result<DescriptorPool, String> {
    compile_with(text, HashMap::new())
}

/// Compile a registry's `.proto` text whose imports are `imports` (import path → text)
/// or Google's well-known types.
pub fn compile_with(text: &str, imports: HashMap<String, String>) -> Result<DescriptorPool, String> {
    struct Files(HashMap<String, String>);
    impl protox::file::FileResolver for Files {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            match self.0.get(name) {
                Some(text) => protox::file::File::from_source(name, text),
                None => Err(protox::Error::file_not_found(name)),
            }
        }
    }
    let mut files = imports;
    files.insert("schema.proto".into(), text.to_string());
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(Files(files));
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut c = protox::Compiler::with_file_resolver(resolver);
    c.include_imports(true);
    c.open_file("schema.proto").map_err(|e| format!("the registry's schema does not compile: {e}"))?;
    Ok(c.descriptor_pool())
}

/// The message the indexes name in the registry schema's file.
fn message_at(pool: &DescriptorPool, indexes: &[i64]) -> Result<MessageDescriptor, String> {
    let file = pool.get_file_by_name("schema.proto").ok_or("the schema has no file")?;
    let bad = || format!("message indexes {indexes:?} name no message");
    let first = usize::try_from(indexes[0]).map_err(|_| bad())?;
    let mut m = file.messages().nth(first).ok_or_else(bad)?;
    for i in &indexes[1..] {
        let i = usize::try_from(*i).map_err(|_| bad())?;
        let child = m.child_messages().nth(i);
        m = child.ok_or_else(bad)?;
    }
    Ok(m)
}

/// Confluent's header: the schema id, the message indexes and the message's bytes.
pub fn header(bytes: &[u8]) -> Result<(u32, Vec<i64>, &[u8]), RecordError> {
    let short = || RecordError::Proto(format!("{} bytes: too short for Confluent's wire format", bytes.len()));
    match bytes.first() {
        Some(0) => {}
        Some(b) => return Err(RecordError::Proto(format!("magic byte {b}, expected 0 (Confluent's wire format)"))),
        None => return Err(short()),
    }
    let id = u32::from_be_bytes(bytes.get(1..5).ok_or_else(short)?.try_into().expect("4 bytes"));
    let mut rest = &bytes[5..];
    let n = zigzag(&mut rest).ok_or_else(short)?;
    let indexes = if n == 0 {
        vec![0]
    } else {
        if !(1..=64).contains(&n) {
            return Err(RecordError::Proto(format!("{n} message indexes; expected 1 to 64")));
        }
        (0..n).map(|_| zigzag(&mut rest).ok_or_else(short)).collect::<Result<Vec<_>, _>>()?
    };
    Ok((id, indexes, rest))
}

fn zigzag(b: &mut &[u8]) -> Option<i64> {
    let v = prost::encoding::decode_varint(b).ok()?;
    Some(((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// Confluent's header for schema `id` and message `indexes` (for the generator and
/// tests).
pub fn frame(id: u32, indexes: &[i64], message: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    let zz = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
    if indexes == [0] {
        out.push(0);
    } else {
        prost::encoding::encode_varint(zz(indexes.len() as i64), out);
        for i in indexes {
            prost::encoding::encode_varint(zz(*i), out);
        }
    }
    out.extend_from_slice(message);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"syntax = "proto3"; package shop;
        import "google/protobuf/timestamp.proto";
        message Order { int64 id = 1; google.protobuf.Timestamp at = 2; message Line { string sku = 1; } }
        message Refund { int64 id = 1; }"#;

    #[test]
    fn the_header_names_the_schema_and_the_message_by_index() {
        let pool = compile(SCHEMA).unwrap();
        for (indexes, name) in [(vec![0], "shop.Order"), (vec![1], "shop.Refund"), (vec![0, 0], "shop.Order.Line")] {
            let mut framed = Vec::new();
            frame(7, &indexes, b"\x08\x05", &mut framed);
            let (id, got, body) = header(&framed).unwrap();
            assert_eq!((id, &got, body), (7, &indexes, &b"\x08\x05"[..]));
            assert_eq!(message_at(&pool, &got).unwrap().full_name(), name);
        }
        assert_eq!(header(&[0, 0, 0, 0, 7, 0]).unwrap().1, vec![0], "the single byte 0 is [0]");
        assert!(message_at(&pool, &[5]).unwrap_err().contains("name no message"));
        assert!(header(&[1, 0, 0, 0, 7, 0]).unwrap_err().to_string().contains("magic byte 1"));
        assert!(header(&[0, 0, 0]).unwrap_err().to_string().contains("too short"));
        assert!(compile("message {").unwrap_err().contains("does not compile"));
    }
}
