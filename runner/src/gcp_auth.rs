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

impl Adc {
    /// An `Authorization` header value (`Bearer ...`) for `scope`.
    pub async fn bearer(&self, scope: &str) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
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
        let t = auth.token(&[scope]).await?;
        Ok(format!("Bearer {}", t.token().ok_or("the token response had no access token")?))
    }
}
