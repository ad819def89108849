//! `kafkaReadAuthenticationMode=APPLICATION_DEFAULT_CREDENTIALS`: SASL_SSL with
//! OAUTHBEARER and a token made from a Google access token, as Google's template does it
//! for Google Cloud Managed Service for Apache Kafka.
//!
//! Google's template sets `sasl.mechanism=OAUTHBEARER` over `SASL_SSL` with
//! `GcpLoginCallbackHandler` (DataflowTemplates `v2/kafka-common` `KafkaConfig.java`).
//! That handler (googleapis/managedkafka, `kafka-java-auth`) turns the application
//! default credentials' access token (scope `cloud-platform`) into a JWT-shaped token:
//! the header `{"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}`, the claims `exp`, `iat`,
//! `scope` = `kafka` and `sub` = the account's e-mail, and the access token itself as the
//! third part, each encoded base64url without padding. [`kafka_token`] builds exactly that.
//!
//! librdkafka asks for a token through the client's context ([`AuthContext`]) when a
//! client starts and again 80 % through the token's life. The access token is fetched by
//! one thread of its own ([`GoogleTokens`]), so a request made inside the job's runtime
//! never blocks on that runtime.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rdkafka::client::OAuthToken;
use rdkafka::consumer::ConsumerContext;
use rdkafka::ClientContext;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The scope Google's handler asks for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// How long a client waits for an access token before librdkafka tries again (in 10 s).
const FETCH_LIMIT: Duration = Duration::from_secs(60);

/// An access token and when it expires (milliseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// The access token (`ya29.…`).
    pub token: String,
    /// Its expiry.
    pub expires_ms: i64,
    /// The account it belongs to (the token's `sub`).
    pub account: String,
}

/// The token Google's `GcpLoginCallbackHandler` gives Kafka for `access`, issued at
/// `now_ms`.
///
/// ```
/// use flexrun::kafka::oauth::{kafka_token, AccessToken};
/// let a = AccessToken { token: "ya29.x".into(), expires_ms: 3_600_000, account: "sa@p.iam.gserviceaccount.com".into() };
/// let t = kafka_token(&a, 1_000);
/// let parts: Vec<&str> = t.split('.').collect();
/// assert_eq!(parts.len(), 3);
/// assert_eq!(parts[0], "eyJ0eXAiOiJKV1QiLCJhbGciOiJHT09HX09BVVRIMl9UT0tFTiJ9");
/// ```
pub fn kafka_token(access: &AccessToken, now_ms: i64) -> String {
    let header = r#"{"typ":"JWT","alg":"GOOG_OAUTH2_TOKEN"}"#;
    let claims = serde_json::json!({
        "exp": access.expires_ms / 1000,
        "iat": now_ms / 1000,
        "scope": "kafka",
        "sub": access.account,
    });
    [header.as_bytes(), claims.to_string().as_bytes(), access.token.as_bytes()]
        .map(|p| URL_SAFE_NO_PAD.encode(p))
        .join(".")
}

type Reply = mpsc::Sender<Result<AccessToken, String>>;

/// Access tokens from the application default credentials, fetched on a thread of
/// their own with its own runtime (one per process).
pub struct GoogleTokens {
    ask: std::sync::Mutex<mpsc::Sender<Reply>>,
}

impl GoogleTokens {
    /// The process's token source, started on first use.
    pub fn shared() -> Arc<GoogleTokens> {
        static ONE: OnceLock<Arc<GoogleTokens>> = OnceLock::new();
        ONE.get_or_init(|| Arc::new(GoogleTokens::start())).clone()
    }

    fn start() -> GoogleTokens {
        let (tx, rx) = mpsc::channel::<Reply>();
        std::thread::Builder::new()
            .name("google-token".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                let adc = crate::gcp_auth::Adc::default();
                for reply in rx {
                    let got = rt.block_on(adc.access_token(SCOPE)).map_err(|e| e.to_string());
                    let _ =
                        reply.send(got.map(|(token, expires_ms, account)| AccessToken { token, expires_ms, account }));
                }
            })
            .expect("a thread");
        GoogleTokens { ask: std::sync::Mutex::new(tx) }
    }

    /// A current access token (the credentials' cache answers until it nears expiry).
    pub fn access_token(&self) -> Result<AccessToken, String> {
        let (tx, rx) = mpsc::channel();
        self.ask
            .lock()
            .map_err(|_| "the token thread's lock is poisoned")?
            .send(tx)
            .map_err(|_| "the token thread ended")?;
        rx.recv_timeout(FETCH_LIMIT).map_err(|_| format!("no access token within {FETCH_LIMIT:?}"))?
    }
}

/// The context of every Kafka client flexrun makes: it answers librdkafka's token
/// requests when the connection authenticates with Google's credentials, and is
/// librdkafka's default otherwise.
#[derive(Clone, Default)]
pub struct AuthContext {
    tokens: Option<Arc<GoogleTokens>>,
}

impl AuthContext {
    /// A context that gives Google tokens.
    pub fn google() -> AuthContext {
        AuthContext { tokens: Some(GoogleTokens::shared()) }
    }
}

impl ClientContext for AuthContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        let Some(tokens) = &self.tokens else {
            return Err("OAUTHBEARER needs kafkaReadAuthenticationMode=APPLICATION_DEFAULT_CREDENTIALS".into());
        };
        let access = tokens.access_token().map_err(|e| {
            tracing::warn!(error = %e, "no Google access token for Kafka's OAUTHBEARER; librdkafka tries again in 10 s");
            e
        })?;
        let now = chrono::Utc::now().timestamp_millis();
        tracing::debug!(account = %access.account, expires_ms = access.expires_ms, "a Google access token for Kafka");
        Ok(OAuthToken {
            token: kafka_token(&access, now),
            principal_name: access.account.clone(),
            lifetime_ms: access.expires_ms,
        })
    }
}

impl ConsumerContext for AuthContext {}

/// Why no Google token could be had, with where application default credentials are
/// looked for and what to set.
///
/// ```
/// let m = flexrun::kafka::oauth::adc_advice("Connection failure");
/// assert!(m.contains("GOOGLE_APPLICATION_CREDENTIALS") && m.contains("gcloud auth application-default login"));
/// ```
pub fn adc_advice(cause: &str) -> String {
    format!(
        "no Google access token for kafkaReadAuthenticationMode=APPLICATION_DEFAULT_CREDENTIALS ({cause}). Application default credentials are looked for in GOOGLE_APPLICATION_CREDENTIALS (a key file), then gcloud's ~/.config/gcloud/application_default_credentials.json, then the metadata server of a Google Cloud VM; set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run `gcloud auth application-default login`"
    )
}

/// Give a new client its first token now. librdkafka asks for tokens through the
/// client's queue, which a client is not polled on before its first request (a metadata
/// lookup blocks without polling); later refreshes come through the queue, which every
/// reader polls. Nothing to do for a client without Google credentials.
pub fn seed(client: &rdkafka::client::Client<AuthContext>) -> Result<(), String> {
    if client.context().tokens.is_none() {
        return Ok(());
    }
    let t = client.context().generate_oauth_token(None).map_err(|e| adc_advice(&e.to_string()))?;
    let token = std::ffi::CString::new(t.token).map_err(|e| e.to_string())?;
    let principal = std::ffi::CString::new(t.principal_name).map_err(|e| e.to_string())?;
    let mut err = [0 as std::ffi::c_char; 512];
    // SAFETY: the client is alive for the call; the strings and the error buffer outlive it.
    let code = unsafe {
        rdkafka::bindings::rd_kafka_oauthbearer_set_token(
            client.native_ptr(),
            token.as_ptr(),
            t.lifetime_ms,
            principal.as_ptr(),
            std::ptr::null_mut(),
            0,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if code == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Ok(());
    }
    // SAFETY: librdkafka wrote a NUL-terminated message into the buffer.
    Err(unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_has_googles_header_claims_and_the_access_token_as_its_third_part() {
        let a = AccessToken {
            token: "ya29.a0-_b".into(),
            expires_ms: 1_700_003_600_000,
            account: "sa@p.iam.gserviceaccount.com".into(),
        };
        let t = kafka_token(&a, 1_700_000_000_500);
        let parts: Vec<Vec<u8>> = t.split('.').map(|p| URL_SAFE_NO_PAD.decode(p).unwrap()).collect();
        let header: serde_json::Value = serde_json::from_slice(&parts[0]).unwrap();
        assert_eq!(header, serde_json::json!({"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"}));
        let claims: serde_json::Value = serde_json::from_slice(&parts[1]).unwrap();
        assert_eq!(
            claims,
            serde_json::json!({"exp": 1_700_003_600, "iat": 1_700_000_000, "scope": "kafka", "sub": "sa@p.iam.gserviceaccount.com"})
        );
        assert_eq!(parts[2], b"ya29.a0-_b");
        assert!(!t.contains('='), "no padding, as Base64.getUrlEncoder().withoutPadding()");
    }

    #[test]
    fn a_client_without_google_credentials_refuses_to_make_a_token() {
        let Err(e) = AuthContext::default().generate_oauth_token(None) else { panic!("a token without credentials") };
        assert!(e.to_string().contains("APPLICATION_DEFAULT_CREDENTIALS"));
    }
}
