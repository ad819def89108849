//! The JSON API: `/api/estimate`, `/api/jobs`, `/api/jobs/{id}/metrics`.

use crate::state::JobRegistry;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use flexrun_estimator as est;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A 400 or 404 with a message naming the field.
#[derive(Debug, Serialize)]
pub struct ApiError {
    /// The field or path part at fault.
    pub field: String,
    /// What is wrong and what is expected.
    pub error: String,
    #[serde(skip)]
    status: StatusCode,
}

impl ApiError {
    fn bad(field: &str, error: impl Into<String>) -> ApiError {
        ApiError { field: field.into(), error: error.into(), status: StatusCode::BAD_REQUEST }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self)).into_response()
    }
}

/// One point of the cost curve.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct CurvePoint {
    /// Throughput, MiB/s.
    pub throughput_mib_s: f64,
    /// Workers billed.
    pub workers: u32,
    /// The whole pipeline's dollars per hour in month 1.
    pub per_hour: f64,
    /// Dataflow's part of it.
    pub dataflow_per_hour: f64,
}

/// One delivery mode's bill, for the chart that sets the two side by side.
#[derive(Debug, Serialize)]
pub struct ModeBill {
    /// The mode.
    pub mode: est::Mode,
    /// Workers billed.
    pub workers: u32,
    /// Per-line totals, month 1 and month 12.
    pub totals: est::Totals,
}

/// `/api/estimate`'s answer: the estimate, both modes' bills and a curve for the chart.
#[derive(Debug, Serialize)]
pub struct EstimateResponse {
    /// The estimate.
    pub estimate: est::Estimate,
    /// Exactly-once's and at-least-once's bills with the same inputs.
    pub modes: Vec<ModeBill>,
    /// Cost and workers from a tenth to twice the asked throughput.
    pub curve: Vec<CurvePoint>,
}

/// The fields `/api/estimate` reads.
pub const ESTIMATE_FIELDS: [&str; 17] = [
    "throughput",
    "message_size",
    "mode",
    "machine_type",
    "commitment",
    "baseline",
    "region",
    "lines",
    "kafka",
    "kafka_retention",
    "kafka_reads",
    "bq_retention",
    "bq_partitioning",
    "cdc_table_size",
    "cdc_max_staleness",
    "row_bytes",
    "dataset_location",
];

type Get<'a> = dyn Fn(&str) -> Option<&'a str> + 'a;

fn retention(get: &Get, field: &str, default: Option<&str>) -> Result<Option<f64>, ApiError> {
    match get(field).or(default) {
        None => Ok(None),
        Some(s) => est::parse_duration_or_zero(s)
            .map(|d| Some(d.as_secs_f64()))
            .map_err(|e| ApiError::bad(field, format!("{e}; a retention cannot be below zero"))),
    }
}

/// The pipeline options from the query, each error naming its field.
fn pipeline_from(get: &Get) -> Result<est::PipelineOptions, ApiError> {
    let d = est::PipelineOptions::default();
    let o = est::PipelineOptions {
        lines: match get("lines") {
            Some(s) => est::Line::parse_list(s).map_err(|e| ApiError::bad("lines", e))?,
            None => d.lines,
        },
        kafka: get("kafka").unwrap_or("own").parse().map_err(|e| ApiError::bad("kafka", e))?,
        kafka_retention_hours: retention(get, "kafka_retention", Some("7d"))?.unwrap_or(0.0) / 3600.0,
        bq_retention_days: retention(get, "bq_retention", None)?.map(|s| s / 86400.0),
        partitioning: get("bq_partitioning")
            .unwrap_or("day")
            .parse()
            .map_err(|e| ApiError::bad("bq_partitioning", e))?,
        cdc: cdc_from(get)?,
        kafka_follower_fetch: match get("kafka_reads").unwrap_or("leader") {
            "leader" | "" => false,
            "local-follower" => true,
            other => {
                return Err(ApiError::bad(
                    "kafka_reads",
                    format!("unknown {other:?}: expected leader or local-follower"),
                ))
            }
        },
    };
    o.check().map_err(|e| ApiError::bad("lines", e))?;
    Ok(o)
}

/// `cdc_table_size` and `cdc_max_staleness`, given together, when the rows are CDC changes.
fn cdc_from(get: &Get) -> Result<Option<est::pipeline::CdcTable>, ApiError> {
    let (size, staleness) =
        (get("cdc_table_size").filter(|s| !s.is_empty()), get("cdc_max_staleness").filter(|s| !s.is_empty()));
    let (Some(size), Some(staleness)) = (size, staleness) else {
        return match size.or(staleness) {
            None => Ok(None),
            Some(_) => Err(ApiError::bad("cdc_table_size", "cdc_table_size and cdc_max_staleness go together")),
        };
    };
    let bytes = est::parse_size(size).map_err(|e| ApiError::bad("cdc_table_size", e.to_string()))?;
    let d = est::parse_duration(staleness).map_err(|e| ApiError::bad("cdc_max_staleness", e))?;
    Ok(Some(est::pipeline::CdcTable {
        table_gib: bytes / (1u64 << 30) as f64,
        max_staleness_min: d.as_secs_f64() / 60.0,
    }))
}

/// The request the query describes, and its baseline.
fn request_from(get: &Get) -> Result<(est::Request, est::BaselineFile), ApiError> {
    let t = get("throughput").unwrap_or("");
    if t.is_empty() {
        return Err(ApiError::bad("throughput", "throughput is required, e.g. 100MiB/s or 5000msg/s"));
    }
    let rate = est::Rate::parse(t).map_err(|e| ApiError::bad("throughput", e.to_string()))?;
    let baseline = match get("baseline").unwrap_or("google") {
        "google" => est::google_kafka_to_bq(),
        other => return Err(ApiError::bad("baseline", format!("unknown baseline {other:?}; expected google"))),
    };
    let msg = match get("message_size") {
        Some(s) => Some(est::parse_size(s).map_err(|e| ApiError::bad("message_size", e.to_string()))?),
        None => None,
    };
    let mode = get("mode").unwrap_or("exactly-once").parse::<est::Mode>().map_err(|e| ApiError::bad("mode", e))?;
    let commitment =
        get("commitment").unwrap_or("none").parse::<est::Commitment>().map_err(|e| ApiError::bad("commitment", e))?;
    let machine_type = get("machine_type").unwrap_or("e2-standard-2");
    let mut req = est::Request::for_rate(rate, msg, &baseline, mode, machine_type, commitment);
    req.pipeline = pipeline_from(get)?;
    req.row_bytes = match get("row_bytes") {
        Some(s) => Some(est::parse_size(s).map_err(|e| ApiError::bad("row_bytes", e.to_string()))?),
        None => None,
    };
    if let Some(loc) = get("dataset_location").filter(|l| !l.is_empty()) {
        req.dataset_location = loc.to_string();
    }
    Ok((req, baseline))
}

fn field_of(err: &est::EstimateError) -> &'static str {
    match err {
        est::EstimateError::MachineType { .. } => "machine_type",
        est::EstimateError::MessageSize(_) => "message_size",
        est::EstimateError::Row(_) => "row_bytes",
        est::EstimateError::Pipeline(_) => "lines",
        est::EstimateError::Location(_) => "dataset_location",
        _ => "throughput",
    }
}

/// Parse the estimate query (the fields in [`ESTIMATE_FIELDS`]).
pub fn estimate_from_query(q: &HashMap<String, String>) -> Result<EstimateResponse, ApiError> {
    if let Some(k) = q.keys().find(|k| !ESTIMATE_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad(k, format!("unknown field {k:?}; expected one of {}", ESTIMATE_FIELDS.join(", "))));
    }
    let get = |k: &str| q.get(k).map(String::as_str).map(str::trim).filter(|s| !s.is_empty());
    let (req, baseline) = request_from(&get)?;
    let pricing =
        est::Pricing::for_region(get("region").unwrap_or("us-central1")).map_err(|e| ApiError::bad("region", e))?;
    let run = |r: &est::Request| est::estimate(r, est::GOOGLE_KAFKA_TO_BQ_NAME, &baseline, &pricing);
    let e = run(&req).map_err(|err| ApiError::bad(field_of(&err), err.to_string()))?;
    let modes = [est::Mode::ExactlyOnce, est::Mode::AtLeastOnce]
        .into_iter()
        .map(|mode| {
            let p = run(&est::Request { mode, ..req.clone() }).expect("same inputs, other mode");
            ModeBill { mode, workers: p.workers, totals: p.totals }
        })
        .collect();
    // The curve re-prices the same request at other throughputs.
    let curve = (1..=20)
        .map(|i| {
            let r = est::Request { throughput_bytes_s: req.throughput_bytes_s * i as f64 / 10.0, ..req.clone() };
            let p = run(&r).expect("same inputs, other throughput");
            let dataflow = p.totals.lines.iter().filter(|l| l.line == est::Line::Dataflow).map(|l| l.per_hour).sum();
            CurvePoint {
                throughput_mib_s: p.throughput_mib_s,
                workers: p.workers,
                per_hour: p.per_hour,
                dataflow_per_hour: dataflow,
            }
        })
        .collect();
    Ok(EstimateResponse { estimate: e, modes, curve })
}

/// `GET /api/estimate?throughput=100MiB/s&mode=exactly-once&...`
pub async fn estimate(Query(q): Query<HashMap<String, String>>) -> Result<Json<EstimateResponse>, ApiError> {
    estimate_from_query(&q).map(Json)
}

/// A job in the list.
#[derive(Debug, Serialize, Deserialize)]
pub struct JobSummary {
    /// Job name.
    pub id: String,
    /// Template.
    pub template: String,
    /// Delivery mode.
    pub delivery: String,
    /// running, drained or failed.
    pub status: String,
    /// The latest point, if any.
    pub latest: Option<crate::state::MetricsPoint>,
}

/// `GET /api/jobs`
pub async fn jobs(State(reg): State<JobRegistry>) -> Json<Vec<JobSummary>> {
    Json(
        reg.all()
            .into_iter()
            .map(|j| JobSummary {
                latest: j.points.back().cloned(),
                id: j.id,
                template: j.template,
                delivery: j.delivery,
                status: j.status,
            })
            .collect(),
    )
}

/// `GET /api/jobs/{id}/metrics`
pub async fn job_metrics(
    State(reg): State<JobRegistry>,
    Path(id): Path<String>,
) -> Result<Json<crate::state::JobView>, ApiError> {
    reg.get(&id).map(Json).ok_or(ApiError {
        field: "id".into(),
        error: format!("no job {id:?}; see /api/jobs"),
        status: StatusCode::NOT_FOUND,
    })
}

/// The settings the simulate view sweeps: machine types × utilization hints × policies.
pub const SWEEP_MACHINES: [&str; 3] = ["e2-standard-2", "e2-standard-4", "e2-standard-8"];
/// Utilization hints the simulate view sweeps.
pub const SWEEP_HINTS: [f64; 3] = [0.5, 0.65, 0.8];
/// Autoscaling policies the simulate view sweeps.
pub const SWEEP_POLICIES: [&str; 2] = ["dataflow", "ds2"];

/// `/api/simulate`'s answer: one row per configuration, the front marked, and the
/// cheapest within the p99 limit.
#[derive(Debug, Serialize)]
pub struct SimulateResponse {
    /// The rows, in sweep order.
    pub configurations: Vec<flexrun_simulate::sweep::SweepRow>,
    /// The p99 limit, ms.
    pub p99_limit_ms: f64,
    /// Index of the cheapest row within the limit.
    pub chosen: Option<usize>,
    /// Virtual hours per configuration.
    pub hours: f64,
}

/// Parse the simulate query (`throughput`, `message_size`, `mode`, `partitions`,
/// `p99_limit`, `profile`, `hours`, `streams`, `dataset_location`) into the sweep's candidates.
pub fn sweep_from_query(
    q: &HashMap<String, String>,
) -> Result<(Vec<flexrun_simulate::sweep::Candidate>, f64), ApiError> {
    use flexrun_simulate::{MessageSize, Profile, SimConfig, Workload};
    let known = [
        "throughput",
        "message_size",
        "mode",
        "partitions",
        "p99_limit",
        "profile",
        "hours",
        "streams",
        "dataset_location",
    ];
    if let Some(k) = q.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::bad(k, format!("unknown field {k:?}; expected one of {}", known.join(", "))));
    }
    let get = |k: &str| q.get(k).map(String::as_str).map(str::trim).filter(|s| !s.is_empty());
    let rate = est::Rate::parse(get("throughput").unwrap_or(""))
        .map_err(|e| ApiError::bad("throughput", format!("{e} (e.g. 100MiB/s or 5000msg/s)")))?;
    let message = MessageSize::parse(get("message_size").unwrap_or("1KiB"))
        .map_err(|e| ApiError::bad("message_size", e.to_string()))?;
    let mode = get("mode").unwrap_or("exactly-once").parse::<est::Mode>().map_err(|e| ApiError::bad("mode", e))?;
    let partitions = match get("partitions").unwrap_or("1000").parse::<u32>() {
        Ok(n) if (1..=100_000).contains(&n) => n,
        _ => return Err(ApiError::bad("partitions", "expected a whole number from 1 to 100000")),
    };
    let limit = est::parse_duration(get("p99_limit").unwrap_or("10s")).map_err(|e| ApiError::bad("p99_limit", e))?;
    let profile =
        Profile::parse(get("profile").unwrap_or("constant")).map_err(|e| ApiError::bad("profile", e.to_string()))?;
    let hours = match get("hours").unwrap_or("6").parse::<f64>() {
        Ok(h) if (1.0..=48.0).contains(&h) => h,
        _ => return Err(ApiError::bad("hours", "expected virtual hours from 1 to 48")),
    };
    // 400, as in the published benchmark's command; exactly-once batches fill per stream.
    let streams = match get("streams").unwrap_or("400").parse::<u32>() {
        Ok(n) if (1..=10_000).contains(&n) => n as f64,
        _ => return Err(ApiError::bad("streams", "expected numStorageWriteApiStreams from 1 to 10000")),
    };
    let quota = flexrun_simulate::WriteQuota::google(get("dataset_location").unwrap_or("US"))
        .map_err(|e| ApiError::bad("dataset_location", e))?;
    let mean = message.mean();
    let workload = Workload {
        base_records_per_s: rate.bytes_per_second(mean) / mean,
        message,
        partitions,
        duration_s: hours * 3600.0,
        profile,
        noise: flexrun_simulate::DEFAULT_NOISE,
    };
    check_work(hours, partitions)?;
    let pricing = est::Pricing::us_central1();
    let mut out = Vec::new();
    for machine in SWEEP_MACHINES {
        for hint in SWEEP_HINTS {
            for policy in SWEEP_POLICIES {
                let pool = flexrun_autoscaler::ScalingConfig {
                    max_workers: 1000,
                    utilization_hint: hint,
                    policy: policy.parse().expect("a known policy"),
                    vcpus_per_worker: pricing.machine_types[machine].vcpus,
                    ..Default::default()
                };
                let settings = vec![
                    ("machine type".to_string(), machine.to_string()),
                    ("utilization hint".to_string(), hint.to_string()),
                    ("policy".to_string(), policy.to_string()),
                ];
                out.push(flexrun_simulate::sweep::Candidate {
                    settings,
                    config: SimConfig {
                        write_quota: Some(quota.clone()),
                        ..SimConfig::google(workload.clone(), mode, pool, machine, streams)
                    },
                });
            }
        }
    }
    Ok((out, limit.as_secs_f64() * 1000.0))
}

/// The most simulated work one `/api/simulate` request may ask for, in partition-seconds:
/// virtual seconds × (partitions + the largest pool, 1,000 workers) × the sweep's
/// configurations. Each unit is one partition's or worker's flow for one virtual second;
/// on a 2-core machine 3.1e9 units (24 h over 1,000 partitions) answered in 0.56 s. The
/// default request (6 h, 1,000 partitions) is a fifth of the bound.
pub const MAX_SIMULATED_WORK: f64 = 4e9;

/// The simulated work a sweep of `hours` over `partitions` implies (see
/// [`MAX_SIMULATED_WORK`]).
pub fn simulated_work(hours: f64, partitions: u32) -> f64 {
    let configurations = (SWEEP_MACHINES.len() * SWEEP_HINTS.len() * SWEEP_POLICIES.len()) as f64;
    flexrun_simulate::work_units(hours * 3600.0, partitions, 1000) * configurations
}

fn check_work(hours: f64, partitions: u32) -> Result<(), ApiError> {
    let work = simulated_work(hours, partitions);
    if work <= MAX_SIMULATED_WORK {
        return Ok(());
    }
    Err(ApiError::bad(
        "hours, partitions",
        format!(
            "{hours} virtual hours over {partitions} partitions is {work:.2e} units of simulated work, over the bound of {MAX_SIMULATED_WORK:.0e} (virtual seconds x (partitions + 1,000 workers) x {} configurations); ask for fewer hours or partitions, or run `flexrun simulate` on your own machine",
            (SWEEP_MACHINES.len() * SWEEP_HINTS.len() * SWEEP_POLICIES.len())
        ),
    ))
}

/// One simulation at a time: a sweep keeps every core busy, and a second would only slow
/// both. A request that finds it taken is answered 429 at once.
static SIM_SLOT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
static SIMS_RUNNING: AtomicUsize = AtomicUsize::new(0);
static SIMS_CANCELLED: AtomicU64 = AtomicU64::new(0);

/// Sweeps running now (this process).
pub fn simulations_running() -> usize {
    SIMS_RUNNING.load(Ordering::SeqCst)
}

/// Sweeps given up because their client went away (this process).
pub fn simulations_cancelled() -> u64 {
    SIMS_CANCELLED.load(Ordering::SeqCst)
}

/// Sets the sweep's stop flag when the request's future is dropped: hyper drops it when
/// the client disconnects, so a sweep nobody waits for stops within one step.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// `GET /api/simulate?throughput=100MiB/s&...`: a small sweep in virtual time, on a
/// blocking thread, bounded ([`MAX_SIMULATED_WORK`]), one at a time, and stopped if the
/// client goes away.
pub async fn simulate(Query(q): Query<HashMap<String, String>>) -> Result<Json<SimulateResponse>, ApiError> {
    let (cands, limit) = sweep_from_query(&q)?;
    let hours = cands.first().map_or(0.0, |c| c.config.workload.duration_s / 3600.0);
    let Ok(_slot) = SIM_SLOT.try_acquire() else {
        return Err(ApiError {
            field: "".into(),
            error: "another simulation is running on this server; try again when it has finished".into(),
            status: StatusCode::TOO_MANY_REQUESTS,
        });
    };
    let stop = Arc::new(AtomicBool::new(false));
    let _guard = StopOnDrop(stop.clone());
    let rows = tokio::task::spawn_blocking(move || {
        SIMS_RUNNING.fetch_add(1, Ordering::SeqCst);
        let rows = flexrun_simulate::sweep::run_until(&cands, &|_| {}, &stop);
        if rows.is_none() {
            SIMS_CANCELLED.fetch_add(1, Ordering::SeqCst);
        }
        SIMS_RUNNING.fetch_sub(1, Ordering::SeqCst);
        rows
    })
    .await
    .map_err(|e| ApiError {
        field: "".into(),
        error: format!("the simulation failed: {e}"),
        status: StatusCode::INTERNAL_SERVER_ERROR,
    })?
    .expect("stopped only when this request is gone");
    let chosen = flexrun_simulate::sweep::cheapest_within(&rows, limit);
    Ok(Json(SimulateResponse { configurations: rows, p99_limit_ms: limit, chosen, hours }))
}

/// One autoscaling event, shaped like Dataflow's AutoscalingEvent.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct AutoscalingEvent {
    /// Seconds since the job started.
    pub t_s: f64,
    /// `TARGET_NUM_WORKERS_CHANGED` or `NO_CHANGE`.
    pub event_type: String,
    /// Workers before.
    pub current_num_workers: u32,
    /// Workers wanted.
    pub target_num_workers: u32,
    /// In Dataflow's job-log words.
    pub description: String,
    /// The rationale Dataflow's chart shows.
    pub rationale: String,
}

/// `GET /api/jobs/{id}/autoscaling`: the job's autoscaling history, oldest first.
pub async fn job_autoscaling(
    State(reg): State<JobRegistry>,
    Path(id): Path<String>,
) -> Result<Json<Vec<AutoscalingEvent>>, ApiError> {
    let j = reg.get(&id).ok_or(ApiError {
        field: "id".into(),
        error: format!("no job {id:?}"),
        status: StatusCode::NOT_FOUND,
    })?;
    Ok(Json(
        j.decisions
            .iter()
            .map(|d| AutoscalingEvent {
                t_s: d.t_s,
                event_type: if d.to != d.from { "TARGET_NUM_WORKERS_CHANGED" } else { "NO_CHANGE" }.into(),
                current_num_workers: d.from,
                target_num_workers: d.to,
                description: d.description.clone(),
                rationale: d.rationale.clone(),
            })
            .collect(),
    ))
}
