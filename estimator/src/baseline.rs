//! Benchmark baselines: what a known job needed at a known throughput.

use serde::{Deserialize, Serialize};

/// Exactly-once or at-least-once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Storage Write with exactly-once semantics.
    ExactlyOnce,
    /// Storage Write at-least-once (the `_default` stream).
    AtLeastOnce,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "exactly-once" => Ok(Mode::ExactlyOnce),
            "at-least-once" => Ok(Mode::AtLeastOnce),
            _ => Err(format!("invalid mode {s:?}: expected exactly-once or at-least-once")),
        }
    }
}

impl Mode {
    /// The name used in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ExactlyOnce => "exactly-once",
            Mode::AtLeastOnce => "at-least-once",
        }
    }
}

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// One measured configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Delivery mode.
    pub mode: Mode,
    /// Input throughput of the measurement, MiB/s, as its publisher sizes other rates
    /// from it (the linear rule `flexrun estimate` applies).
    pub throughput_mib_s: f64,
    /// The input as message rate × message size, MiB/s, where that differs from
    /// `throughput_mib_s`: what the simulator's capacity per vCPU is derived from, so
    /// that simulating the measured message rate and size gives the measured load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_mib_s: Option<f64>,
    /// Workers it needed.
    pub workers: f64,
    /// Their mean CPU utilization (0 to 1).
    pub mean_cpu: f64,
    /// Streaming Engine compute units per hour.
    pub secu_per_hour: f64,
    /// Throughput per worker, MB/s (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_per_worker_mb_s: Option<f64>,
    /// Measured latency, when published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Latency>,
    /// CPU per message whatever its size, vCPU-microseconds (measured by `flexrun
    /// calibrate` at two message sizes; absent in Google's figures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_us_per_message: Option<f64>,
    /// CPU per byte, vCPU-nanoseconds (with `vcpu_us_per_message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_ns_per_byte: Option<f64>,
}

/// The CPU a message costs: a part per message plus a part per byte, in vCPU time at
/// 100% busy.
///
/// ```
/// let t = flexrun_estimator::CpuTerms { vcpu_us_per_message: 40.0, vcpu_ns_per_byte: 50.0 };
/// assert!((t.vcpu_s(1000.0) - 90e-6).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuTerms {
    /// vCPU-microseconds per message, whatever its size.
    pub vcpu_us_per_message: f64,
    /// vCPU-nanoseconds per byte.
    pub vcpu_ns_per_byte: f64,
}

impl CpuTerms {
    /// vCPU-seconds for one message of `bytes`.
    pub fn vcpu_s(&self, bytes: f64) -> f64 {
        self.vcpu_us_per_message * 1e-6 + self.vcpu_ns_per_byte * 1e-9 * bytes
    }
}

impl Baseline {
    /// The two CPU terms: the file's, when it has them (Google's, calibrated to two
    /// published runs; `flexrun calibrate`'s, measured), or else all of the measured
    /// CPU (`workers` × `vcpus_per_worker` × `mean_cpu`) charged per byte of the input.
    pub fn cpu_terms(&self, vcpus_per_worker: f64) -> CpuTerms {
        match (self.vcpu_us_per_message, self.vcpu_ns_per_byte) {
            (None, None) => {
                let busy = self.workers * vcpus_per_worker * self.mean_cpu;
                CpuTerms {
                    vcpu_us_per_message: 0.0,
                    vcpu_ns_per_byte: busy / (self.input_mib_s() * crate::units::MIB) * 1e9,
                }
            }
            (us, ns) => CpuTerms { vcpu_us_per_message: us.unwrap_or(0.0), vcpu_ns_per_byte: ns.unwrap_or(0.0) },
        }
    }

    /// Bytes per second one worker of the baseline's machine processes at 100% CPU:
    /// the throughput divided by workers × mean CPU (assumes CPU grows linearly with
    /// throughput, the same assumption as Google's linear sizing rule).
    pub fn worker_capacity_bytes_s(&self) -> f64 {
        self.input_mib_s() * crate::units::MIB / (self.workers * self.mean_cpu.max(1e-9))
    }

    /// The measured input as message rate × message size, MiB/s (`input_mib_s`, or
    /// `throughput_mib_s` when the two are the same).
    pub fn input_mib_s(&self) -> f64 {
        self.input_mib_s.unwrap_or(self.throughput_mib_s)
    }
}

/// A baseline file: where the figures come from and one baseline per mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineFile {
    /// Who measured it.
    pub source: String,
    /// When.
    pub date: String,
    /// Template.
    pub template: String,
    /// Worker machine type of the measurement.
    pub machine_type: String,
    /// Typical message size, bytes.
    #[serde(default)]
    pub message_bytes: Option<f64>,
    /// Free-form description of the machine (for locally measured baselines).
    #[serde(default)]
    pub machine: Option<String>,
    /// vCPUs per worker, for a machine type the pricing file does not know (a local machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus_per_worker: Option<f64>,
    /// The baselines.
    pub baselines: Vec<Baseline>,
}

/// A baseline file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// The file cannot be read.
    #[error("baseline file {name}: cannot read it: {source}")]
    Read {
        /// File name.
        name: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Not YAML of the expected shape.
    #[error("baseline file {name}: {source}")]
    Yaml {
        /// File name.
        name: String,
        /// Cause.
        source: serde_yaml::Error,
    },
    /// Numbers that cannot be extrapolated from.
    #[error("baseline file {name}: {message}")]
    Invalid {
        /// File name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// No baseline for the mode asked for.
    #[error("baseline file {name} has no {mode} baseline")]
    NoMode {
        /// File name.
        name: String,
        /// Mode.
        mode: &'static str,
    },
}

impl BaselineFile {
    /// The one baseline loader: the file at `path`, or Google's published kafka-to-bq
    /// baselines when there is none. Returns the name to cite with it.
    pub fn load(path: Option<&std::path::Path>) -> Result<(String, BaselineFile), BaselineError> {
        match path {
            None => Ok((GOOGLE_KAFKA_TO_BQ_NAME.to_string(), google_kafka_to_bq())),
            Some(p) => {
                let name = p.display().to_string();
                let text =
                    std::fs::read_to_string(p).map_err(|source| BaselineError::Read { name: name.clone(), source })?;
                let file = BaselineFile::parse(&name, &text)?;
                Ok((name, file))
            }
        }
    }

    /// Parse and check a baseline file.
    pub fn parse(name: &str, yaml: &str) -> Result<BaselineFile, BaselineError> {
        let f: BaselineFile =
            serde_yaml::from_str(yaml).map_err(|source| BaselineError::Yaml { name: name.into(), source })?;
        for b in &f.baselines {
            let bad = |m: String| Err(BaselineError::Invalid { name: name.into(), message: m });
            if !(b.throughput_mib_s > 0.0 && b.throughput_mib_s.is_finite()) {
                return bad(format!("{} throughput_mib_s must be above 0", b.mode.as_str()));
            }
            if !(b.workers > 0.0 && b.workers.is_finite()) {
                return bad(format!("{} workers must be above 0", b.mode.as_str()));
            }
            if !(0.0..=1.0).contains(&b.mean_cpu) {
                return bad(format!("{} mean_cpu must be between 0 and 1", b.mode.as_str()));
            }
            if !(b.secu_per_hour >= 0.0 && b.secu_per_hour.is_finite()) {
                return bad(format!("{} secu_per_hour must not be negative", b.mode.as_str()));
            }
            for (field, v) in [("vcpu_us_per_message", b.vcpu_us_per_message), ("vcpu_ns_per_byte", b.vcpu_ns_per_byte)]
            {
                if v.is_some_and(|v| !(v >= 0.0 && v.is_finite())) {
                    return bad(format!("{} {field} must be a number of 0 or more", b.mode.as_str()));
                }
            }
            if b.vcpu_us_per_message.is_some_and(|us| us <= 0.0) && b.vcpu_ns_per_byte.is_none_or(|ns| ns <= 0.0) {
                return bad(format!(
                    "{} vcpu_us_per_message and vcpu_ns_per_byte cannot both be 0 (a message would cost no CPU)",
                    b.mode.as_str()
                ));
            }
        }
        if f.vcpus_per_worker.is_some_and(|v| !(v > 0.0 && v.is_finite())) {
            return Err(BaselineError::Invalid {
                name: name.into(),
                message: "vcpus_per_worker must be above 0".into(),
            });
        }
        if f.baselines.is_empty() {
            return Err(BaselineError::Invalid { name: name.into(), message: "no baselines".into() });
        }
        Ok(f)
    }

    /// The baseline for `mode`.
    pub fn for_mode(&self, name: &str, mode: Mode) -> Result<&Baseline, BaselineError> {
        self.baselines
            .iter()
            .find(|b| b.mode == mode)
            .ok_or(BaselineError::NoMode { name: name.into(), mode: mode.as_str() })
    }
}

/// The file name Google's built-in baselines are cited by.
pub const GOOGLE_KAFKA_TO_BQ_NAME: &str = "google-kafka-to-bq-e2-standard-2.yaml";

/// Google's published kafka-to-bq baselines (e2-standard-2), parsed once.
pub fn google_kafka_to_bq() -> BaselineFile {
    static CELL: std::sync::OnceLock<BaselineFile> = std::sync::OnceLock::new();
    CELL.get_or_init(|| {
        BaselineFile::parse(GOOGLE_KAFKA_TO_BQ_NAME, include_str!("../data/google-kafka-to-bq-e2-standard-2.yaml"))
            .expect("the shipped baseline is valid")
    })
    .clone()
}
