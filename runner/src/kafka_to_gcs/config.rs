//! A kafka-to-gcs job's settings, from validated template parameters and run flags;
//! every problem names its parameter, before anything connects.

use super::window::{parse_span, parse_window, TimestampBounds, TimestampPolicy};
use crate::avro::wire::{AvroDecoder, Framing};
use crate::kafka::SourceSettings;
use crate::scaling::Capacity;
use crate::state::{Backend, Kind};
use crate::store::Location;
use flexrun_autoscaler::ScalingConfig;
use flexrun_templates::typed::kafka_to_gcs::{
    MessageFormat, Name as GcsName, OutputFileFormat as FileParam, Params as Gcs, SchemaFormat,
    TimestampPolicy as PolicyParam,
};
use flexrun_templates::{ParamErrors, Problems, ResolvedParams};
use std::sync::Arc;
use std::time::Duration;

/// What the files hold (`messageFormat`).
#[derive(Debug, Clone)]
pub enum OutputFormat {
    /// Each message value verbatim, one per line (`.json`).
    Json,
    /// The decoded records in Avro container files, one per writer schema (`.avro`).
    Avro(Arc<AvroDecoder>),
    /// The decoded records in Parquet files, one per writer schema (`.parquet`).
    Parquet(Arc<AvroDecoder>),
}

impl OutputFormat {
    /// The Avro decoder, for the formats that decode.
    pub fn decoder(&self) -> Option<&AvroDecoder> {
        match self {
            OutputFormat::Json => None,
            OutputFormat::Avro(d) | OutputFormat::Parquet(d) => Some(d),
        }
    }

    /// The file format's name, as `outputFileFormat` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            OutputFormat::Json => "TEXT",
            OutputFormat::Avro(_) => "AVRO",
            OutputFormat::Parquet(_) => "PARQUET",
        }
    }
}

/// `outputFileFormat=PARQUET` over Avro input: refused when a column of the schema has
/// no Parquet type, or when this flexrun was built without Parquet.
fn parquet_format(d: Arc<AvroDecoder>, errs: &mut Problems) -> Option<OutputFormat> {
    let checked = super::parquet::available().and_then(|()| match d.schema_file() {
        Some(w) => super::parquet::columns(&w.schema).map(drop),
        None => Ok(()),
    });
    match checked {
        Ok(()) => Some(OutputFormat::Parquet(d)),
        Err(e) => {
            errs.push(format!("outputFileFormat=PARQUET: {e}"));
            None
        }
    }
}

/// `outputFileFormat` (flexrun's extension; Google's older Kafka_to_GCS template's
/// parameter) over the format `messageFormat` gives.
fn file_format(p: &ResolvedParams, read: Option<OutputFormat>, errs: &mut Problems) -> Option<OutputFormat> {
    let read = read?;
    let given = Gcs(p).output_file_format().filter(|_| Gcs(p).was_given(GcsName::OutputFileFormat));
    match (given, read) {
        (None, f)
        | (Some(FileParam::Text), f @ OutputFormat::Json)
        | (Some(FileParam::Avro), f @ OutputFormat::Avro(_)) => Some(f),
        (Some(FileParam::Parquet), OutputFormat::Avro(d)) => parquet_format(d, errs),
        (Some(f), OutputFormat::Json) => {
            errs.push(format!("outputFileFormat={f}: messageFormat=JSON writes TEXT (JSON lines) only; AVRO and PARQUET need an Avro messageFormat and its schema"));
            None
        }
        (Some(f), _) => {
            errs.push(format!("outputFileFormat={f}: an Avro messageFormat writes AVRO or PARQUET, not TEXT"));
            None
        }
    }
}

/// `messageFormat` and its schema source, as Google's Kafka_to_Gcs_Flex reads them.
fn output_format(p: &ResolvedParams, errs: &mut Problems) -> Option<OutputFormat> {
    let file = |name: &str, framing: Framing, errs: &mut Problems| {
        let path = crate::avro::schema_file_param(p, name, errs);
        if path.is_empty() {
            errs.push(format!("{name} is required for messageFormat={}: a local .avsc file", Gcs(p).message_format()));
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let w = crate::avro::WriterSchema::parse(&text).ok()?;
        Some(OutputFormat::Avro(Arc::new(AvroDecoder::with_file(framing, w))))
    };
    match Gcs(p).message_format() {
        MessageFormat::Json => Some(OutputFormat::Json),
        MessageFormat::AvroBinaryEncoding => file("binaryAvroSchemaPath", Framing::Binary, errs),
        MessageFormat::AvroConfluentWireFormat => match Gcs(p).schema_format() {
            SchemaFormat::SchemaRegistry => {
                crate::avro::check_registry_auth(p, errs);
                match Gcs(p).schema_registry_connection_url() {
                    Some(url) => Some(OutputFormat::Avro(Arc::new(AvroDecoder::with_registry(
                        crate::avro::registry::Registry::new(url),
                    )))),
                    None => {
                        errs.push("schemaRegistryConnectionUrl is required with schemaFormat=SCHEMA_REGISTRY, e.g. http://localhost:8081");
                        None
                    }
                }
            }
            SchemaFormat::SingleSchemaFile => file("confluentAvroSchemaPath", Framing::Confluent, errs),
        },
    }
}

impl KafkaToGcsConfig {
    /// What the job's checkpoint depends on ([`crate::control::identity`]): the topic,
    /// the window, the file format and where files go. A change would re-read records
    /// into windows or files that the commit log does not know.
    pub fn identity(&self) -> Vec<crate::control::identity::Field> {
        use crate::control::identity::Field;
        vec![
            Field::new("topic", self.source.topic.clone()),
            Field::new("windowDuration", format!("{}s", self.window.as_secs())),
            Field::new("outputFileFormat", self.format.name()),
            Field::new("outputDirectory", self.output.url()),
            Field::new("outputFilenamePrefix", self.prefix.clone()),
        ]
    }
}

/// Shards per window when `numShards=0` and no worker ceiling is given: Dataflow's
/// streaming default (`DEFAULT_NUM_SHARDS` in Beam's StreamingShardedWriteFactory).
pub const DEFAULT_SHARDS: u32 = 10;

/// What a kafka-to-gcs job needs.
#[derive(Debug, Clone)]
pub struct KafkaToGcsConfig {
    /// `--job-name`.
    pub job_name: String,
    /// The topic and how to reach it.
    pub source: SourceSettings,
    /// `outputDirectory`.
    pub output: Location,
    /// `outputFilenamePrefix`.
    pub prefix: String,
    /// `messageFormat`.
    pub format: OutputFormat,
    /// `windowDuration`.
    pub window: Duration,
    /// Files per window.
    pub shards: u32,
    /// `enableCommitOffsets`.
    pub commit_offsets: bool,
    /// `--commit-parallelism`.
    pub parallelism: usize,
    /// `--storage-endpoint`.
    pub endpoint: Option<String>,
    /// `--idle-timeout`: drain after this long with nothing to read.
    pub idle_timeout: Option<Duration>,
    /// The worker pool and its autoscaler.
    pub pool: ScalingConfig,
    /// `--worker-capacity`.
    pub capacity: Option<Capacity>,
    /// Window state and its checkpoints.
    pub state: StateConfig,
    /// `timestampPolicy` and `maxTimestampSkew`.
    pub timestamps: TimestampBounds,
}

/// `timestampPolicy` (CLAMP or FAIL) and `maxTimestampSkew` (a span, default 1h).
fn timestamp_bounds(p: &ResolvedParams, errs: &mut Problems) -> Option<TimestampBounds> {
    let policy = match Gcs(p).timestamp_policy() {
        PolicyParam::Clamp => TimestampPolicy::Clamp,
        PolicyParam::Fail => TimestampPolicy::Fail,
    };
    let skew = parse_span("maxTimestampSkew", Gcs(p).max_timestamp_skew()).map_err(|e| errs.push(e)).ok()?;
    Some(TimestampBounds { policy, max_future_ms: skew.as_millis() as i64 })
}

/// Where window state lives and how it is checkpointed.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// `--state-backend`.
    pub backend: Backend,
    /// `--checkpoint-kind`.
    pub kind: Kind,
    /// `--checkpoint-interval`.
    pub interval: Duration,
    /// `--checkpoint-location`, or `None` for `<checkpoint-dir>/<job>/checkpoints/`.
    pub location: Option<Location>,
}

/// The run flags kafka-to-gcs reads.
#[derive(Debug, Clone)]
pub struct GcsFlags {
    /// `--job-name`.
    pub job_name: String,
    /// `--max-workers` as given (for `numShards=0`).
    pub max_workers: Option<u32>,
    /// `--commit-parallelism`.
    pub parallelism: usize,
    /// `--storage-endpoint`.
    pub endpoint: Option<String>,
    /// `--idle-timeout`.
    pub idle_timeout: Option<Duration>,
    /// The worker pool flags, checked.
    pub pool: ScalingConfig,
    /// `--worker-capacity`.
    pub capacity: Option<Capacity>,
    /// `--state-backend`.
    pub backend: Backend,
    /// `--checkpoint-kind`.
    pub kind: Kind,
    /// `--checkpoint-interval`.
    pub interval: Duration,
    /// `--checkpoint-location`, as given.
    pub location: Option<String>,
}

/// `--state-backend`, `--checkpoint-kind` and `--checkpoint-location`, checked.
fn state_config(f: &GcsFlags, errs: &mut Problems) -> Option<StateConfig> {
    if let Err(e) = crate::state::check_built(f.backend).and_then(|()| crate::state::check_kind(f.backend, f.kind)) {
        errs.push(e);
        return None;
    }
    let location = match &f.location {
        Some(l) => Some(Location::parse(l).map_err(|e| errs.push(format!("--checkpoint-location: {e}"))).ok()?),
        None => None,
    };
    Some(StateConfig { backend: f.backend, kind: f.kind, interval: f.interval, location })
}

impl KafkaToGcsConfig {
    /// Build and check the configuration.
    pub fn from_params(p: &ResolvedParams, f: GcsFlags) -> Result<KafkaToGcsConfig, ParamErrors> {
        let mut errs = Problems::default();
        let source = crate::kafka::params::read_source(p, &f.job_name, &mut errs);
        let output =
            Location::parse(Gcs(p).output_directory()).map_err(|e| errs.push(format!("outputDirectory: {e}"))).ok();
        let window = parse_window(Gcs(p).window_duration()).map_err(|e| errs.push(e)).ok();
        let shards = match Gcs(p).num_shards().parse::<i64>() {
            Ok(0) => f.max_workers.map(|m| 2 * m).unwrap_or(DEFAULT_SHARDS),
            Ok(n) if n > 0 && n <= 10_000 => n as u32,
            _ => {
                errs.push(format!(
                    "numShards={}: expected 0 (the runner chooses) or a whole number from 1 to 10000",
                    Gcs(p).num_shards()
                ));
                0
            }
        };
        let read = output_format(p, &mut errs);
        let format = file_format(p, read, &mut errs);
        let state = state_config(&f, &mut errs);
        let timestamps = timestamp_bounds(p, &mut errs);
        if Gcs(p).use_big_query_dlq() {
            errs.push("useBigQueryDLQ=true: a BigQuery dead-letter table for kafka-to-gcs is not built; leave it false (an undecodable Avro message then stops the job, naming it, where Google's template retries it without end)");
        }
        errs.into_result()?;
        Ok(KafkaToGcsConfig {
            job_name: f.job_name,
            source: source.expect("checked"),
            output: output.expect("checked"),
            prefix: Gcs(p).output_filename_prefix().to_string(),
            format: format.expect("checked"),
            window: window.expect("checked"),
            shards,
            commit_offsets: Gcs(p).enable_commit_offsets(),
            parallelism: f.parallelism,
            endpoint: f.endpoint,
            idle_timeout: f.idle_timeout,
            pool: f.pool,
            capacity: f.capacity,
            state: state.expect("checked"),
            timestamps: timestamps.expect("checked"),
        })
    }
}
