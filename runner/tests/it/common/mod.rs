//! Shared helpers for the integration tests: they talk to the real local stack
//! (tansu + bqemulator) that `scripts/test.sh` starts and describes with
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
        _ => panic!("integration tests need the local stack: run them with scripts/test.sh (it starts tansu and bqemulator and sets FLEXRUN_KAFKA, BIGQUERY_EMULATOR_HOST, BIGQUERY_STORAGE_EMULATOR_HOST)"),
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

/// Ask the emulator launcher for faults (see scripts/bqemulator_launcher.py): POST
/// `body` (JSON) to `/faults`, or to `path` itself when it starts with `/`.
pub fn faults(path: &str, body: &str) -> serde_json::Value {
    http("POST", if path.is_empty() { "/faults" } else { path }, body)
}

/// The launcher's Storage Write call counters.
pub fn fault_stats() -> serde_json::Value {
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
    let mut c = Command::new(env!("CARGO_BIN_EXE_flexrun"));
    c.args(args).env("FLEXRUN_LOG", "warn").stdin(Stdio::null());
    c
}

/// Run a kafka-to-bq job to completion (it drains after `idle`).
pub fn run_job(job: &str, ckpt: &Path, params: &str, idle: &str, extra: &[&str]) -> Output {
    job_cmd(job, ckpt, params, idle, extra).bounded()
}

/// The command [`run_job`] runs, to add environment variables (e.g. FAILPOINTS).
pub fn job_cmd(job: &str, ckpt: &Path, params: &str, idle: &str, extra: &[&str]) -> Command {
    let mut args = vec![
        "--template",
        "kafka-to-bq",
        "--job-name",
        job,
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--idle-timeout",
        idle,
        "--parameters",
        params,
    ];
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

/// Ask the emulator's launcher to answer the next `count` requests with `status`
/// (`POST /_flexrun/faults`), or (with `None`) how many it has answered so.
pub fn gcs_faults(ask: Option<(u16, u32)>) -> serde_json::Value {
    use std::io::{Read, Write};
    let host = std::env::var("STORAGE_EMULATOR_HOST").expect("STORAGE_EMULATOR_HOST (scripts/stack.sh env)");
    let mut s = std::net::TcpStream::connect(host.trim_start_matches("http://")).unwrap();
    let (method, body) = match ask {
        Some((status, count)) => ("POST", format!("{{\"status\":{status},\"count\":{count}}}")),
        None => ("GET", String::new()),
    };
    write!(s, "{method} /_flexrun/faults HTTP/1.0\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap()
}
