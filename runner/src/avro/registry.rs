//! A Confluent Schema Registry REST client: the calls a decoder and a producer need.
//!
//! - `GET /schemas/ids/{id}` → `{"schema": "<schema JSON as a string>"}`; an unknown id
//!   is HTTP 404 with `{"error_code": 40403, "message": "Schema not found"}`.
//! - `GET /subjects/{subject}/versions/latest` → `{"subject", "version", "id", "schema"}`.
//! - `POST /subjects/{subject}/versions` with `{"schema": "..."}` → `{"id": N}`.
//!
//! Requests and answers use `application/vnd.schemaregistry.v1+json` (Confluent's
//! *Schema Registry API reference*). Values of topic T are registered under the subject
//! `T-value` (TopicNameStrategy, Confluent's default).

use serde::Deserialize;
use std::time::Duration;

/// The registry's media type.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A registry call that failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Not reachable, or not HTTP.
    #[error("Schema Registry at {url}: {source}")]
    Http {
        /// Base URL.
        url: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// An error answer (Confluent's `error_code` and `message`).
    #[error("Schema Registry at {url} answered {status}: {body}")]
    Status {
        /// Base URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// The answer's body.
        body: String,
    },
    /// An answer without the expected fields.
    #[error("Schema Registry at {url}: unexpected answer {body}")]
    Shape {
        /// Base URL.
        url: String,
        /// The answer's body.
        body: String,
    },
}

/// A registry client (cheap to clone).
#[derive(Debug, Clone)]
pub struct Registry {
    url: String,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct SchemaAnswer {
    schema: String,
    #[serde(default)]
    id: Option<u32>,
    #[serde(default)]
    references: Vec<Reference>,
}

/// Another registered schema a schema imports (Confluent's "Schema references": the
/// import path `name` resolves to version `version` of `subject`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reference {
    /// The name it is imported by (a `.proto` import path).
    pub name: String,
    /// The subject it is registered under.
    pub subject: String,
    /// Its version there.
    pub version: i64,
}

/// A schema's text and the schemas it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The schema text.
    pub text: String,
    /// What it imports.
    pub references: Vec<Reference>,
}

/// What waiting on the registry ended with: an answer that holds for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Definitive {
    /// HTTP 404: the registry does not know it.
    #[error("not found in the Schema Registry at {url} ({body})")]
    NotFound {
        /// Base URL.
        url: String,
        /// The answer's body.
        body: String,
    },
    /// Another refusal that asking again will not change (a 4xx other than 401, 403,
    /// 408 and 429, or an answer of the wrong shape).
    #[error("{0}")]
    Refused(String),
}

/// Ask the registry with `call` until it gives an answer that holds: the value, or a
/// [`Definitive`] refusal. An outage (no connection, 5xx) and the refusals that say
/// nothing about the request itself (401/403 credentials, 408 timeout, 429 rate limit)
/// are waited out with backoff and counted, never taken as the answer: cached, such an
/// answer would dead-letter every later record of that schema (issue 62, item 5).
pub async fn until_answered<T, F, Fut>(client: &Registry, what: &str, mut call: F) -> Result<T, Definitive>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, RegistryError>>,
{
    for attempt in 1.. {
        let wait = crate::retry::Backoff::REGISTRY.delay(attempt).expect("registry retries have no attempt limit");
        match call().await {
            Ok(v) => return Ok(v),
            Err(RegistryError::Status { status: 404, body, .. }) => {
                return Err(Definitive::NotFound { url: client.url().to_string(), body })
            }
            Err(e @ RegistryError::Status { status: 401 | 403 | 408 | 429, .. }) => {
                tracing::error!(what, error = %e, retry_in_ms = wait.as_millis() as u64, "Schema Registry refused the request: retrying (the batch waits)");
                crate::retry::note_retry(crate::retry::Service::Registry);
                tokio::time::sleep(wait).await;
            }
            Err(e @ RegistryError::Status { status: 400..=499, .. }) | Err(e @ RegistryError::Shape { .. }) => {
                return Err(Definitive::Refused(e.to_string()))
            }
            Err(e) => {
                tracing::warn!(what, error = %e, retry_in_ms = wait.as_millis() as u64, "Schema Registry unavailable: retrying (the batch waits)");
                crate::retry::note_retry(crate::retry::Service::Registry);
                tokio::time::sleep(wait).await;
            }
        }
    }
    unreachable!("the loop returns")
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u32,
}

impl Registry {
    /// A client for the registry at `url` (`http://host:port`).
    pub fn new(url: &str) -> Registry {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("HTTP client");
        Registry { url: url.trim_end_matches('/').to_string(), http }
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<String, RegistryError> {
        let http = |source| RegistryError::Http { url: self.url.clone(), source };
        let resp = req.header("Accept", CONTENT_TYPE).send().await.map_err(http)?;
        let status = resp.status();
        let body = resp.text().await.map_err(http)?;
        if !status.is_success() {
            return Err(RegistryError::Status { url: self.url.clone(), status: status.as_u16(), body });
        }
        Ok(body)
    }

    fn parse<T: for<'de> Deserialize<'de>>(&self, body: &str) -> Result<T, RegistryError> {
        serde_json::from_str(body).map_err(|_| RegistryError::Shape { url: self.url.clone(), body: body.into() })
    }

    /// The schema text registered under `id`.
    pub async fn schema_by_id(&self, id: u32) -> Result<String, RegistryError> {
        let body = self.send(self.http.get(format!("{}/schemas/ids/{id}", self.url))).await?;
        Ok(self.parse::<SchemaAnswer>(&body)?.schema)
    }

    /// The schema registered under `id`, with its references.
    pub async fn fetch_by_id(&self, id: u32) -> Result<Fetched, RegistryError> {
        let body = self.send(self.http.get(format!("{}/schemas/ids/{id}", self.url))).await?;
        let a: SchemaAnswer = self.parse(&body)?;
        Ok(Fetched { text: a.schema, references: a.references })
    }

    /// Version `version` of `subject`, with its references.
    pub async fn fetch_version(&self, subject: &str, version: i64) -> Result<Fetched, RegistryError> {
        let url = format!("{}/subjects/{subject}/versions/{version}", self.url);
        let body = self.send(self.http.get(url)).await?;
        let a: SchemaAnswer = self.parse(&body)?;
        Ok(Fetched { text: a.schema, references: a.references })
    }

    /// The latest schema of `subject`: its id and text.
    pub async fn latest(&self, subject: &str) -> Result<(u32, String), RegistryError> {
        let body = self.send(self.http.get(format!("{}/subjects/{subject}/versions/latest", self.url))).await?;
        let a: SchemaAnswer = self.parse(&body)?;
        let id = a.id.ok_or_else(|| RegistryError::Shape { url: self.url.clone(), body })?;
        Ok((id, a.schema))
    }

    /// Register the Avro `schema` under `subject` (or find it registered); its id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        self.register_typed(subject, schema, "AVRO").await
    }

    /// Register `schema` of `schema_type` (AVRO or PROTOBUF) under `subject`; its id.
    pub async fn register_typed(&self, subject: &str, schema: &str, schema_type: &str) -> Result<u32, RegistryError> {
        let req = self
            .http
            .post(format!("{}/subjects/{subject}/versions", self.url))
            .header("Content-Type", CONTENT_TYPE)
            .body(serde_json::json!({ "schema": schema, "schemaType": schema_type }).to_string());
        let body = self.send(req).await?;
        Ok(self.parse::<IdAnswer>(&body)?.id)
    }
}
