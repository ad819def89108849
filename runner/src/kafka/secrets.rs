//! Google Secret Manager, as Google's templates read their `…SecretId` parameters
//! (`SecretManagerUtils.getSecret`): a secret version's path,
//! `projects/P/secrets/S/versions/V` or `projects/P/locations/L/secrets/S/versions/V`
//! (`V` a number or `latest`), whose payload is the value.
//!
//! The call is `GET https://secretmanager.googleapis.com/v1/{name}:access` (Secret
//! Manager's REST reference, `projects.secrets.versions.access`; a regional secret's at
//! `secretmanager.{L}.rep.googleapis.com`), with an Application Default Credentials
//! token. The answer's `payload.dataCrc32c` is checked against the data ("the CRC32C
//! checksum of the payload data ... encoded as a decimal integer", Secret Manager's
//! data-integrity page), so a payload damaged on its way is refused, not used.
//! `FLEXRUN_SECRET_MANAGER` (a base URL) sends every call to another endpoint: the local
//! stack's (`scripts/secret_manager.py`).
//!
//! Errors name the version and what went wrong, never the payload.

use base64::Engine;

/// The environment variable that points every call at another endpoint.
pub const ENDPOINT_ENV: &str = "FLEXRUN_SECRET_MANAGER";
/// The scope Secret Manager's access call needs.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// A secret version's path, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretVersion {
    /// The whole path, as given.
    pub name: String,
    /// The location of a regional secret.
    pub location: Option<String>,
}

/// Whether `v` is meant as a Secret Manager path (starts with `projects/` and names
/// `secrets/`).
pub fn is_secret_path(v: &str) -> bool {
    v.starts_with("projects/") && v.contains("/secrets/")
}

/// Parse a secret version's path, or say what was expected.
///
/// ```
/// use flexrun::kafka::secrets::parse;
/// assert!(parse("projects/p/secrets/s/versions/latest").is_ok());
/// assert_eq!(parse("projects/p/locations/europe-west1/secrets/s/versions/3").unwrap().location.as_deref(), Some("europe-west1"));
/// assert!(parse("projects/p/secrets/s").unwrap_err().contains("versions/"));
/// assert!(parse("projects/p/secrets/s/versions/first").unwrap_err().contains("a number or latest"));
/// ```
pub fn parse(v: &str) -> Result<SecretVersion, String> {
    let parts: Vec<&str> = v.split('/').collect();
    let (location, version) = match parts.as_slice() {
        ["projects", p, "secrets", s, "versions", ver] if ![p, s].iter().any(|x| x.is_empty()) => (None, *ver),
        ["projects", p, "locations", l, "secrets", s, "versions", ver] if ![p, l, s].iter().any(|x| x.is_empty()) => {
            (Some(l.to_string()), *ver)
        }
        _ => {
            return Err(format!(
                "{v:?} is not a secret version: expected projects/PROJECT/secrets/SECRET/versions/VERSION (or projects/PROJECT/locations/LOCATION/secrets/SECRET/versions/VERSION)"
            ))
        }
    };
    if version != "latest" && version.parse::<u64>().is_err() {
        return Err(format!("{v:?}: the version is {version:?}; expected a number or latest"));
    }
    Ok(SecretVersion { name: v.to_string(), location })
}

/// The URL of `v`'s access call.
fn url(v: &SecretVersion) -> String {
    let base = match (std::env::var(ENDPOINT_ENV).ok().filter(|s| !s.is_empty()), &v.location) {
        (Some(b), _) => b.trim_end_matches('/').to_string(),
        (None, Some(l)) => format!("https://secretmanager.{l}.rep.googleapis.com"),
        (None, None) => "https://secretmanager.googleapis.com".to_string(),
    };
    format!("{base}/v1/{}:access", v.name)
}

/// The payload of `v`, its CRC32C checked.
pub async fn access(v: &SecretVersion) -> Result<Vec<u8>, String> {
    let bearer = crate::gcp_auth::Adc::default().bearer(SCOPE).await.map_err(|e| {
        format!("no Google credentials to call Secret Manager with ({e}); set GOOGLE_APPLICATION_CREDENTIALS to a key file, or run `gcloud auth application-default login`")
    })?;
    let r = reqwest::Client::new()
        .get(url(v))
        .header("authorization", bearer)
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| format!("Secret Manager did not answer: {e}"))?;
    let status = r.status();
    let body: serde_json::Value = r.json().await.map_err(|e| format!("Secret Manager's answer ({status}): {e}"))?;
    if !status.is_success() {
        let msg = body["error"]["message"].as_str().unwrap_or("no message");
        return Err(format!("Secret Manager answered {status}: {msg}"));
    }
    payload(&body)
}

/// The data of an access answer, checked against its `dataCrc32c`.
///
/// ```
/// use flexrun::kafka::secrets::payload;
/// let ok = serde_json::json!({"payload": {"data": "c2VjcmV0", "dataCrc32c": "2956741965"}});
/// assert_eq!(payload(&ok).unwrap(), b"secret");
/// let bad = serde_json::json!({"payload": {"data": "c2VjcmV0", "dataCrc32c": "1"}});
/// assert!(payload(&bad).unwrap_err().contains("CRC32C"));
/// ```
pub fn payload(body: &serde_json::Value) -> Result<Vec<u8>, String> {
    let data = body["payload"]["data"].as_str().ok_or("the answer has no payload.data")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("payload.data is not base64: {e}"))?;
    if let Some(want) = body["payload"]["dataCrc32c"].as_str() {
        let want: u64 = want.parse().map_err(|_| format!("dataCrc32c {want:?} is not a decimal integer"))?;
        let got = crate::checksum::crc32c(&bytes);
        if u64::from(got) != want {
            return Err(format!(
                "the payload's CRC32C is {got}, its dataCrc32c says {want}: damaged on its way, not used"
            ));
        }
    }
    Ok(bytes)
}

/// [`access`] from synchronous code (parameters are read before the job's runtime has
/// work): on a thread of its own with a runtime of its own, as UTF-8 text.
pub fn access_text(v: &SecretVersion) -> Result<String, String> {
    let run = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for Secret Manager: {e}"))?;
        rt.block_on(access(v))
    };
    let bytes = std::thread::scope(|s| s.spawn(run).join()).map_err(|_| "the Secret Manager call panicked")??;
    String::from_utf8(bytes).map_err(|_| "the secret's payload is not UTF-8 text".to_string())
}
