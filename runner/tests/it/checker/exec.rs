//! A schedule carried out on the real local stack: Apache Kafka, bqemulator (with its
//! launcher's fault port) and the `flexrun` binary, each job a process of its own that
//! is run to the end, aborted at a crash point or SIGKILLed. Everything the model needs
//! is recorded on the way: each record's log and offset, what the schedule did to the
//! broker, and a history to print when the check fails.

use super::model::{Change, Excuses, Produced};
use super::schedule::{BqFault, Job, Op, Schedule};
use crate::common::*;
use flexrun::bigquery::{rest, TableRef};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

/// The fixing UDF a replay runs: an array `[n]` becomes `{"id": n}`, a string id `x-n`
/// becomes the number `n`.
const FIX: &str = r#"
function fix(inJson) {
  var o = JSON.parse(inJson);
  if (Array.isArray(o)) return JSON.stringify({id: o[0], message: "fixed"});
  if (typeof o.id === 'string') o.id = parseInt(o.id.substring(2), 10);
  return JSON.stringify(o);
}
"#;

/// One job's topic, table and settings.
pub struct JobState {
    /// `--job-name`.
    pub name: String,
    /// Its topic.
    pub topic: String,
    /// Its table.
    pub table: TableRef,
    /// The topic's partitions now.
    pub partitions: i32,
    /// The topic's id now.
    pub topic_id: String,
    /// `offsetGapPolicy=SKIP`.
    pub skip: bool,
    /// Whether it has started once (records produced before that are not read: the
    /// template's default `kafkaReadOffset` is `latest`).
    pub started: bool,
    /// The second topic a topic-list change created: name and id.
    pub second: Option<(String, String)>,
    /// Whether the second topic is on the job's list now.
    pub listed: bool,
    /// A CDC job: keyed changes, `cdcPrimaryKey=id,cdcSequenceField=version`.
    pub cdc: bool,
}

/// The keys the CDC job's changes touch (a bad change gets a key of its own, above).
const CDC_KEYS: i64 = 24;

/// One record to produce: where, what, and what the model knows of it.
struct Out {
    topic: String,
    topic_id: String,
    partition: i32,
    key: String,
    value: String,
    op: Option<&'static str>,
    bad: bool,
    change: Option<Change>,
}

/// The schedule's world on the stack.
pub struct World {
    s: Stack,
    dir: tempfile::TempDir,
    streams: u32,
    batch_rows: String,
    /// The jobs.
    pub jobs: BTreeMap<Job, JobState>,
    /// The dead-letter table both jobs share.
    pub dlq: TableRef,
    /// Every record produced.
    pub produced: Vec<Produced>,
    /// What the schedule did that can excuse an exception.
    pub excuses: Excuses,
    /// What happened, in order (printed when the check fails).
    pub history: Vec<String>,
    next_id: u64,
    runs: u32,
    rng: StdRng,
    schedule_partitions: i32,
    /// What the schedule met: crash points reached, kills, FAIL refusals answered.
    pub met: BTreeMap<&'static str, u32>,
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    flexrun::kafka::Connection::plaintext(bootstrap).client("an admin client", &[]).expect("admin client")
}

fn opts() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))
}

async fn topic_id(kafka: &str, topic: &str) -> String {
    let md = flexrun::kafka::Metadata::new(&flexrun::kafka::Connection::plaintext(kafka), topic).expect("metadata");
    let start = Instant::now();
    loop {
        if let Ok(Some(id)) = md.topic_id().await {
            return id;
        }
        assert!(start.elapsed() < CALL_LIMIT, "topic {topic} has no id within {CALL_LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl World {
    /// Topics and tables of `schedule`'s jobs.
    pub async fn new(schedule: &Schedule) -> World {
        let s = stack();
        let tag = format!("lc{}", schedule.seed);
        let dlq = TableRef { project: PROJECT.into(), dataset: "it".into(), table: unique(&format!("{tag}_dlq")) };
        let mut w = World {
            s,
            dir: tempfile::tempdir().expect("a temporary directory"),
            streams: schedule.streams,
            batch_rows: schedule.batch_rows.to_string(),
            jobs: BTreeMap::new(),
            dlq,
            produced: Vec::new(),
            excuses: Excuses::default(),
            history: Vec::new(),
            next_id: 1,
            runs: 0,
            rng: StdRng::seed_from_u64(schedule.seed),
            schedule_partitions: schedule.partitions,
            met: BTreeMap::new(),
        };

        std::fs::write(w.dir.path().join("fix.js"), FIX).unwrap();
        let jobs = [(Job::A, true), (Job::B, schedule.second_job), (Job::C, schedule.cdc_job)];
        for job in jobs.iter().filter(|j| j.1).map(|j| j.0) {
            let topic = unique(&format!("{tag}_{job:?}").to_lowercase());
            flexrun::kafka::create_topic(&w.s.kafka, &topic, schedule.partitions).await.expect("create topic");
            let table = TableRef { project: PROJECT.into(), dataset: "it".into(), table: topic.clone() };
            if job == Job::C {
                crate::cdc::create_keyed(&w.s, &table).await;
            } else {
                let c = rest::client(&w.s.bq).await.expect("rest client");
                answer("create table", rest::ensure_table(&c, &w.s.bq, &table, &flexrun::local::demo_schema()))
                    .await
                    .expect("create table");
            }
            let topic_id = topic_id(&w.s.kafka, &topic).await;
            let name = unique(&format!("{tag}{job:?}"));
            let st = JobState {
                name,
                topic,
                table,
                partitions: schedule.partitions,
                topic_id,
                skip: schedule.skip,
                started: false,
                second: None,
                listed: false,
                cdc: job == Job::C,
            };
            w.jobs.insert(job, st);
        }
        w.note(format!(
            "seed {} partitions {} streams {} skip {} jobs {:?}",
            schedule.seed,
            schedule.partitions,
            schedule.streams,
            schedule.skip,
            w.jobs.keys().collect::<Vec<_>>()
        ));
        w
    }

    fn note(&mut self, line: String) {
        self.history.push(line);
    }

    fn ck(&self) -> PathBuf {
        self.dir.path().join("ck")
    }

    /// Carry out one operation.
    pub async fn apply(&mut self, op: &Op) {
        self.note(format!("{op:?}"));
        match op {
            Op::Produce { job, good, bad } => self.produce(*job, *good, *bad).await,
            Op::Run { job } => self.run(*job, None).await,
            Op::Crash { job, point, hit } => self.run(*job, Some((point, *hit))).await,
            Op::Kill { job, rows } => self.kill(*job, *rows).await,
            Op::AddPartitions { job, by } => self.add_partitions(*job, *by).await,
            Op::DeleteRecords { job, partition, percent } => self.delete_records(*job, *partition, *percent).await,
            Op::Recreate { job } => self.recreate(*job).await,
            Op::Fault(f) => self.fault(*f),
            Op::Replay { job, crash } => self.replay(*job, *crash),
            Op::Relist { job, listed } => self.relist(*job, *listed).await,
            Op::Skip { job } => {
                if let Some(j) = self.jobs.get_mut(job) {
                    j.skip = true;
                }
            }
        }
    }

    async fn produce(&mut self, job: Job, good: u32, bad: u32) {
        if !self.jobs.contains_key(&job) {
            return;
        }
        let p: FutureProducer = flexrun::kafka::Connection::plaintext(&self.s.kafka)
            .client("a producer", &[("enable.idempotence", "true")])
            .expect("a producer");
        let mut outs: Vec<(u64, Out)> = Vec::new();
        for k in 0..(good + bad) {
            let id = self.next_id;
            self.next_id += 1;
            outs.push((id, self.record(job, id, k >= good)));
        }
        // A CDC job's changes are sent partly out of sequence order: only the
        // sequence field says which of two swapped changes is newer.
        if self.jobs[&job].cdc {
            for i in (1..outs.len()).step_by(2) {
                if self.rng.random_bool(0.3) {
                    outs.swap(i - 1, i);
                }
            }
        }
        let mut sent = Vec::new();
        for (id, o) in outs {
            let mut r = FutureRecord::to(&o.topic).key(&o.key).payload(&o.value).partition(o.partition);
            if let Some(op) = o.op {
                r = r.headers(OwnedHeaders::new().insert(Header { key: "op", value: Some(op) }));
            }
            let d = answer("produce", p.send(r, CALL_LIMIT)).await.map_err(|(e, _)| e).expect("produce");
            let (partition, offset, topic_id, bad, change) = (d.partition, d.offset, o.topic_id, o.bad, o.change);
            sent.push(Produced { id, job, topic_id, partition, offset, bad, change });
        }
        // A job that has not started yet starts at the end of its topic: what it will
        // never read is not in the model.
        if self.jobs[&job].started {
            self.produced.extend(sent);
        } else {
            self.note(format!(
                "  {} records before {job:?}'s first start: not read (kafkaReadOffset=latest)",
                sent.len()
            ));
        }
    }

    /// Record `id` of `job`: to the first topic, or, once there is a second, to either
    /// by turns; for the CDC job a keyed change (a bad one's id is a string the UDF fixes).
    fn record(&mut self, job: Job, id: u64, bad: bool) -> Out {
        let j = &self.jobs[&job];
        let (topic, topic_id, parts) = match &j.second {
            Some((t, tid)) if id % 2 == 1 => (t.clone(), tid.clone(), self.schedule_partitions),
            _ => (j.topic.clone(), j.topic_id.clone(), j.partitions),
        };
        if !j.cdc {
            let value = match (bad, id % 2) {
                (false, _) => format!(r#"{{"id": {id}, "message": "m{id}"}}"#),
                (true, 0) => format!("[{id}]"),
                (true, _) => format!(r#"{{"id": "x-{id}"}}"#),
            };
            let partition = (id % parts as u64) as i32;
            return Out { topic, topic_id, partition, key: id.to_string(), value, op: None, bad, change: None };
        }
        let key = if bad { 1000 + id as i64 } else { self.rng.random_range(0..CDC_KEYS) };
        let delete = !bad && self.rng.random_bool(0.2);
        let value = match bad {
            false => format!(r#"{{"id": {key}, "version": {id}, "note": "v{id}"}}"#),
            true => format!(r#"{{"id": "x-{key}", "version": {id}, "note": "v{id}"}}"#),
        };
        let partition = ((key as u64 + id) % parts as u64) as i32;
        let op = Some(if delete { "DELETE" } else { "UPSERT" });
        let change = Some(Change { key, delete });
        Out { topic, topic_id, partition, key: key.to_string(), value, op, bad, change }
    }

    /// Change `job`'s topic list: its second topic (created the first time) listed or not.
    async fn relist(&mut self, job: Job, listed: bool) {
        let Some(j) = self.jobs.get(&job) else { return };
        if j.second.is_none() {
            let topic = format!("{}_2", j.topic);
            flexrun::kafka::create_topic(&self.s.kafka, &topic, self.schedule_partitions).await.expect("create topic");
            let id = topic_id(&self.s.kafka, &topic).await;
            self.note(format!("  created {topic} (id {id})"));
            self.jobs.get_mut(&job).unwrap().second = Some((topic, id));
        }
        self.jobs.get_mut(&job).unwrap().listed = listed;
    }

    fn params(&self, job: Job) -> String {
        let j = &self.jobs[&job];
        let mut p = format!(
            "readBootstrapServerAndTopic={};{},messageFormat=JSON,outputTableSpec={},kafkaReadAuthenticationMode=NONE,outputDeadletterTable={},useBigQueryDLQ=true",
            self.s.kafka, j.topic, j.table, self.dlq
        );
        if let (Some((second, _)), true) = (&j.second, j.listed) {
            p = p.replacen(&format!(";{},", j.topic), &format!(";{}|{second},", j.topic), 1);
        }
        if j.cdc {
            p.push_str(",cdcPrimaryKey=id,cdcSequenceField=version");
        }
        if self.streams > 0 {
            p.push_str(&format!(",numStorageWriteApiStreams={}", self.streams));
        }
        if j.skip {
            p.push_str(",offsetGapPolicy=SKIP");
        }
        p
    }

    fn job_command(&self, job: Job) -> std::process::Command {
        let j = &self.jobs[&job];
        job_cmd(&j.name, &self.ck(), &self.params(job), "20s", &["--batch-rows", &self.batch_rows])
    }

    /// Run `job` to the end of its topic, or to a crash point; a refusal under
    /// `offsetGapPolicy=FAIL` is answered as an operator would (SKIP, then again).
    async fn run(&mut self, job: Job, crash: Option<(&str, u32)>) {
        if !self.jobs.contains_key(&job) {
            return;
        }
        self.jobs.get_mut(&job).unwrap().started = true;
        let mut cmd = self.job_command(job);
        if let Some((point, hit)) = crash {
            cmd.env("FAILPOINTS", format!("{point}={}*off->return", hit - 1));
        }
        let o = cmd.bounded();
        self.outcome(job, &o, crash.is_some()).await;
    }

    /// What a run's exit means: done, a crash point met, or a gap refused (then the
    /// operator sets SKIP and runs it again); anything else fails the check.
    async fn outcome(&mut self, job: Job, o: &Output, may_crash: bool) {
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        self.runs += 1;
        let _ = std::fs::write(self.dir.path().join(format!("run-{:02}-{job:?}.stderr", self.runs)), &o.stderr);
        let killed = o.status.code().is_none();
        match o.status.code() {
            Some(0) => self.note("  exit 0".into()),
            None if may_crash && err.contains("crash point") => {
                let point = err.lines().find(|l| l.contains("crash point")).unwrap_or_default().to_string();
                self.note(format!("  {point}"));
                *self.met.entry("crash points reached").or_default() += 1;
            }
            Some(1) if err.contains("offsetGapPolicy=FAIL stops") && !self.jobs[&job].skip => {
                let why = err.lines().rev().find(|l| l.contains("offsetGapPolicy")).unwrap_or_default();
                self.note(format!(
                    "  refused under FAIL: {}; the operator sets SKIP",
                    why.chars().take(300).collect::<String>()
                ));
                self.jobs.get_mut(&job).unwrap().skip = true;
                *self.met.entry("FAIL refusals answered").or_default() += 1;
                let again = self.job_command(job).bounded();
                Box::pin(self.outcome(job, &again, false)).await;
            }
            _ => panic!(
                "{job:?}'s run ended unexpectedly (killed: {killed}):\n{}\nhistory:\n{}",
                text(o),
                self.history.join("\n")
            ),
        }
    }

    /// Start `job` and SIGKILL it once its table has gained `rows` rows (or let it end).
    async fn kill(&mut self, job: Job, rows: u32) {
        if !self.jobs.contains_key(&job) {
            return;
        }
        self.jobs.get_mut(&job).unwrap().started = true;
        let table = self.jobs[&job].table.clone();
        let (before, _) = self.s.count(&table).await;
        let mut child = self
            .job_command(job)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn flexrun");
        let start = Instant::now();
        loop {
            if child.try_wait().expect("poll the job").is_some() {
                let o = wait_with_timeout(child, RUN_LIMIT);
                self.note("  ended before the kill".into());
                return self.outcome(job, &o, false).await;
            }
            if self.s.count(&table).await.0 >= before + rows as i64 {
                child.kill().expect("SIGKILL");
                child.wait().expect("reap");
                self.note(format!("  SIGKILLed after {rows} new rows"));
                *self.met.entry("SIGKILLs mid-run").or_default() += 1;
                return;
            }
            assert!(start.elapsed() < RUN_LIMIT, "the job neither ended nor wrote {rows} rows within {RUN_LIMIT:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn add_partitions(&mut self, job: Job, by: i32) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.partitions += by;
        let np = NewPartitions::new(&j.topic, j.partitions as usize);
        let r = answer("create partitions", admin(&self.s.kafka).create_partitions(&[np], &opts())).await.unwrap();
        r[0].as_ref().map_err(|e| format!("{e:?}")).expect("create partitions");
        // Producers learn of the new partitions from metadata: wait until they are listed.
        let md =
            flexrun::kafka::Metadata::new(&flexrun::kafka::Connection::plaintext(&self.s.kafka), &j.topic).unwrap();
        let want = j.partitions as usize;
        let start = Instant::now();
        while md.partitions().await.map(|p| p.len()).unwrap_or(0) < want {
            assert!(start.elapsed() < CALL_LIMIT, "the new partitions were not listed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn delete_records(&mut self, job: Job, partition: i32, percent: u32) {
        let Some(j) = self.jobs.get(&job) else { return };
        if partition >= j.partitions {
            return self.note("  no such partition".into());
        }
        let md =
            flexrun::kafka::Metadata::new(&flexrun::kafka::Connection::plaintext(&self.s.kafka), &j.topic).unwrap();
        let (_, high) = md.watermarks(&[partition]).await.expect("watermarks")[&partition];
        let cut = high * percent as i64 / 100;
        if cut == 0 {
            return self.note("  nothing to delete".into());
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&j.topic, partition, Offset::Offset(cut)).unwrap();
        answer("delete records", admin(&self.s.kafka).delete_records(&tpl, &opts())).await.expect("DeleteRecords");
        let key = (job, j.topic_id.clone(), partition);
        let e = self.excuses.deleted.entry(key).or_insert(0);
        *e = (*e).max(cut);
        self.note(format!("  deleted {} {partition} below {cut}", j.topic));
    }

    async fn recreate(&mut self, job: Job) {
        let Some(j) = self.jobs.get(&job) else { return };
        let (topic, parts, old) = (j.topic.clone(), j.partitions, j.topic_id.clone());
        let a = admin(&self.s.kafka);
        answer("delete topic", a.delete_topics(&[&topic], &opts())).await.expect("delete topic");
        let start = Instant::now();
        loop {
            let t = NewTopic::new(&topic, parts, TopicReplication::Fixed(1));
            let r = answer("create topic", a.create_topics(&[t], &opts())).await.expect("create topic");
            match &r[0] {
                Ok(_) => break,
                Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {
                    assert!(start.elapsed() < CALL_LIMIT, "{topic} was not deleted within {CALL_LIMIT:?}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Err(e) => panic!("create topic {topic}: {e:?}"),
            }
        }
        let new = loop {
            let id = topic_id(&self.s.kafka, &topic).await;
            if id != old {
                break id;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        self.excuses.recreated.insert(old.clone());
        self.excuses.lineage.entry(job).or_insert_with(|| vec![old.clone()]).push(new.clone());
        self.jobs.get_mut(&job).unwrap().topic_id = new.clone();
        self.note(format!("  {topic}: id {old} -> {new}"));
    }

    fn fault(&mut self, f: BqFault) {
        let t = self.jobs[&Job::A].table.clone();
        match f {
            BqFault::Unavailable(n) => {
                table_faults(&t, &format!(r#""fail_next": {n}, "code": "UNAVAILABLE""#));
            }
            BqFault::Freeze => {
                table_faults(&t, r#""fail_for_s": 2, "code": "RESOURCE_EXHAUSTED""#);
            }
            BqFault::StreamGone => {
                let r = faults("", &format!(r#"{{"finalize_table": "{}.{}"}}"#, t.dataset, t.table));
                self.note(format!("  finalized {r}"));
                self.excuses.stream_gone.insert(Job::A);
            }
        }
    }

    fn replay(&mut self, job: Job, crash: bool) {
        let Some(j) = self.jobs.get(&job) else { return };
        if !j.started {
            return self.note("  the job never ran: nothing to replay".into());
        }
        let udf = self.dir.path().join("fix.js");
        let params =
            format!("javascriptTextTransformGcsPath={},javascriptTextTransformFunctionName=fix", udf.display());
        let ck = self.ck();
        let mut c = flexrun(&[
            "dlq",
            "replay",
            "--job",
            &j.name,
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--parameters",
            &params,
        ]);
        if crash {
            c.env("FAILPOINTS", "replay::between_tables=return");
        }
        let o = c.bounded();
        match o.status.code() {
            Some(0) => self.note("  replayed".into()),
            None if crash && String::from_utf8_lossy(&o.stderr).contains("crash point") => {
                self.note("  replay killed between the table and the ledger".into());
                *self.met.entry("replays killed").or_default() += 1;
            }
            _ => panic!("{job:?}'s replay ended unexpectedly:\n{}\nhistory:\n{}", text(&o), self.history.join("\n")),
        }
    }

    /// The end of every schedule: each job run to the end of its topics (every topic
    /// listed), its dead letters replayed (any killed replay finished), then what each
    /// table holds: by id, or for the CDC job each key's version.
    pub async fn finish(&mut self) -> (HashMap<Job, HashMap<u64, u32>>, BTreeMap<Job, BTreeMap<i64, i64>>) {
        for job in self.jobs.keys().copied().collect::<Vec<_>>() {
            self.note(format!("final Run {job:?}"));
            let j = self.jobs.get_mut(&job).unwrap();
            j.listed = j.second.is_some();
            self.run(job, None).await;
            self.note(format!("final Replay {job:?}"));
            self.replay(job, false);
        }
        let (mut counts, mut states) = (HashMap::new(), BTreeMap::new());
        for (job, j) in &self.jobs {
            if j.cdc {
                states.insert(*job, crate::cdc::state(&self.s, &j.table).await);
                continue;
            }
            let sql = format!(
                "SELECT id, COUNT(*) FROM `{}.{}.{}` GROUP BY id",
                j.table.project, j.table.dataset, j.table.table
            );
            let rows = self.s.rows(&sql).await;
            let by_id = rows
                .into_iter()
                .map(|r| (r[0].as_deref().unwrap().parse().unwrap(), r[1].as_deref().unwrap().parse().unwrap()))
                .collect();
            counts.insert(*job, by_id);
        }
        (counts, states)
    }

    /// Where the checkpoints, the UDF and each run's stderr (`run-NN-JOB.stderr`) are.
    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Every exception the jobs recorded in their checkpoints.
    pub fn exceptions(&self) -> Vec<super::model::Exception> {
        let mut out = Vec::new();
        let dirs: Vec<(Job, PathBuf)> = std::fs::read_dir(self.ck())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                let job = self.jobs.iter().find(|(_, j)| name == j.name || name.starts_with(&format!("{}.", j.name)));
                job.map(|(job, _)| (*job, e.path()))
            })
            .collect();
        for (job, dir) in dirs {
            for l in flexrun::stats::read_exceptions(&dir).expect("exceptions.jsonl") {
                out.push(super::model::Exception {
                    job,
                    kind: l.kind,
                    topic_id: l.range.topic_id,
                    partition: l.range.partition,
                    from: l.range.from,
                    to: l.range.to,
                    why: l.range.why,
                    replaced_by: l.range.replaced_by,
                });
            }
        }
        out
    }
}
