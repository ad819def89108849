//! flexrun's web server: the cost-estimate page, job dashboards with per-stage
//! latency, the JSON API behind them, and `/metrics` for Prometheus.
//!
//! Layout:
//! - [`state`]: the [`JobRegistry`] a running job publishes its time series and
//!   autoscaling decisions to.
//! - [`api`]: `/api/estimate` (pure, on `flexrun-estimator`), `/api/simulate` (a small
//!   sweep on `flexrun-simulate`: cost against p99 and its Pareto front), `/api/jobs`,
//!   `/api/jobs/{id}/metrics`; bad input is a 400 naming the field.
//! - [`metrics`]: `/metrics` with Dataflow's metric names.
//! - [`pages`]: the HTML pages; charts use uPlot, shipped inside the binary
//!   (`assets/uplot`), so nothing is fetched at run time.
//!
//! [`router`] builds the axum app (tests call it without a socket); [`serve`] binds it.

pub mod api;
pub mod metrics;
pub mod pages;
pub mod state;

pub use state::{DecisionView, JobRegistry, JobView, MetricsPoint, StageLatency, StatePoint, TopicPoint};

use axum::routing::get;
use axum::Router;

/// The application.
pub fn router(jobs: JobRegistry) -> Router {
    Router::new()
        .route("/", get(pages::estimate_page))
        .route("/estimate", get(pages::estimate_page))
        .route("/jobs", get(pages::jobs_page))
        .route("/jobs/{id}", get(pages::job_page))
        .route("/simulate", get(pages::simulate_page))
        .route("/api/estimate", get(api::estimate))
        .route("/api/simulate", get(api::simulate))
        .route("/api/jobs", get(api::jobs))
        .route("/api/jobs/{id}/metrics", get(api::job_metrics))
        .route("/api/jobs/{id}/autoscaling", get(api::job_autoscaling))
        .route(
            "/metrics",
            get(|axum::extract::State(j): axum::extract::State<JobRegistry>| async move {
                ([("content-type", "text/plain; version=0.0.4")], metrics::render(&j))
            }),
        )
        .route(
            "/assets/uplot.js",
            get(|| async {
                ([("content-type", "application/javascript"), ("cache-control", "max-age=86400")], pages::UPLOT_JS)
            }),
        )
        .route(
            "/assets/uplot.css",
            get(|| async { ([("content-type", "text/css"), ("cache-control", "max-age=86400")], pages::UPLOT_CSS) }),
        )
        .with_state(jobs)
}

/// Bind `addr` and serve until the process ends. Returns the bound address.
pub async fn serve(
    addr: &str,
    jobs: JobRegistry,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = router(jobs);
    let h = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "web server stopped");
        }
    });
    Ok((local, h))
}
