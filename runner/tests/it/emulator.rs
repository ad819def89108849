//! The local stack itself: the BigQuery emulator's launcher fix for the deadlock
//! RELIABILITY.md lists (REST queries and Storage Write appends sharing one DuckDB
//! connection wedged the emulator), driven the way it used to wedge.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;
use std::time::Duration;

/// Four tasks query the table over REST without pause while a job appends 30,000 rows
/// over gRPC. Before the launcher's per-thread cursor (scripts/bqemulator_launcher.py,
/// item 4a) this interleaving could deadlock the emulator; every query must answer
/// within [`CALL_LIMIT`] and the job must finish within its own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rest_queries_during_grpc_appends_all_answer() {
    let s = stack();
    let f = s.fixture("deadlock", 4).await;
    f.produce(&s, 0, 30_000, None).await;
    let ck = tempfile::tempdir().unwrap();
    let mut child = spawn_job(
        "deadlock",
        ck.path(),
        &f.params(&s, ""),
        &["--batch-rows", "500", "--idle-timeout", "20s", "--stop-when-caught-up"],
    );
    wait_for_rows(&s, &f.table, 1, &mut child).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let queriers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, table) = (stop.clone(), f.table.clone());
            tokio::spawn(async move {
                let s = stack();
                let mut answered = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    s.count(&table).await;
                    answered += 1;
                }
                answered
            })
        })
        .collect();
    let o = tokio::task::spawn_blocking(move || wait_with_timeout(child, RUN_LIMIT)).await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answered = 0;
    for q in queriers {
        answered +=
            tokio::time::timeout(CALL_LIMIT + Duration::from_secs(5), q).await.expect("a querier hung").unwrap();
    }
    assert!(o.status.success(), "{}", text(&o));
    assert!(answered >= 4, "the queries ran alongside the appends: {answered}");
    assert_eq!(s.count(&f.table).await, (30_000, 30_000));
}

/// Issue 49 item 4: a query's rows are read page by page until none is left. The
/// emulator pages as BigQuery does (`maxResults` rows, then a `pageToken` for
/// `jobs.getQueryResults`): one page holds 10 of the 35 rows, and `query_pages` returns
/// all 35, in order. (`jobComplete: false` is followed the same way; the emulator
/// always completes within the call, so that branch is not exercised here.)
#[tokio::test]
async fn query_results_are_read_page_by_page() {
    use flexrun::bigquery::rest;
    let s = stack();
    let c = rest::client(&s.bq).await.unwrap();
    let sql = "SELECT x FROM UNNEST(GENERATE_ARRAY(1, 35)) AS x ORDER BY x";
    let mut one = gcp_bigquery_client::model::query_request::QueryRequest::new(sql);
    one.max_results = Some(10);
    let first = answer("jobs.query", c.job().query(PROJECT, one)).await.unwrap();
    assert_eq!(first.rows.as_ref().map(Vec::len), Some(10), "one page");
    assert!(first.page_token.is_some(), "and a token for the next");
    let all = answer("paged query", rest::query_pages(&c, PROJECT, sql, 10)).await.unwrap();
    let got: Vec<i64> = all.iter().map(|r| r[0].as_deref().unwrap().parse().unwrap()).collect();
    assert_eq!(got, (1..=35).collect::<Vec<i64>>());
}
