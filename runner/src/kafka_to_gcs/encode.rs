//! A window's records as file bytes: JSON lines (each message value verbatim, as
//! Google's JSON path writes them), or Avro container files of the decoded records,
//! one file per writer schema and shard (Google's Avro path writes one destination per
//! schema).

use super::config::OutputFormat;
use crate::avro::wire::AvroDecoder;
use std::collections::BTreeMap;

/// One record waiting in a window.
#[derive(Debug, Clone)]
pub struct Rec {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// The message value.
    pub value: Vec<u8>,
}

/// A message that could not be decoded: the job stops rather than drop it, as Google's
/// template without a dead-letter table does ("the pipeline will retry").
#[derive(Debug, thiserror::Error)]
#[error("partition {partition} offset {offset}: {reason}")]
pub struct Undecodable {
    /// Where.
    pub partition: i32,
    /// Where.
    pub offset: i64,
    /// Why.
    pub reason: String,
}

/// Where a file's records go beyond the window and shard: nothing for JSON; for Avro,
/// the writer schema's simple name (a sub-directory) and the MD5 of its JSON.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Destination {
    /// `Schema.getName()`.
    pub schema_name: String,
    /// Lower-case hex MD5 of the schema's compact JSON.
    pub md5: String,
}

/// The bytes of the files for `recs` (already in file order): one for JSON, one per
/// writer schema for Avro.
pub fn encode(format: &OutputFormat, recs: &[Rec]) -> Result<Vec<(Destination, Vec<u8>)>, Undecodable> {
    match format {
        OutputFormat::Json => {
            let mut out = Vec::with_capacity(recs.iter().map(|r| r.value.len() + 1).sum());
            for r in recs {
                out.extend_from_slice(&r.value);
                out.push(b'\n');
            }
            Ok(vec![(Destination::default(), out)])
        }
        OutputFormat::Avro(d) => by_schema(d, recs, avro_file),
        OutputFormat::Parquet(d) => by_schema(d, recs, parquet_file),
    }
}

type Decoded = (i32, i64, apache_avro::types::Value);

/// An Avro container file of `values`, Snappy-compressed (Beam's AvroIO default; the
/// template sets no codec).
fn avro_file(w: &crate::avro::WriterSchema, values: Vec<Decoded>) -> Result<Vec<u8>, Undecodable> {
    let mut writer = apache_avro::Writer::with_codec(&w.schema, Vec::new(), apache_avro::Codec::Snappy);
    for (partition, offset, v) in values {
        writer.append(v).map_err(|e| Undecodable {
            partition,
            offset,
            reason: format!("cannot write the record with its own schema: {e}"),
        })?;
    }
    writer.into_inner().map_err(|e| Undecodable { partition: -1, offset: -1, reason: e.to_string() })
}

/// A Parquet file of `values` ([`super::parquet`]).
fn parquet_file(w: &crate::avro::WriterSchema, values: Vec<Decoded>) -> Result<Vec<u8>, Undecodable> {
    let (partition, offset) = values.first().map_or((-1, -1), |(p, o, _)| (*p, *o));
    let records: Vec<apache_avro::types::Value> = values.into_iter().map(|(_, _, v)| v).collect();
    super::parquet::write(&w.schema, &records).map_err(|reason| Undecodable { partition, offset, reason })
}

/// Google's destination for a schema: its simple name, and the MD5 (commons-codec
/// `md5Hex`) of its JSON. Google hashes Java's `Schema.toString()`; this hashes
/// apache-avro's compact JSON of the same schema, which can order attributes
/// differently, so the hash (not the layout) may differ from Google's for one schema.
pub fn destination(schema: &apache_avro::Schema) -> Destination {
    use md5::{Digest, Md5};
    let json = serde_json::to_string(schema).unwrap_or_else(|_| schema.canonical_form());
    let md5 = Md5::digest(json.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let schema_name = match schema {
        apache_avro::Schema::Record(r) => r.name.name.clone(),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)),
    };
    Destination { schema_name, md5 }
}

/// Decode `recs`, group them by writer schema, and write each group with `file`.
fn by_schema(
    d: &AvroDecoder,
    recs: &[Rec],
    file: fn(&crate::avro::WriterSchema, Vec<Decoded>) -> Result<Vec<u8>, Undecodable>,
) -> Result<Vec<(Destination, Vec<u8>)>, Undecodable> {
    type Group = (std::sync::Arc<crate::avro::WriterSchema>, Vec<Decoded>);
    let mut by_schema: BTreeMap<Destination, Group> = BTreeMap::new();
    for r in recs {
        let (w, v) = d.decode(&r.value).map_err(|e| Undecodable {
            partition: r.partition,
            offset: r.offset,
            reason: e.to_string(),
        })?;
        by_schema.entry(destination(&w.schema)).or_insert_with(|| (w.clone(), Vec::new())).1.push((
            r.partition,
            r.offset,
            v,
        ));
    }
    let mut out = Vec::new();
    for (dest, (w, values)) in by_schema {
        out.push((dest, file(&w, values)?));
    }
    Ok(out)
}
