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

use crate::bigquery::layout::{Granularity, Partitioning, TableLayout};
use flexrun_templates::typed::kafka_to_bq::{
    CreateDisposition, MessageFormat, Name as BqName, Params as Bq, SchemaFormat, TablePartitioning,
    WriteDisposition as WriteParam,
};
use flexrun_templates::{Problems, ResolvedParams};

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
    /// Protobuf messages of one type from a compiled descriptor set (`messageFormat=PROTO`).
    Proto {
        /// `protoSchemaPath`: the descriptor set file.
        schema_path: String,
        /// `fullMessageName`.
        message: String,
    },
    /// Protobuf in Confluent's wire format, schemas from a Schema Registry
    /// (`PROTO_CONFLUENT_WIRE_FORMAT`).
    ProtoRegistry {
        /// `schemaRegistryConnectionUrl`.
        url: String,
    },
}

impl InputFormat {
    /// Whether messages are binary (Avro or Protobuf), not JSON text.
    pub fn is_binary(&self) -> bool {
        !matches!(self, InputFormat::Json)
    }

    /// Whether a missing table can be made from the job's schema (Avro, or Protobuf
    /// with a descriptor set): JSON and registry Protobuf write to an existing table.
    pub fn can_create_tables(&self) -> bool {
        !matches!(self, InputFormat::Json | InputFormat::ProtoRegistry { .. })
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
#[derive(Debug, Clone, PartialEq)]
pub struct Dispositions {
    /// Create a missing table from the Avro schema.
    pub create_if_needed: bool,
    /// What to do with rows already in the table when a new job starts.
    pub write: WriteDisposition,
    /// Partitioning and clustering of a table the job creates.
    pub layout: TableLayout,
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

fn avro_confluent(p: &ResolvedParams, errs: &mut Problems) -> (InputFormat, Option<DynamicTables>) {
    match Bq(p).schema_format() {
        SchemaFormat::SchemaRegistry => {
            let url = Bq(p).schema_registry_connection_url().unwrap_or_default().to_string();
            if url.is_empty() {
                errs.push("schemaRegistryConnectionUrl is required with schemaFormat=SCHEMA_REGISTRY, e.g. http://localhost:8081 (Google: \"Either Schema Registry Connection URL or Confluent Avro Schema Path must be provided for AVRO_CONFLUENT_WIRE_FORMAT.\")");
            }
            crate::avro::check_registry_auth(p, errs);
            let dataset = Bq(p).output_dataset().unwrap_or_default().to_string();
            if dataset.is_empty() {
                errs.push("outputDataset is required with schemaFormat=SCHEMA_REGISTRY (Google: \"An output BigQuery dataset is required. It will be used to create tables per schema.\")");
            }
            let project = Bq(p).output_project().unwrap_or_default().to_string();
            if project.is_empty() {
                errs.push("outputProject is required with schemaFormat=SCHEMA_REGISTRY: the per-record tables are outputProject:outputDataset.<name>");
            }
            let prefix = Bq(p).bq_table_name_prefix().unwrap_or_default().to_string();
            (InputFormat::AvroRegistry { url }, Some(DynamicTables { project, dataset, prefix }))
        }
        SchemaFormat::SingleSchemaFile => {
            let schema_path = crate::avro::schema_file_param(p, "confluentAvroSchemaPath", errs);
            if schema_path.is_empty() {
                errs.push("confluentAvroSchemaPath is required with schemaFormat=SINGLE_SCHEMA_FILE, a local .avsc file (Google: \"Either Schema Registry Connection URL or Confluent Avro Schema Path must be provided for AVRO_CONFLUENT_WIRE_FORMAT.\")");
            }
            if Bq(p).output_table_spec().is_none() {
                errs.push("outputTableSpec is required with schemaFormat=SINGLE_SCHEMA_FILE, as project:dataset.table (Google: \"The outputTableSpec parameter is required when using the SINGLE_SCHEMA_FILE schema format.\")");
            }
            (InputFormat::AvroConfluentFile { schema_path }, None)
        }
    }
}

/// `messageFormat=PROTO`: a descriptor set and a message name, checked now (exit 2).
fn proto_file(p: &ResolvedParams, errs: &mut Problems) -> (InputFormat, Option<DynamicTables>) {
    let schema_path = Bq(p).proto_schema_path().unwrap_or_default().to_string();
    let message = Bq(p).full_message_name().unwrap_or_default().to_string();
    if schema_path.is_empty() || message.is_empty() {
        errs.push("messageFormat=PROTO needs protoSchemaPath (a descriptor set: protoc --include_imports --descriptor_set_out=schema.pb) and fullMessageName (package.Message)");
    } else if schema_path.starts_with("gs://") {
        errs.push(format!(
            "protoSchemaPath={schema_path}: this command does not fetch gs:// files (a job run does, at start); give a local descriptor set file"
        ));
    } else if let Err(e) = crate::proto::ProtoDecoder::from_file(&schema_path, &message) {
        errs.push(format!("protoSchemaPath={schema_path}, fullMessageName={message}: {e}"));
    }
    if Bq(p).output_table_spec().is_none() {
        errs.push("outputTableSpec is required with messageFormat=PROTO (project:dataset.table)");
    }
    (InputFormat::Proto { schema_path, message }, None)
}

/// `messageFormat=PROTO_CONFLUENT_WIRE_FORMAT`: a registry, and one existing table.
fn proto_registry(p: &ResolvedParams, errs: &mut Problems) -> (InputFormat, Option<DynamicTables>) {
    let url = Bq(p).schema_registry_connection_url().unwrap_or_default().to_string();
    if url.is_empty() {
        errs.push("schemaRegistryConnectionUrl is required with messageFormat=PROTO_CONFLUENT_WIRE_FORMAT, e.g. http://localhost:8081");
    }
    crate::avro::check_registry_auth(p, errs);
    if Bq(p).output_table_spec().is_none() {
        errs.push("outputTableSpec is required with messageFormat=PROTO_CONFLUENT_WIRE_FORMAT: the table (which must exist) every message type is written to");
    }
    (InputFormat::ProtoRegistry { url }, None)
}

/// Read `messageFormat` and what goes with it; problems are pushed onto `errs`.
pub fn format_params(p: &ResolvedParams, errs: &mut Problems) -> FormatParams {
    let (format, dynamic) = match Bq(p).message_format() {
        MessageFormat::Json => {
            if Bq(p).output_table_spec().is_none() {
                errs.push("outputTableSpec is required with messageFormat=JSON (project:dataset.table)");
            }
            (InputFormat::Json, None)
        }
        MessageFormat::AvroBinaryEncoding => {
            let schema_path = crate::avro::schema_file_param(p, "binaryAvroSchemaPath", errs);
            if schema_path.is_empty() {
                errs.push("binaryAvroSchemaPath is required with messageFormat=AVRO_BINARY_ENCODING, a local .avsc file (Google: \"Binary Avro Schema Path cannot be empty for AVRO_BINARY_ENCODING.\")");
            }
            if Bq(p).output_table_spec().is_none() {
                errs.push(
                    "outputTableSpec is required with messageFormat=AVRO_BINARY_ENCODING (project:dataset.table)",
                );
            }
            (InputFormat::AvroBinary { schema_path }, None)
        }
        MessageFormat::Proto => proto_file(p, errs),
        MessageFormat::ProtoConfluentWireFormat => proto_registry(p, errs),
        MessageFormat::AvroConfluentWireFormat => avro_confluent(p, errs),
    };
    let json = !format.can_create_tables();
    let write = match Bq(p).write_disposition() {
        _ if json => WriteDisposition::Append,
        WriteParam::WriteEmpty => WriteDisposition::Empty,
        WriteParam::WriteTruncate => WriteDisposition::Truncate,
        WriteParam::WriteAppend => WriteDisposition::Append,
    };
    let create_if_needed = !json && Bq(p).create_disposition() == CreateDisposition::CreateIfNeeded;
    let layout = table_layout(p, errs);
    if !layout.is_default() && !create_if_needed {
        errs.push(format!("tablePartitioning and tableClusteringFields lay out a table flexrun creates, and this job creates none ({}): create the table partitioned and clustered yourself, or use an Avro messageFormat with createDisposition=CREATE_IF_NEEDED", if json { "messageFormat=JSON writes to an existing table" } else { "createDisposition=CREATE_NEVER" }));
    }
    FormatParams { format, dynamic, dispositions: Dispositions { create_if_needed, write, layout } }
}

/// `tablePartitioning`, `tablePartitionField`, `tablePartitionExpirationDays` and
/// `tableClusteringFields` (the columns are checked against the schema when the table
/// is created: [`TableLayout::check`]).
fn table_layout(p: &ResolvedParams, errs: &mut Problems) -> TableLayout {
    let field = Bq(p).table_partition_field().map(str::to_string);
    let expiration_days = match Bq(p).parsed::<f64>(BqName::TablePartitionExpirationDays, "a number of days above 0") {
        Ok(Some(d)) if d <= 0.0 => {
            errs.push(format!("tablePartitionExpirationDays={d}: expected a number of days above 0"));
            None
        }
        Ok(d) => d,
        Err(e) => {
            errs.push(e);
            None
        }
    };
    let granularity = match Bq(p).table_partitioning() {
        TablePartitioning::None => None,
        TablePartitioning::Hour => Some(Granularity::Hour),
        TablePartitioning::Day => Some(Granularity::Day),
        TablePartitioning::Month => Some(Granularity::Month),
        TablePartitioning::Year => Some(Granularity::Year),
    };
    if granularity.is_none() && (field.is_some() || expiration_days.is_some()) {
        errs.push(
            "tablePartitionField and tablePartitionExpirationDays need tablePartitioning (HOUR, DAY, MONTH or YEAR)",
        );
    }
    let partitioning = granularity.map(|granularity| Partitioning { granularity, field, expiration_days });
    let clustering = Bq(p)
        .table_clustering_fields()
        .map(|v| v.split(['|', ',']).map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
        .unwrap_or_default();
    TableLayout { partitioning, clustering, ..Default::default() }
}
