//! Prices and machine types, from a data file with its source and date: Dataflow's
//! workers and Streaming Engine, BigQuery's ingestion and storage, and Managed Kafka.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Hourly prices of streaming resources.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StreamingPrices {
    /// Per vCPU-hour.
    pub vcpu_hour: f64,
    /// Per GB-hour of memory.
    pub memory_gb_hour: f64,
    /// Per Streaming Engine compute unit hour.
    pub secu_hour: f64,
}

/// Persistent disk prices.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiskPrices {
    /// Standard PD, per GB-hour.
    pub standard_gb_hour: f64,
    /// SSD PD, per GB-hour.
    pub ssd_gb_hour: f64,
}

/// A worker machine type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MachineType {
    /// vCPUs.
    pub vcpus: f64,
    /// Memory, GB.
    pub memory_gb: f64,
}

/// A committed use discount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
pub enum Commitment {
    /// On demand.
    #[serde(rename = "none")]
    None,
    /// One year (20% off).
    #[serde(rename = "1y")]
    OneYear,
    /// Three years (40% off).
    #[serde(rename = "3y")]
    ThreeYears,
}

impl std::str::FromStr for Commitment {
    type Err = String;
    fn from_str(s: &str) -> Result<Commitment, String> {
        match s {
            "none" | "" => Ok(Commitment::None),
            "1y" | "1-year" => Ok(Commitment::OneYear),
            "3y" | "3-year" => Ok(Commitment::ThreeYears),
            _ => Err(format!("invalid commitment {s:?}: expected none, 1y or 3y")),
        }
    }
}

impl Commitment {
    /// `none`, `1y` or `3y`.
    pub fn as_str(self) -> &'static str {
        match self {
            Commitment::None => "none",
            Commitment::OneYear => "1y",
            Commitment::ThreeYears => "3y",
        }
    }
}

/// BigQuery's prices: Storage Write API ingestion and logical storage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BigQueryPrices {
    /// Where the prices come from.
    pub source: String,
    /// As of.
    pub date: String,
    /// Storage Write API, per GiB ingested.
    pub storage_write_gib: f64,
    /// Storage Write API GiB free per month, per billing account.
    pub storage_write_free_gib_month: f64,
    /// Active logical storage, per GiB-month.
    pub active_storage_gib_month: f64,
    /// Long-term logical storage (unmodified for `long_term_after_days`), per GiB-month.
    pub long_term_storage_gib_month: f64,
    /// Storage GiB free per month.
    pub storage_free_gib_month: f64,
    /// Days a table or partition stays unmodified before it is billed as long-term.
    pub long_term_after_days: f64,
    /// On-demand compute, per TiB processed (what CDC's background apply jobs pay
    /// without a reservation).
    pub on_demand_tib: f64,
}

/// Google Cloud Managed Service for Apache Kafka: prices and its sizing guide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManagedKafkaPrices {
    /// Where the prices come from.
    pub source: String,
    /// As of.
    pub date: String,
    /// Per Data Compute Unit hour.
    pub dcu_hour: f64,
    /// DCUs per vCPU.
    pub dcu_per_vcpu: f64,
    /// DCUs per GiB of RAM.
    pub dcu_per_gib_ram: f64,
    /// RAM per vCPU, GiB (the guide's clusters).
    pub ram_gib_per_vcpu: f64,
    /// Local (broker) storage provisioned per vCPU, GiB.
    pub local_storage_gib_per_vcpu: f64,
    /// Local storage, per GiB-month.
    pub local_storage_gib_month: f64,
    /// Persistent storage of one replica of what topics retain, per GiB-month.
    pub persistent_storage_gib_month: f64,
    /// Write-equivalent traffic one vCPU handles at 100 % utilization, MB/s (decimal).
    pub write_mb_s_per_vcpu: f64,
    /// How much cheaper a byte read is than a byte written (the guide's 4).
    pub read_efficiency: f64,
    /// The vCPU utilization the guide sizes at.
    pub target_utilization: f64,
    /// The smallest cluster, vCPUs.
    pub min_vcpus: f64,
    /// Replicas of each partition, one per zone (Google's sample workloads: 3 in 3 zones).
    pub replicas: f64,
    /// Zones the brokers span; a client reaches a leader in another zone for all but
    /// one zone's share of its traffic.
    pub zones: f64,
    /// Inter-zone data transfer, per GiB: replication from leaders to followers, and
    /// client traffic to a leader in another zone.
    pub inter_zone_gib: f64,
}

/// A pricing file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pricing {
    /// Region.
    pub region: String,
    /// Where the prices come from.
    pub source: String,
    /// As of.
    pub date: String,
    /// Hours in a month for monthly figures.
    pub hours_per_month: f64,
    /// On-demand streaming prices.
    pub streaming: StreamingPrices,
    /// Disk prices.
    pub disk: DiskPrices,
    /// Discounted streaming prices by commitment.
    pub commitments: BTreeMap<String, StreamingPrices>,
    /// Machine types by name.
    pub machine_types: BTreeMap<String, MachineType>,
    /// Boot disk per worker, GB.
    pub default_disk_gb: f64,
    /// BigQuery's prices.
    pub bigquery: BigQueryPrices,
    /// Managed Kafka's prices.
    pub managed_kafka: ManagedKafkaPrices,
}

/// The regions whose prices ship.
pub const REGIONS: &[&str] = &["us-central1"];

impl Pricing {
    /// The shipped us-central1 prices (parsed once).
    pub fn us_central1() -> Pricing {
        static CELL: std::sync::OnceLock<Pricing> = std::sync::OnceLock::new();
        CELL.get_or_init(|| {
            serde_yaml::from_str(include_str!("../data/pricing-us-central1.yaml"))
                .expect("the shipped pricing file is valid")
        })
        .clone()
    }

    /// The shipped prices of `region`, or an error naming the regions that ship.
    pub fn for_region(region: &str) -> Result<Pricing, String> {
        match region {
            "us-central1" => Ok(Pricing::us_central1()),
            other => Err(format!("unknown region {other:?}: expected one of {}", REGIONS.join(", "))),
        }
    }

    /// Streaming prices under a commitment.
    pub fn streaming_for(&self, c: Commitment) -> StreamingPrices {
        match c {
            Commitment::None => self.streaming,
            Commitment::OneYear => self.commitments.get("1y").copied().unwrap_or(self.streaming),
            Commitment::ThreeYears => self.commitments.get("3y").copied().unwrap_or(self.streaming),
        }
    }
}
