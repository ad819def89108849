//! REST calls through `gcp-bigquery-client`.

use super::{Endpoints, TableRef};
use crate::bigquery::layout::TableLayout;
use crate::bigquery::schema::{Schema, SchemaError};
use async_trait::async_trait;
use gcp_bigquery_client::auth::Authenticator;
use gcp_bigquery_client::error::BQError;
use gcp_bigquery_client::model::clustering::Clustering;
use gcp_bigquery_client::model::dataset::Dataset;
use gcp_bigquery_client::model::query_request::QueryRequest;
use gcp_bigquery_client::model::table::Table;
use gcp_bigquery_client::model::table_schema::TableSchema;
use gcp_bigquery_client::model::time_partitioning::TimePartitioning;
use gcp_bigquery_client::Client;
use std::sync::Arc;

/// REST failures, with the table they concern.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// The client could not be built (credentials, URL).
    #[error("cannot build the BigQuery client for {endpoint}: {source}")]
    Client {
        /// REST base URL.
        endpoint: String,
        /// Cause.
        source: Box<BQError>,
    },
    /// The table does not exist or cannot be read.
    #[error("cannot read table {table} ({endpoint}): {source}")]
    GetTable {
        /// Table.
        table: TableRef,
        /// REST base URL.
        endpoint: String,
        /// Cause.
        source: Box<BQError>,
    },
    /// The table has a schema that flexrun cannot map onto.
    #[error("table {table}: {source}")]
    Schema {
        /// Table.
        table: TableRef,
        /// Cause.
        source: Box<SchemaError>,
    },
    /// tables.insert failed.
    #[error("BigQuery could not create table {table}: {why}")]
    Create {
        /// Table.
        table: TableRef,
        /// BigQuery's answer.
        why: String,
    },
    /// A table's schema could not be changed (BigQuery's answer says why).
    #[error("BigQuery refused {what}: {why}")]
    Patch {
        /// The call and the changes.
        what: String,
        /// BigQuery's answer.
        why: String,
    },
    /// A query that did not complete, or whose pages could not all be read.
    #[error(
        "BigQuery query {sql:?} did not complete with all its pages ({rows} rows read); nothing was taken from it"
    )]
    Incomplete {
        /// The query.
        sql: String,
        /// Rows read before it gave up.
        rows: usize,
    },
    /// Any other call.
    #[error("BigQuery {what}: {source}")]
    Call {
        /// What was attempted.
        what: String,
        /// Cause.
        source: Box<BQError>,
    },
}

impl RestError {
    /// Whether BigQuery answered HTTP 400 (for a query: its text is invalid, as
    /// `invalidQuery` in BigQuery's error table).
    pub fn is_bad_request(&self) -> bool {
        let source = match self {
            RestError::Call { source, .. } | RestError::Client { source, .. } | RestError::GetTable { source, .. } => {
                source
            }
            _ => return false,
        };
        matches!(source.as_ref(), BQError::ResponseError { error } if error.error.code == 400)
    }
}

impl RestError {
    /// Whether BigQuery answered HTTP 404 (`notFound`: the table or dataset does not exist).
    pub fn is_not_found(&self) -> bool {
        match self {
            RestError::GetTable { source, .. } | RestError::Call { source, .. } => {
                matches!(source.as_ref(), BQError::ResponseError { error } if error.error.code == 404)
            }
            _ => false,
        }
    }

    /// Whether the call may succeed if tried again: a transport failure, HTTP 429, a
    /// 5xx, or a 403 whose reason is `rateLimitExceeded` (BigQuery's error table:
    /// `rateLimitExceeded`, `backendError` and `internalError` are retried with
    /// exponential backoff; table metadata updates past "5 operations per 10 seconds"
    /// per table are answered 403 `rateLimitExceeded`). Any other 4xx will be answered
    /// the same way again.
    pub fn is_transient(&self) -> bool {
        let code = |c: i64| c == 429 || (500..600).contains(&c);
        match self {
            RestError::Call { source, .. } | RestError::Client { source, .. } | RestError::GetTable { source, .. } => {
                match source.as_ref() {
                    BQError::ResponseError { error } => {
                        let reasons = error.error.errors.iter().filter_map(|e| e.get("reason"));
                        code(error.error.code) || reasons.into_iter().any(|r| r == RATE_LIMITED)
                    }
                    BQError::RequestError(_) => true,
                    _ => false,
                }
            }
            RestError::Patch { why, .. } => {
                let status = why.split_whitespace().next().and_then(|c| c.parse().ok());
                status.is_none_or(code) || (status == Some(403) && why.contains(RATE_LIMITED))
            }
            _ => false,
        }
    }
}

/// The reason BigQuery gives a request over a rate limit (with HTTP 403).
const RATE_LIMITED: &str = "rateLimitExceeded";

/// The emulator checks no credentials; this hands the client a fixed token.
#[derive(Clone)]
struct NoAuth;

#[async_trait]
impl Authenticator for NoAuth {
    async fn access_token(&self) -> Result<String, BQError> {
        Ok("flexrun-emulator".into())
    }
}

/// The REST client for `endpoints`.
pub async fn client(endpoints: &Endpoints) -> Result<Client, RestError> {
    let mut b = gcp_bigquery_client::client_builder::ClientBuilder::new();
    b.with_v2_base_url(endpoints.rest.clone());
    let r = if endpoints.emulator {
        b.build_from_authenticator(Arc::new(NoAuth)).await
    } else {
        b.build_from_application_default_credentials().await
    };
    r.map_err(|source| RestError::Client { endpoint: endpoints.rest.clone(), source: Box::new(source) })
}

fn to_schema(table: &TableRef, s: &TableSchema) -> Result<Schema, RestError> {
    let json = serde_json::to_value(s).expect("TableSchema serializes");
    Schema::from_json(&json).map_err(|source| RestError::Schema { table: table.clone(), source: Box::new(source) })
}

fn from_schema(s: &Schema) -> TableSchema {
    serde_json::from_value(serde_json::json!({ "fields": s.to_json() })).expect("schema JSON converts")
}

/// The destination table's schema (the table must exist: Google's JSON path uses CREATE_NEVER).
pub async fn table_schema(c: &Client, endpoints: &Endpoints, t: &TableRef) -> Result<Schema, RestError> {
    let table = c.table().get(&t.project, &t.dataset, &t.table, None).await.map_err(|source| RestError::GetTable {
        table: t.clone(),
        endpoint: endpoints.rest.clone(),
        source: Box::new(source),
    })?;
    to_schema(t, &table.schema)
}

/// Create the dataset if it is missing.
pub async fn ensure_dataset(c: &Client, project: &str, dataset: &str) -> Result<(), RestError> {
    if c.dataset().get(project, dataset).await.is_ok() {
        return Ok(());
    }
    match c.dataset().create(Dataset::new(project, dataset)).await {
        Ok(_) => Ok(()),
        // Created meanwhile by someone else.
        Err(_) if c.dataset().get(project, dataset).await.is_ok() => Ok(()),
        Err(source) => {
            Err(RestError::Call { what: format!("create dataset {project}:{dataset}"), source: Box::new(source) })
        }
    }
}

/// Create the table with `schema` if it is missing; return its actual schema.
pub async fn ensure_table(
    c: &Client,
    endpoints: &Endpoints,
    t: &TableRef,
    schema: &Schema,
) -> Result<Schema, RestError> {
    ensure_table_laid_out(c, endpoints, t, schema, &TableLayout::default()).await
}

/// The table resource `tables.insert` takes for `schema` laid out as `layout`.
fn new_table(t: &TableRef, schema: &Schema, layout: &TableLayout) -> Table {
    let mut table = Table::new(&t.project, &t.dataset, &t.table, from_schema(schema));
    if let Some(p) = &layout.partitioning {
        let mut tp = TimePartitioning::new(p.granularity.as_str().to_string());
        tp.field = p.field.clone();
        tp.expiration_ms = p.expiration_ms();
        table = table.time_partitioning(tp);
    }
    if !layout.clustering.is_empty() {
        table = table.clustering(Clustering { fields: Some(layout.clustering.clone()) });
    }
    table
}

/// [`ensure_table`], creating a missing table partitioned and clustered as `layout`
/// says (an existing table is used as it is).
pub async fn ensure_table_laid_out(
    c: &Client,
    endpoints: &Endpoints,
    t: &TableRef,
    schema: &Schema,
    layout: &TableLayout,
) -> Result<Schema, RestError> {
    if let Ok(s) = table_schema(c, endpoints, t).await {
        return Ok(s);
    }
    ensure_dataset(c, &t.project, &t.dataset).await?;
    let table = new_table(t, schema, layout);
    let created = match layout.primary_key.is_empty() && layout.max_staleness.is_none() {
        true => c.table().create(table).await.map(|_| ()).map_err(|e| e.to_string()),
        false => insert_with_constraints(endpoints, t, table, layout).await,
    };
    if let Err(why) = created {
        if table_schema(c, endpoints, t).await.is_err() {
            return Err(RestError::Create { table: t.clone(), why });
        }
    }
    table_schema(c, endpoints, t).await
}

/// tables.insert with `tableConstraints` and `maxStaleness`, which the BigQuery client's
/// table model lacks: the same resource, sent as JSON by hand.
async fn insert_with_constraints(
    endpoints: &Endpoints,
    t: &TableRef,
    table: Table,
    layout: &TableLayout,
) -> Result<(), String> {
    let mut body = serde_json::to_value(&table).map_err(|e| e.to_string())?;
    if !layout.primary_key.is_empty() {
        body["tableConstraints"] = serde_json::json!({"primaryKey": {"columns": layout.primary_key}});
    }
    if let Some(s) = &layout.max_staleness {
        body["maxStaleness"] = serde_json::json!(s);
    }
    let url = format!("{}/projects/{}/datasets/{}/tables", endpoints.rest, t.project, t.dataset);
    send_json(endpoints, reqwest::Method::POST, &url, &body, None).await.map(|_| ())
}

/// Send a JSON body to BigQuery's REST API (with credentials when talking to Google,
/// and `If-Match` when an etag is given); the reply's JSON, or the status and text.
async fn send_json(
    endpoints: &Endpoints,
    method: reqwest::Method,
    url: &str,
    body: &serde_json::Value,
    if_match: Option<&str>,
) -> Result<serde_json::Value, String> {
    let mut req =
        reqwest::Client::new().request(method, url).header("content-type", "application/json").body(body.to_string());
    if !endpoints.emulator {
        let auth =
            crate::gcp_auth::Adc::default().bearer(crate::gcp_auth::BIGQUERY_SCOPE).await.map_err(|e| e.to_string())?;
        req = req.header("authorization", auth);
    }
    if let Some(etag) = if_match {
        req = req.header("if-match", etag);
    }
    let r = req.send().await.map_err(|e| e.to_string())?;
    match r.status().is_success() {
        true => Ok(r.json().await.unwrap_or_default()),
        false => Err(format!("{}: {}", r.status(), r.text().await.unwrap_or_default())),
    }
}

/// Make `changes` to the table's schema (schema evolution) and return the schema it
/// then has. Only what the table lacks is changed (another writer may have made the
/// same change); the table's other fields and its columns' other attributes are kept.
/// The patch carries the table's etag as `If-Match`, so a change made meanwhile by
/// someone else fails it instead of being overwritten; it is then read and tried again.
pub async fn evolve_table(
    c: &Client,
    endpoints: &Endpoints,
    t: &TableRef,
    changes: &[crate::bigquery::evolution::Change],
) -> Result<Schema, RestError> {
    use crate::bigquery::evolution::{pending, Change};
    for attempt in 0.. {
        let table = c.table().get(&t.project, &t.dataset, &t.table, None).await.map_err(|source| {
            RestError::GetTable { table: t.clone(), endpoint: endpoints.rest.clone(), source: Box::new(source) }
        })?;
        let current = to_schema(t, &table.schema)?;
        let todo = pending(&current, changes.to_vec());
        if todo.is_empty() {
            return Ok(current);
        }
        let mut fields = serde_json::to_value(&table.schema).expect("TableSchema serializes")["fields"].clone();
        let list = fields.as_array_mut().expect("a table's fields are a list");
        for ch in &todo {
            match ch {
                Change::Add(col) => list.extend(
                    from_schema(&Schema::new(vec![col.clone()]))
                        .fields
                        .iter()
                        .flatten()
                        .map(|f| serde_json::to_value(f).expect("a field serializes")),
                ),
                Change::Relax(name) => list
                    .iter_mut()
                    .filter(|f| f["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
                    .for_each(|f| f["mode"] = "NULLABLE".into()),
            }
        }
        let url = format!("{}/projects/{}/datasets/{}/tables/{}", endpoints.rest, t.project, t.dataset, t.table);
        let body = serde_json::json!({"schema": {"fields": fields}});
        match send_json(endpoints, reqwest::Method::PATCH, &url, &body, table.etag.as_deref()).await {
            Ok(_) => return table_schema(c, endpoints, t).await,
            Err(why) if why.starts_with("412") && attempt < 5 => continue,
            Err(why) => {
                let what = format!(
                    "tables.patch {t} ({})",
                    todo.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                );
                return Err(RestError::Patch { what, why });
            }
        }
    }
    unreachable!("the loop returns")
}

/// Delete a table if it exists.
pub async fn drop_table(c: &Client, t: &TableRef) {
    let _ = c.table().delete_if_exists(&t.project, &t.dataset, &t.table).await;
}

/// Run a query and return the first row's integer columns (for counts).
pub async fn query_ints(c: &Client, project: &str, sql: &str) -> Result<Vec<Option<i64>>, RestError> {
    let rows = query_rows(c, project, sql).await?;
    let Some(first) = rows.into_iter().next() else { return Ok(Vec::new()) };
    Ok(first.into_iter().map(|v| v.and_then(|v| v.parse().ok())).collect())
}

/// A table's row count and, with `distinct_col`, its count of distinct values there.
pub async fn count_rows(
    endpoints: &Endpoints,
    table: &TableRef,
    distinct_col: Option<&str>,
) -> Result<(i64, Option<i64>), RestError> {
    let c = client(endpoints).await?;
    let fq = format!("`{}.{}.{}`", table.project, table.dataset, table.table);
    let sql = match distinct_col {
        Some(col) => format!("SELECT COUNT(*) AS n, COUNT(DISTINCT {col}) AS d FROM {fq}"),
        None => format!("SELECT COUNT(*) AS n FROM {fq}"),
    };
    let v = query_ints(&c, &table.project, &sql).await?;
    Ok((v.first().copied().flatten().unwrap_or(0), v.get(1).copied().flatten()))
}

/// Rows asked for per page of a query's results.
pub const QUERY_PAGE_ROWS: i32 = 100_000;

/// How long one `jobs.query` or `jobs.getQueryResults` call waits for the query to
/// complete before it answers `jobComplete: false` (BigQuery's default is 10 s).
const QUERY_WAIT_MS: i32 = 30_000;

/// The longest a query may run before flexrun gives up on it.
const QUERY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// Run a query and return every row as strings, every page of it
/// ([`query_pages`] with [`QUERY_PAGE_ROWS`]).
pub async fn query_rows(c: &Client, project: &str, sql: &str) -> Result<Vec<Vec<Option<String>>>, RestError> {
    query_pages(c, project, sql, QUERY_PAGE_ROWS).await
}

/// Run a query to completion and read all of its rows, `page_rows` a page. BigQuery's
/// `jobs.query` "returns results ... if the query completes within a specified timeout"
/// and otherwise `jobComplete: false` with no rows; a result larger than a page comes
/// with a `pageToken`. Both are followed with `jobs.getQueryResults` until the job is
/// complete and no page is left, so a caller never takes a partial answer for the whole.
pub async fn query_pages(
    c: &Client,
    project: &str,
    sql: &str,
    page_rows: i32,
) -> Result<Vec<Vec<Option<String>>>, RestError> {
    use gcp_bigquery_client::model::get_query_results_parameters::GetQueryResultsParameters;
    use gcp_bigquery_client::model::query_response::ResultSet;
    let call = |source| RestError::Call { what: format!("query {sql:?}"), source: Box::new(source) };
    let mut req = QueryRequest::new(sql);
    req.max_results = Some(page_rows);
    req.timeout_ms = Some(QUERY_WAIT_MS);
    let first = c.job().query(project, req).await.map_err(call)?;
    let job = first.job_reference.clone().unwrap_or_default();
    let (mut complete, mut token) = (first.job_complete.unwrap_or(false), first.page_token.clone());
    let mut out = Vec::new();
    if complete {
        out.extend(result_rows(ResultSet::new_from_query_response(first)));
    }
    let started = std::time::Instant::now();
    while !complete || token.is_some() {
        let (Some(id), true) = (job.job_id.as_deref(), started.elapsed() < QUERY_DEADLINE) else {
            return Err(RestError::Incomplete { sql: sql.to_string(), rows: out.len() });
        };
        let params = GetQueryResultsParameters {
            page_token: token.clone(),
            max_results: Some(page_rows),
            timeout_ms: Some(QUERY_WAIT_MS),
            location: job.location.clone(),
            ..Default::default()
        };
        let r = c.job().get_query_results(project, id, params).await.map_err(call)?;
        complete = r.job_complete.unwrap_or(false);
        if complete {
            token = r.page_token.clone();
            out.extend(result_rows(ResultSet::new_from_get_query_results_response(r)));
        }
    }
    Ok(out)
}

fn result_rows(mut rs: gcp_bigquery_client::model::query_response::ResultSet) -> Vec<Vec<Option<String>>> {
    let n = rs.column_names().len();
    let mut out = Vec::new();
    while rs.next_row() {
        let row = (0..n)
            .map(|i| {
                rs.get_json_value(i)
                    .ok()
                    .flatten()
                    .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
            })
            .collect();
        out.push(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_tried_again_on_429_5xx_rate_limits_and_the_network_only() {
        let patch = |why: &str| RestError::Patch { what: "tables.patch".into(), why: why.into() };
        for transient in ["429 Too Many Requests: slow down", "503 Service Unavailable: x", "error sending request"] {
            assert!(patch(transient).is_transient(), "{transient}");
        }
        for permanent in ["400 Bad Request: Invalid field name", "403 Forbidden: no", "412 Precondition Failed: etag"] {
            assert!(!patch(permanent).is_transient(), "{permanent}");
        }
        // Issue 62, item 10: BigQuery answers table updates past its rate with 403.
        let limited = r#"403 Forbidden: {"error":{"code":403,"message":"Exceeded rate limits: too many table update operations for this table","errors":[{"reason":"rateLimitExceeded"}]}}"#;
        assert!(patch(limited).is_transient());
    }
}
