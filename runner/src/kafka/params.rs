//! The Kafka read parameters Google's templates share (`readBootstrapServerAndTopic`,
//! `kafkaReadAuthenticationMode` and its secrets, `consumerGroupId`,
//! `kafkaReadOffset`, `enableCommitOffsets`), read once for every template.

use super::{parse_server_and_topic, resolve_secret, Auth, Connection, SourceSettings};
use flexrun_templates::{Problems, ResolvedParams};

/// The source the parameters name, or `None` with the problems pushed to `errs`.
pub fn read_source(p: &ResolvedParams, job_name: &str, errs: &mut Problems) -> Option<SourceSettings> {
    if p.flag("enableCommitOffsets") && p.get("consumerGroupId").is_none() {
        errs.push("enableCommitOffsets=true requires consumerGroupId");
    }
    let (bootstrap, topic) = match parse_server_and_topic(p.get("readBootstrapServerAndTopic").unwrap_or_default()) {
        Ok(v) => v,
        Err(e) => {
            errs.push(e.to_string());
            Default::default()
        }
    };
    let mode = p.get("kafkaReadAuthenticationMode").unwrap_or("SASL_PLAIN");
    let path = |n: &str| p.get(n).map(str::to_string);
    let auth = match mode {
        "NONE" => Ok(Auth::None),
        "SASL_PLAIN" => secret(p, "kafkaReadUsernameSecretId", mode).and_then(|u| {
            secret(p, "kafkaReadPasswordSecretId", mode).map(|pw| Auth::SaslPlain { username: u, password: pw, ca: path("kafkaReadTruststoreLocation") })
        }),
        "SASL_SCRAM_512" => secret(p, "kafkaReadSaslScramUsernameSecretId", mode).and_then(|u| {
            secret(p, "kafkaReadSaslScramPasswordSecretId", mode).map(|pw| Auth::SaslScram512 { username: u, password: pw, ca: path("kafkaReadSaslScramTruststoreLocation") })
        }),
        "TLS" => {
            let key_password = match p.get("kafkaReadKeyPasswordSecretId") {
                Some(v) => resolve_secret("kafkaReadKeyPasswordSecretId", v).map(Some).map_err(|e| e.to_string()),
                None => Ok(None),
            };
            key_password.map(|kp| Auth::Tls { ca: path("kafkaReadTruststoreLocation"), keystore: path("kafkaReadKeystoreLocation"), key_password: kp })
        }
        // Google's template takes no truststore here (Managed Kafka's certificates are
        // publicly trusted); kafkaReadTruststoreLocation is honoured if given.
        "APPLICATION_DEFAULT_CREDENTIALS" => Ok(Auth::GoogleAdc { ca: path("kafkaReadTruststoreLocation") }),
        other => Err(format!("kafkaReadAuthenticationMode={other}: expected APPLICATION_DEFAULT_CREDENTIALS, SASL_PLAIN, SASL_SCRAM_512, TLS or NONE")),
    };
    let auth = auth.map_err(|e| errs.push(e)).ok();
    let gap_policy =
        super::gaps::GapPolicy::parse(p.get("offsetGapPolicy").unwrap_or("FAIL")).map_err(|e| errs.push(e)).ok();
    let hostname_check = super::HostnameCheck::parse(p.get("kafkaTlsHostnameVerification").unwrap_or("AS_GOOGLE"))
        .map_err(|e| errs.push(e))
        .ok();
    let isolation = super::source::Isolation::parse(p.get("kafkaIsolationLevel").unwrap_or("read_committed"))
        .map_err(|e| errs.push(e))
        .ok();
    let group_id = p.get("consumerGroupId").map(str::to_string).unwrap_or_else(|| format!("flexrun-{job_name}"));
    Some(SourceSettings {
        conn: Connection { bootstrap, auth: auth?, hostname_check: hostname_check? },
        topic,
        group_id,
        start_earliest: p.get("kafkaReadOffset") == Some("earliest"),
        gap_policy: gap_policy?,
        isolation: isolation?,
    })
}

fn secret(p: &ResolvedParams, name: &str, mode: &str) -> Result<String, String> {
    let v = p.get(name).ok_or_else(|| format!("kafkaReadAuthenticationMode={mode} needs {name} (the value, env:VAR or file:PATH); for a broker without authentication set kafkaReadAuthenticationMode=NONE"))?;
    resolve_secret(name, v).map_err(|e| e.to_string())
}
