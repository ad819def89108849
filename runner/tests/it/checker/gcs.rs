//! The lifecycle checker's second model: kafka-to-gcs. From a seed: produce records
//! stamped into 1-second windows (some late, so a window waits while later ones
//! publish), run the job, abort it at a crash point of the window commit protocol or of
//! the state checkpoint, SIGKILL it before its first checkpoint, add partitions, and
//! switch the state backend between restarts. The model: every record produced after
//! the job's first start (`kafkaReadOffset` latest, the default) is in exactly one
//! final file, of its window or (a late record, its window published before it was
//! read) a later one, and no staging object is left.

use crate::common::*;
use flexrun::store::{Location, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Window starts are multiples of this from the epoch.
const WINDOW_MS: i64 = 1000;
/// Event times start here (a past time: every window is due at once).
const BASE_MS: i64 = 1_700_000_000_000;

/// A crash point of the window commit (`gcs::`) or of the state checkpoint (`state::`).
const CRASH_POINTS: [&str; 7] = [
    "gcs::before_prepare",
    "gcs::after_prepare",
    "gcs::mid_publish_before",
    "gcs::mid_publish",
    "gcs::before_committed",
    "state::before_manifest",
    "state::mid_upload",
];

/// One thing done to the job.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Produce `n` records; every `late`th is stamped 1.5 windows ahead.
    Produce { n: u32, late: u32 },
    /// Run until idle.
    Run,
    /// Run and abort at the `hit`th time `point` is reached.
    Crash { point: &'static str, hit: u32 },
    /// Run and SIGKILL once a final file is out, before any checkpoint.
    KillEarly,
    /// Add a partition while the job is down.
    AddPartition,
    /// The next runs keep their window state in this backend (`heap` or `lsm`).
    Backend(&'static str),
}

/// A kafka-to-gcs schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct GcsSchedule {
    /// The seed.
    pub seed: u64,
    /// Partitions at the start.
    pub partitions: i32,
    /// What happens.
    pub ops: Vec<Op>,
}

impl GcsSchedule {
    /// The schedule of `seed`, `n` operations, the job's first start first.
    pub fn generate(seed: u64, n: usize) -> GcsSchedule {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6763_7300);
        let mut ops = vec![Op::Run];
        while ops.len() < n {
            ops.push(match rng.random_range(0..100) {
                0..=34 => Op::Produce { n: rng.random_range(50..400), late: rng.random_range(3..12) },
                35..=49 => Op::Run,
                50..=74 => Op::Crash {
                    point: CRASH_POINTS[rng.random_range(0..CRASH_POINTS.len())],
                    hit: rng.random_range(1..3),
                },
                75..=84 => Op::KillEarly,
                85..=92 => Op::AddPartition,
                _ => Op::Backend(if rng.random_bool(0.5) { "lsm" } else { "heap" }),
            });
        }
        GcsSchedule { seed, partitions: rng.random_range(1..=3), ops }
    }

    /// The first `n` operations.
    pub fn prefix(&self, n: usize) -> GcsSchedule {
        GcsSchedule { ops: self.ops[..n.min(self.ops.len())].to_vec(), ..self.clone() }
    }
}

/// The schedule carried out.
struct World {
    s: Stack,
    dir: tempfile::TempDir,
    topic: String,
    out: String,
    partitions: i32,
    backend: &'static str,
    started: bool,
    /// id → its event time, for records the job is to write.
    produced: BTreeMap<u64, i64>,
    next: u64,
    history: Vec<String>,
    met: BTreeMap<&'static str, u32>,
}

impl World {
    async fn new(sch: &GcsSchedule) -> World {
        let s = stack();
        let topic = unique(&format!("lcg{}", sch.seed));
        flexrun::kafka::create_topic(&s.kafka, &topic, sch.partitions).await.unwrap();
        let bucket = std::env::var("FLEXRUN_GCS_BUCKET").expect("FLEXRUN_GCS_BUCKET (scripts/stack.sh env)");
        let out = format!("gs://{bucket}/{topic}/");
        let history = vec![format!("kafka-to-gcs seed {} partitions {}", sch.seed, sch.partitions)];
        World {
            s,
            dir: tempfile::tempdir().unwrap(),
            topic,
            out,
            partitions: sch.partitions,
            backend: "heap",
            started: false,
            produced: BTreeMap::new(),
            next: 0,
            history,
            met: BTreeMap::new(),
        }
    }

    fn command(&self) -> std::process::Command {
        let p = format!(
            "readBootstrapServerAndTopic={};{},kafkaReadAuthenticationMode=NONE,messageFormat=JSON,outputDirectory={},windowDuration=1s,numShards=2",
            self.s.kafka, self.topic, self.out
        );
        let ck = self.dir.path().join("ck");
        let mut c =
            flexrun(&["--template", "kafka-to-gcs", "--job-name", "lcg", "--checkpoint-dir", ck.to_str().unwrap()]);
        c.args([
            "--idle-timeout",
            "3s",
            "--checkpoint-interval",
            "1s",
            "--state-backend",
            self.backend,
            "--parameters",
            &p,
        ]);
        c
    }

    async fn apply(&mut self, op: &Op) {
        self.history.push(format!("{op:?}"));
        match op {
            Op::Produce { n, late } => self.produce(*n, *late).await,
            Op::Run => self.run(None),
            Op::Crash { point, hit } => self.run(Some((point, *hit))),
            Op::KillEarly => self.kill_early().await,
            Op::AddPartition => self.add_partition().await,
            Op::Backend(b) => self.backend = b,
        }
    }

    async fn produce(&mut self, n: u32, late: u32) {
        let p: FutureProducer = flexrun::kafka::Connection::plaintext(&self.s.kafka).client("a producer", &[]).unwrap();
        let mut sent = BTreeMap::new();
        for _ in 0..n {
            let id = self.next;
            self.next += 1;
            let ts = BASE_MS + id as i64 * 10 + if id.is_multiple_of(late as u64) { 1500 } else { 0 };
            let v = format!("{{\"id\":{id}}}");
            let r = FutureRecord::<(), _>::to(&self.topic)
                .payload(&v)
                .partition((id % self.partitions as u64) as i32)
                .timestamp(ts);
            answer("produce", p.send(r, CALL_LIMIT)).await.map_err(|(e, _)| e).unwrap();
            sent.insert(id, ts);
        }
        if self.started {
            self.produced.extend(sent);
        } else {
            self.history.push(format!("  {} before the first start: not read (kafkaReadOffset=latest)", sent.len()));
        }
    }

    fn run(&mut self, crash: Option<(&str, u32)>) {
        self.started = true;
        let mut c = self.command();
        if let Some((point, hit)) = crash {
            c.env("FAILPOINTS", format!("{point}={}*off->return", hit - 1));
        }
        let o = c.bounded();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        match o.status.code() {
            Some(0) => self.history.push("  exit 0".into()),
            None if crash.is_some() && err.contains("crash point") => {
                self.history.push(format!("  {}", err.lines().find(|l| l.contains("crash point")).unwrap_or_default()));
                *self.met.entry("crash points reached").or_default() += 1;
            }
            _ => panic!("kafka-to-gcs run ended unexpectedly:\n{}\nhistory:\n{}", text(&o), self.history.join("\n")),
        }
    }

    async fn kill_early(&mut self) {
        self.started = true;
        let mut c = self.command();
        c.env("FAILPOINTS", "state::before_manifest=pause");
        let mut child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        let store = Store::open(&Location::parse(&self.out).unwrap(), None).await.unwrap();
        let start = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                self.history.push("  ended before the kill".into());
                return;
            }
            let published = store.list("").await.unwrap_or_default().iter().any(|n| !n.starts_with("_temporary/"));
            if published || start.elapsed() > Duration::from_secs(20) {
                child.kill().unwrap();
                child.wait().unwrap();
                self.history.push(format!("  SIGKILLed before any checkpoint (files out: {published})"));
                *self.met.entry("SIGKILLs before the first checkpoint").or_default() += 1;
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn add_partition(&mut self) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
        self.partitions += 1;
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            flexrun::kafka::Connection::plaintext(&self.s.kafka).client("an admin client", &[]).unwrap();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let np = NewPartitions::new(&self.topic, self.partitions as usize);
        let r = answer("create partitions", admin.create_partitions(&[np], &opts)).await.unwrap();
        r[0].as_ref().map_err(|e| format!("{e:?}")).unwrap();
        let md =
            flexrun::kafka::Metadata::new(&flexrun::kafka::Connection::plaintext(&self.s.kafka), &self.topic).unwrap();
        while md.partitions().await.map(|p| p.len()).unwrap_or(0) < self.partitions as usize {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every final file: its window (from its name) and its ids; and the staging objects left.
    async fn files(&self) -> (Vec<((i64, i64), Vec<u64>)>, usize) {
        let store = Store::open(&Location::parse(&self.out).unwrap(), None).await.unwrap();
        let (mut files, mut staged) = (Vec::new(), 0);
        for name in store.list("").await.unwrap() {
            if name.starts_with("_temporary/") {
                staged += 1;
                continue;
            }
            let body = String::from_utf8(store.get(&name).await.unwrap()).unwrap();
            let ids = body
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_u64().unwrap())
                .collect();
            files.push((window_of(&name), ids));
        }
        (files, staged)
    }
}

/// The window a file's name names: `<start>-<end>-pane-...`, each an RFC 3339 time.
fn window_of(name: &str) -> (i64, i64) {
    let re = regex::Regex::new(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")
        .unwrap();
    let c = re.captures(name).unwrap_or_else(|| panic!("no window in {name}"));
    let ms = |i: usize| chrono::DateTime::parse_from_rfc3339(&c[i]).unwrap().timestamp_millis();
    (ms(1), ms(2))
}

/// Carry out `sch` on fresh topic and prefix: the differences from the model, or None.
pub async fn check(sch: &GcsSchedule) -> Option<String> {
    let mut w = World::new(sch).await;
    for op in &sch.ops {
        w.apply(op).await;
    }
    w.history.push("final Run".into());
    w.run(None);
    let (files, staged) = w.files().await;
    let mut errors = Vec::new();
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    for ((start, end), ids) in &files {
        for id in ids {
            *seen.entry(*id).or_default() += 1;
            match w.produced.get(id) {
                // A record whose window was published before it was read goes to the
                // earliest open window (docs/guide/kafka-to-gcs.md, "Late records are
                // kept"): never to one that ends before its event time.
                Some(ts) if *end <= *ts => {
                    errors.push(format!("record {id} (event time {ts}) is in the file of window {start}..{end}"))
                }
                Some(_) => {}
                None if *id >= w.next => errors.push(format!("id {id} was never produced")),
                None => {
                    errors.push(format!("record {id}, produced before the job's first start (latest), is in a file"))
                }
            }
            if end - start != WINDOW_MS {
                errors.push(format!("a file's window {start}..{end} is not {WINDOW_MS} ms"));
            }
        }
    }
    for id in w.produced.keys() {
        let n = seen.get(id).copied().unwrap_or(0);
        if n != 1 {
            errors.push(format!("record {id} is in {n} files; 1 expected"));
        }
    }
    if staged > 0 {
        errors.push(format!("{staged} staging objects left"));
    }
    if errors.is_empty() {
        eprintln!(
            "kafka-to-gcs seed {}: {} records in {} files as the model says; met {:?}",
            sch.seed,
            w.produced.len(),
            files.len(),
            w.met
        );
        return None;
    }
    errors.sort();
    Some(format!(
        "{} differences:\n  {}\nhistory:\n  {}",
        errors.len(),
        errors.iter().take(20).cloned().collect::<Vec<_>>().join("\n  "),
        w.history.join("\n  ")
    ))
}
