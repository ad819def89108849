//! `kafkaReadAuthenticationMode=APPLICATION_DEFAULT_CREDENTIALS` end to end: a job
//! authenticates to the broker's SASL_SSL listener with OAUTHBEARER and the token
//! Google's `GcpLoginCallbackHandler` makes, from application default credentials (a
//! service account key whose `token_uri` is a token endpoint this test serves). The
//! broker checks the token's shape (`scripts/kafka/validator`), refuses a token from
//! other credentials, and the job asks for a new token before the old one expires.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use flexrun::bigquery::{rest, TableRef};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A token endpoint (Google's OAuth `token_uri` stand-in): every request gets a new
/// access token `<prefix>-<n>` valid for `lifetime_s`. Counts what it served.
struct TokenEndpoint {
    url: String,
    served: Arc<AtomicU64>,
}

impl TokenEndpoint {
    fn start(prefix: &str, lifetime_s: u64) -> TokenEndpoint {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let served = Arc::new(AtomicU64::new(0));
        let (count, prefix) = (served.clone(), prefix.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                read_request(&mut conn);
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                let body = serde_json::json!({"access_token": format!("{prefix}-{n}"), "expires_in": lifetime_s, "token_type": "Bearer"}).to_string();
                let _ = write!(conn, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            }
        });
        TokenEndpoint { url, served }
    }

    fn served(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }
}

/// Read one HTTP request (headers, then the body its content-length names).
fn read_request(conn: &mut std::net::TcpStream) {
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = conn.read(&mut chunk) {
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap_or(0));
        if buf.len() >= end + 4 + len {
            break;
        }
    }
}

/// A service account key file whose token_uri is `endpoint`.
fn key_file(dir: &std::path::Path, endpoint: &TokenEndpoint) -> std::path::PathBuf {
    adc_key_file(dir, &endpoint.url)
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} (scripts/stack.sh env)"))
}

async fn table(s: &Stack, name: &str) -> TableRef {
    let t = TableRef { project: PROJECT.into(), dataset: "it".into(), table: name.to_string() };
    let c = rest::client(&s.bq).await.expect("rest client");
    answer("create table", rest::ensure_table(&c, &s.bq, &t, &flexrun::local::demo_schema())).await.expect("table");
    t
}

/// The job's parameters as a `gcloud` command for Managed Kafka gives them, on the
/// local broker's SASL_SSL listener with the stack's CA.
fn params(topic: &str, t: &TableRef) -> String {
    let ca = format!("{}/ca.pem", env("FLEXRUN_KAFKA_TLS_DIR"));
    format!(
        "readBootstrapServerAndTopic={};{topic},messageFormat=JSON,outputTableSpec={t},kafkaReadOffset=earliest,kafkaReadAuthenticationMode=APPLICATION_DEFAULT_CREDENTIALS,kafkaReadTruststoreLocation={ca}",
        env("FLEXRUN_KAFKA_SASL_SSL")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_default_credentials_read_through_oauthbearer_and_refresh_the_token() {
    let s = stack();
    let topic = unique("adc_read");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    flexrun::local::produce(&s.kafka, &topic, 1, 0, 20, None, 100).await.unwrap();
    let t = table(&s, &topic).await;
    // Tokens live 20 s: librdkafka asks again 80 % through, while the job runs.
    let endpoint = TokenEndpoint::start(&env("FLEXRUN_GOOGLE_TOKEN_PREFIX"), 20);
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), &endpoint);
    let mut cmd = job_cmd_until_idle("adc", &dir.path().join("ck"), &params(&topic, &t), "120s", &[]);
    let mut child = cmd
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_rows(&s, &t, 20, &mut child).await;
    let first = endpoint.served();
    assert!(first >= 1, "the job read without asking the token endpoint");
    // A refresh: another token asked for while the job runs, then more records read.
    let start = std::time::Instant::now();
    while endpoint.served() == first {
        assert!(child.try_wait().unwrap().is_none(), "the job ended: {}", stderr_tail(&mut child));
        assert!(start.elapsed() < Duration::from_secs(90), "no token refresh within 90 s of a 20 s token");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    flexrun::local::produce(&s.kafka, &topic, 1, 20, 20, None, 100).await.unwrap();
    wait_for_rows(&s, &t, 40, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = wait_with_timeout(child, RUN_LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.count(&t).await, (40, 40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_from_other_credentials_is_refused_by_the_broker() {
    let s = stack();
    let topic = unique("adc_refused");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    flexrun::local::produce(&s.kafka, &topic, 1, 0, 5, None, 100).await.unwrap();
    let t = table(&s, &topic).await;
    let endpoint = TokenEndpoint::start("ya29.someone-else", 3600);
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), &endpoint);
    let o = job_cmd_until_idle("adc-refused", &dir.path().join("ck"), &params(&topic, &t), "20s", &[])
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .bounded();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(endpoint.served() >= 1, "the job never asked for a token: {}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("OAUTHBEARER")
            || said.contains("Authentication failed")
            || said.contains("Broker transport failure"),
        "{said}"
    );
    assert_eq!(s.count(&t).await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_credentials_stop_the_job_naming_the_token_and_write_nothing() {
    let s = stack();
    let topic = unique("adc_garbage");
    flexrun::kafka::create_topic(&s.kafka, &topic, 1).await.unwrap();
    flexrun::local::produce(&s.kafka, &topic, 1, 0, 5, None, 100).await.unwrap();
    let t = table(&s, &topic).await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("adc.json");
    std::fs::write(&key, "{not a service account key").unwrap();
    let o = job_cmd_until_idle("adc-garbage", &dir.path().join("ck"), &params(&topic, &t), "20s", &[])
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .bounded();
    assert!(!o.status.success(), "{}", text(&o));
    // The error says what was tried and what to set (issue 65), and names the topic.
    let t_ = text(&o);
    assert!(t_.contains("no Google access token"), "the error names the token: {t_}");
    assert!(t_.contains("GOOGLE_APPLICATION_CREDENTIALS") && t_.contains("application-default login"), "{t_}");
    assert!(!t_.contains("topic :"), "a topic named empty: {t_}");
    assert_eq!(s.count(&t).await.0, 0);
}
