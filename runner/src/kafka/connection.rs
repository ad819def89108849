//! [`Connection`]: where the brokers are and how to authenticate, turned into
//! librdkafka settings. The only place a `ClientConfig` is created.

use super::oauth::AuthContext;
use super::KafkaError;
use rdkafka::config::{ClientConfig, FromClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::Consumer;
use rdkafka::producer::{ProducerContext, ThreadedProducer};

/// How to authenticate to the brokers (`kafkaReadAuthenticationMode`).
#[derive(Debug, Clone, PartialEq)]
pub enum Auth {
    /// Plain TCP, no authentication.
    None,
    /// SASL/PLAIN, always over TLS as in Google's template (`SASL_SSL`).
    SaslPlain {
        /// Username.
        username: String,
        /// Password.
        password: String,
        /// PEM CA file (else the system's CAs).
        ca: Option<String>,
    },
    /// SASL/SCRAM-SHA-512 over TLS.
    SaslScram512 {
        /// Username.
        username: String,
        /// Password.
        password: String,
        /// PEM CA file.
        ca: Option<String>,
    },
    /// SASL/OAUTHBEARER over TLS with a token from Google's application default
    /// credentials (`APPLICATION_DEFAULT_CREDENTIALS`, for Google Managed Kafka; see
    /// [`super::oauth`]).
    GoogleAdc {
        /// PEM CA file (else the system's CAs, as Managed Kafka's certificates need).
        ca: Option<String>,
    },
    /// TLS, optionally with a client certificate.
    Tls {
        /// PEM CA file.
        ca: Option<String>,
        /// PEM file with the client certificate and key (mTLS).
        keystore: Option<String>,
        /// Private key password.
        key_password: Option<String>,
    },
}

/// Whether TLS connections check that the broker's certificate names the host
/// (`kafkaTlsHostnameVerification`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostnameCheck {
    /// As Google's template sets its Java client (`KafkaConfig.java` in
    /// DataflowTemplates' `v2/kafka-common`): `ssl.endpoint.identification.algorithm`
    /// is emptied for `TLS`, so the name is not checked there, and left at the Java
    /// client's default (`https`, checked) for the SASL modes.
    #[default]
    AsGoogle,
    /// Check the name in every TLS mode (librdkafka's own default).
    Always,
}

/// Bootstrap servers and authentication: enough to build any client.
///
/// ```
/// use flexrun::kafka::Connection;
/// let c = Connection::plaintext("localhost:9092");
/// assert_eq!(c.config().get("bootstrap.servers"), Some("localhost:9092"));
/// assert_eq!(c.config().get("security.protocol"), Some("plaintext"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// `host:port[,host:port]`.
    pub bootstrap: String,
    /// Authentication.
    pub auth: Auth,
    /// TLS host name checking.
    pub hostname_check: HostnameCheck,
}

/// librdkafka settings for a producer that sends in bulk: idempotent, batched.
pub const BULK_PRODUCER: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("linger.ms", "5"),
    ("batch.num.messages", "10000"),
    ("queue.buffering.max.messages", "500000"),
    ("message.timeout.ms", "120000"),
];

impl Connection {
    /// Plain TCP without authentication (the local stack).
    pub fn plaintext(bootstrap: &str) -> Connection {
        Connection { bootstrap: bootstrap.to_string(), auth: Auth::None, hostname_check: HostnameCheck::AsGoogle }
    }

    /// The librdkafka settings every client starts from: bootstrap servers, socket
    /// timeout and authentication.
    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c.set("socket.timeout.ms", "10000");
        apply_auth(&mut c, &self.auth, self.hostname_check);
        c
    }

    /// The context every client of this connection is made with: it answers
    /// librdkafka's OAUTHBEARER token requests with Google tokens under
    /// [`Auth::GoogleAdc`].
    pub fn context(&self) -> AuthContext {
        match self.auth {
            Auth::GoogleAdc { .. } => AuthContext::google(),
            _ => AuthContext::default(),
        }
    }

    /// A client of type `T` with these settings plus `extra`, and the [`AuthContext`]
    /// that answers token requests; `what` names it in errors. Every client that reads
    /// a job's topic is made here or by [`super::SourceSettings::consumer`].
    pub fn reader<T: FromClientConfigAndContext<AuthContext> + Consumer<AuthContext>>(
        &self,
        what: &str,
        extra: &[(&str, &str)],
    ) -> Result<T, KafkaError> {
        let mut c = self.config();
        for (k, v) in extra {
            c.set(*k, *v);
        }
        let t: T =
            c.create_with_context(self.context()).map_err(|e| self.error(format!("cannot create {what}: {e}")))?;
        super::oauth::seed(t.client()).map_err(|e| self.error(format!("{what}: {e}")))?;
        Ok(t)
    }

    /// A client of type `T` with librdkafka's default context (set-up, tests): it cannot
    /// answer token requests, so it is refused under [`Auth::GoogleAdc`].
    pub fn client<T: FromClientConfig>(&self, what: &str, extra: &[(&str, &str)]) -> Result<T, KafkaError> {
        if matches!(self.auth, Auth::GoogleAdc { .. }) {
            return Err(self.error(format!("{what} cannot authenticate with APPLICATION_DEFAULT_CREDENTIALS")));
        }
        let mut c = self.config();
        for (k, v) in extra {
            c.set(*k, *v);
        }
        c.create().map_err(|e| self.error(format!("cannot create {what}: {e}")))
    }

    /// A producer with a delivery context, these settings plus `extra`.
    pub fn producer<C: ProducerContext>(
        &self,
        extra: &[(&str, &str)],
        context: C,
    ) -> Result<ThreadedProducer<C>, KafkaError>
    where
        ThreadedProducer<C>: FromClientConfigAndContext<C>,
    {
        if matches!(self.auth, Auth::GoogleAdc { .. }) {
            return Err(self.error("writing to Kafka with APPLICATION_DEFAULT_CREDENTIALS is not built (flexrun reads Managed Kafka with it); use SASL_PLAIN, SASL_SCRAM_512, TLS or NONE for the topic written to".into()));
        }
        let mut c = self.config();
        for (k, v) in extra {
            c.set(*k, *v);
        }
        c.create_with_context(context).map_err(|e| self.error(format!("cannot create a producer: {e}")))
    }

    fn error(&self, message: String) -> KafkaError {
        KafkaError::Broker { bootstrap: self.bootstrap.clone(), topic: String::new(), message }
    }
}

/// Add `auth`'s settings to `c`, with the protocols Google's template uses
/// (`KafkaConfig.java`: `SASL_SSL` for both SASL mechanisms, `SSL` for TLS).
pub(crate) fn apply_auth(c: &mut ClientConfig, auth: &Auth, check: HostnameCheck) {
    match auth {
        Auth::None => {
            c.set("security.protocol", "plaintext");
        }
        Auth::SaslPlain { username, password, ca } => {
            c.set("security.protocol", "sasl_ssl")
                .set("sasl.mechanism", "PLAIN")
                .set("sasl.username", username)
                .set("sasl.password", password);
            if let Some(ca) = ca {
                c.set("ssl.ca.location", ca);
            }
        }
        Auth::SaslScram512 { username, password, ca } => {
            c.set("security.protocol", "sasl_ssl")
                .set("sasl.mechanism", "SCRAM-SHA-512")
                .set("sasl.username", username)
                .set("sasl.password", password);
            if let Some(ca) = ca {
                c.set("ssl.ca.location", ca);
            }
        }
        Auth::GoogleAdc { ca } => {
            // KafkaConfig.java: SASL_SSL, OAUTHBEARER, GcpLoginCallbackHandler.
            c.set("security.protocol", "sasl_ssl").set("sasl.mechanism", "OAUTHBEARER");
            if let Some(ca) = ca {
                c.set("ssl.ca.location", ca);
            }
        }
        Auth::Tls { ca, keystore, key_password } => {
            c.set("security.protocol", "ssl");
            if check == HostnameCheck::AsGoogle {
                c.set("ssl.endpoint.identification.algorithm", "none");
            }
            if let Some(ca) = ca {
                c.set("ssl.ca.location", ca);
            }
            if let Some(ks) = keystore {
                c.set("ssl.certificate.location", ks).set("ssl.key.location", ks);
            }
            if let Some(p) = key_password {
                c.set("ssl.key.password", p);
            }
        }
    }
}
