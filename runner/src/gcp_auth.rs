//! Application Default Credentials for the Google calls flexrun makes with its own
//! HTTP requests (Cloud Storage's client, and the BigQuery REST calls whose fields the
//! BigQuery client's model lacks), through the same yup-oauth2 the BigQuery client uses.

use gcp_bigquery_client::yup_oauth2 as y;

/// The scope of BigQuery's REST API.
pub const BIGQUERY_SCOPE: &str = "https://www.googleapis.com/auth/bigquery";
/// The scope of Cloud Storage reads and writes.
pub const STORAGE_SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";

/// An ADC authenticator, built on first use.
#[derive(Default)]
pub struct Adc(tokio::sync::OnceCell<y::authenticator::DefaultAuthenticator>);

impl std::fmt::Debug for Adc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("application default credentials")
    }
}

/// An error from the credentials.
pub type AuthError = Box<dyn std::error::Error + Send + Sync>;

impl Adc {
    /// An `Authorization` header value (`Bearer ...`) for `scope`.
    pub async fn bearer(&self, scope: &str) -> Result<String, AuthError> {
        let t = self.token(scope).await?;
        Ok(format!("Bearer {}", t.token().ok_or("the token response had no access token")?))
    }

    /// An access token for `scope`, when it expires (milliseconds since the epoch), and
    /// the account it belongs to: the key file's `client_email`, or the metadata
    /// server's default service account.
    pub async fn access_token(&self, scope: &str) -> Result<(String, i64, String), AuthError> {
        let t = self.token(scope).await?;
        let token = t.token().ok_or("the token response had no access token")?.to_string();
        let expires_ms = t.expiration_time().map_or(i64::MAX, |e| (e.unix_timestamp_nanos() / 1_000_000) as i64);
        Ok((token, expires_ms, account().await?))
    }

    async fn token(&self, scope: &str) -> Result<y::AccessToken, AuthError> {
        let auth = self
            .0
            .get_or_try_init(|| async {
                let opts = y::ApplicationDefaultCredentialsFlowOpts::default();
                match y::ApplicationDefaultCredentialsAuthenticator::builder(opts).await {
                    y::authenticator::ApplicationDefaultCredentialsTypes::ServiceAccount(b) => b.build().await,
                    y::authenticator::ApplicationDefaultCredentialsTypes::InstanceMetadata(b) => b.build().await,
                }
            })
            .await?;
        Ok(auth.token(&[scope]).await?)
    }
}

/// The credentials' account e-mail (a token's subject).
async fn account() -> Result<String, AuthError> {
    if let Ok(path) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
        let key: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        return key["client_email"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{path}: a service account key has client_email").into());
    }
    let url = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/email";
    let r = reqwest::Client::new().get(url).header("Metadata-Flavor", "Google").send().await?;
    Ok(r.error_for_status()?.text().await?)
}
