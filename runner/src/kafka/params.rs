//! The Kafka read parameters Google's templates share (`readBootstrapServerAndTopic`,
//! `kafkaReadAuthenticationMode` and its secrets, `consumerGroupId`,
//! `kafkaReadOffset`, `enableCommitOffsets`), read once for every template.

use super::gaps::GapPolicy;
use super::source::Isolation;
use super::HostnameCheck;
use super::{parse_server_and_topic, resolve_secret, Auth, Connection, SourceSettings};
use flexrun_templates::typed::kafka_source::{
    KafkaIsolationLevel, KafkaReadAuthenticationMode as Mode, KafkaReadOffset, KafkaTlsHostnameVerification,
    Name as SrcName, OffsetGapPolicy, Params as Src,
};
use flexrun_templates::{Problems, ResolvedParams};

/// The source the parameters name, or `None` with the problems pushed to `errs`.
pub fn read_source(p: &ResolvedParams, job_name: &str, errs: &mut Problems) -> Option<SourceSettings> {
    if Src(p).enable_commit_offsets() && Src(p).consumer_group_id().is_none() {
        errs.push("enableCommitOffsets=true requires consumerGroupId");
    }
    let (bootstrap, topic) = match parse_server_and_topic(Src(p).read_bootstrap_server_and_topic()) {
        Ok(v) => v,
        Err(e) => {
            errs.push(e.to_string());
            Default::default()
        }
    };
    let mode = Src(p).kafka_read_authentication_mode();
    let auth = auth_of(Src(p), mode);
    let auth = auth.map_err(|e| errs.push(e)).ok();
    let gap_policy = match Src(p).offset_gap_policy() {
        OffsetGapPolicy::Fail => GapPolicy::Fail,
        OffsetGapPolicy::Skip => GapPolicy::Skip,
    };
    let hostname_check = match Src(p).kafka_tls_hostname_verification() {
        KafkaTlsHostnameVerification::AsGoogle => HostnameCheck::AsGoogle,
        KafkaTlsHostnameVerification::Always => HostnameCheck::Always,
    };
    let isolation = match Src(p).kafka_isolation_level() {
        KafkaIsolationLevel::ReadCommitted => Isolation::ReadCommitted,
        KafkaIsolationLevel::ReadUncommitted => Isolation::ReadUncommitted,
    };
    let group_id = Src(p).consumer_group_id().map(str::to_string).unwrap_or_else(|| format!("flexrun-{job_name}"));
    Some(SourceSettings {
        conn: Connection { bootstrap, auth: auth?, hostname_check },
        topic,
        group_id,
        start_earliest: Src(p).kafka_read_offset() == KafkaReadOffset::Earliest,
        gap_policy,
        isolation,
        group_offsets: true,
    })
}

/// The authentication `kafkaReadAuthenticationMode` names, with its secrets resolved.
fn auth_of(p: Src<'_>, mode: Mode) -> Result<Auth, String> {
    let owned = |v: Option<&str>| v.map(str::to_string);
    match mode {
        Mode::None => Ok(Auth::None),
        Mode::SaslPlain => {
            let username = secret(SrcName::KafkaReadUsernameSecretId, p.kafka_read_username_secret_id(), mode)?;
            let password = secret(SrcName::KafkaReadPasswordSecretId, p.kafka_read_password_secret_id(), mode)?;
            Ok(Auth::SaslPlain { username, password, ca: owned(p.kafka_read_truststore_location()) })
        }
        Mode::SaslScram512 => {
            let user = p.kafka_read_sasl_scram_username_secret_id();
            let username = secret(SrcName::KafkaReadSaslScramUsernameSecretId, user, mode)?;
            let pass = p.kafka_read_sasl_scram_password_secret_id();
            let password = secret(SrcName::KafkaReadSaslScramPasswordSecretId, pass, mode)?;
            Ok(Auth::SaslScram512 { username, password, ca: owned(p.kafka_read_sasl_scram_truststore_location()) })
        }
        Mode::Tls => {
            let key_password = match p.kafka_read_key_password_secret_id() {
                Some(v) => {
                    Some(resolve_secret(SrcName::KafkaReadKeyPasswordSecretId.as_str(), v).map_err(|e| e.to_string())?)
                }
                None => None,
            };
            let (ca, keystore) = (owned(p.kafka_read_truststore_location()), owned(p.kafka_read_keystore_location()));
            Ok(Auth::Tls { ca, keystore, key_password })
        }
        // Google's template takes no truststore here (Managed Kafka's certificates are
        // publicly trusted); kafkaReadTruststoreLocation is honoured if given.
        Mode::ApplicationDefaultCredentials => Ok(Auth::GoogleAdc { ca: owned(p.kafka_read_truststore_location()) }),
    }
}

/// A secret parameter the mode needs, resolved (a Secret Manager version, `env:VAR`,
/// `file:PATH` or the value).
fn secret(name: SrcName, value: Option<&str>, mode: Mode) -> Result<String, String> {
    let name = name.as_str();
    let v = value.ok_or_else(|| format!("kafkaReadAuthenticationMode={mode} needs {name} (a Secret Manager version projects/P/secrets/S/versions/V, env:VAR, file:PATH or the value); for a broker without authentication set kafkaReadAuthenticationMode=NONE"))?;
    resolve_secret(name, v).map_err(|e| e.to_string())
}
