//! Kafka, through rdkafka: one place that builds clients, the source's partitions and
//! positions, and one producer context.
//!
//! # Layout
//! - [`connection`]: [`Connection`] (bootstrap servers + authentication → librdkafka
//!   settings). Every consumer, producer and admin client in flexrun is built from
//!   [`Connection::config`], so none skips the authentication settings.
//! - [`source`]: [`SourceSettings`] (topic, group, where a fresh job starts), the
//!   consumers' settings, start positions, `assign` and informational commits.
//! - [`shared`]: [`shared::SharedConsumer`], one consumer per worker whose shards read
//!   their partitions from split partition queues.
//! - [`metadata`]: [`Metadata`], one long-lived client per job for partitions and
//!   watermarks (the dashboard and the autoscaler read them every few seconds).
//! - [`oauth`]: [`oauth::AuthContext`], the context of every other client, which answers
//!   OAUTHBEARER token requests with Google's credentials
//!   (`APPLICATION_DEFAULT_CREDENTIALS`).
//! - [`acks`]: [`AckContext`], the one producer context: counts acknowledgements and
//!   failures, and times them when messages carry their creation time.
//! - [`admin`]: topic creation for the local stack, tests and the demo.
//! - [`params`]: the read parameters Google's templates share, into [`SourceSettings`].
//! - [`gaps`]: positions the broker no longer holds (retention, a log cut short) and
//!   `offsetGapPolicy`, at start and while running.
//! - [`starts`]: start positions made durable before the first read, so a restart
//!   without a checkpoint resumes where the last run began instead of at a new `latest`.
//! - [`lineage`]: which log a position belongs to (topic id, leader epochs), and the
//!   check that a saved position is still in it.
//! - [`history`]: one pass over a topic's stored messages (`flexrun local topic-rates`).
//! - [`budget`]: `--memory-budget` shared out into per-partition prefetch and batch size.
//! - [`secrets`]: Secret Manager versions (`…SecretId`), read with Google's credentials and
//!   their CRC32C checked; [`resolve_secret`] takes them beside `env:` and `file:`.
//!
//! Partitions are assigned by flexrun (manual `assign`), not by the consumer group
//! protocol: the job's checkpoint, not the group, is the source of truth for where
//! each partition stands. `consumerGroupId` is still sent as `group.id`, its
//! committed offsets seed a job that has no checkpoint yet, and with
//! `enableCommitOffsets=true` processed offsets are committed back for lag tools.

pub mod acks;
pub mod admin;
pub mod budget;
pub mod connection;
pub mod gaps;
pub mod history;
pub mod lineage;
pub mod metadata;
pub mod oauth;
pub mod params;
pub mod secrets;
pub mod shared;
pub mod source;
pub mod starts;

pub use acks::{AckContext, Acks, Timing};
pub use admin::create_topic;
pub use connection::{Auth, Connection, HostnameCheck};
pub use metadata::Metadata;
pub use source::{assign, commit_positions, SourceSettings};

/// Kafka failures, naming the broker and topic.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// Settings that cannot work.
    #[error("{0}")]
    Config(String),
    /// The broker did not answer or the topic does not exist.
    #[error("Kafka {bootstrap}{}: {message}", if .topic.is_empty() { String::new() } else { format!(" topic {}", .topic) })]
    Broker {
        /// Bootstrap servers.
        bootstrap: String,
        /// Topic.
        topic: String,
        /// What went wrong.
        message: String,
    },
}

/// A project id as Managed Kafka's bootstrap host names it (DataflowTemplates #2908):
/// lower-cased, a domain-scoped `domain:project` as `project.domain`, and any other
/// character outside `[a-z0-9-.]` as `-`.
///
/// ```
/// use flexrun::kafka::managed_kafka_project;
/// assert_eq!(managed_kafka_project("google.com:My_Proj"), "my-proj.google.com");
/// assert_eq!(managed_kafka_project("plain-1"), "plain-1");
/// ```
pub fn managed_kafka_project(p: &str) -> String {
    let p = p.to_lowercase();
    let p = match p.split_once(':') {
        Some((domain, project)) => format!("{project}.{domain}"),
        None => p,
    };
    p.chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' { c } else { '-' })
        .collect()
}

/// Split `readBootstrapServerAndTopic` into servers and topic; a Managed Kafka topic
/// path becomes its bootstrap address, as Google's KafkaTopicUtils does.
pub fn parse_server_and_topic(v: &str) -> Result<(String, String), KafkaError> {
    if let Some(rest) = v.strip_prefix("projects/") {
        let parts: Vec<&str> = rest.split('/').collect();
        if let [p, "locations", r, "clusters", c, "topics", t] = parts.as_slice() {
            let p = managed_kafka_project(p);
            return Ok((format!("bootstrap.{c}.{r}.managedkafka.{p}.cloud.goog:9092"), t.to_string()));
        }
        return Err(KafkaError::Config(format!(
            "readBootstrapServerAndTopic {v:?}: expected projects/P/locations/R/clusters/C/topics/T"
        )));
    }
    match v.split_once(';') {
        Some((servers, topic)) if !servers.is_empty() && !topic.is_empty() && !topic.contains(',') => {
            Ok((servers.to_string(), topic.to_string()))
        }
        Some((_, topic)) if topic.contains(',') => Err(KafkaError::Config(format!(
            "readBootstrapServerAndTopic {v:?}: several topics are separated by | (a|b|c), not commas; a pattern is written /regex/ (got {topic:?})"
        ))),
        _ => {
            Err(KafkaError::Config(format!("readBootstrapServerAndTopic {v:?}: expected host:port[,host:port];topic")))
        }
    }
}

/// Resolve a credential parameter: a Secret Manager version
/// (`projects/P/secrets/S/versions/V`, as Google's templates take it, [`secrets`]),
/// `env:VAR`, `file:PATH` or the literal value.
pub fn resolve_secret(param: &str, v: &str) -> Result<String, KafkaError> {
    if let Some(var) = v.strip_prefix("env:") {
        return std::env::var(var)
            .map_err(|_| KafkaError::Config(format!("{param}: environment variable {var} is not set")));
    }
    if let Some(path) = v.strip_prefix("file:") {
        return std::fs::read_to_string(path)
            .map(|s| s.trim_end().to_string())
            .map_err(|e| KafkaError::Config(format!("{param}: cannot read {path}: {e}")));
    }
    if secrets::is_secret_path(v) {
        let version = secrets::parse(v).map_err(|e| KafkaError::Config(format!("{param}: {e}")))?;
        return secrets::access_text(&version)
            .map_err(|e| KafkaError::Config(format!("{param}: Secret Manager version {v}: {e}")));
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::connection::apply_auth;
    use super::*;
    use rdkafka::config::ClientConfig;

    #[test]
    fn server_and_topic_forms() {
        assert_eq!(parse_server_and_topic("h:1,h2:2;t").unwrap(), ("h:1,h2:2".into(), "t".into()));
        assert_eq!(
            parse_server_and_topic("projects/p/locations/r/clusters/c/topics/t").unwrap(),
            ("bootstrap.c.r.managedkafka.p.cloud.goog:9092".into(), "t".into())
        );
        assert!(parse_server_and_topic("h:1;t1,t2").unwrap_err().to_string().contains("separated by |"));
        assert!(parse_server_and_topic("h:1").is_err());
        assert!(parse_server_and_topic("projects/p/topics/t").is_err());
        assert_eq!(
            parse_server_and_topic("projects/example.com:Proj/locations/us-central1/clusters/c/topics/t").unwrap().0,
            "bootstrap.c.us-central1.managedkafka.proj.example.com.cloud.goog:9092"
        );
    }

    #[test]
    fn secrets_resolve_or_say_why_not() {
        std::env::set_var("FLEXRUN_TEST_SECRET", "s3cret");
        assert_eq!(resolve_secret("p", "env:FLEXRUN_TEST_SECRET").unwrap(), "s3cret");
        assert!(resolve_secret("p", "env:FLEXRUN_NOPE_NOT_SET")
            .unwrap_err()
            .to_string()
            .contains("FLEXRUN_NOPE_NOT_SET"));
        // A Secret Manager path without its version says what is expected, before any call.
        assert!(resolve_secret("p", "projects/x/secrets/y").unwrap_err().to_string().contains("versions/VERSION"));
        assert!(resolve_secret("p", "file:/nonexistent/flexrun").unwrap_err().to_string().contains("cannot read"));
        assert_eq!(resolve_secret("p", "plain").unwrap(), "plain");
    }

    #[test]
    fn auth_modes_map_to_librdkafka_settings() {
        let scram = Auth::SaslScram512 { username: "u".into(), password: "p".into(), ca: Some("/ca.pem".into()) };
        let mut c = ClientConfig::new();
        apply_auth(&mut c, &scram, HostnameCheck::AsGoogle);
        assert_eq!(c.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(c.get("ssl.ca.location"), Some("/ca.pem"));
        // SASL keeps the client's default check, as Google's Java client does.
        assert_eq!(c.get("ssl.endpoint.identification.algorithm"), None);
        let mut c = ClientConfig::new();
        apply_auth(
            &mut c,
            &Auth::SaslPlain { username: "u".into(), password: "p".into(), ca: None },
            HostnameCheck::AsGoogle,
        );
        // Google connects SASL_PLAIN over TLS even without a truststore.
        assert_eq!(c.get("security.protocol"), Some("sasl_ssl"));
        let tls = Auth::Tls { ca: None, keystore: Some("/k.pem".into()), key_password: None };
        let mut c = ClientConfig::new();
        apply_auth(&mut c, &tls, HostnameCheck::AsGoogle);
        assert_eq!(c.get("ssl.key.location"), Some("/k.pem"));
        assert_eq!(c.get("ssl.endpoint.identification.algorithm"), Some("none"));
        let mut c = ClientConfig::new();
        apply_auth(&mut c, &tls, HostnameCheck::Always);
        assert_eq!(c.get("ssl.endpoint.identification.algorithm"), None, "librdkafka's default (https) stays");
    }
}
