//! Avro input for kafka-to-bq, and Avro output for the generator.
//!
//! Layout (one role per file):
//! - [`wire`]: the two framings Google's template reads (Confluent wire format and
//!   plain binary encoding) and the decoder that holds the writer schemas.
//! - [`table`]: Avro schema → BigQuery table schema (what `CREATE_IF_NEEDED` creates),
//!   and the dynamic table name Google derives from a record's full name.
//! - [`row`]: one decoded Avro value → protobuf row bytes for a table schema;
//!   [`fast`]: the same straight from Avro binary for common schemas (no `Value`),
//!   proven identical by a property test.
//! - [`registry`]: a Confluent Schema Registry REST client (ids → schemas).
//! - [`from_json`]: a JSON document → an Avro value of a schema (the generator's
//!   `outputType=AVRO`).
//!
//! Decoding uses the `apache-avro` crate (the Apache project's own Rust
//! implementation); everything here is pure except [`registry`].

pub mod fast;
pub mod from_json;
pub mod registry;
pub mod row;
pub mod table;
pub mod wire;

use apache_avro::schema::{Name, Schema};
use flexrun_templates::typed::kafka_source::{Params as Src, SchemaRegistryAuthenticationMode as RegistryAuth};
use std::collections::HashMap;

/// A parsed writer schema with its named types, ready to decode and map with.
#[derive(Debug, Clone)]
pub struct WriterSchema {
    /// The schema.
    pub schema: Schema,
    /// Every named type inside it, for `Ref`s.
    pub names: HashMap<Name, Schema>,
}

/// An Avro schema that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct AvroSchemaError(pub String);

impl WriterSchema {
    /// Parse a schema from its JSON text.
    pub fn parse(text: &str) -> Result<WriterSchema, AvroSchemaError> {
        let schema = Schema::parse_str(text).map_err(|e| AvroSchemaError(format!("not a valid Avro schema: {e}")))?;
        WriterSchema::new(schema)
    }

    /// Wrap a parsed schema, collecting its named types.
    pub fn new(schema: Schema) -> Result<WriterSchema, AvroSchemaError> {
        let resolved = apache_avro::schema::ResolvedSchema::try_from(&schema)
            .map_err(|e| AvroSchemaError(format!("the Avro schema does not resolve: {e}")))?;
        let names = resolved.get_names().iter().map(|(n, s)| (n.clone(), (*s).clone())).collect();
        Ok(WriterSchema { schema, names })
    }

    /// Follow a `Ref` to the schema it names.
    pub fn resolve<'a>(&'a self, s: &'a Schema) -> &'a Schema {
        match s {
            Schema::Ref { name } => self.names.get(name).unwrap_or(s),
            _ => s,
        }
    }

    /// The record in field `name` of the top-level record (a union with null unwrapped),
    /// as a schema of its own: Debezium's `after` in its `Envelope`.
    pub fn field_record(&self, name: &str) -> Option<WriterSchema> {
        let Schema::Record(r) = &self.schema else { return None };
        let f = r.fields.iter().find(|f| f.name == name)?;
        let inner = match self.resolve(&f.schema) {
            Schema::Union(u) => {
                u.variants().iter().map(|v| self.resolve(v)).find(|v| matches!(v, Schema::Record(_)))?
            }
            s => s,
        };
        matches!(inner, Schema::Record(_)).then(|| WriterSchema { schema: inner.clone(), names: self.names.clone() })
    }

    /// The top-level record's full name, `namespace.name` (or `name`), if it is a record.
    pub fn full_name(&self) -> Option<String> {
        self.record_full_name().map(|(ns, n)| wire::full_name(ns.as_deref(), &n))
    }

    /// The top-level record's namespace and name, if the schema is a record.
    pub fn record_full_name(&self) -> Option<(Option<String>, String)> {
        match &self.schema {
            Schema::Record(r) => Some((r.name.namespace.clone(), r.name.name.clone())),
            _ => None,
        }
    }
}

/// `schemaRegistryAuthenticationMode`: NONE only (both templates). A mode that is not
/// built is refused, never accepted and then ignored (which would send the registry
/// unauthenticated requests the user did not ask for).
pub fn check_registry_auth(p: &flexrun_templates::ResolvedParams, errs: &mut flexrun_templates::Problems) {
    match Src(p).schema_registry_authentication_mode() {
        RegistryAuth::None => {}
        m @ (RegistryAuth::Tls | RegistryAuth::Oauth | RegistryAuth::ApplicationDefaultCredentials) => errs.push(format!(
            "schemaRegistryAuthenticationMode={m} is not supported by flexrun; only NONE (a registry without authentication) is"
        )),
    }
}

/// A schema file parameter: a local path whose file is a valid Avro schema (checked now,
/// so a bad file is a bad parameter, exit 2, rather than a failure after connecting).
pub fn schema_file_param(
    p: &flexrun_templates::ResolvedParams,
    name: &str,
    errs: &mut flexrun_templates::Problems,
) -> String {
    let v = p.get(name).unwrap_or_default().to_string();
    if v.starts_with("gs://") {
        errs.push(format!("{name}={v}: this command does not fetch gs:// files (a job run does, at start); give a local .avsc file path"));
    } else if !v.is_empty() {
        match std::fs::read_to_string(&v) {
            Err(e) => errs.push(format!("{name}={v}: cannot read the schema file: {e}")),
            Ok(text) => {
                if let Err(e) = WriterSchema::parse(&text).and_then(|w| table::table_schema(&w, false).map(|_| ())) {
                    errs.push(format!("{name}={v}: {e}"));
                }
            }
        }
    }
    v
}
