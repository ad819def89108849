//! kafka-to-gcs as `simulate` and `estimate` model it: its window and files from its
//! parameters, the window commit's cost, and the window state with its checkpoints
//! (flags shared by both commands, so a model is configured once the same way).

use crate::usage;
use anyhow::Result;
use clap::Args;
use flexrun_estimator::files::WindowCommit;
use flexrun_estimator::state::{CheckpointCosts, CheckpointKind, StateBackend, StateModel};
use flexrun_estimator::{parse_duration, Rate};
use flexrun_templates::typed::kafka_to_gcs::Params as Gcs;
use std::time::Duration;

/// Serial publish time per file: see [`GcsModelFlags::commit_file_cost`].
pub const DEFAULT_COMMIT_FILE_COST: &str = "45ms";

/// The window commit and state flags of a modelled kafka-to-gcs job.
#[derive(Debug, Clone, Args)]
pub struct GcsModelFlags {
    /// kafka-to-gcs: seconds to publish one file serially (copy + delete on a bucket).
    /// The default is calibrated to scripts/bench-commit.sh against the emulator with
    /// 20 ms of modelled request latency (BENCHMARKS.md).
    #[arg(long, default_value = DEFAULT_COMMIT_FILE_COST, value_parser = parse_duration)]
    pub commit_file_cost: Duration,
    /// kafka-to-gcs: requests each worker's committer keeps in flight.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub commit_parallelism: u32,
    /// kafka-to-gcs: model the window state in this backend (heap or lsm) and its
    /// checkpoints: state size, memory, checkpoint size and duration.
    #[arg(long, value_enum)]
    pub state_backend: Option<crate::state::Backend>,
    /// kafka-to-gcs: full or incremental checkpoints (incremental needs --state-backend lsm).
    #[arg(long, value_enum, default_value_t = crate::state::Kind::Full)]
    pub checkpoint_kind: crate::state::Kind,
    /// kafka-to-gcs: time between checkpoints.
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    pub checkpoint_interval: Duration,
    /// kafka-to-gcs: the rate one worker's checkpoint uploads at (default: calibrated
    /// to scripts/bench-state.sh against the Cloud Storage emulator).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| Rate::parse(s).map_err(|e| e.to_string()))]
    pub checkpoint_upload_rate: Option<Rate>,
}

impl GcsModelFlags {
    /// The window commit of `files` files per window.
    pub fn window_commit(&self, files: f64) -> WindowCommit {
        WindowCommit {
            files_per_window: files,
            per_file_s: self.commit_file_cost.as_secs_f64(),
            parallelism: self.commit_parallelism as f64,
        }
    }

    /// The state model for windows of `window_s`, when `--state-backend` is given.
    pub fn state_model(&self, window_s: f64) -> Result<Option<StateModel>> {
        let Some(backend) = self.state_backend else { return Ok(None) };
        crate::state::check_kind(backend, self.checkpoint_kind).map_err(usage)?;
        let mut costs = CheckpointCosts::calibrated();
        match self.checkpoint_upload_rate {
            Some(Rate::BytesPerSecond(b)) => costs.upload_bytes_per_s = b,
            Some(Rate::MessagesPerSecond(_)) => {
                return Err(usage("--checkpoint-upload-rate: expected bytes per second (e.g. 100MiB/s), not messages"))
            }
            None => {}
        }
        Ok(Some(StateModel {
            backend: match backend {
                crate::state::Backend::Heap => StateBackend::Heap,
                crate::state::Backend::Lsm => StateBackend::Lsm,
            },
            kind: match self.checkpoint_kind {
                crate::state::Kind::Full => CheckpointKind::Full,
                crate::state::Kind::Incremental => CheckpointKind::Incremental,
            },
            window_s,
            interval_s: self.checkpoint_interval.as_secs_f64(),
            costs,
        }))
    }
}

/// `windowDuration` and the files per window (`numShards`; 0 means 2 × `max_workers`,
/// else 10, as the runner chooses) from kafka-to-gcs parameters, checked as for a run;
/// where to read and write may be left out.
pub fn window_and_files(mut pairs: Vec<(String, String)>, max_workers: Option<u32>) -> Result<(Duration, f64)> {
    let template = flexrun_templates::find("kafka-to-gcs").expect("a built-in template");
    for (k, v) in [
        ("readBootstrapServerAndTopic", "modelled:9092;modelled"),
        ("outputDirectory", "gs://modelled/out/"),
        ("messageFormat", "JSON"),
    ] {
        if !pairs.iter().any(|(n, _)| n == k) {
            pairs.push((k.into(), v.into()));
        }
    }
    let p = flexrun_templates::validate(template, &pairs).map_err(|e| usage(e.to_string()))?;
    let window = crate::kafka_to_gcs::window::parse_window(Gcs(&p).window_duration()).map_err(usage)?;
    let files = match Gcs(&p).num_shards().parse::<i64>() {
        Ok(0) => max_workers.map_or(crate::kafka_to_gcs::config::DEFAULT_SHARDS as f64, |m| 2.0 * m as f64),
        Ok(n) if n > 0 => n as f64,
        _ => return Err(usage("numShards: expected 0 (the runner chooses) or a positive whole number")),
    };
    Ok((window, files))
}
