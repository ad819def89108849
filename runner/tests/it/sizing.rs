//! `flexrun calibrate` writes a baseline that `estimate` and `simulate` read back, and
//! `flexrun capacity` finds a boundary against the real local broker.

use std::process::{Command, Output};

fn flexrun(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flexrun")).args(args).output().expect("runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn calibrate_writes_a_baseline_that_estimate_and_simulate_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("local.yaml");
    let p = path.to_str().unwrap();
    let report = json(&flexrun(&["calibrate", "--duration", "300ms", "--output", p, "--format", "json"]));
    // Both modes at two sizes; every message mapped.
    let ms = report["measurements"].as_array().unwrap();
    assert_eq!(ms.len(), 4, "{report}");
    for m in ms {
        assert!(m["messages"].as_u64().unwrap() > 1000 && m["messages_per_core_s"].as_f64().unwrap() > 0.0, "{m}");
        assert_eq!(m["rejected"], 0);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# Measured by `flexrun calibrate`"), "{text}");
    let file = flexrun_estimator::BaselineFile::parse(p, &text).expect("the written baseline parses");
    let eo = file.for_mode(p, flexrun_estimator::Mode::ExactlyOnce).unwrap();
    assert_eq!((eo.workers, eo.mean_cpu, file.vcpus_per_worker), (1.0, 0.8, Some(1.0)));

    // estimate: the messages of the baseline's size in 100 MiB/s, each costing calibrate's
    // two terms (per message, per byte), on an e2-standard-2's two vCPUs at 80%.
    let e = json(&flexrun(&["estimate", "--throughput", "100MiB/s", "--baseline", p, "--format", "json"]));
    let msg = file.message_bytes.expect("calibrate writes the message size");
    let (us, ns) = (eo.vcpu_us_per_message.unwrap(), eo.vcpu_ns_per_byte.unwrap());
    let expected = 100.0 * 1048576.0 / msg * (us * 1e-6 + ns * 1e-9 * msg) / (2.0 * 0.8);
    assert!((e["workers_exact"].as_f64().unwrap() - expected).abs() < 1e-9, "{e} vs {expected}");

    // simulate: the capacity it uses is the one calibrate measured (per-message + per-byte split).
    let s = json(&flexrun(&[
        "simulate",
        "--baseline",
        p,
        "--qps",
        "20000",
        "--duration",
        "1h",
        "--partitions",
        "16",
        "--format",
        "json",
    ]));
    // simulate's default message is the baseline's 1 KiB.
    let per_msg_s = eo.vcpu_us_per_message.unwrap() * 1e-6 + eo.vcpu_ns_per_byte.unwrap() * 1e-9 * 1024.0;
    let want_mib_s = 1024.0 / per_msg_s / (1024.0 * 1024.0);
    let got = s["summary"]["vcpu_capacity_mib_s"].as_f64().unwrap();
    assert!((got - want_mib_s).abs() / want_mib_s < 1e-6, "{got} vs {want_mib_s}");
}

#[test]
fn calibrate_and_capacity_refuse_bad_input_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(&schema, r#"[{"name": "id", "type": "INTEGER", "mode": "REQUIRED"}]"#).unwrap();
    let template = dir.path().join("template.json");
    std::fs::write(&template, r#"{"name": "{{username()}}"}"#).unwrap();
    let out_file = dir.path().join("b.yaml");
    let template_not_schema = dir.path().join("not-a-schema.json");
    std::fs::write(&template_not_schema, "{ this is not JSON").unwrap();
    let broken_template = dir.path().join("broken.json");
    std::fs::write(&broken_template, r#"{"name": "{{nosuchfunction()}}"}"#).unwrap();
    for (args, needle) in [
        (vec!["calibrate", "--target-cpu", "2"], "0.1"),
        (vec!["calibrate", "--duration", "10ms"], "--duration"),
        (vec!["calibrate", "--modes", "twice"], "exactly-once or at-least-once"),
        (vec!["calibrate", "--schema-template", template.to_str().unwrap()], "--table-schema"),
        (
            vec![
                "calibrate",
                "--duration",
                "200ms",
                "--schema-template",
                template.to_str().unwrap(),
                "--table-schema",
                schema.to_str().unwrap(),
                "--output",
                out_file.to_str().unwrap(),
            ],
            "did not map onto the table schema",
        ),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--sizes", "0"], "invalid"),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--sizes", "4"], "outside 8 B"),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--consumer-limit", "-5"], "expected a positive number"),
        (
            vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--consumer-limit", "fast"],
            "expected a positive number",
        ),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--low", "5000", "--high", "100"], "0 < low < high"),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--trial", "100ms"], "--trial"),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--p99-limit", "soon"], "soon"),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--low", "-5"], "positive"),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--partitions", "0"], "--partitions"),
        (
            vec![
                "capacity",
                "--bootstrap-server",
                "127.0.0.1:9",
                "--low",
                "100",
                "--high",
                "1000",
                "--tolerance",
                "5000",
            ],
            "tolerance",
        ),
        (vec!["capacity", "--bootstrap-server", "127.0.0.1:9", "--sizes", "20MiB"], "outside 8 B"),
        (
            vec![
                "calibrate",
                "--schema-template",
                template.to_str().unwrap(),
                "--table-schema",
                template_not_schema.to_str().unwrap(),
            ],
            "--table-schema",
        ),
        (
            vec![
                "calibrate",
                "--schema-template",
                broken_template.to_str().unwrap(),
                "--table-schema",
                schema.to_str().unwrap(),
            ],
            "--schema-template",
        ),
    ] {
        let out = flexrun(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(!out_file.exists(), "no baseline is written from rows that did not map");
}

#[test]
fn capacity_against_an_unreachable_broker_says_so() {
    let out = flexrun(&["capacity", "--bootstrap-server", "127.0.0.1:9", "--sizes", "100", "--trial", "1s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach the Kafka broker at 127.0.0.1:9"), "{err}");
}

/// Needs the local stack (the `integration` feature).
#[cfg(feature = "integration")]
#[test]
fn capacity_finds_a_boundary_for_two_sizes_on_the_local_broker() {
    let stack = crate::common::stack();
    let topic = crate::common::unique("capacity");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("boundary.svg");
    // 2,000..64,000 msg/s, 8,000 tolerance: at most ⌈log2(62000/8000)⌉ + 1 = 4 trials per size.
    let out = flexrun(&[
        "capacity",
        "--bootstrap-server",
        &stack.kafka,
        "--topic",
        &topic,
        "--partitions",
        "4",
        "--sizes",
        "100,4KiB",
        "--low",
        "2000",
        "--high",
        "64000",
        "--tolerance",
        "8000",
        "--trial",
        "2s",
        "--format",
        "json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let v = json(&out);
    let sizes = v.as_array().unwrap();
    assert_eq!(sizes.len(), 2, "{v}");
    for s in sizes {
        let b = &s["boundary"];
        let trials = b["trials"].as_array().unwrap().len();
        assert!((1..=4).contains(&trials), "{s}");
        let safe = s["messages_per_s"].as_f64().unwrap();
        assert!((2000.0..=64000.0).contains(&safe), "{s}");
        // Either a bracket within the tolerance, or a boundary outside the range, said so.
        let failed = b["failed"].as_f64();
        let outside = b["above_range"].as_bool().unwrap() || b["below_range"].as_bool().unwrap();
        assert!(outside || failed.is_some_and(|f| f - safe <= 8000.0 + 1e-9), "{s}");
        if let Some(why) = b["tripped"].as_str() {
            assert!(["achieved rate", "p99", "lag", "error"].iter().any(|k| why.contains(k)), "{why}");
        }
        // Every trial that was judged sustained delivered what was offered.
        for t in s["trials"].as_array().unwrap() {
            if t["tripped"].is_null() {
                assert!(t["achieved"].as_f64().unwrap() >= 0.95 * t["offered"].as_f64().unwrap(), "{t}");
            }
        }
    }
    let mb = |i: usize| sizes[i]["mb_per_s"].as_f64().unwrap();
    eprintln!(
        "boundary: 100 B → {} msg/s ({:.2} MB/s); 4 KiB → {} msg/s ({:.2} MB/s)",
        sizes[0]["messages_per_s"],
        mb(0),
        sizes[1]["messages_per_s"],
        mb(1)
    );
    assert!(std::fs::read_to_string(&svg).unwrap().contains("MB/s"));
}

/// Against a system whose boundary is known in advance: the probe's consumer drains at
/// most 3,000 msg/s (`--consumer-limit`), far below what the broker takes at 100 B, so
/// the sustainable rate is 3,000 msg/s. The search must bracket it within its tolerance:
/// a search that always reports its range's end, or never trips, fails here.
#[cfg(feature = "integration")]
#[test]
fn capacity_finds_a_known_consumer_limit_within_the_tolerance() {
    let stack = crate::common::stack();
    let topic = crate::common::unique("capacity_known");
    let limit = 3000.0;
    let out = flexrun(&[
        "capacity",
        "--bootstrap-server",
        &stack.kafka,
        "--topic",
        &topic,
        "--partitions",
        "2",
        "--sizes",
        "100",
        "--low",
        "1000",
        "--high",
        "12000",
        "--tolerance",
        "500",
        "--trial",
        "2s",
        "--lag-growth-limit",
        "0.05",
        "--consumer-limit",
        "3000",
        "--format",
        "json",
    ]);
    let v = json(&out);
    let s = &v[0];
    let b = &s["boundary"];
    let safe = s["messages_per_s"].as_f64().unwrap();
    let failed = b["failed"].as_f64().expect("a rate that tripped");
    eprintln!("known limit {limit} msg/s: sustained {safe}, tripped at {failed}: {b}");
    assert!(failed - safe <= 500.0 + 1e-9, "the bracket is within the tolerance: {s}");
    assert!(safe <= limit * 1.1, "sustained {safe} msg/s past a {limit} msg/s consumer: {s}");
    assert!(failed >= limit * 0.9, "tripped at {failed} msg/s, below the {limit} msg/s consumer: {s}");
}
