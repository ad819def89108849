//! The long chaos suite (ignored by default; `scripts/chaos.sh` runs it and turns its
//! `CHAOS|...` lines into the table in RELIABILITY.md). Each scenario runs the real
//! job against the real broker and emulator and prints one row: scenario, messages,
//! faults, rows, distinct ids, lost, duplicates, seconds from the last fault to a job
//! that has written everything.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn row(scenario: &str, messages: u64, faults: &str, rows: i64, distinct: i64, recover_s: f64) {
    let lost = messages as i64 - distinct;
    let dups = rows - distinct;
    eprintln!("CHAOS|{scenario}|{messages}|{faults}|{rows}|{distinct}|{lost}|{dups}|{recover_s:.1}");
}

fn seed() -> u64 {
    test_seed("chaos kill schedule")
}

/// Start the job `kills` times and SIGKILL it each time once the table holds a seeded
/// row count (the k-th between k/(kills+2) and that plus half a step of `n`), so every
/// kill lands while the job is writing; then let it finish. Returns (kills landed,
/// seconds of the final run, the final run's summary).
/// `flags` are more job flags; `n` is the rows the table ends with.
async fn kill_loop(
    s: &Stack,
    f: &Fixture,
    n: i64,
    params: &str,
    kills: u32,
    seed: u64,
    flags: &[&str],
) -> (u32, f64, serde_json::Value) {
    let flags = [&["--batch-rows", "2000"][..], flags].concat();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let ck = tempfile::tempdir().unwrap();
    let step = n / (kills as i64 + 2);
    let mut landed = 0;
    for k in 1..=kills as i64 {
        let mut child = spawn_job("chaos", ck.path(), params, &flags);
        let seen = wait_for_rows(s, &f.table, step * k + rng.random_range(0..step / 2), &mut child).await;
        assert!(child.try_wait().unwrap().is_none() && seen < n, "kill {k} would not land mid-write ({seen} rows)");
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        landed += 1;
        let _ = child.wait();
    }
    let t = Instant::now();
    let sum = ck.path().join("final.json");
    let o =
        run_job("chaos", ck.path(), params, "3s", &[&flags[..], &["--summary-json", sum.to_str().unwrap()]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(landed, kills, "every kill landed while the job was writing");
    // The final run stops once caught up (--stop-when-caught-up): its whole time is the
    // recovery, with no idle wait to subtract.
    (landed, t.elapsed().as_secs_f64(), summary(&sum))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_20_sigkills_exactly_once_200k() {
    let s = stack();
    let f = s.fixture("chaos_eo", 8).await;
    f.produce(&s, 0, 200_000, None).await;
    let sd = seed();
    let (landed, rec, _) = kill_loop(&s, &f, 200_000, &f.params(&s, ""), 20, sd, &[]).await;
    let (rows, distinct) = s.count(&f.table).await;
    row("exactly-once, 20 random SIGKILLs", 200_000, &format!("{landed} SIGKILLs (seed {sd})"), rows, distinct, rec);
    assert_eq!((rows, distinct), (200_000, 200_000), "seed {sd}");
}

/// Issue 27: 20 SIGKILLs while BigQuery refuses the rows of chosen messages (those whose
/// text holds a seeded marker, about 0.4%) and every batch of 2,000 goes out as about
/// fifteen requests of 200 kB: refusals split requests mid-batch, and kills land
/// between requests, after relogs and in replays. Every other row is in the table once
/// and every refused one in the dead-letter table once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_mixed_20_sigkills_row_errors_small_requests_200k() {
    let s = stack();
    let f = s.fixture("chaos_mixed", 8).await;
    let n = 200_000u64;
    f.produce(&s, 0, n, None).await;
    let marker = "Qz7";
    let refused = (0..n)
        .filter(|id| String::from_utf8_lossy(&flexrun::local::seed_message(*id, 42, 962)).contains(marker))
        .count() as i64;
    table_faults(&f.table, &format!(r#""reject_rows_containing": "{marker}""#));
    let sd = seed();
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let good = n as i64 - refused;
    let (landed, rec, _) = kill_loop(&s, &f, good, &params, 20, sd, &["--append-request-bytes", "200000"]).await;
    let stats = fault_stats(&f.table);
    reset_faults(&f.table);
    let (rows, distinct) = s.count(&f.table).await;
    let (dl, _) = flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap();
    let faults = format!(
        "{landed} SIGKILLs (seed {sd}), {refused} rows refused ({} refusals met), 200 kB requests",
        stats["rows_rejected"]
    );
    row("exactly-once, row errors + small requests + 20 SIGKILLs", n - refused as u64, &faults, rows, distinct, rec);
    assert!(refused > 100, "the marker picks rows: {refused}");
    assert_eq!((rows, distinct), (good, good), "seed {sd}");
    assert_eq!(dl, refused, "each refused row dead-lettered once (seed {sd})");
}

/// Issue 27, item 1, under kills: a job at `latest` on two partitions, one of them idle,
/// is killed mid-write; while it is down 100 messages go to the idle partition; the
/// restart writes them, once, beside everything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_idle_partition_restart() {
    let s = stack();
    let f = s.fixture("chaos_idle", 2).await;
    let ck = tempfile::tempdir().unwrap();
    let params = f.params(&s, "").replace("kafkaReadOffset=earliest", "kafkaReadOffset=latest");
    let mut child = spawn_job("idle", ck.path(), &params, &["--batch-rows", "2000"]);
    // Started at latest: produce only once the job has saved its starts.
    let starts = ck.path().join("idle/starts.json");
    while !starts.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the job ended before it started reading");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let to = |p: i32, ids: std::ops::Range<u64>| -> Vec<(i32, Vec<u8>)> {
        ids.map(|i| (p, flexrun::local::seed_message(i, 42, 962))).collect()
    };
    produce_to(&s, &f.topic, to(0, 0..50_000)).await;
    wait_for_rows(&s, &f.table, 10_000, &mut child).await;
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    produce_to(&s, &f.topic, to(1, 50_000..50_100)).await;
    let t = Instant::now();
    let o = run_job("idle", ck.path(), &params, "3s", &["--batch-rows", "2000"]);
    assert!(o.status.success(), "{}", text(&o));
    let (rows, distinct) = s.count(&f.table).await;
    row(
        "idle partition + SIGKILL, then 100 to the idle one",
        50_100,
        "1 SIGKILL mid-write; 100 produced while down",
        rows,
        distinct,
        t.elapsed().as_secs_f64(),
    );
    assert_eq!((rows, distinct), (50_100, 50_100));
}

/// Produce each (partition, value), in order.
async fn produce_to(s: &Stack, topic: &str, msgs: Vec<(i32, Vec<u8>)>) {
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
    let p: FutureProducer = flexrun::kafka::Connection::plaintext(&s.kafka)
        .client("a producer", &[("queue.buffering.max.messages", "1000000")])
        .unwrap();
    let mut acks = Vec::with_capacity(msgs.len());
    for (part, v) in &msgs {
        acks.push(
            p.send_result(FutureRecord::<(), [u8]>::to(topic).payload(v.as_slice()).partition(*part))
                .map_err(|(e, _)| e)
                .unwrap(),
        );
    }
    for a in acks {
        answer("produce", a).await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    p.flush(CALL_LIMIT).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_20_sigkills_at_least_once_200k() {
    let s = stack();
    let f = s.fixture("chaos_alo", 8).await;
    f.produce(&s, 0, 200_000, None).await;
    let sd = seed();
    let params = f.params(&s, "useStorageWriteApiAtLeastOnce=true");
    let (landed, rec, j) = kill_loop(&s, &f, 200_000, &params, 20, sd, &[]).await;
    let (rows, distinct) = s.count(&f.table).await;
    row("at-least-once, 20 random SIGKILLs", 200_000, &format!("{landed} SIGKILLs (seed {sd})"), rows, distinct, rec);
    assert_eq!(distinct, 200_000, "seed {sd}");
    // Duplicates are the batches in flight at a kill, re-read from the last commit.
    assert_eq!(j["delivery"], "at-least-once", "{j}");
    assert!(
        rows - distinct <= 20 * 8 * 2000,
        "{} duplicates: more than the batches in flight at 20 kills",
        rows - distinct
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_broker_sigkill_and_restart_mid_run() {
    let s = stack();
    let f = s.fixture("chaos_broker", 4).await;
    f.produce(&s, 0, 100_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let child = spawn_job("chaos_broker", ck.path(), &f.params(&s, ""), &["--idle-timeout", "10s"]);
    std::thread::sleep(Duration::from_secs(3));
    let restart = std::env::var("FLEXRUN_RESTART_BROKER").expect("FLEXRUN_RESTART_BROKER: run via scripts/chaos.sh");
    let st = std::process::Command::new("bash").arg("-c").arg(&restart).status().unwrap();
    assert!(st.success(), "broker restart failed");
    let t = Instant::now();
    let o = wait_with_timeout(child, Duration::from_secs(600));
    let (rows, distinct) = s.count(&f.table).await;
    row(
        "broker SIGKILL + restart mid-run",
        100_000,
        "the broker SIGKILLed and restarted",
        rows,
        distinct,
        t.elapsed().as_secs_f64() - 10.0,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((rows, distinct), (100_000, 100_000));
}

async fn fault_window(name: &str, body: &str, label: &str, window_s: u64) {
    let s = stack();
    let f = s.fixture(name, 4).await;
    f.produce(&s, 0, 100_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let sum = ck.path().join("summary.json");
    let mut child = spawn_job(
        name,
        ck.path(),
        &f.params(&s, ""),
        &["--idle-timeout", "5s", "--summary-json", sum.to_str().unwrap()],
    );
    // The window opens once the job is writing, so the faults land mid-run.
    wait_for_rows(&s, &f.table, 1, &mut child).await;
    table_faults(&f.table, body);
    let t = Instant::now();
    let o = wait_with_timeout(child, Duration::from_secs(window_s + 600));
    let injected = fault_stats(&f.table)["injected_failures"].as_u64().unwrap_or(0);
    reset_faults(&f.table);
    let (rows, distinct) = s.count(&f.table).await;
    row(
        label,
        100_000,
        &format!("{window_s} s of injected errors"),
        rows,
        distinct,
        t.elapsed().as_secs_f64() - window_s as f64 - 5.0,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!((rows, distinct), (100_000, 100_000));
    let retries = &summary(&sum)["summary"]["reliability"]["retries"];
    let total: u64 = retries.as_object().map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
    assert!(injected >= 1 && total >= 1, "the window was met and retried: {injected} injected, retries {retries}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_bigquery_unavailable_for_30s() {
    fault_window("chaos_unavail", r#""fail_for_s": 30, "code": "UNAVAILABLE""#, "BigQuery UNAVAILABLE for 30 s", 30)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_resource_exhausted_for_2_minutes() {
    fault_window(
        "chaos_quota",
        r#""fail_for_s": 120, "code": "RESOURCE_EXHAUSTED""#,
        "RESOURCE_EXHAUSTED for 2 min",
        120,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_large_messages() {
    let s = stack();
    let f = s.fixture("chaos_big", 1).await;
    flexrun::local::produce(&s.kafka, &f.topic, 1, 0, 1000, None, 1_000_000).await.unwrap();
    flexrun::local::produce_large(&s.kafka, &f.topic, 1000, 9_900_000).await.unwrap();
    flexrun::local::produce_large(&s.kafka, &f.topic, 1001, 15_000_000).await.unwrap();
    let ck = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let sum = ck.path().join("summary.json");
    let params = f.params(&s, &format!("outputDeadletterTable={}", f.dlq));
    let o = run_job("chaos_big", ck.path(), &params, "3s", &["--summary-json", sum.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    // The broker's and the topic's limit is 16 MiB (scripts/stack.sh): both large
    // records reach the job.
    assert_eq!(summary(&sum)["summary"]["messages_read"], 1002, "{}", text(&o));
    let (rows, distinct) = s.count(&f.table).await;
    let (dl, _) = flexrun::local::count_rows(&s.bq, &f.dlq, None).await.unwrap();
    row(
        "1,000 × 1 MB, one 9.9 MB, one 15 MB",
        1002,
        &format!("{dl} dead-lettered (too large for a request)"),
        rows + dl,
        distinct + dl,
        t.elapsed().as_secs_f64(),
    );
    assert_eq!(rows + dl, 1002);
}

/// Produce `n` seeded CDC changes over `keys` keys to `topic` (two partitions, each key
/// on partition `key % 2`, the op in a header), in order, and return the final state
/// they define (a key's last change wins when it is an UPSERT). Versions count from
/// `first`, so they say nothing about order across topics.
async fn produce_cdc(s: &Stack, topic: &str, n: i64, keys: i64, seed: u64, first: i64) -> BTreeMap<i64, i64> {
    let mut state = BTreeMap::new();
    apply_cdc(&mut state, produce_cdc_ops(s, topic, n, keys, seed, first).await);
    state
}

/// A final state moved on by a slice of changes: each key's last change in the slice
/// upserts it or deletes it.
fn apply_cdc(state: &mut BTreeMap<i64, i64>, slice: BTreeMap<i64, (i64, &'static str)>) {
    for (k, (v, op)) in slice {
        match op {
            "UPSERT" => state.insert(k, v),
            _ => state.remove(&k),
        };
    }
}

/// [`produce_cdc`]'s changes, as each key's last (version, op).
async fn produce_cdc_ops(
    s: &Stack,
    topic: &str,
    n: i64,
    keys: i64,
    seed: u64,
    first: i64,
) -> BTreeMap<i64, (i64, &'static str)> {
    use rdkafka::message::OwnedHeaders;
    use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
    let p: FutureProducer = flexrun::kafka::Connection::plaintext(&s.kafka)
        .client("a producer", &[("enable.idempotence", "true"), ("queue.buffering.max.messages", "1000000")])
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut last = BTreeMap::new();
    let mut acks = Vec::new();
    for version in first..first + n {
        let id = rng.random_range(0..keys);
        let op = if rng.random_bool(0.2) { "DELETE" } else { "UPSERT" };
        last.insert(id, (version, op));
        let value = serde_json::json!({"id": id, "version": version, "note": format!("v{version}")}).to_string();
        let headers = OwnedHeaders::new().insert(rdkafka::message::Header { key: "op", value: Some(op) });
        let key = id.to_string();
        let r = FutureRecord::to(topic).key(&key).payload(&value).partition((id % 2) as i32).headers(headers);
        acks.push(p.send_result(r).map_err(|(e, _)| e).unwrap());
    }
    for a in acks {
        answer("produce", a).await.unwrap().map_err(|(e, _)| e).unwrap();
    }
    p.flush(CALL_LIMIT).unwrap();
    last
}

/// Issue 49: a CDC pattern job (changes ordered by Kafka offset, each key on one of two
/// partitions) with the template's default `kafkaReadOffset`, killed 10 times while
/// topics join it: `t1` exists from the start and gets a tenth of its changes before each
/// run, `t2` is created with its changes while the job is down after the third kill, `t3`
/// while it runs after the sixth. Every topic's table ends in each key's exact final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: scripts/chaos.sh"]
async fn chaos_topics_join_a_cdc_pattern_job_under_10_sigkills() {
    let s = stack();
    let sd = seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(sd);
    let p = unique("chaos_join");
    let topics: Vec<String> = (1..=3).map(|i| format!("{p}_t{i}")).collect();
    let tables: Vec<flexrun::bigquery::TableRef> = topics
        .iter()
        .map(|t| flexrun::bigquery::TableRef { project: PROJECT.into(), dataset: "cdc".into(), table: t.clone() })
        .collect();
    for t in &tables {
        crate::cdc::create_keyed(&s, t).await;
    }
    flexrun::kafka::create_topic(&s.kafka, &topics[0], 2).await.unwrap();
    let params = format!(
        "readBootstrapServerAndTopic={};/{p}_t.*/,messageFormat=JSON,outputTableSpec={PROJECT}:cdc.{{topic}},kafkaReadAuthenticationMode=NONE,cdcPrimaryKey=id",
        s.kafka
    );
    let ck = tempfile::tempdir().unwrap();
    let flags = ["--batch-rows", "500"];
    let (n, keys) = (20_000i64, 400i64);
    let mut want: Vec<BTreeMap<i64, i64>> = vec![BTreeMap::new(); 3];
    let changes = |t: &flexrun::bigquery::TableRef| fault_stats(t)["cdc_changes"].as_i64().unwrap_or(0);
    let mut landed = 0;
    for k in 1..=10i64 {
        let mut child = spawn_job("chaos_join", ck.path(), &params, &flags);
        if k == 1 {
            // The default offset is latest: produce once t1's start is durable.
            let starts = ck.path().join(format!("chaos_join.{}/starts.json", topics[0]));
            while !starts.exists() {
                assert!(child.try_wait().unwrap().is_none(), "the job ended before it started reading");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        // A fresh slice of t1's changes for every run (the first once its start is
        // durable, the others as each run starts), so each run has changes left for its
        // kill to wait on, whatever the seed.
        let before = changes(&tables[0]);
        let slice = n / 10;
        apply_cdc(
            &mut want[0],
            produce_cdc_ops(&s, &topics[0], slice, keys, sd ^ ((k as u64) << 8), (k - 1) * slice).await,
        );
        if k == 7 {
            flexrun::kafka::create_topic(&s.kafka, &topics[2], 2).await.unwrap();
            want[2] = produce_cdc(&s, &topics[2], n / 2, keys, sd ^ 3, 0).await;
        }
        // Kill once t1's table has received a seeded share of its changes more (and, on
        // the seventh run, once t3, created while it runs, has been found and written to).
        let goal = before + rng.random_range(500..1_500);
        let start = Instant::now();
        let t3_read = |k: i64| k != 7 || changes(&tables[2]) > 0;
        while (changes(&tables[0]) < goal || !t3_read(k)) && child.try_wait().unwrap().is_none() {
            if start.elapsed() > RUN_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "kill {k}: the job made no progress ({} of {goal} changes of t1, {} of t3); its stderr ends:\n{}",
                    changes(&tables[0]),
                    changes(&tables[2]),
                    stderr_tail(&mut child)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(child.try_wait().unwrap().is_none(), "kill {k} would not land while the job runs");
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        landed += 1;
        if k == 3 {
            flexrun::kafka::create_topic(&s.kafka, &topics[1], 2).await.unwrap();
            want[1] = produce_cdc(&s, &topics[1], n / 2, keys, sd ^ 2, 0).await;
        }
    }
    let t = Instant::now();
    let o = run_job("chaos_join", ck.path(), &params, "3s", &flags);
    assert!(o.status.success(), "{}", text(&o));
    let mut exact = 0;
    for (i, t) in tables.iter().enumerate() {
        let got = crate::cdc::state_of(&s, t).await;
        exact += (got == want[i]) as i64;
        assert_eq!(got, want[i], "{}: each key's final state (seed {sd})", topics[i]);
    }
    // The row counts tables: three, each exact in every key.
    row(
        "CDC pattern job (tables exact, of 3), topics created while down and while running",
        3,
        &format!("{landed} SIGKILLs (seed {sd}), {} changes; t2 created while down, t3 while running", n * 2),
        exact,
        exact,
        t.elapsed().as_secs_f64(),
    );
}
