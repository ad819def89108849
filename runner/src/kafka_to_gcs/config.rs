//! A kafka-to-gcs job's settings, from validated template parameters and run flags;
//! every problem names its parameter, before anything connects.

use super::window::parse_window;
use crate::kafka::SourceSettings;
use crate::store::Location;
use flexrun_templates::ResolvedParams;
use std::time::Duration;

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
}

/// The run flags kafka-to-gcs reads.
#[derive(Debug, Clone, Default)]
pub struct GcsFlags {
    /// `--job-name`.
    pub job_name: String,
    /// `--max-workers` (for `numShards=0`).
    pub max_workers: Option<u32>,
    /// `--commit-parallelism`.
    pub parallelism: usize,
    /// `--storage-endpoint`.
    pub endpoint: Option<String>,
    /// `--idle-timeout`.
    pub idle_timeout: Option<Duration>,
}

impl KafkaToGcsConfig {
    /// Build and check the configuration.
    pub fn from_params(p: &ResolvedParams, f: GcsFlags) -> Result<KafkaToGcsConfig, Vec<String>> {
        let mut errs = Vec::new();
        let source = crate::kafka::params::read_source(p, &f.job_name, &mut errs);
        let output = Location::parse(p.get("outputDirectory").unwrap_or_default())
            .map_err(|e| errs.push(format!("outputDirectory: {e}")))
            .ok();
        let window = parse_window(p.get("windowDuration").unwrap_or("5m")).map_err(|e| errs.push(e)).ok();
        let shards = match p.get("numShards").unwrap_or("0").parse::<i64>() {
            Ok(0) => f.max_workers.map(|m| 2 * m).unwrap_or(DEFAULT_SHARDS),
            Ok(n) if n > 0 && n <= 10_000 => n as u32,
            _ => {
                errs.push(format!(
                    "numShards={}: expected 0 (the runner chooses) or a whole number from 1 to 10000",
                    p.get("numShards").unwrap_or_default()
                ));
                0
            }
        };
        match p.get("messageFormat").unwrap_or("AVRO_CONFLUENT_WIRE_FORMAT") {
            "JSON" => {}
            other => errs.push(format!(
                "messageFormat={other}: kafka-to-gcs writes JSON only in this build (each message value verbatim, one per line); pass messageFormat=JSON"
            )),
        }
        if p.flag("useBigQueryDLQ") {
            errs.push(
                "useBigQueryDLQ=true: Google's kafka-to-gcs has no dead-letter path for JSON; leave it false".into(),
            );
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(KafkaToGcsConfig {
            job_name: f.job_name,
            source: source.expect("checked"),
            output: output.expect("checked"),
            prefix: p.get("outputFilenamePrefix").unwrap_or("output").to_string(),
            window: window.expect("checked"),
            shards,
            commit_offsets: p.flag("enableCommitOffsets"),
            parallelism: f.parallelism,
            endpoint: f.endpoint,
            idle_timeout: f.idle_timeout,
        })
    }
}
