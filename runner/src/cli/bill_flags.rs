//! The whole-pipeline bill's flags, shared by `estimate` and `simulate`: which lines to
//! price and what BigQuery's and Kafka's lines assume. (`--region` is each command's own:
//! `simulate` takes gcloud's.)

use crate::usage;
use anyhow::Result;
use clap::Args;
use flexrun_estimator::{self as est, KafkaChoice, Line, Partitioning, PipelineOptions};
use std::path::PathBuf;

/// `--lines`, `--kafka`, `--kafka-retention`, `--kafka-follower-fetch`, `--bq-retention`,
/// `--bq-partitioning`, `--row-bytes`, `--table-schema`.
#[derive(Debug, Args, Clone)]
pub struct BillFlags {
    /// Lines to price, comma-separated: dataflow, bigquery-ingestion, bigquery-storage,
    /// bigquery-cdc (only with --cdc-table-size), kafka (only with --kafka managed).
    /// Default: all.
    #[arg(long, default_value = "dataflow,bigquery-ingestion,bigquery-storage,bigquery-cdc,kafka")]
    pub lines: String,
    /// Kafka: own (your cluster, not priced) or managed (Google Cloud Managed Service for
    /// Apache Kafka, sized by Google's guide).
    #[arg(long, default_value = "own", value_parser = |s: &str| s.parse::<KafkaChoice>())]
    pub kafka: KafkaChoice,
    /// How long Kafka keeps messages (what Managed Kafka stores): 24h, 7d, 0.
    #[arg(long, default_value = "7d", allow_hyphen_values = true)]
    pub kafka_retention: String,
    /// With --kafka managed: the job fetches from a follower in its own zone (client.rack,
    /// as Google's Managed Kafka sample workloads assume), so its reads cross no zone.
    #[arg(long)]
    pub kafka_follower_fetch: bool,
    /// BigQuery table or partition expiration (30d, 0 for none kept); default: rows are kept.
    #[arg(long, allow_hyphen_values = true)]
    pub bq_retention: Option<String>,
    /// BigQuery table partitioning: day (partitions turn long-term after 90 days) or none.
    #[arg(long, default_value = "day", value_parser = |s: &str| s.parse::<Partitioning>())]
    pub bq_partitioning: Partitioning,
    /// Billed bytes per BigQuery row, when known (default: estimated from the table).
    #[arg(long, allow_hyphen_values = true, value_parser = |s: &str| est::parse_size(s).map_err(|e| e.to_string()))]
    pub row_bytes: Option<f64>,
    /// The BigQuery table's JSON schema, to estimate billed bytes per row (default: seed
    /// 001's table, an INT64 and a STRING).
    #[arg(long)]
    pub table_schema: Option<PathBuf>,
    /// The rows are CDC changes (`cdcPrimaryKey`) to a table of this size (e.g. 500GiB):
    /// storage is the table, not the stream, and BigQuery's background apply jobs are
    /// priced (with --cdc-max-staleness).
    #[arg(long, value_parser = |s: &str| est::parse_size(s).map_err(|e| e.to_string()))]
    pub cdc_table_size: Option<f64>,
    /// The CDC table's max_staleness (e.g. 15m): one apply job per interval.
    #[arg(long)]
    pub cdc_max_staleness: Option<String>,
}

fn retention_s(flag: &str, s: &str) -> Result<f64> {
    est::parse_duration_or_zero(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| usage(format!("{flag}: {e}; a retention cannot be below zero")))
}

/// The prices of `--region` (only us-central1's ship).
pub fn pricing(region: &str) -> Result<est::Pricing> {
    est::Pricing::for_region(region).map_err(|e| usage(format!("--region: {e}")))
}

impl BillFlags {
    /// The pipeline options; `files` drops BigQuery's lines (kafka-to-gcs writes files).
    pub fn options(&self, files: bool) -> Result<PipelineOptions> {
        let mut lines = Line::parse_list(&self.lines).map_err(|e| usage(format!("--lines: {e}")))?;
        if files {
            lines.retain(|l| !matches!(l, Line::BigqueryIngestion | Line::BigqueryStorage));
        }
        let o = PipelineOptions {
            lines,
            kafka: self.kafka,
            kafka_retention_hours: retention_s("--kafka-retention", &self.kafka_retention)? / 3600.0,
            bq_retention_days: match &self.bq_retention {
                Some(s) => Some(retention_s("--bq-retention", s)? / 86400.0),
                None => None,
            },
            partitioning: self.bq_partitioning,
            cdc: self.cdc()?,
            kafka_follower_fetch: self.kafka_follower_fetch,
        };
        o.check().map_err(usage)?;
        Ok(o)
    }

    fn cdc(&self) -> Result<Option<est::pipeline::CdcTable>> {
        let staleness = |s: &str| {
            est::parse_duration(s)
                .map(|d| d.as_secs_f64() / 60.0)
                .map_err(|e| usage(format!("--cdc-max-staleness: {e}; expected a duration such as 15m")))
        };
        match (self.cdc_table_size, &self.cdc_max_staleness) {
            (None, None) => Ok(None),
            (Some(bytes), Some(s)) => {
                Ok(Some(est::pipeline::CdcTable { table_gib: bytes / (1u64 << 30) as f64, max_staleness_min: staleness(s)? }))
            }
            _ => Err(usage("--cdc-table-size and --cdc-max-staleness go together: the apply jobs' bill is the table's size times how often they run")),
        }
    }

    /// The table's columns from `--table-schema`, if given.
    pub fn table(&self) -> Result<Option<Vec<est::rowsize::Column>>> {
        let Some(p) = &self.table_schema else { return Ok(None) };
        let text = std::fs::read_to_string(p)
            .map_err(|e| usage(format!("--table-schema {}: cannot read it: {e}", p.display())))?;
        est::rowsize::parse_schema(&text).map(Some).map_err(|e| usage(format!("--table-schema {}: {e}", p.display())))
    }
}
