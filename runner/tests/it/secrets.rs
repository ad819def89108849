//! Issue 65: Secret Manager versions as Google's templates take them, against the
//! stack's Secret Manager (`scripts/secret_manager.py`) and token endpoint
//! (`scripts/token_endpoint.py`), with a service account key file whose `token_uri` is
//! that endpoint (application default credentials, as a Dataflow worker has them).
//!
//! A SASL_PLAIN job whose user and password are secret versions (one `latest`, one by
//! number) reads every record; a missing secret, a damaged payload (a wrong
//! `dataCrc32c`) and a malformed path each stop the job at start with exit 2, naming the
//! parameter and never printing the secret.

use crate::common::*;
use flexrun::bigquery::{rest, TableRef};

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} (scripts/stack.sh env)"))
}

/// Add a version to the stack's Secret Manager; its full name.
async fn add_secret(name: &str, data: &str) -> String {
    let url = format!("{}/_flexrun/secrets", env("FLEXRUN_SECRET_MANAGER"));
    let body = serde_json::json!({"name": name, "data": data});
    let r = answer("add a secret", reqwest::Client::new().post(&url).json(&body).send()).await.unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
    let v: serde_json::Value = r.json().await.unwrap();
    v["name"].as_str().unwrap().to_string()
}

async fn fault(body: serde_json::Value) {
    let url = format!("{}/_flexrun/faults", env("FLEXRUN_SECRET_MANAGER"));
    let r = answer("a fault", reqwest::Client::new().post(&url).json(&body).send()).await.unwrap();
    assert!(r.status().is_success());
}

/// A service account key whose token endpoint is the stack's.
fn key_file(dir: &std::path::Path) -> std::path::PathBuf {
    adc_key_file(dir, &env("FLEXRUN_TOKEN_ENDPOINT"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_credentials_come_from_secret_manager_versions_and_bad_ones_exit_2() {
    let s = stack();
    let topic = unique("sm_auth");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    flexrun::local::produce(&s.kafka, &topic, 1, 0, 20, None, 100).await.unwrap();
    let table = TableRef { project: PROJECT.into(), dataset: "it".into(), table: topic.clone() };
    let c = rest::client(&s.bq).await.unwrap();
    answer("table", rest::ensure_table(&c, &s.bq, &table, &flexrun::local::demo_schema())).await.unwrap();
    let secret = |s: &str| format!("projects/{PROJECT}/secrets/{topic}_{s}");
    add_secret(&secret("user"), &env("FLEXRUN_KAFKA_SASL_USER")).await;
    add_secret(&secret("pw"), "an older password").await;
    add_secret(&secret("pw"), &env("FLEXRUN_KAFKA_SASL_PASSWORD")).await;
    let (user, pw) = (format!("{}/versions/latest", secret("user")), format!("{}/versions/2", secret("pw")));
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let ca = format!("{}/ca.pem", env("FLEXRUN_KAFKA_TLS_DIR"));
    let params = |u: &str, p: &str| {
        format!("readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={table},kafkaReadOffset=earliest,kafkaReadAuthenticationMode=SASL_PLAIN,kafkaReadUsernameSecretId={u},kafkaReadPasswordSecretId={p},kafkaReadTruststoreLocation={ca}", env("FLEXRUN_KAFKA_SASL_SSL"))
    };
    let run = |p: String| {
        let ck = tempfile::tempdir().unwrap();
        job_cmd("sm", ck.path(), &p, "1s", &[]).env("GOOGLE_APPLICATION_CREDENTIALS", &key).bounded()
    };
    let o = run(params(&user, &pw));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&table).await, (20, 20));

    let missing = format!("{}/versions/1", secret("nope"));
    fault(serde_json::json!({"name": secret("pw"), "corrupt_crc": true, "count": 1})).await;
    let cases = [
        (params(&user, &pw), "kafkaReadPasswordSecretId", "CRC32C"),
        (params(&missing, &pw), "kafkaReadUsernameSecretId", "not found"),
        (params(&user, &secret("pw")), "kafkaReadPasswordSecretId", "versions/VERSION"),
    ];
    for (p, param, says) in cases {
        let o = run(p);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{param}: {t}");
        assert!(t.contains(param) && t.contains(says), "{param}: expected {says:?} in {t}");
        assert!(!t.contains(&env("FLEXRUN_KAFKA_SASL_PASSWORD")), "the secret is printed: {t}");
    }
    assert_eq!(s.count(&table).await, (20, 20), "no bad run wrote anything");
}

/// Put `data` at `gs://<bucket>/<prefix>/<name>` on the stack's Cloud Storage; its path.
async fn put_object(prefix: &str, name: &str, data: Vec<u8>) -> String {
    let dir = format!("gs://{}/{prefix}/", env("FLEXRUN_GCS_BUCKET"));
    let store = flexrun::store::Store::open(&flexrun::store::Location::parse(&dir).unwrap(), None).await.unwrap();
    store.put(name, data).await.unwrap();
    format!("{dir}{name}")
}

/// Issue 65's first "done when", on the local stack: a SASL_PLAIN job whose user and
/// password are Secret Manager versions, whose truststore and UDF are `gs://` objects
/// (fetched at start). A `gs://` object that does not exist stops the start with exit 2
/// naming its parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_gcs_truststore_and_a_gcs_udf_run_as_googles_command_gives_them() {
    let s = stack();
    let topic = unique("sm_gcs");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    flexrun::local::produce(&s.kafka, &topic, 1, 0, 20, None, 100).await.unwrap();
    let table = TableRef { project: PROJECT.into(), dataset: "it".into(), table: topic.clone() };
    let c = rest::client(&s.bq).await.unwrap();
    answer("table", rest::ensure_table(&c, &s.bq, &table, &flexrun::local::demo_schema())).await.unwrap();
    let user = add_secret(&format!("projects/{PROJECT}/secrets/{topic}_u"), &env("FLEXRUN_KAFKA_SASL_USER")).await;
    let pw = add_secret(&format!("projects/{PROJECT}/secrets/{topic}_p"), &env("FLEXRUN_KAFKA_SASL_PASSWORD")).await;
    let ca_pem = std::fs::read(format!("{}/ca.pem", env("FLEXRUN_KAFKA_TLS_DIR"))).unwrap();
    let ca = put_object(&topic, "ca.pem", ca_pem).await;
    let udf = "function t(inJson) { var o = JSON.parse(inJson); o.message = 'from gcs'; return JSON.stringify(o); }";
    let js = put_object(&topic, "t.js", udf.as_bytes().to_vec()).await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let params = |ca: &str| {
        format!("readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={table},kafkaReadOffset=earliest,kafkaReadAuthenticationMode=SASL_PLAIN,kafkaReadUsernameSecretId={user},kafkaReadPasswordSecretId={pw},kafkaReadTruststoreLocation={ca},javascriptTextTransformGcsPath={js},javascriptTextTransformFunctionName=t", env("FLEXRUN_KAFKA_SASL_SSL"))
    };
    let ck = tempfile::tempdir().unwrap();
    let run =
        |p: String| job_cmd("smgcs", ck.path(), &p, "1s", &[]).env("GOOGLE_APPLICATION_CREDENTIALS", &key).bounded();
    let o = run(params(&ca));
    assert!(o.status.success(), "{}", text(&o));
    let rows = s.rows(&format!("SELECT message FROM `{}.{}.{}`", table.project, table.dataset, table.table)).await;
    assert_eq!(rows.len(), 20);
    assert!(rows.iter().all(|r| r[0].as_deref() == Some("from gcs")), "the UDF from gs:// ran: {rows:?}");
    let o = run(params(&format!("{ca}.missing")));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("kafkaReadTruststoreLocation"), "{}", text(&o));
}
