//! Google's quotas and limits a pipeline can cross, as data with their source and date
//! (`data/limits.yaml`), and which of them a sized pipeline crosses, with what to do.
//!
//! - The Storage Write API's throughput quota, per project and location: a multi-region
//!   dataset (`US`, `EU`) allows ten times a region's (`us-central1`, ...).
//! - Its concurrent connections: exactly-once writes one COMMITTED stream per
//!   connection, modelled as one per worker vCPU (Beam's dynamic sharding), at-least-once
//!   one `_default` connection per worker.
//! - Dataflow's workers per job: `maxNumWorkers` defaults to 100 with Streaming Engine and
//!   goes to 1,000.
//!
//! ```
//! use flexrun_estimator::limits::{crossed, Limits, Sized};
//! let l = Limits::google();
//! let gib = 1024.0 * 1024.0 * 1024.0;
//! let s = |loc: &str| Sized { throughput_bytes_s: gib, workers: 63.0, connections: 126.0, location: loc.into() };
//! assert_eq!(crossed(&s("us-central1"), &l)[0].limit, "storage-write-throughput");
//! assert!(crossed(&s("US"), &l).is_empty());
//! ```

use serde::{Deserialize, Serialize};

/// A quota whose value depends on the dataset's location kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ByLocation {
    /// In the US and EU multi-regions.
    pub multi_region: f64,
    /// In any single region.
    pub region: f64,
}

impl ByLocation {
    /// The value for a dataset in `location`.
    pub fn at(&self, location: &str) -> f64 {
        if is_multi_region(location) {
            self.multi_region
        } else {
            self.region
        }
    }
}

/// The Storage Write API's quotas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageWrite {
    /// Where the figures come from.
    pub source: String,
    /// When they were read.
    pub date: String,
    /// Bytes per second per project and location.
    pub throughput_bytes_s: ByLocation,
    /// The throughput quota's token bucket depth, seconds of quota (calibrated, see the file).
    pub throughput_burst_s: f64,
    /// Concurrent connections per project and location.
    pub concurrent_connections: ByLocation,
    /// CreateWriteStream calls per hour per project and region.
    pub create_write_stream_per_hour: f64,
}

/// Dataflow's worker limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataflow {
    /// Where the figures come from.
    pub source: String,
    /// When they were read.
    pub date: String,
    /// `maxNumWorkers` when not given (Streaming Engine).
    pub default_max_workers: f64,
    /// The most `maxNumWorkers` may be.
    pub max_workers: f64,
}

/// Every limit flexrun checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// BigQuery's Storage Write API.
    pub storage_write: StorageWrite,
    /// Dataflow.
    pub dataflow: Dataflow,
}

impl Limits {
    /// The limits that ship (`data/limits.yaml`).
    pub fn google() -> Limits {
        serde_yaml::from_str(include_str!("../data/limits.yaml")).expect("the built-in limits parse")
    }
}

/// Whether `location` is a multi-region (`US`, `EU`).
pub fn is_multi_region(location: &str) -> bool {
    matches!(location.to_ascii_uppercase().as_str(), "US" | "EU")
}

/// Check a dataset location: `US`, `EU` or a region name such as `us-central1`.
pub fn check_location(location: &str) -> Result<(), String> {
    let region = |s: &str| {
        s.split('-').count() >= 2
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && s.ends_with(|c: char| c.is_ascii_digit())
    };
    match is_multi_region(location) || region(location) {
        true => Ok(()),
        false => Err(format!(
            "invalid dataset location {location:?}: expected a multi-region (US, EU) or a region such as us-central1"
        )),
    }
}

/// What a sized pipeline asks of the limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sized {
    /// Bytes per second written to BigQuery.
    pub throughput_bytes_s: f64,
    /// Workers.
    pub workers: f64,
    /// Concurrent Storage Write connections.
    pub connections: f64,
    /// The dataset's location.
    pub location: String,
}

impl Sized {
    /// A kafka-to-bq pipeline of `workers` workers of `vcpus` vCPUs writing
    /// `throughput_bytes_s` into `location`: exactly-once holds about one Storage Write
    /// connection per worker vCPU (one COMMITTED stream each, as Beam's dynamic sharding
    /// does), at-least-once one `_default` connection per worker.
    pub fn pipeline(mode: crate::Mode, throughput_bytes_s: f64, workers: f64, vcpus: f64, location: &str) -> Sized {
        let connections = match mode {
            crate::Mode::ExactlyOnce => workers * vcpus,
            crate::Mode::AtLeastOnce => workers,
        };
        Sized { throughput_bytes_s, workers, connections, location: location.into() }
    }
}

/// A limit the pipeline crosses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Crossed {
    /// Which limit (`storage-write-throughput`, `storage-write-connections`,
    /// `dataflow-max-workers`, `dataflow-default-max-workers`).
    pub limit: String,
    /// What the pipeline needs.
    pub needed: f64,
    /// What the limit allows.
    pub allowed: f64,
    /// The sentence to show: the limit, the need and what to do.
    pub message: String,
    /// Where the limit comes from, and when it was read.
    pub source: String,
}

/// The limits `s` crosses, most binding first.
pub fn crossed(s: &Sized, l: &Limits) -> Vec<Crossed> {
    let sw = &l.storage_write;
    let sw_source = format!("{} ({})", sw.source, sw.date);
    let df_source = format!("{} ({})", l.dataflow.source, l.dataflow.date);
    let kind = if is_multi_region(&s.location) { "multi-region" } else { "region" };
    let mut out = Vec::new();
    let quota = sw.throughput_bytes_s.at(&s.location);
    if s.throughput_bytes_s > quota {
        out.push(Crossed {
            limit: "storage-write-throughput".into(),
            needed: s.throughput_bytes_s,
            allowed: quota,
            message: format!(
                "Storage Write API throughput: {:.0} MB/s needed, the default quota in {} ({kind}) is {:.0} MB/s per project: write to a US or EU multi-region dataset ({:.0} MB/s), or ask for a quota increase",
                s.throughput_bytes_s / 1e6, s.location, quota / 1e6, sw.throughput_bytes_s.multi_region / 1e6
            ),
            source: sw_source.clone(),
        });
    }
    let conns = sw.concurrent_connections.at(&s.location);
    if s.connections > conns {
        out.push(Crossed {
            limit: "storage-write-connections".into(),
            needed: s.connections,
            allowed: conns,
            message: format!(
                "Storage Write API concurrent connections: about {:.0} needed, the default quota in {} ({kind}) is {conns:.0}: set fewer streams (numStorageWriteApiStreams), use at-least-once (the default stream), or ask for a quota increase",
                s.connections, s.location
            ),
            source: sw_source,
        });
    }
    if s.workers > l.dataflow.max_workers {
        out.push(Crossed {
            limit: "dataflow-max-workers".into(),
            needed: s.workers,
            allowed: l.dataflow.max_workers,
            message: format!(
                "Dataflow workers: {:.0} needed, a job takes at most {:.0} (maxNumWorkers): split the input across jobs, or use larger machines (--machine-type)",
                s.workers, l.dataflow.max_workers
            ),
            source: df_source,
        });
    } else if s.workers > l.dataflow.default_max_workers {
        out.push(Crossed {
            limit: "dataflow-default-max-workers".into(),
            needed: s.workers,
            allowed: l.dataflow.default_max_workers,
            message: format!(
                "Dataflow workers: {:.0} needed, over the default maxNumWorkers of {:.0} with Streaming Engine: set --max-workers {:.0} or more",
                s.workers, l.dataflow.default_max_workers, s.workers.ceil()
            ),
            source: df_source,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(bytes_s: f64, workers: f64, conns: f64, loc: &str) -> Sized {
        Sized { throughput_bytes_s: bytes_s, workers, connections: conns, location: loc.into() }
    }

    #[test]
    fn the_throughput_quota_depends_on_the_location_kind() {
        let l = Limits::google();
        let names = |s: &Sized| crossed(s, &l).into_iter().map(|c| c.limit).collect::<Vec<_>>();
        assert_eq!(names(&sized(1.07e9, 63.0, 126.0, "us-central1")), ["storage-write-throughput"]);
        assert!(names(&sized(1.07e9, 63.0, 126.0, "US")).is_empty());
        assert!(names(&sized(2.9e8, 10.0, 20.0, "europe-west1")).is_empty());
        assert_eq!(names(&sized(3.3e9, 63.0, 126.0, "eu")), ["storage-write-throughput"]);
        assert!(names(&sized(3.1e9, 63.0, 126.0, "eu")).is_empty(), "3 GiB/s, not 3 GB/s");
        let c = &crossed(&sized(1.07e9, 63.0, 126.0, "us-central1"), &l)[0];
        assert!(
            c.message.contains("multi-region") && c.message.contains("quota increase") && c.source.contains("2026")
        );
    }

    #[test]
    fn connections_and_workers_are_named_with_what_to_do() {
        let l = Limits::google();
        let all = crossed(&sized(1e8, 1353.0, 2706.0, "us-central1"), &l);
        let names: Vec<&str> = all.iter().map(|c| c.limit.as_str()).collect();
        assert_eq!(names, ["storage-write-connections", "dataflow-max-workers"]);
        assert!(all[0].message.contains("numStorageWriteApiStreams") && all[1].message.contains("split the input"));
        let over_default = crossed(&sized(1e8, 150.0, 300.0, "US"), &l);
        assert_eq!(over_default[0].limit, "dataflow-default-max-workers");
        assert!(over_default[0].message.contains("--max-workers 150"));
    }

    #[test]
    fn locations_are_checked() {
        for ok in ["US", "eu", "us-central1", "asia-southeast1", "europe-west12"] {
            assert!(check_location(ok).is_ok(), "{ok}");
        }
        for bad in ["", "usa", "us central1", "moon"] {
            assert!(check_location(bad).unwrap_err().contains("expected a multi-region"), "{bad}");
        }
    }
}
