//! The JSON API: `/api/estimate`, `/api/jobs`, `/api/jobs/{id}/metrics`.

use crate::state::JobRegistry;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use flexrun_estimator as est;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

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
    /// Dollars per hour.
    pub per_hour: f64,
}

/// `/api/estimate`'s answer: the estimate and a curve around it for the chart.
#[derive(Debug, Serialize)]
pub struct EstimateResponse {
    /// The estimate.
    pub estimate: est::Estimate,
    /// Cost and workers from a tenth to twice the asked throughput.
    pub curve: Vec<CurvePoint>,
}

/// Parse the estimate query (`throughput`, `message_size`, `mode`, `machine_type`, `commitment`, `baseline`).
pub fn estimate_from_query(q: &HashMap<String, String>) -> Result<EstimateResponse, ApiError> {
    let known = ["throughput", "message_size", "mode", "machine_type", "commitment", "baseline"];
    if let Some(k) = q.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(ApiError::bad(k, format!("unknown field {k:?}; expected one of {}", known.join(", "))));
    }
    let t = q.get("throughput").map(String::as_str).unwrap_or("");
    if t.is_empty() {
        return Err(ApiError::bad("throughput", "throughput is required, e.g. 100MiB/s or 5000msg/s"));
    }
    let rate = est::Rate::parse(t).map_err(|e| ApiError::bad("throughput", e.to_string()))?;
    let baseline = match q.get("baseline").map(String::as_str).unwrap_or("google") {
        "google" | "" => est::google_kafka_to_bq(),
        other => return Err(ApiError::bad("baseline", format!("unknown baseline {other:?}; expected google"))),
    };
    let msg = match q.get("message_size").map(String::as_str).filter(|s| !s.is_empty()) {
        Some(s) => est::parse_size(s).map_err(|e| ApiError::bad("message_size", e.to_string()))?,
        None => baseline.message_bytes.unwrap_or(1024.0),
    };
    let mode = q
        .get("mode")
        .map(String::as_str)
        .unwrap_or("exactly-once")
        .parse::<est::Mode>()
        .map_err(|e| ApiError::bad("mode", e))?;
    let commitment = q
        .get("commitment")
        .map(String::as_str)
        .unwrap_or("none")
        .parse::<est::Commitment>()
        .map_err(|e| ApiError::bad("commitment", e))?;
    let machine_type = q.get("machine_type").cloned().unwrap_or_else(|| "e2-standard-2".into());
    let req = est::Request { throughput_bytes_s: rate.bytes_per_second(msg), mode, machine_type, commitment };
    let pricing = est::Pricing::us_central1();
    // The curve re-prices the same request at other throughputs.
    let name = "google-kafka-to-bq-e2-standard-2.yaml";
    let e = est::estimate(&req, name, &baseline, &pricing).map_err(|err| match err {
        est::EstimateError::MachineType { .. } => ApiError::bad("machine_type", err.to_string()),
        other => ApiError::bad("throughput", other.to_string()),
    })?;
    let curve = (1..=20)
        .map(|i| {
            let r = est::Request { throughput_bytes_s: req.throughput_bytes_s * i as f64 / 10.0, ..req.clone() };
            let p = est::estimate(&r, name, &baseline, &pricing).expect("same inputs, other throughput");
            CurvePoint { throughput_mib_s: p.throughput_mib_s, workers: p.workers, per_hour: p.per_hour }
        })
        .collect();
    Ok(EstimateResponse { estimate: e, curve })
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
