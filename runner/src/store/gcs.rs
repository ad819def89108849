//! A Cloud Storage bucket over the JSON API (`gcloud-storage`).
//!
//! With `STORAGE_EMULATOR_HOST` set (the variable Google's client libraries read), calls
//! go there without credentials; otherwise to `https://storage.googleapis.com` with
//! Application Default Credentials (scope `devstorage.read_write`).
//!
//! Retries follow Google's retry strategy
//! (<https://cloud.google.com/storage/docs/retry-strategy>): "The following responses
//! indicate transient problems that are useful to retry: HTTP 408, 429, and 5xx
//! response codes. Socket timeouts and TCP disconnects." Every call here is idempotent
//! for this use: a put or a copy writes the same bytes to the same name, and a delete
//! that finds the object gone has done its work.

use super::StoreError;
use crate::retry::Backoff;
use gcloud_storage::client::{Client, ClientConfig};
use gcloud_storage::http::objects::copy::CopyObjectRequest;
use gcloud_storage::http::objects::delete::DeleteObjectRequest;
use gcloud_storage::http::objects::download::Range;
use gcloud_storage::http::objects::get::GetObjectRequest;
use gcloud_storage::http::objects::list::ListObjectsRequest;
use gcloud_storage::http::objects::upload::{UploadObjectRequest, UploadType};
use gcloud_storage::http::objects::Object;
use std::sync::Arc;

/// A bucket and the prefix every name is under.
#[derive(Clone)]
pub struct GcsStore {
    client: Arc<Client>,
    bucket: String,
    prefix: String,
}

/// The endpoint to use without credentials: `given`, else `STORAGE_EMULATOR_HOST`
/// (`host:port` or a URL); `None` means Google.
pub fn emulator_endpoint(given: Option<&str>) -> Option<String> {
    let v = match given {
        Some(g) => g.to_string(),
        None => std::env::var("STORAGE_EMULATOR_HOST").ok().filter(|v| !v.is_empty())?,
    };
    Some(if v.contains("://") { v } else { format!("http://{v}") })
}

/// Application Default Credentials for Cloud Storage, through the same yup-oauth2 the
/// BigQuery client uses.
#[derive(Debug)]
struct Adc(Arc<dyn token_source::TokenSource>);

impl token_source::TokenSourceProvider for Adc {
    fn token_source(&self) -> Arc<dyn token_source::TokenSource> {
        self.0.clone()
    }
}

#[derive(Debug, Default)]
struct AdcSource(crate::gcp_auth::Adc);

#[async_trait::async_trait]
impl token_source::TokenSource for AdcSource {
    async fn token(&self) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        self.0.bearer(crate::gcp_auth::STORAGE_SCOPE).await
    }
}

fn retryable(e: &gcloud_storage::http::Error) -> (bool, Option<u16>) {
    use gcloud_storage::http::Error as E;
    match e {
        E::Response(r) => (r.code == 408 || r.code == 429 || r.code >= 500, Some(r.code)),
        E::HttpClient(h) => {
            let status = h.status().map(|s| s.as_u16());
            let transient = status.is_some_and(|c| c == 408 || c == 429 || c >= 500);
            (transient || h.is_timeout() || h.is_connect() || h.is_request(), status)
        }
        _ => (false, None),
    }
}

impl GcsStore {
    /// Connect (to `endpoint`, see [`emulator_endpoint`]) and check that `bucket` exists.
    pub async fn open(bucket: &str, prefix: &str, endpoint: Option<&str>) -> Result<GcsStore, StoreError> {
        let config = match emulator_endpoint(endpoint) {
            Some(ep) => ClientConfig { storage_endpoint: ep, ..Default::default() }.anonymous(),
            None => ClientConfig {
                token_source_provider: Some(Box::new(Adc(Arc::new(AdcSource::default())))),
                ..Default::default()
            },
        };
        let s = GcsStore { client: Arc::new(Client::new(config)), bucket: bucket.into(), prefix: prefix.into() };
        let req = ListObjectsRequest { bucket: bucket.into(), max_results: Some(1), ..Default::default() };
        s.retry_with(Backoff::STORAGE_OPEN, "list", "", || s.client.list_objects(&req)).await.map_err(|e| match e {
            StoreError::Gcs { status: Some(404), .. } => {
                StoreError::Location(format!("gs://{bucket}/: no such bucket (create it, or check the name)"))
            }
            StoreError::Gcs { message, .. } => {
                StoreError::Location(format!("gs://{bucket}/ is unreachable: {message}"))
            }
            e => e,
        })?;
        Ok(s)
    }

    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// `gs://bucket/prefix/name`.
    pub fn url(&self, name: &str) -> String {
        format!("gs://{}/{}", self.bucket, self.full(name))
    }

    /// `call`, retried on transient errors without an attempt limit ([`Backoff::STORAGE`]).
    async fn retry<T, F, Fut>(&self, op: &'static str, name: &str, call: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, gcloud_storage::http::Error>>,
    {
        self.retry_with(Backoff::STORAGE, op, name, call).await
    }

    async fn retry_with<T, F, Fut>(
        &self,
        backoff: Backoff,
        op: &'static str,
        name: &str,
        mut call: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, gcloud_storage::http::Error>>,
    {
        for attempt in 1.. {
            match call().await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let (again, status) = retryable(&e);
                    let delay = backoff.delay(attempt);
                    if !again || delay.is_none() {
                        let message = match status {
                            Some(code) => format!("HTTP {code}: {e}"),
                            None => e.to_string(),
                        };
                        return Err(StoreError::Gcs { op, object: self.url(name), message, status });
                    }
                    tracing::warn!(op, object = %self.url(name), attempt, error = %e, "Cloud Storage: retrying");
                    crate::retry::note_retry(crate::retry::Service::Storage);
                    tokio::time::sleep(delay.expect("checked above")).await;
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// Upload `data` to `name`.
    pub async fn put(&self, name: &str, data: Vec<u8>) -> Result<(), StoreError> {
        let req = UploadObjectRequest { bucket: self.bucket.clone(), ..Default::default() };
        let full = self.full(name);
        // A multipart upload (metadata + media): the emulator's simple upload mishandles
        // an empty body, and an empty shard file is legitimate.
        let kind = UploadType::Multipart(Box::new(Object { name: full.clone(), ..Default::default() }));
        self.retry("upload", name, || self.client.upload_object(&req, data.clone(), &kind)).await.map(|_| ())
    }

    /// Download `name`.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let req = GetObjectRequest { bucket: self.bucket.clone(), object: self.full(name), ..Default::default() };
        let range = Range::default();
        self.retry("download", name, || self.client.download_object(&req, &range)).await
    }

    /// Names (relative to the prefix) under `prefix`, sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        let mut page_token = None;
        loop {
            let req = ListObjectsRequest {
                bucket: self.bucket.clone(),
                prefix: Some(self.full(prefix)),
                page_token: page_token.clone(),
                ..Default::default()
            };
            let r = self.retry("list", prefix, || self.client.list_objects(&req)).await?;
            for o in r.items.unwrap_or_default() {
                out.push(o.name.strip_prefix(&self.prefix).unwrap_or(&o.name).to_string());
            }
            match r.next_page_token {
                Some(t) if !t.is_empty() => page_token = Some(t),
                _ => break,
            }
        }
        out.sort();
        Ok(out)
    }

    /// Copy then delete: Cloud Storage has no rename.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), StoreError> {
        let req = CopyObjectRequest {
            source_bucket: self.bucket.clone(),
            source_object: self.full(from),
            destination_bucket: self.bucket.clone(),
            destination_object: self.full(to),
            ..Default::default()
        };
        match self.retry("copy", from, || self.client.copy_object(&req)).await {
            Ok(_) => {}
            // A retry after a crash between the copy and the delete: the copy is done.
            Err(e) if e.is_not_found() && self.exists(to).await? => return Ok(()),
            Err(e) => return Err(e),
        }
        self.delete(from).await
    }

    async fn exists(&self, name: &str) -> Result<bool, StoreError> {
        let req = GetObjectRequest { bucket: self.bucket.clone(), object: self.full(name), ..Default::default() };
        match self.retry("get", name, || self.client.get_object(&req)).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Delete `name`; one already gone is not an error.
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        let req = DeleteObjectRequest { bucket: self.bucket.clone(), object: self.full(name), ..Default::default() };
        match self.retry("delete", name, || self.client.delete_object(&req)).await {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }
}
