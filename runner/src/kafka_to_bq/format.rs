//! The input format and destination parameters, checked as Google's template checks
//! them (`KafkaToBigQueryFlex.java`), with its messages quoted where it has one.
//!
//! Each message leads with the parameter it is about (so `--format json` can name it)
//! and quotes Google's own message where the template has one.
//!
//! Routing follows the template's code, not `writeMode` (which its pipeline never
//! reads): JSON, `AVRO_BINARY_ENCODING` and `AVRO_CONFLUENT_WIRE_FORMAT` with
//! `schemaFormat=SINGLE_SCHEMA_FILE` write to `outputTableSpec`;
//! `schemaFormat=SCHEMA_REGISTRY` writes to tables named after each record
//! (`outputProject:outputDataset.[bqTableNamePrefix-]namespace-Name`).

use flexrun_templates::ResolvedParams;

/// `messageFormat`, with the schema source it needs.
#[derive(Debug, Clone, PartialEq)]
pub enum InputFormat {
    /// One JSON object per message.
    Json,
    /// Avro datums with no header, decoded with the schema file `binaryAvroSchemaPath`.
    AvroBinary {
        /// Local path of the `.avsc` file.
        schema_path: String,
    },
    /// Confluent-framed Avro decoded with the schema file `confluentAvroSchemaPath`.
    AvroConfluentFile {
        /// Local path of the `.avsc` file.
        schema_path: String,
    },
    /// Confluent-framed Avro with writer schemas from a Schema Registry.
    AvroRegistry {
        /// `schemaRegistryConnectionUrl`.
        url: String,
    },
}

impl InputFormat {
    /// Whether this is one of the Avro formats.
    pub fn is_avro(&self) -> bool {
        !matches!(self, InputFormat::Json)
    }
}

/// Where `schemaFormat=SCHEMA_REGISTRY` writes: one table per record full name.
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicTables {
    /// `outputProject`.
    pub project: String,
    /// `outputDataset`.
    pub dataset: String,
    /// `bqTableNamePrefix`.
    pub prefix: String,
}

/// `createDisposition` / `writeDisposition` on the Avro paths (the JSON path always
/// uses CREATE_NEVER and WRITE_APPEND, as Google's does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dispositions {
    /// Create a missing table from the Avro schema.
    pub create_if_needed: bool,
    /// What to do with rows already in the table when a new job starts.
    pub write: WriteDisposition,
}

/// BigQuery's WriteDisposition, applied once, when a job starts for the first time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteDisposition {
    /// Keep existing rows.
    Append,
    /// Refuse to start if the table has rows.
    Empty,
    /// Remove existing rows first.
    Truncate,
}

/// The format, destination and dispositions of a kafka-to-bq job.
#[derive(Debug, Clone, PartialEq)]
pub struct FormatParams {
    /// How messages are read.
    pub format: InputFormat,
    /// Per-record tables (SCHEMA_REGISTRY), if so.
    pub dynamic: Option<DynamicTables>,
    /// Dispositions.
    pub dispositions: Dispositions,
}

fn avro_confluent(p: &ResolvedParams, errs: &mut Vec<String>) -> (InputFormat, Option<DynamicTables>) {
    match p.get("schemaFormat").unwrap_or("SINGLE_SCHEMA_FILE") {
        "SCHEMA_REGISTRY" => {
            let url = p.get("schemaRegistryConnectionUrl").unwrap_or_default().to_string();
            if url.is_empty() {
                errs.push("schemaRegistryConnectionUrl is required with schemaFormat=SCHEMA_REGISTRY, e.g. http://localhost:8081 (Google: \"Either Schema Registry Connection URL or Confluent Avro Schema Path must be provided for AVRO_CONFLUENT_WIRE_FORMAT.\")".into());
            }
            crate::avro::check_registry_auth(p, errs);
            let dataset = p.get("outputDataset").unwrap_or_default().to_string();
            if dataset.is_empty() {
                errs.push("outputDataset is required with schemaFormat=SCHEMA_REGISTRY (Google: \"An output BigQuery dataset is required. It will be used to create tables per schema.\")".into());
            }
            let project = p.get("outputProject").unwrap_or_default().to_string();
            if project.is_empty() {
                errs.push("outputProject is required with schemaFormat=SCHEMA_REGISTRY: the per-record tables are outputProject:outputDataset.<name>".into());
            }
            let prefix = p.get("bqTableNamePrefix").unwrap_or_default().to_string();
            (InputFormat::AvroRegistry { url }, Some(DynamicTables { project, dataset, prefix }))
        }
        _ => {
            let schema_path = crate::avro::schema_file_param(p, "confluentAvroSchemaPath", errs);
            if schema_path.is_empty() {
                errs.push("confluentAvroSchemaPath is required with schemaFormat=SINGLE_SCHEMA_FILE, a local .avsc file (Google: \"Either Schema Registry Connection URL or Confluent Avro Schema Path must be provided for AVRO_CONFLUENT_WIRE_FORMAT.\")".into());
            }
            if p.get("outputTableSpec").is_none() {
                errs.push("outputTableSpec is required with schemaFormat=SINGLE_SCHEMA_FILE, as project:dataset.table (Google: \"The outputTableSpec parameter is required when using the SINGLE_SCHEMA_FILE schema format.\")".into());
            }
            (InputFormat::AvroConfluentFile { schema_path }, None)
        }
    }
}

/// Read `messageFormat` and what goes with it; problems are pushed onto `errs`.
pub fn format_params(p: &ResolvedParams, errs: &mut Vec<String>) -> FormatParams {
    let (format, dynamic) = match p.get("messageFormat").unwrap_or("AVRO_CONFLUENT_WIRE_FORMAT") {
        "JSON" => {
            if p.get("outputTableSpec").is_none() {
                errs.push("outputTableSpec is required with messageFormat=JSON (project:dataset.table)".into());
            }
            (InputFormat::Json, None)
        }
        "AVRO_BINARY_ENCODING" => {
            let schema_path = crate::avro::schema_file_param(p, "binaryAvroSchemaPath", errs);
            if schema_path.is_empty() {
                errs.push("binaryAvroSchemaPath is required with messageFormat=AVRO_BINARY_ENCODING, a local .avsc file (Google: \"Binary Avro Schema Path cannot be empty for AVRO_BINARY_ENCODING.\")".into());
            }
            if p.get("outputTableSpec").is_none() {
                errs.push(
                    "outputTableSpec is required with messageFormat=AVRO_BINARY_ENCODING (project:dataset.table)"
                        .into(),
                );
            }
            (InputFormat::AvroBinary { schema_path }, None)
        }
        _ => avro_confluent(p, errs),
    };
    let json = !format.is_avro();
    let write = match p.get("writeDisposition").unwrap_or("WRITE_APPEND") {
        _ if json => WriteDisposition::Append,
        "WRITE_EMPTY" => WriteDisposition::Empty,
        "WRITE_TRUNCATE" => WriteDisposition::Truncate,
        _ => WriteDisposition::Append,
    };
    let create_if_needed = !json && p.get("createDisposition").unwrap_or("CREATE_IF_NEEDED") == "CREATE_IF_NEEDED";
    FormatParams { format, dynamic, dispositions: Dispositions { create_if_needed, write } }
}
