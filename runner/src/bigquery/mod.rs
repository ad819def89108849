//! BigQuery: REST for datasets, tables and schemas; gRPC Storage Write for rows.
//!
//! - [`rest`]: `gcp-bigquery-client`'s REST client (schema lookup, dead-letter table
//!   creation, and the helpers the local stack and tests use).
//! - [`errors`]: what Storage Write's answers mean (retryable, a stream gone, an
//!   offset already written), from the API's documented rules.
//! - [`write`]: the crate's generated `BigQueryWriteClient` on a channel built here:
//!   plain HTTP/2 to the emulator, TLS with Application Default Credentials to Google.
//! - [`rows`]: a batch's rows, written once in the wire form a request carries.
//! - [`framed`]: AppendRows requests framed from a batch's rows, and the call's body.
//! - [`proto`]: the run-time row descriptor and wire-format helpers.
//! - [`schema`]: a table's schema (columns, modes, fingerprint).
//! - [`evolution`]: the schema changes BigQuery allows (a NULLABLE column added, a
//!   REQUIRED one relaxed) and which a message asks for.
//! - [`layout`]: partitioning and clustering of a table flexrun creates, checked by
//!   BigQuery's documented rules.
//! - [`target`]: a retrying append target (reconnect, stream replacement, unbounded
//!   jittered backoff on transient errors).
//!
//! [`Endpoints::resolve`] decides where both go: `BIGQUERY_EMULATOR_HOST` (REST,
//! `host:port`) and `BIGQUERY_STORAGE_EMULATOR_HOST` (gRPC, `host:port`), or the
//! matching flags; with neither, Google's endpoints.

pub mod errors;
pub mod evolution;
pub mod framed;
pub mod layout;
pub mod proto;
pub mod rest;
pub mod rows;
pub mod schema;
pub mod target;
pub mod write;

use std::fmt;

/// Google's REST base URL.
pub const GOOGLE_REST_URL: &str = "https://bigquery.googleapis.com/bigquery/v2";
/// Google's Storage Write gRPC endpoint.
pub const GOOGLE_STORAGE_URL: &str = "https://bigquerystorage.googleapis.com";
/// Environment variable naming the emulator's REST `host:port`.
pub const ENV_REST_EMULATOR: &str = "BIGQUERY_EMULATOR_HOST";
/// Environment variable naming the emulator's gRPC `host:port`.
pub const ENV_GRPC_EMULATOR: &str = "BIGQUERY_STORAGE_EMULATOR_HOST";

/// A fully qualified table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableRef {
    /// Project id.
    pub project: String,
    /// Dataset id.
    pub dataset: String,
    /// Table id.
    pub table: String,
}

/// A table spec that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid table {0:?}: expected project:dataset.table or project.dataset.table")]
pub struct BadTableSpec(pub String);

impl TableRef {
    /// Parse `project:dataset.table` or `project.dataset.table`.
    pub fn parse(spec: &str) -> Result<TableRef, BadTableSpec> {
        let bad = || BadTableSpec(spec.to_string());
        let (project, rest) = match spec.split_once(':') {
            Some((p, r)) => (p, r),
            None => spec.split_once('.').ok_or_else(bad)?,
        };
        let (dataset, table) = rest.split_once('.').ok_or_else(bad)?;
        if [project, dataset, table].iter().any(|s| s.is_empty() || s.contains(['.', ':', '/'])) {
            return Err(bad());
        }
        Ok(TableRef { project: project.into(), dataset: dataset.into(), table: table.into() })
    }

    /// `projects/P/datasets/D/tables/T`, the Storage Write parent.
    pub fn path(&self) -> String {
        format!("projects/{}/datasets/{}/tables/{}", self.project, self.dataset, self.table)
    }

    /// The table a write stream belongs to, from its name
    /// (`projects/P/datasets/D/tables/T/streams/S`).
    pub fn from_stream(stream: &str) -> Option<TableRef> {
        let parts: Vec<&str> = stream.split('/').collect();
        match parts.as_slice() {
            ["projects", p, "datasets", d, "tables", t, "streams", _] => {
                Some(TableRef { project: p.to_string(), dataset: d.to_string(), table: t.to_string() })
            }
            _ => None,
        }
    }

    /// The table's `_default` stream.
    pub fn default_stream(&self) -> String {
        format!("{}/streams/_default", self.path())
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}.{}", self.project, self.dataset, self.table)
    }
}

/// Where REST and gRPC calls go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// REST base URL (ends in `/bigquery/v2`).
    pub rest: String,
    /// gRPC URL (`http://host:port` or Google's `https://...`).
    pub grpc: String,
    /// True when talking to an emulator: no credentials, plain HTTP/2.
    pub emulator: bool,
}

impl Endpoints {
    /// From explicit `host:port` overrides (flags), falling back to the environment,
    /// then to Google. Giving only one of the two overrides is an error.
    pub fn resolve(rest_override: Option<&str>, grpc_override: Option<&str>) -> Result<Endpoints, String> {
        let rest = rest_override
            .map(str::to_string)
            .or_else(|| std::env::var(ENV_REST_EMULATOR).ok())
            .filter(|s| !s.is_empty());
        let grpc = grpc_override
            .map(str::to_string)
            .or_else(|| std::env::var(ENV_GRPC_EMULATOR).ok())
            .filter(|s| !s.is_empty());
        match (rest, grpc) {
            (None, None) => Ok(Endpoints { rest: GOOGLE_REST_URL.into(), grpc: GOOGLE_STORAGE_URL.into(), emulator: false }),
            (Some(r), Some(g)) => Ok(Endpoints { rest: format!("{}/bigquery/v2", with_scheme(&r)), grpc: with_scheme(&g), emulator: true }),
            (Some(_), None) => Err(format!("the BigQuery REST emulator is set but not the Storage Write one: set {ENV_GRPC_EMULATOR} or --bigquery-grpc-endpoint (host:port)")),
            (None, Some(_)) => Err(format!("the BigQuery Storage Write emulator is set but not the REST one: set {ENV_REST_EMULATOR} or --bigquery-endpoint (host:port)")),
        }
    }
}

fn with_scheme(hostport: &str) -> String {
    let h = hostport.trim_end_matches('/');
    if h.starts_with("http://") || h.starts_with("https://") {
        h.to_string()
    } else {
        format!("http://{h}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_specs() {
        let t = TableRef::parse("p:d.t").unwrap();
        assert_eq!(t, TableRef::parse("p.d.t").unwrap());
        assert_eq!(t.path(), "projects/p/datasets/d/tables/t");
        assert_eq!(t.to_string(), "p:d.t");
        for bad in ["p:d", "d.t", "p:d.t.x", ":d.t", "p:.t"] {
            assert!(TableRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_need_both_overrides() {
        let e = Endpoints::resolve(Some("127.0.0.1:1"), Some("127.0.0.1:2")).unwrap();
        assert_eq!(e.rest, "http://127.0.0.1:1/bigquery/v2");
        assert_eq!(e.grpc, "http://127.0.0.1:2");
        assert!(e.emulator);
        if std::env::var(ENV_GRPC_EMULATOR).is_err() {
            assert!(Endpoints::resolve(Some("127.0.0.1:1"), None).unwrap_err().contains(ENV_GRPC_EMULATOR));
        }
    }
}
