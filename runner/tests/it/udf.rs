//! JavaScript UDFs end to end on the real stack, with Google's contract: the function
//! gets each message's JSON text and returns JSON text; null/undefined/"" drops the
//! message, a throw or a non-string dead-letters it with the error.

// Needs the local stack (scripts/test.sh starts it and turns this feature on).
#![cfg(feature = "integration")]

use crate::common::*;

const UDF: &str = r#"
function transform(inJson) {
  var o = JSON.parse(inJson);
  if (o.id % 10 === 1) return null;            // dropped
  if (o.id % 10 === 2) return undefined;       // dropped
  if (o.id % 10 === 3) throw new Error("refused id " + o.id);
  if (o.id % 10 === 4) return 42;              // not a string
  o.message = "udf:" + o.message.substring(0, 5);
  return JSON.stringify(o);
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_udf_transforms_drops_and_dead_letters_as_googles_does_and_everything_reconciles() {
    let s = stack();
    let f = s.fixture("udf", 2).await;
    f.produce(&s, 0, 200, None).await;
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("t.js");
    std::fs::write(&js, UDF).unwrap();
    let params = f.params(
        &s,
        &format!(
            "useBigQueryDLQ=true,outputDeadletterTable={},javascriptTextTransformGcsPath={},javascriptTextTransformFunctionName=transform,javascriptTextTransformReloadIntervalMinutes=5",
            f.dlq,
            js.display()
        ),
    );
    let summary = dir.path().join("s.json");
    let o = run_job("udf", &dir.path().join("ck"), &params, "2s", &["--summary-json", summary.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("reconciliation: read = written + dead-lettered + dropped by the UDF: yes"), "{out}");
    // 200 ids: 20 each end in 1, 2, 3, 4.
    assert_eq!(s.count(&f.table).await, (120, 120));
    let j = crate::common::summary(&summary);
    assert_eq!(j["summary"]["udf_dropped"], 40, "{j}");
    assert_eq!(j["summary"]["dead_lettered"], 40, "{j}");
    let fq = |t: &flexrun::bigquery::TableRef| format!("`{}.{}.{}`", t.project, t.dataset, t.table);
    let rows = s.rows(&format!("SELECT message FROM {} WHERE id = 5", fq(&f.table))).await;
    assert!(rows[0][0].as_deref().unwrap().starts_with("udf:"), "{rows:?}");
    let dl = s.rows(&format!("SELECT errorMessage FROM {}", fq(&f.dlq))).await;
    let msgs: Vec<String> = dl.into_iter().map(|r| r[0].clone().unwrap_or_default()).collect();
    assert_eq!(msgs.iter().filter(|m| m.contains("refused id")).count(), 20, "{msgs:?}");
    assert_eq!(
        msgs.iter().filter(|m| m.contains("UDF Function did not return a String. Instead got: int")).count(),
        20,
        "{msgs:?}"
    );
}

#[tokio::test]
async fn a_udf_that_does_not_load_stops_the_launch_with_exit_2() {
    let s = stack();
    let dir = tempfile::tempdir().unwrap();
    let js = dir.path().join("t.js");
    std::fs::write(&js, "function transform(s) {").unwrap();
    let p = format!(
        "readBootstrapServerAndTopic={};t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,javascriptTextTransformGcsPath={},javascriptTextTransformFunctionName=transform",
        s.kafka,
        js.display()
    );
    let o = flexrun(&["--template", "kafka-to-bq", "--parameters", &p]).bounded();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("the script does not evaluate"), "{}", text(&o));
}
