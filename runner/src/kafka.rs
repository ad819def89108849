//! The Kafka source: connection settings, partition discovery, start positions and
//! per-shard consumers (rdkafka).
//!
//! Partitions are assigned by flexrun (manual `assign`), not by the consumer group
//! protocol: the job's checkpoint, not the group, is the source of truth for where
//! each partition stands. `consumerGroupId` is still sent as `group.id`, its
//! committed offsets seed a job that has no checkpoint yet, and with
//! `enableCommitOffsets=true` processed offsets are committed back for lag tools.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// Kafka failures, naming the broker and topic.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// Settings that cannot work.
    #[error("{0}")]
    Config(String),
    /// The broker did not answer or the topic does not exist.
    #[error("Kafka {bootstrap} topic {topic}: {message}")]
    Broker {
        /// Bootstrap servers.
        bootstrap: String,
        /// Topic.
        topic: String,
        /// What went wrong.
        message: String,
    },
}

/// How to authenticate to the brokers (`kafkaReadAuthenticationMode`).
#[derive(Debug, Clone, PartialEq)]
pub enum Auth {
    /// Plain TCP, no authentication.
    None,
    /// SASL/PLAIN (over TLS when a truststore is given).
    SaslPlain {
        /// Username.
        username: String,
        /// Password.
        password: String,
        /// PEM CA file, for SASL_SSL.
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

/// Where the source reads from.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSettings {
    /// `host:port[,host:port]`.
    pub bootstrap: String,
    /// The one topic.
    pub topic: String,
    /// Authentication.
    pub auth: Auth,
    /// `group.id`.
    pub group_id: String,
    /// Whether a job without a checkpoint starts at the earliest offset (else the latest).
    pub start_earliest: bool,
}

/// Split `readBootstrapServerAndTopic` into servers and topic; a Managed Kafka topic
/// path becomes its bootstrap address, as Google's KafkaTopicUtils does.
pub fn parse_server_and_topic(v: &str) -> Result<(String, String), KafkaError> {
    if let Some(rest) = v.strip_prefix("projects/") {
        let parts: Vec<&str> = rest.split('/').collect();
        if let [p, "locations", r, "clusters", c, "topics", t] = parts.as_slice() {
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
            "readBootstrapServerAndTopic {v:?}: one job reads one topic (got {topic:?})"
        ))),
        _ => {
            Err(KafkaError::Config(format!("readBootstrapServerAndTopic {v:?}: expected host:port[,host:port];topic")))
        }
    }
}

/// Resolve a credential parameter: `env:VAR`, `file:PATH` or the literal value.
/// Google's Secret Manager paths (`projects/.../secrets/...`) cannot be read here.
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
    if v.starts_with("projects/") && v.contains("/secrets/") {
        return Err(KafkaError::Config(format!(
            "{param}: Secret Manager ({v}) is not reachable from here; pass the value, env:VAR or file:PATH"
        )));
    }
    Ok(v.to_string())
}

impl SourceSettings {
    /// librdkafka settings shared by consumers, producers and the admin client.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c.set("socket.timeout.ms", "10000");
        apply_auth(&mut c, &self.auth);
        c
    }

    /// A consumer for manual assignment (no auto commit, low fetch wait).
    pub fn consumer(&self) -> Result<StreamConsumer, KafkaError> {
        let mut c = self.client_config();
        c.set("group.id", &self.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // Every partition is assigned at an explicit offset, so this only applies when
            // that offset no longer exists. Kafka's consumer docs: auto.offset.reset is
            // "What to do when there is no initial offset in Kafka or if the current
            // offset does not exist any more on the server (e.g. because that data has
            // been deleted)". Earliest loses the least; the job counts such gaps at start
            // (see `pipeline::positions`).
            .set("auto.offset.reset", "earliest")
            // tansu holds each fetch for the full wait even when data is ready.
            .set("fetch.wait.max.ms", "10")
            .set("queued.min.messages", "20000")
            // Let one fetch carry a record of up to 32 MiB: tansu returns nothing (rather
            // than the first batch, as Kafka does since KIP-74) for a batch over the
            // partition's fetch size, which would stall the shard on a large record.
            .set("max.partition.fetch.bytes", "33554432")
            .set("fetch.max.bytes", "67108864")
            .set("receive.message.max.bytes", "67109376")
            .set("enable.partition.eof", "false");
        c.create().map_err(|e| self.broker_err(format!("cannot create consumer: {e}")))
    }

    fn broker_err(&self, message: String) -> KafkaError {
        KafkaError::Broker { bootstrap: self.bootstrap.clone(), topic: self.topic.clone(), message }
    }

    /// The topic's partitions, sorted.
    pub async fn partitions(&self) -> Result<Vec<i32>, KafkaError> {
        let s = self.clone();
        tokio::task::spawn_blocking(move || {
            let c: BaseConsumer =
                s.client_config().create().map_err(|e| s.broker_err(format!("cannot create client: {e}")))?;
            let md = c
                .fetch_metadata(Some(&s.topic), Duration::from_secs(10))
                .map_err(|e| s.broker_err(format!("broker unreachable or metadata failed: {e}")))?;
            let t = md
                .topics()
                .iter()
                .find(|t| t.name() == s.topic)
                .ok_or_else(|| s.broker_err("topic not in metadata".into()))?;
            if let Some(e) = t.error() {
                return Err(s.broker_err(format!("topic error: {e:?} (does the topic exist?)")));
            }
            let mut ps: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
            if ps.is_empty() {
                return Err(s.broker_err("topic has no partitions (does it exist?)".into()));
            }
            ps.sort_unstable();
            Ok(ps)
        })
        .await
        .expect("metadata task")
    }

    /// Where partitions without a checkpoint start: the group's committed offset if it
    /// has one, else the earliest or latest offset (`kafkaReadOffset`).
    pub async fn initial_positions(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        let s = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut cfg = s.client_config();
            cfg.set("group.id", &s.group_id).set("enable.auto.commit", "false");
            let c: BaseConsumer = cfg.create().map_err(|e| s.broker_err(format!("cannot create client: {e}")))?;
            let mut tpl = TopicPartitionList::new();
            for p in &partitions {
                tpl.add_partition(&s.topic, *p);
            }
            let committed = c.committed_offsets(tpl, Duration::from_secs(10)).ok();
            let mut out = BTreeMap::new();
            for p in partitions {
                let from_group =
                    committed.as_ref().and_then(|t| t.find_partition(&s.topic, p)).and_then(|e| match e.offset() {
                        Offset::Offset(o) if o >= 0 => Some(o),
                        _ => None,
                    });
                let pos = match from_group {
                    Some(o) => o,
                    None => {
                        let (lo, hi) = c
                            .fetch_watermarks(&s.topic, p, Duration::from_secs(10))
                            .map_err(|e| s.broker_err(format!("watermarks of partition {p}: {e}")))?;
                        if s.start_earliest {
                            lo
                        } else {
                            hi
                        }
                    }
                };
                out.insert(p, pos);
            }
            Ok(out)
        })
        .await
        .expect("offsets task")
    }

    /// The low watermark (earliest offset still stored) of every partition.
    pub async fn low_watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        Ok(self.watermarks(partitions).await?.into_iter().map(|(p, (lo, _))| (p, lo)).collect())
    }

    /// The high watermark (next offset to be written) of every partition.
    pub async fn high_watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, KafkaError> {
        Ok(self.watermarks(partitions).await?.into_iter().map(|(p, (_, hi))| (p, hi)).collect())
    }

    /// Low and high watermarks of every partition.
    async fn watermarks(&self, partitions: &[i32]) -> Result<BTreeMap<i32, (i64, i64)>, KafkaError> {
        let s = self.clone();
        let partitions = partitions.to_vec();
        tokio::task::spawn_blocking(move || {
            let c: BaseConsumer =
                s.client_config().create().map_err(|e| s.broker_err(format!("cannot create client: {e}")))?;
            partitions
                .into_iter()
                .map(|p| {
                    c.fetch_watermarks(&s.topic, p, Duration::from_secs(10))
                        .map(|w| (p, w))
                        .map_err(|e| s.broker_err(format!("watermarks of partition {p}: {e}")))
                })
                .collect()
        })
        .await
        .expect("watermark task")
    }
}

/// Point `consumer` at `positions` (partition → next offset).
pub fn assign(consumer: &StreamConsumer, topic: &str, positions: &BTreeMap<i32, i64>) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in positions {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
            .map_err(|e| KafkaError::Config(format!("partition {p} offset {o}: {e}")))?;
    }
    consumer.assign(&tpl).map_err(|e| KafkaError::Config(format!("assign partitions of {topic}: {e}")))
}

/// Commit processed positions to the consumer group (informational).
pub fn commit_positions(consumer: &StreamConsumer, topic: &str, positions: &BTreeMap<i32, i64>) {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in positions {
        let _ = tpl.add_partition_offset(topic, *p, Offset::Offset(*o));
    }
    if let Err(e) = consumer.commit(&tpl, rdkafka::consumer::CommitMode::Async) {
        tracing::warn!(topic, error = %e, "committing offsets to the consumer group failed (informational only)");
    }
}

fn apply_auth(c: &mut ClientConfig, auth: &Auth) {
    match auth {
        Auth::None => {
            c.set("security.protocol", "plaintext");
        }
        Auth::SaslPlain { username, password, ca } => {
            c.set("security.protocol", if ca.is_some() { "sasl_ssl" } else { "sasl_plaintext" })
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
        Auth::Tls { ca, keystore, key_password } => {
            c.set("security.protocol", "ssl");
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

/// Create a topic (used by the local stack helpers, tests and the demo).
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| KafkaError::Broker { bootstrap: bootstrap.into(), topic: topic.into(), message: e.to_string() })?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let res = admin
        .create_topics(&[new], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))))
        .await
        .map_err(|e| KafkaError::Broker { bootstrap: bootstrap.into(), topic: topic.into(), message: e.to_string() })?;
    for r in res {
        match r {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(KafkaError::Broker {
                    bootstrap: bootstrap.into(),
                    topic: topic.into(),
                    message: format!("create topic: {code:?}"),
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_and_topic_forms() {
        assert_eq!(parse_server_and_topic("h:1,h2:2;t").unwrap(), ("h:1,h2:2".into(), "t".into()));
        assert_eq!(
            parse_server_and_topic("projects/p/locations/r/clusters/c/topics/t").unwrap(),
            ("bootstrap.c.r.managedkafka.p.cloud.goog:9092".into(), "t".into())
        );
        assert!(parse_server_and_topic("h:1;t1,t2").unwrap_err().to_string().contains("one topic"));
        assert!(parse_server_and_topic("h:1").is_err());
        assert!(parse_server_and_topic("projects/p/topics/t").is_err());
    }

    #[test]
    fn secrets_resolve_or_say_why_not() {
        std::env::set_var("FLEXRUN_TEST_SECRET", "s3cret");
        assert_eq!(resolve_secret("p", "env:FLEXRUN_TEST_SECRET").unwrap(), "s3cret");
        assert!(resolve_secret("p", "env:FLEXRUN_NOPE_NOT_SET")
            .unwrap_err()
            .to_string()
            .contains("FLEXRUN_NOPE_NOT_SET"));
        assert!(resolve_secret("p", "projects/x/secrets/y/versions/1")
            .unwrap_err()
            .to_string()
            .contains("Secret Manager"));
        assert!(resolve_secret("p", "file:/nonexistent/flexrun").unwrap_err().to_string().contains("cannot read"));
        assert_eq!(resolve_secret("p", "plain").unwrap(), "plain");
    }

    #[test]
    fn auth_modes_map_to_librdkafka_settings() {
        let mut c = ClientConfig::new();
        apply_auth(
            &mut c,
            &Auth::SaslScram512 { username: "u".into(), password: "p".into(), ca: Some("/ca.pem".into()) },
        );
        assert_eq!(c.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(c.get("ssl.ca.location"), Some("/ca.pem"));
        let mut c = ClientConfig::new();
        apply_auth(&mut c, &Auth::SaslPlain { username: "u".into(), password: "p".into(), ca: None });
        assert_eq!(c.get("security.protocol"), Some("sasl_plaintext"));
        let mut c = ClientConfig::new();
        apply_auth(&mut c, &Auth::Tls { ca: None, keystore: Some("/k.pem".into()), key_password: None });
        assert_eq!(c.get("ssl.key.location"), Some("/k.pem"));
    }
}
