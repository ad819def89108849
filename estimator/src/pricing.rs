//! Dataflow prices and machine types, from a data file with its source and date.

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
}

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

    /// Streaming prices under a commitment.
    pub fn streaming_for(&self, c: Commitment) -> StreamingPrices {
        match c {
            Commitment::None => self.streaming,
            Commitment::OneYear => self.commitments.get("1y").copied().unwrap_or(self.streaming),
            Commitment::ThreeYears => self.commitments.get("3y").copied().unwrap_or(self.streaming),
        }
    }
}
