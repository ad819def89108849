//! A kafka-to-bq job's settings, from validated template parameters and run flags.
//!
//! [`KafkaToBqConfig::from_params`] applies the rules Google's template applies at
//! launch (and flexrun's own limits), so every problem is reported before anything
//! connects.

use super::format::{format_params, Dispositions, DynamicTables, InputFormat};
use super::topics::{TopicRoutes, Topics};
use crate::bigquery::evolution::SchemaUpdates;
use crate::bigquery::TableRef;
use crate::kafka::SourceSettings;
use crate::kafka_to_bq::map::metadata::{parse_columns, MetaColumn};
use crate::progress::ProgressConfig;
use crate::scaling::Capacity;
use crate::udf::Udf;
use flexrun_autoscaler::ScalingConfig;
use flexrun_templates::typed::kafka_to_bq::{self as bq, Name as BqName, Params as Bq};
use flexrun_templates::{ParamErrors, Problems, ResolvedParams};
use std::sync::Arc;
use std::time::Duration;

/// How rows reach BigQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// COMMITTED streams with offsets and a write-ahead offset log.
    ExactlyOnce,
    /// The `_default` stream; a crash can replay (duplicate) up to one batch per shard.
    AtLeastOnce,
}

impl Delivery {
    /// The delivery a kafka-to-bq job's parameters ask for: the one rule `run`,
    /// `simulate` and `export` share. At-least-once when `useStorageWriteApiAtLeastOnce`
    /// is true (or, not given, with the `streaming_mode_at_least_once` experiment), and
    /// always for CDC (`cdcPrimaryKey`), whose writes BigQuery takes only on the
    /// `_default` stream.
    pub fn of(p: &ResolvedParams, at_least_once_experiment: bool) -> Delivery {
        let defined = |n: BqName| Bq(p).defines(n);
        let asked = if defined(BqName::UseStorageWriteApiAtLeastOnce)
            && Bq(p).was_given(BqName::UseStorageWriteApiAtLeastOnce)
        {
            Bq(p).use_storage_write_api_at_least_once()
        } else {
            at_least_once_experiment
        };
        let cdc = defined(BqName::CdcPrimaryKey) && Bq(p).cdc_primary_key().is_some_and(|k| !k.trim().is_empty());
        if asked || cdc {
            Delivery::AtLeastOnce
        } else {
            Delivery::ExactlyOnce
        }
    }

    /// The estimator's mode for this delivery.
    pub fn mode(self) -> flexrun_estimator::Mode {
        match self {
            Delivery::ExactlyOnce => flexrun_estimator::Mode::ExactlyOnce,
            Delivery::AtLeastOnce => flexrun_estimator::Mode::AtLeastOnce,
        }
    }

    /// The name used in checkpoints and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::ExactlyOnce => "exactly-once",
            Delivery::AtLeastOnce => "at-least-once",
        }
    }
}

/// Where rows go.
#[derive(Debug, Clone, PartialEq)]
pub enum SinkKind {
    /// BigQuery (emulator or Google).
    BigQuery,
    /// Map and encode every row exactly as for BigQuery, then only count it
    /// (benchmarks of the runner itself). Needs a schema file.
    Stats {
        /// BigQuery JSON schema file.
        schema_file: String,
    },
}

/// Everything a kafka-to-bq run needs.
#[derive(Debug, Clone)]
pub struct KafkaToBqConfig {
    /// The job's name (checkpoints live under it).
    pub job_name: String,
    /// Kafka source (with several topics, `source.topic` is the topic part as given).
    pub source: SourceSettings,
    /// The topics the job reads (several: one pipeline each, [`crate::kafka_to_bq::fan_out`]).
    pub topics: Topics,
    /// Each topic's table and dead-letter table.
    pub routes: TopicRoutes,
    /// Destination table (for dynamic tables, named when the job starts).
    pub table: TableRef,
    /// How messages are read (`messageFormat` and its schema source).
    pub format: InputFormat,
    /// Per-record tables (`schemaFormat=SCHEMA_REGISTRY`), if so.
    pub dynamic: Option<DynamicTables>,
    /// Create and write dispositions (Avro paths).
    pub dispositions: Dispositions,
    /// `persistKafkaKey`: the Kafka key goes to the `_key` BYTES column.
    pub persist_key: bool,
    /// `kafkaMetadataColumns`: the record's metadata written to columns.
    pub metadata: Vec<MetaColumn>,
    /// `schemaUpdateOptions`: the changes the job may make to its table's schema.
    pub schema_updates: SchemaUpdates,
    /// `cdcPrimaryKey` and `cdcChangeTypeHeader`: records are changes by key (CDC).
    pub cdc: Option<crate::kafka_to_bq::map::cdc::CdcConfig>,
    /// The JavaScript UDF (JSON path), loaded and checked at launch.
    pub udf: Option<Arc<Udf>>,
    /// Dead-letter table, if any.
    pub dlq: Option<TableRef>,
    /// Without a dead-letter table: stop at a bad record, or log and drop it.
    pub bad_records: BadRecordPolicy,
    /// Delivery guarantee.
    pub delivery: Delivery,
    /// Requested write streams (0 = automatic).
    pub streams: u32,
    /// The longest a batch is held open.
    pub triggering_frequency: Duration,
    /// Commit processed offsets to the consumer group.
    pub commit_offsets: bool,
    /// The run flags (batching limits, sink, pool, progress), as given.
    pub run: RunFlags,
    /// For one topic's pipeline in a job of several, the job's name (None: the job itself).
    pub parent: Option<String>,
    /// For one topic's pipeline in a job of several, the job's workers it runs on and
    /// follows (None: the pipeline autoscales its own).
    pub shared: Option<Arc<crate::scaling::SharedWorkers>>,
}

/// What a record that cannot be written leads to when no dead-letter table is
/// configured (`badRecordPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BadRecordPolicy {
    /// Stop the job before the batch commits, naming the record (flexrun's default:
    /// nothing is lost, and the fix is to add a dead-letter table or fix the data).
    #[default]
    Fail,
    /// Log the record and its error, count it (`bad_records_dropped`) and go on, as
    /// Google's template does without `outputDeadletterTable` (its `ThrowErrorFn`
    /// logs each failed element; nothing writes it anywhere).
    LogAndDrop,
}

/// Why asynchronous progress tracking and exactly-once do not mix.
pub const ASYNC_PROGRESS_WITH_EXACTLY_ONCE: &str = "--async-progress-tracking persists progress off the critical path, once per --progress-checkpoint-interval, so after a crash up to one interval of data is replayed: that is at-least-once delivery. It cannot be combined with exactly-once; set useStorageWriteApiAtLeastOnce=true (or --additional-experiments=streaming_mode_at_least_once), or drop --async-progress-tracking";

/// Shards used when numStorageWriteApiStreams is 0: one per partition, at most this many.
pub const AUTO_MAX_SHARDS: usize = 8;

/// Load the UDF the parameters name (JSON path only, as in Google's template).
fn load_udf(p: &ResolvedParams, avro: bool, errs: &mut Problems) -> Option<Arc<Udf>> {
    let path = Bq(p).javascript_text_transform_gcs_path().filter(|s| !s.is_empty());
    let name = Bq(p).javascript_text_transform_function_name().filter(|s| !s.is_empty());
    let (path, name) = match (path, name) {
        (None, None) => return None,
        (Some(path), Some(name)) => (path, name),
        (Some(_), None) => {
            errs.push(
                "javascriptTextTransformGcsPath needs javascriptTextTransformFunctionName (the function to call)",
            );
            return None;
        }
        (None, Some(_)) => {
            errs.push("javascriptTextTransformFunctionName needs javascriptTextTransformGcsPath (a local .js file)");
            return None;
        }
    };
    if avro {
        tracing::warn!("JavaScript UDF parameters are set while using Avro message format. UDFs are supported for JSON format only. No UDF transformation will be applied.");
        return None;
    }
    if path.starts_with("gs://") {
        errs.push(format!(
            "javascriptTextTransformGcsPath={path}: this command does not fetch gs:// files (a job run does, at start); give a local .js file"
        ));
        return None;
    }
    let minutes: u64 = match Bq(p).javascript_text_transform_reload_interval_minutes().parse() {
        Ok(m) => m,
        Err(_) => {
            errs.push("javascriptTextTransformReloadIntervalMinutes: expected a whole number of minutes");
            return None;
        }
    };
    let reload = (minutes > 0).then(|| Duration::from_secs(minutes * 60));
    Udf::new(path, name, reload).map(Arc::new).map_err(|e| errs.push(e.to_string())).ok()
}

/// `numStorageWriteApiStreams` (0: Beam's dynamic sharding), read and checked once for
/// the live job and `simulate` alike.
pub fn storage_write_streams(p: &ResolvedParams) -> Result<u32, String> {
    Ok(Bq(p)
        .parsed(BqName::NumStorageWriteApiStreams, "a whole number of streams (0: dynamic)")
        .map_err(|e| e.to_string())?
        .unwrap_or(0))
}

/// `storageWriteApiTriggeringFrequencySec`: seconds above 0 and at most 3600, read and
/// checked once for the live job and `simulate` alike.
pub fn triggering_frequency_s(p: &ResolvedParams) -> Result<f64, String> {
    let expected = "a number of seconds above 0 and at most 3600";
    let freq: f64 = Bq(p)
        .parsed(BqName::StorageWriteApiTriggeringFrequencySec, expected)
        .map_err(|e| e.to_string())?
        .unwrap_or(5.0);
    if !(freq > 0.0 && freq <= 3600.0) {
        return Err(format!("storageWriteApiTriggeringFrequencySec={freq}: expected {expected}"));
    }
    Ok(freq)
}

/// The run flags that are not template parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFlags {
    /// `--job-name`.
    pub job_name: String,
    /// Forced at-least-once (the `streaming_mode_at_least_once` experiment).
    pub at_least_once_experiment: bool,
    /// `--max-row-bytes`.
    pub max_row_bytes: usize,
    /// `--batch-bytes` (capped by the memory budget, [`crate::kafka::budget`]).
    pub batch_bytes: usize,
    /// `--memory-budget`.
    pub memory_budget: crate::kafka::budget::MemoryBudget,
    /// `--append-request-bytes`.
    pub append_request_bytes: usize,
    /// `--batch-rows`.
    pub batch_rows: usize,
    /// `--idle-timeout`.
    pub idle_timeout: Option<Duration>,
    /// `--stop-when-caught-up`.
    pub stop_when_caught_up: bool,
    /// `--sink`.
    pub sink: SinkKind,
    /// Worker pool and autoscaling flags.
    pub pool: ScalingConfig,
    /// `--worker-capacity`: emulate workers of this capacity.
    pub worker_capacity: Option<Capacity>,
    /// Progress flags.
    pub progress: ProgressConfig,
}

/// The CDC parameters, checked: BigQuery takes CDC writes only on the `_default`
/// stream, so they cannot go with `useStorageWriteApiAtLeastOnce=false` given
/// explicitly, and per-record tables would need a primary key per record type.
fn cdc_params(
    p: &ResolvedParams,
    fp: &super::format::FormatParams,
    errs: &mut Problems,
) -> Option<crate::kafka_to_bq::map::cdc::CdcConfig> {
    let cdc = crate::kafka_to_bq::map::cdc::parse(Bq(p).cdc_primary_key(), Bq(p).cdc_change_type_header());
    if Bq(p).cdc_sequence_field().is_some() && !matches!(cdc, Ok(Some(_))) {
        errs.push("cdcSequenceField needs cdcPrimaryKey (CDC is on only with a primary key)");
    }
    if Bq(p).cdc_change_type_field().is_some() && !matches!(cdc, Ok(Some(_))) {
        errs.push("cdcChangeTypeField needs cdcPrimaryKey (CDC is on only with a primary key)");
    }
    if Bq(p).cdc_change_type_field().is_some() && Bq(p).cdc_change_type_header().is_some() {
        errs.push("cdcChangeTypeField and cdcChangeTypeHeader both name where the change type is; give one");
    }
    if Bq(p).cdc_key_schema_path().is_some() && !matches!(cdc, Ok(Some(_))) {
        errs.push("cdcKeySchemaPath needs cdcPrimaryKey (CDC is on only with a primary key)");
    }
    let key_schema = cdc_key_schema(p, fp, errs);
    let format = cdc_format(p, matches!(cdc, Ok(Some(_))), errs);
    let cdc = cdc
        .map_err(|e| errs.push(e))
        .ok()??
        .with_sequence_field(Bq(p).cdc_sequence_field())
        .with_change_type_field(Bq(p).cdc_change_type_field())
        .with_key_schema(key_schema)
        .with_format(format);
    if Bq(p).was_given(BqName::UseStorageWriteApiAtLeastOnce) && !Bq(p).use_storage_write_api_at_least_once() {
        errs.push("cdcPrimaryKey: BigQuery takes CDC writes only on the _default stream (\"You must use the Storage Write API in the default stream\"), and useStorageWriteApiAtLeastOnce=false asks for COMMITTED streams; drop it. Each key's final state is still exact after a crash");
    }
    if fp.dynamic.is_some() && cdc.format == crate::kafka_to_bq::map::cdc::CdcFormat::Flat {
        errs.push("cdcPrimaryKey: not built for schemaFormat=SCHEMA_REGISTRY per-record tables with flat rows; use one table (outputTableSpec), or cdcFormat=DEBEZIUM (each table's envelope is a record type of its own)");
    }
    Some(cdc)
}

/// `cdcFormat`: DEBEZIUM reads the change type and the order from the envelope, so the
/// flat format's parameters for them cannot go with it.
fn cdc_format(p: &ResolvedParams, cdc_on: bool, errs: &mut Problems) -> crate::kafka_to_bq::map::cdc::CdcFormat {
    use crate::kafka_to_bq::map::cdc::CdcFormat;
    let format = match Bq(p).cdc_format() {
        None | Some(bq::CdcFormat::Flat) => CdcFormat::Flat,
        Some(bq::CdcFormat::Debezium) => CdcFormat::Debezium,
    };
    if format == CdcFormat::Debezium {
        if Bq(p).javascript_text_transform_gcs_path().is_some_and(|s| !s.is_empty()) {
            errs.push("javascriptTextTransformGcsPath cannot go with cdcFormat=DEBEZIUM: the envelope is read as Debezium writes it; change the rows with a BigQuery view instead");
        }
        if !cdc_on {
            errs.push("cdcFormat=DEBEZIUM needs cdcPrimaryKey: the table's primary key columns, which each event's after (or before, for a delete) carries");
        }
        for flat in ["cdcChangeTypeHeader", "cdcChangeTypeField", "cdcSequenceField", "cdcKeySchemaPath"] {
            if p.get(flat).is_some() {
                errs.push(format!("{flat} cannot go with cdcFormat=DEBEZIUM: the envelope's op is the change type, its source block's log position the order, and the delete event (not the tombstone after it) names the row"));
            }
        }
    }
    format
}

/// CDC without `cdcSequenceField` orders a key's changes by Kafka offset, which orders
/// only the records of one partition of one topic. Two topics into one CDC table would
/// compare offsets of different logs, and a newer change could lose to an older one
/// without a word, so that is refused; with `cdcSequenceField` the order is the
/// records' own and several topics may share a table.
fn check_cdc_inputs(
    cdc: &crate::kafka_to_bq::map::cdc::CdcConfig,
    topics: &Topics,
    routes: &TopicRoutes,
    errs: &mut Problems,
) {
    if !cdc.orders_by_offset() {
        return;
    }
    if let Some((a, b)) = routes.shared_table(topics) {
        errs.push(format!(
            "cdcPrimaryKey without cdcSequenceField: {a} and {b} would write to one CDC table, and their changes would be ordered by Kafka offsets of different logs, so a newer change could lose to an older one. Set cdcSequenceField to a column that orders each key's changes across topics, or give each topic its own table ({{topic}} in outputTableSpec, or topicTableMap)"
        ));
    }
}

/// `cdcKeySchemaPath`: the .avsc a tombstone's key is read with, in the job's framing
/// (Avro paths with a schema file only; a JSON job reads keys as JSON).
fn cdc_key_schema(
    p: &ResolvedParams,
    fp: &super::format::FormatParams,
    errs: &mut Problems,
) -> Option<crate::kafka_to_bq::map::cdc::KeySchema> {
    use crate::avro::wire::{AvroDecoder, Framing};
    let path = Bq(p).cdc_key_schema_path()?;
    let framing = match &fp.format {
        InputFormat::AvroBinary { .. } => Framing::Binary,
        InputFormat::AvroConfluentFile { .. } => Framing::Confluent,
        _ => {
            errs.push("cdcKeySchemaPath is for the Avro paths with a schema file (AVRO_BINARY_ENCODING, or AVRO_CONFLUENT_WIRE_FORMAT with SINGLE_SCHEMA_FILE); a JSON job reads a tombstone's key as JSON");
            return None;
        }
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| errs.push(format!("cdcKeySchemaPath={path}: cannot read the schema file: {e}")))
        .ok()?;
    let w =
        crate::avro::WriterSchema::parse(&text).map_err(|e| errs.push(format!("cdcKeySchemaPath={path}: {e}"))).ok()?;
    let decoder = std::sync::Arc::new(AvroDecoder::with_file(framing, w));
    Some(crate::kafka_to_bq::map::cdc::KeySchema { path: path.to_string(), decoder })
}

/// `cdcMaxStaleness` as BigQuery's interval text.
fn cdc_staleness(p: &ResolvedParams, errs: &mut Problems) -> Option<String> {
    let v = Bq(p).cdc_max_staleness()?;
    match flexrun_estimator::parse_duration(v) {
        Ok(d) if d.as_secs() > 0 => Some(crate::bigquery::layout::staleness_interval(d)),
        Ok(_) => {
            errs.push(format!("cdcMaxStaleness={v}: expected a duration of a second or more (15m, 1h)"));
            None
        }
        Err(e) => {
            errs.push(format!("cdcMaxStaleness={v}: {e}"));
            None
        }
    }
}

/// With a schema file, the table a job would create is known at launch: check the
/// partitioning and clustering columns against it now, so a wrong column exits 2.
/// (With a Schema Registry the check runs when each table is created.)
fn check_layout(fp: &super::format::FormatParams, persist_key: bool, meta: &[MetaColumn], errs: &mut Problems) {
    let path = match &fp.format {
        InputFormat::AvroBinary { schema_path } | InputFormat::AvroConfluentFile { schema_path } => schema_path,
        _ => return,
    };
    if fp.dispositions.layout.is_default() || path.is_empty() {
        return;
    }
    let schema = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| crate::avro::WriterSchema::parse(&text).ok())
        .and_then(|w| crate::avro::table::table_schema(&w, persist_key).ok())
        .and_then(|s| crate::kafka_to_bq::map::metadata::with_columns(&s, meta).ok());
    // A file that does not read or parse is reported by the schema file's own check.
    if let Some(schema) = schema {
        if let Err(why) = fp.dispositions.layout.check(&schema) {
            errs.push(why);
        }
    }
}

impl KafkaToBqConfig {
    /// Build and check the configuration; errors name the parameter and the fix.
    pub fn from_params(p: &ResolvedParams, flags: RunFlags) -> Result<KafkaToBqConfig, ParamErrors> {
        let mut errs = Problems::default();
        let fp = format_params(p, &mut errs);
        let table = match (Bq(p).output_table_spec(), &fp.dynamic) {
            // The per-record table is named at start, from the registry's schema.
            (_, Some(d)) => {
                Some(TableRef { project: d.project.clone(), dataset: d.dataset.clone(), table: String::new() })
            }
            (Some(t), None) => TableRef::parse(t).map_err(|e| errs.push(format!("outputTableSpec: {e}"))).ok(),
            (None, None) => None,
        };
        let dlq = match Bq(p).output_deadletter_table() {
            Some(t) => TableRef::parse(t).map_err(|e| errs.push(format!("outputDeadletterTable: {e}"))).ok(),
            None => None,
        };
        if Bq(p).use_big_query_dlq() && Bq(p).output_deadletter_table().is_none() {
            errs.push("useBigQueryDLQ=true requires outputDeadletterTable (project:dataset.table)");
        }
        let bad_records = match Bq(p).bad_record_policy() {
            bq::BadRecordPolicy::Fail => BadRecordPolicy::Fail,
            bq::BadRecordPolicy::LogAndDrop => BadRecordPolicy::LogAndDrop,
        };
        if bad_records == BadRecordPolicy::LogAndDrop && dlq.is_some() {
            errs.push("badRecordPolicy=LOG_AND_DROP is for jobs without a dead-letter table, and outputDeadletterTable is set: bad records go to that table. Drop one of the two");
        }
        let source = crate::kafka::params::read_source(p, &flags.job_name, &mut errs);
        let streams = storage_write_streams(p).unwrap_or_else(|e| {
            errs.push(e);
            0
        });
        let freq = triggering_frequency_s(p).unwrap_or_else(|e| {
            errs.push(e);
            5.0
        });
        let delivery = Delivery::of(p, flags.at_least_once_experiment);
        if flags.progress.async_progress && delivery == Delivery::ExactlyOnce {
            errs.push(ASYNC_PROGRESS_WITH_EXACTLY_ONCE);
        }
        let udf = load_udf(p, fp.format.is_binary(), &mut errs);
        let metadata = parse_columns(Bq(p).kafka_metadata_columns().unwrap_or_default()).unwrap_or_else(|e| {
            errs.push(e);
            Vec::new()
        });
        check_layout(&fp, Bq(p).persist_kafka_key(), &metadata, &mut errs);
        let cdc = cdc_params(p, &fp, &mut errs);
        let schema_updates = SchemaUpdates::parse(Bq(p).schema_update_options().unwrap_or_default())
            .map_err(|e| errs.push(e))
            .unwrap_or_default();
        let mut fp = fp;
        if let (Some(c), true) = (&cdc, fp.dispositions.create_if_needed) {
            fp.dispositions.layout.primary_key = c.primary_key.clone();
            fp.dispositions.layout.max_staleness = cdc_staleness(p, &mut errs);
        } else if Bq(p).cdc_max_staleness().is_some() {
            errs.push("cdcMaxStaleness sets maxStaleness on a CDC table flexrun creates (cdcPrimaryKey with an Avro messageFormat and createDisposition=CREATE_IF_NEEDED); on an existing table use ALTER TABLE ... SET OPTIONS (max_staleness = INTERVAL ...)");
        }
        let topics = source.as_ref().and_then(|s| Topics::parse(&s.topic).map_err(|e| errs.push(e)).ok());
        let routes = table.as_ref().map(|t| {
            TopicRoutes::parse(t.clone(), dlq.clone(), Bq(p).topic_table_map().unwrap_or_default())
                .map_err(|e| errs.push(e))
                .ok()
        });
        if let (Some(c), Some(t), Some(Some(r))) = (&cdc, &topics, &routes) {
            check_cdc_inputs(c, t, r, &mut errs);
        }
        errs.into_result()?;
        let (topics, routes) = (topics.expect("checked"), routes.flatten().expect("checked"));
        // One topic: its table and dead-letter table are known now ({topic} filled in).
        let (table, dlq) = match &topics {
            Topics::One(t) if fp.dynamic.is_none() => routes.route(t),
            _ => (table.expect("checked"), dlq),
        };
        Ok(KafkaToBqConfig {
            job_name: flags.job_name.clone(),
            source: source.expect("checked"),
            topics,
            routes,
            table,
            format: fp.format,
            dynamic: fp.dynamic,
            dispositions: fp.dispositions,
            persist_key: Bq(p).persist_kafka_key(),
            metadata,
            schema_updates,
            udf,
            dlq,
            bad_records,
            delivery,
            cdc,
            streams,
            triggering_frequency: Duration::from_secs_f64(freq),
            commit_offsets: Bq(p).enable_commit_offsets(),
            run: flags,
            parent: None,
            shared: None,
        })
    }

    /// The configuration of the pipeline that reads `topic`, one of several: its own job
    /// name (`<job>.<topic>`, so its own checkpoint and logs), table and dead-letter table.
    pub fn for_topic(&self, topic: &str) -> KafkaToBqConfig {
        let mut c = self.clone();
        let (table, dlq) = self.routes.route(topic);
        if self.dynamic.is_none() {
            c.table = table;
        }
        c.dlq = dlq;
        c.job_name = format!("{}.{topic}", self.job_name);
        c.parent = Some(self.job_name.clone());
        c.run.job_name = c.job_name.clone();
        c.source.topic = topic.to_string();
        c.topics = Topics::One(topic.to_string());
        c
    }

    /// The number of shards (write streams) for a topic with `partitions` partitions.
    pub fn shard_count(&self, partitions: usize) -> usize {
        let want = if self.streams == 0 { AUTO_MAX_SHARDS } else { self.streams as usize };
        want.min(partitions).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexrun_templates::{find, parse_parameter_list, validate};

    fn flags() -> RunFlags {
        RunFlags {
            job_name: "j".into(),
            at_least_once_experiment: false,
            max_row_bytes: 100,
            batch_bytes: 1,
            memory_budget: Default::default(),
            append_request_bytes: 10_000_000,
            batch_rows: 1,
            idle_timeout: None,
            stop_when_caught_up: false,
            sink: SinkKind::BigQuery,
            pool: ScalingConfig::default(),
            worker_capacity: None,
            progress: ProgressConfig::default(),
        }
    }

    fn cfg(s: &str) -> Result<KafkaToBqConfig, ParamErrors> {
        let p = validate(find("kafka-to-bq").unwrap(), &parse_parameter_list(s).unwrap()).unwrap();
        KafkaToBqConfig::from_params(&p, flags())
    }

    const OK: &str =
        "readBootstrapServerAndTopic=h:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE";

    #[test]
    fn a_good_config_resolves() {
        let c = cfg(OK).unwrap();
        assert_eq!(c.delivery, Delivery::ExactlyOnce);
        assert_eq!(c.source.topic, "t");
        assert_eq!(c.triggering_frequency, Duration::from_secs(5));
        assert_eq!(c.shard_count(3), 3);
        assert_eq!(c.shard_count(100), AUTO_MAX_SHARDS);
        assert!(!c.source.start_earliest);
        let c = cfg(&format!("{OK},useStorageWriteApiAtLeastOnce=true,numStorageWriteApiStreams=2")).unwrap();
        assert_eq!(c.delivery, Delivery::AtLeastOnce);
        assert_eq!(c.shard_count(8), 2);
    }

    /// Issue 49 item 3: CDC ordered by offset cannot take two topics into one table.
    #[test]
    fn cdc_by_offset_refuses_two_topics_into_one_table() {
        let base = "messageFormat=JSON,kafkaReadAuthenticationMode=NONE,cdcPrimaryKey=id";
        for (topics, table, map) in [
            ("a|b", "p:d.t", ""),
            ("/a.*/", "p:d.t", ""),
            ("a|b", "p:d.{topic}", ",topicTableMap=a:shared|b:shared"),
            ("a|b", "p:d.{topic}", ",topicTableMap=b:a"),
        ] {
            let p = format!("readBootstrapServerAndTopic=h:1;{topics},outputTableSpec={table},{base}{map}");
            let e = cfg(&p).unwrap_err();
            assert!(e.0.iter().any(|v| v.to_string().contains("would write to one CDC table")), "{p}: {e:?}");
            assert!(cfg(&format!("{p},cdcSequenceField=version")).is_ok(), "{p}: a sequence field orders them");
        }
        for ok in [
            "readBootstrapServerAndTopic=h:1;a|b,outputTableSpec=p:d.{topic}",
            "readBootstrapServerAndTopic=h:1;/a.*/,outputTableSpec=p:d.{topic}",
            "readBootstrapServerAndTopic=h:1;a,outputTableSpec=p:d.t",
        ] {
            assert!(cfg(&format!("{ok},{base}")).is_ok(), "{ok}");
        }
    }

    #[test]
    fn the_experiment_sets_at_least_once_unless_forced_off() {
        let p = validate(find("kafka-to-bq").unwrap(), &parse_parameter_list(OK).unwrap()).unwrap();
        let f = RunFlags { at_least_once_experiment: true, ..flags() };
        assert_eq!(KafkaToBqConfig::from_params(&p, f.clone()).unwrap().delivery, Delivery::AtLeastOnce);
        let p = validate(
            find("kafka-to-bq").unwrap(),
            &parse_parameter_list(&format!("{OK},useStorageWriteApiAtLeastOnce=false")).unwrap(),
        )
        .unwrap();
        assert_eq!(KafkaToBqConfig::from_params(&p, f.clone()).unwrap().delivery, Delivery::ExactlyOnce);
    }

    #[test]
    fn launch_rules_are_enforced_with_reasons() {
        let e = cfg("readBootstrapServerAndTopic=h:1;t,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE")
            .unwrap_err();
        assert!(e.0[0].to_string().contains("confluentAvroSchemaPath is required"), "{e:?}");
        let e =
            cfg("readBootstrapServerAndTopic=h:1;t,messageFormat=JSON,kafkaReadAuthenticationMode=NONE").unwrap_err();
        assert!(e.0[0].to_string().contains("outputTableSpec is required"), "{e:?}");
        let e = cfg(&format!("{OK},useBigQueryDLQ=true")).unwrap_err();
        assert!(e.0[0].to_string().contains("requires outputDeadletterTable"), "{e:?}");
        let e = cfg(&format!("{OK},enableCommitOffsets=true")).unwrap_err();
        assert!(e.0[0].to_string().contains("requires consumerGroupId"), "{e:?}");
        let e = cfg("readBootstrapServerAndTopic=h:1;t,messageFormat=JSON,outputTableSpec=p:d.t").unwrap_err();
        assert!(
            e.0[0].to_string().contains("kafkaReadAuthenticationMode=SASL_PLAIN needs kafkaReadUsernameSecretId"),
            "{e:?}"
        );
        let p = validate(find("kafka-to-bq").unwrap(), &parse_parameter_list(OK).unwrap()).unwrap();
        let f = RunFlags { progress: ProgressConfig { async_progress: true, ..Default::default() }, ..flags() };
        let e = KafkaToBqConfig::from_params(&p, f.clone()).unwrap_err();
        assert!(e.0[0].to_string().contains("cannot be combined with exactly-once"), "{e:?}");
        let p = validate(
            find("kafka-to-bq").unwrap(),
            &parse_parameter_list(&format!("{OK},useStorageWriteApiAtLeastOnce=true")).unwrap(),
        )
        .unwrap();
        assert!(KafkaToBqConfig::from_params(&p, f.clone()).is_ok());
        let e = cfg(&format!("{OK},storageWriteApiTriggeringFrequencySec=0")).unwrap_err();
        assert!(e.0[0].to_string().contains("above 0"), "{e:?}");
        let adc = cfg("readBootstrapServerAndTopic=h:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=APPLICATION_DEFAULT_CREDENTIALS").unwrap();
        assert_eq!(adc.source.conn.auth, crate::kafka::Auth::GoogleAdc { ca: None });
    }
}
