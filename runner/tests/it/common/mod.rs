//! Shared helpers for the integration tests: they talk to the real local stack
//! (Apache Kafka + bqemulator) that `scripts/test.sh` starts and describes with
//! FLEXRUN_KAFKA, BIGQUERY_EMULATOR_HOST and BIGQUERY_STORAGE_EMULATOR_HOST.
#![allow(dead_code)]

use flexrun::bigquery::{rest, Endpoints, TableRef};
use flexrun::{kafka, local};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The BigQuery project the emulator serves.
pub const PROJECT: &str = "flexrun-local";

/// Connection details of the running stack.
pub struct Stack {
    /// Kafka bootstrap host:port.
    pub kafka: String,
    /// BigQuery endpoints (emulator).
    pub bq: Endpoints,
}

/// The stack from the environment; fails the test (never skips) when it is not there.
pub fn stack() -> Stack {
    let kafka = std::env::var("FLEXRUN_KAFKA").unwrap_or_default();
    let bq = Endpoints::resolve(None, None).ok().filter(|e| e.emulator);
    match (kafka.is_empty(), bq) {
        (false, Some(bq)) => Stack { kafka, bq },
        _ => panic!("integration tests need the local stack: run them with scripts/test.sh (it starts Apache Kafka and bqemulator and sets FLEXRUN_KAFKA, BIGQUERY_EMULATOR_HOST, BIGQUERY_STORAGE_EMULATOR_HOST)"),
    }
}

/// A name no other test run uses (topics and tables outlive a test).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    format!("{prefix}_{}_{t}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A topic with `partitions` partitions and an empty demo table (plus the DLQ table's name).
pub struct Fixture {
    /// Topic.
    pub topic: String,
    /// Partitions.
    pub partitions: i32,
    /// Destination table.
    pub table: TableRef,
    /// Dead-letter table (created by the job when it is configured).
    pub dlq: TableRef,
}

impl Stack {
    /// Create a topic and a table with the demo schema.
    pub async fn fixture(&self, name: &str, partitions: i32) -> Fixture {
        let topic = unique(name);
        kafka::create_topic(&self.kafka, &topic, partitions).await.expect("create topic");
        let table = TableRef { project: PROJECT.into(), dataset: "it".into(), table: topic.clone() };
        let dlq = TableRef { table: format!("{topic}_dlq"), ..table.clone() };
        let c = rest::client(&self.bq).await.expect("rest client");
        answer("create table", rest::ensure_table(&c, &self.bq, &table, &local::demo_schema()))
            .await
            .expect("create table");
        Fixture { topic, partitions, table, dlq }
    }

    /// Rows and distinct ids in a table.
    pub async fn count(&self, t: &TableRef) -> (i64, i64) {
        let (n, d) = answer("count rows", local::count_rows(&self.bq, t, Some("id"))).await.expect("count rows");
        (n, d.unwrap_or(0))
    }

    /// Every row of a query, as strings.
    pub async fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let c = rest::client(&self.bq).await.expect("rest client");
        answer("query", rest::query_rows(&c, PROJECT, sql)).await.expect("query")
    }
}

/// How long the emulators get to answer one call made by a test itself.
pub const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Await a call to the stack within [`CALL_LIMIT`], or fail the test naming the call: a
/// stuck emulator must fail one test, not stall the suite.
pub async fn answer<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .unwrap_or_else(|_| panic!("{what}: the local stack gave no answer within {CALL_LIMIT:?}"))
}

impl Fixture {
    /// The `--parameters` value for this fixture.
    pub fn params(&self, stack: &Stack, extra: &str) -> String {
        let mut p = format!(
            "readBootstrapServerAndTopic={};{},messageFormat=JSON,outputTableSpec={},kafkaReadAuthenticationMode=NONE,kafkaReadOffset=earliest",
            stack.kafka, self.topic, self.table
        );
        if !extra.is_empty() {
            p.push(',');
            p.push_str(extra);
        }
        p
    }

    /// Produce `count` messages with ids from `start`.
    pub async fn produce(&self, stack: &Stack, start: u64, count: u64, bad_every: Option<u64>) -> local::Produced {
        answer("produce", local::produce(&stack.kafka, &self.topic, self.partitions, start, count, bad_every, 962))
            .await
            .expect("produce")
    }
}

/// Produce these message values, in order, to partition 0 of `topic`.
pub async fn produce_values(s: &Stack, topic: &str, values: &[Vec<u8>]) {
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
    let p: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &s.kafka)
        .set("message.max.bytes", "33554432")
        .create()
        .expect("a producer");
    for v in values {
        let r = FutureRecord::<(), [u8]>::to(topic).payload(v.as_slice()).partition(0);
        answer("produce", p.send(r, CALL_LIMIT)).await.map_err(|(e, _)| e).expect("produce");
    }
    p.flush(CALL_LIMIT).expect("flush");
}

/// Ask the emulator launcher for faults (see scripts/bqemulator_launcher.py): POST
/// `body` (JSON) to `/faults`, or to `path` itself when it starts with `/`.
pub fn faults(path: &str, body: &str) -> serde_json::Value {
    http("POST", if path.is_empty() { "/faults" } else { path }, body)
}

/// Faults for one table only (`extra` is more JSON members, e.g. `"fail_next": 6`):
/// tests run in parallel, each on its own table, so none faults another's calls.
pub fn table_faults(t: &TableRef, extra: &str) -> serde_json::Value {
    faults("", &format!(r#"{{"table": "{}.{}", {extra}}}"#, t.dataset, t.table))
}

/// Clear the faults of one table.
pub fn reset_faults(t: &TableRef) -> serde_json::Value {
    faults("/reset", &format!(r#"{{"table": "{}.{}"}}"#, t.dataset, t.table))
}

/// The launcher's Storage Write call counters for one table.
pub fn fault_stats(t: &TableRef) -> serde_json::Value {
    http("GET", &format!("/stats?table={}.{}", t.dataset, t.table), "")
}

/// The launcher's Storage Write call counters over every table.
pub fn fault_stats_all() -> serde_json::Value {
    http("GET", "/stats", "")
}

fn http(method: &str, path: &str, body: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = std::env::var("FLEXRUN_BQ_FAULTS").expect("FLEXRUN_BQ_FAULTS: run the tests with scripts/test.sh");
    let mut s = std::net::TcpStream::connect(&addr).expect("connect to the fault port");
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let json = out.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("fault server said {out:?}: {e}"))
}

/// The `--summary-json` a run wrote.
pub fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("summary file")).expect("summary JSON")
}

/// `flexrun` with the stack's environment and the given arguments.
pub fn flexrun(args: &[&str]) -> Command {
    // A checkpoint root of this test process's own for runs that name none (the
    // generator's, say): tests run in parallel, and two jobs of one default name under
    // one root would meet at its lock.
    let root = std::env::temp_dir().join(format!("flexrun-it-{}", std::process::id()));
    // FLEXRUN_BIN: a copy of the binary, for long runs that must not see a rebuild.
    let bin = std::env::var_os("FLEXRUN_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_flexrun").into());
    let mut c = Command::new(bin);
    c.args(args).env("FLEXRUN_LOG", "warn").env("FLEXRUN_CHECKPOINT_DIR", root).stdin(Stdio::null());
    c
}

/// Run a kafka-to-bq job to completion: it drains once caught up with the topic (or, at
/// the latest, after `idle` with nothing to read; see [`job_cmd`]).
pub fn run_job(job: &str, ckpt: &Path, params: &str, idle: &str, extra: &[&str]) -> Output {
    job_cmd(job, ckpt, params, idle, extra).bounded()
}

/// The command [`run_job`] runs, to add environment variables (e.g. FAILPOINTS).
pub fn job_cmd(job: &str, ckpt: &Path, params: &str, idle: &str, extra: &[&str]) -> Command {
    // The run ends as soon as the topic's end offsets at start are committed. The idle
    // timeout is only the bound for a run that cannot get there, so it is at least 20 s:
    // a short one could end a run that is merely slow to start (tests run in parallel)
    // before it has read anything.
    let mut c = job_cmd_until_idle(job, ckpt, params, idle_backstop(idle), extra);
    c.arg("--stop-when-caught-up");
    c
}

/// `idle`, or 20 s if it is shorter (see [`job_cmd`]).
fn idle_backstop(idle: &str) -> &str {
    let secs = match idle.strip_suffix("ms") {
        Some(ms) => ms.parse::<f64>().unwrap_or(0.0) / 1000.0,
        None => idle.strip_suffix('s').and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0),
    };
    if secs < 20.0 {
        "20s"
    } else {
        idle
    }
}

/// [`job_cmd`] without `--stop-when-caught-up`: the run lasts until its idle timeout,
/// for tests that watch what a job does while it waits (autoscaler decisions, say).
pub fn job_cmd_until_idle(job: &str, ckpt: &Path, params: &str, idle: &str, extra: &[&str]) -> Command {
    let mut args = vec!["--template", "kafka-to-bq", "--job-name", job, "--checkpoint-dir", ckpt.to_str().unwrap()];
    args.extend_from_slice(&["--idle-timeout", idle, "--parameters", params]);
    args.extend_from_slice(extra);
    flexrun(&args)
}

/// Start a kafka-to-bq job in the background.
pub fn spawn_job(job: &str, ckpt: &Path, params: &str, extra: &[&str]) -> Child {
    let mut args = vec![
        "--template",
        "kafka-to-bq",
        "--job-name",
        job,
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--parameters",
        params,
    ];
    args.extend_from_slice(extra);
    flexrun(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn flexrun")
}

/// The seed of a test's random choices: `FLEXRUN_TEST_SEED` (or the older
/// `FLEXRUN_KILL_SEED`) when set, else a fixed default, so a run repeats exactly; the
/// seed is printed so a failure names the run to repeat.
pub fn test_seed(what: &str) -> u64 {
    let from = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    let seed = from("FLEXRUN_TEST_SEED").or_else(|| from("FLEXRUN_KILL_SEED")).unwrap_or(20_261_203);
    eprintln!("{what}: seed {seed} (set FLEXRUN_TEST_SEED to repeat or vary it)");
    seed
}

/// The last 4,000 bytes of an exited job's piped stderr, so a test that sees a job end
/// early says why it ended.
pub fn stderr_tail(child: &mut Child) -> String {
    use std::io::Read;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let cut = err.len().saturating_sub(4000);
    let cut = (cut..err.len()).find(|&i| err.is_char_boundary(i)).unwrap_or(err.len());
    err[cut..].to_string()
}

/// Wait until `t` holds at least `rows` rows while `child` still runs, and return the
/// count seen: the condition a kill or a SIGTERM waits on, so that it lands mid-work
/// whatever the machine's load, instead of after a guessed sleep. Fails the test when
/// the job ends first or the rows do not come within [`RUN_LIMIT`].
pub async fn wait_for_rows(s: &Stack, t: &TableRef, rows: i64, child: &mut Child) -> i64 {
    let start = std::time::Instant::now();
    loop {
        let (n, _) = s.count(t).await;
        if n >= rows {
            return n;
        }
        if let Some(status) = child.try_wait().expect("poll the job") {
            panic!(
                "the job ended ({status}) before {t} held {rows} rows (it holds {n}); its stderr ends:\n{}",
                stderr_tail(child)
            );
        }
        assert!(start.elapsed() < RUN_LIMIT, "{t} did not reach {rows} rows within {RUN_LIMIT:?} (it holds {n})");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the emulator has failed at least one call on `t` with an injected fault,
/// counted under `counter` (`injected_failures`, or by call: `injected_create`,
/// `injected_get`, `injected_append`), while `child` still runs.
pub async fn wait_for_injected_failure(t: &TableRef, counter: &str, child: &mut Child) {
    wait_for_injected_failures_over(t, counter, 0, child).await
}

/// Wait until the emulator's `counter` of injected faults on `t` is above `seen` (the
/// count before `child` started), while `child` still runs.
pub async fn wait_for_injected_failures_over(t: &TableRef, counter: &str, seen: u64, child: &mut Child) {
    let start = std::time::Instant::now();
    while fault_stats(t)[counter].as_u64().unwrap_or(0) <= seen {
        if let Some(status) = child.try_wait().expect("poll the job") {
            panic!(
                "the job ended ({status}) before any call on {t} met the injected fault ({counter}); its stderr ends:\n{}",
                stderr_tail(child)
            );
        }
        assert!(start.elapsed() < RUN_LIMIT, "no call on {t} met the injected fault ({counter}) within {RUN_LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Stdout and stderr as text, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// How long any one `flexrun` run in a test may take before the test fails with its
/// output. A hang must fail the test that hangs, with the job's own words, not stall the
/// suite until CI's overall limit ends it without a clue (issue: the CI run of
/// 2026-11-30 stopped inside progress.rs with nothing printed).
pub const RUN_LIMIT: Duration = Duration::from_secs(240);

/// Run a command to completion within [`RUN_LIMIT`], collecting its output.
pub trait Bounded {
    /// Like [`Command::output`], but kills the child and panics with what it printed
    /// once [`RUN_LIMIT`] has passed.
    fn bounded(&mut self) -> Output;
}

impl Bounded for Command {
    fn bounded(&mut self) -> Output {
        let child = self.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn flexrun");
        wait_with_timeout(child, RUN_LIMIT)
    }
}

/// Wait for a child with a timeout; kill it if it overstays. Its pipes are drained on
/// threads meanwhile, so a chatty child never blocks on a full pipe.
pub fn wait_with_timeout(mut child: Child, limit: Duration) -> Output {
    use std::io::Read;
    fn drain<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = std::time::Instant::now();
    let (status, late) = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break (st, false);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break (child.wait().expect("wait"), true);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let o = Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() };
    assert!(!late, "flexrun did not finish within {limit:?}: {}", text(&o));
    o
}

/// Ask the emulator's launcher to answer the next `count` requests whose path contains
/// `scope` (an object prefix of the test's own) with `status` (`POST /_flexrun/faults`),
/// or (with `None`) how many it has answered so. The scope keeps a test's faults off
/// the objects of tests running beside it.
pub fn gcs_faults(scope: &str, ask: Option<(u16, u32)>) -> serde_json::Value {
    use std::io::{Read, Write};
    let host = std::env::var("STORAGE_EMULATOR_HOST").expect("STORAGE_EMULATOR_HOST (scripts/stack.sh env)");
    let mut s = std::net::TcpStream::connect(host.trim_start_matches("http://")).unwrap();
    let scope_json = serde_json::Value::from(scope);
    let (method, query, body) = match ask {
        Some((status, count)) => {
            ("POST", String::new(), format!("{{\"status\":{status},\"count\":{count},\"scope\":{scope_json}}}"))
        }
        None => ("GET", format!("?scope={}", urlencoding(scope)), String::new()),
    };
    let head =
        format!("{method} /_flexrun/faults{query} HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len());
    write!(s, "{head}{body}").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap()
}

/// `text` with every byte outside `[A-Za-z0-9._~-]` percent-encoded, for a query value.
fn urlencoding(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'~' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` from the web server at `addr`: the body, or None.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    use std::io::{Read, Write};
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// A free local address for `--web`.
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// Poll `job`'s series for up to 60 s; the series and its first point that `want`
/// accepts (Null, Null when none did).
pub fn wait_for_point(
    addr: &str,
    job: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> (serde_json::Value, serde_json::Value) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let series = http_get(addr, &format!("/api/jobs/{job}/metrics"))
            .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
        if let Some(j) = series {
            if let Some(p) = j["points"].as_array().and_then(|ps| ps.iter().find(|p| want(p)).cloned()) {
                return (j, p);
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    (serde_json::Value::Null, serde_json::Value::Null)
}

/// A service account key file (a fresh RSA key) in `dir` whose `token_uri` is
/// `token_uri`: application default credentials for tests (`GOOGLE_APPLICATION_CREDENTIALS`).
pub fn adc_key_file(dir: &std::path::Path, token_uri: &str) -> std::path::PathBuf {
    let pem = dir.join("key.pem");
    let ok = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out"])
        .arg(&pem)
        .status()
        .unwrap();
    assert!(ok.success(), "openssl genpkey");
    let key = serde_json::json!({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "1",
        "private_key": std::fs::read_to_string(&pem).unwrap(),
        "client_email": "flexrun-test@flexrun-local.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": token_uri,
    });
    let path = dir.join("adc.json");
    std::fs::write(&path, key.to_string()).unwrap();
    path
}
