//! The command line: bad input exits with status 2 and a message that names the
//! problem, before anything connects (these tests need no running services).

use std::process::{Command, Output};

fn flexrun(args: &[&str]) -> Output {
    // Jobs of this test process under a checkpoint root of its own: tests run in
    // parallel, and two generator runs of the default job name under the user's root
    // met at its lock (one failed with "already running").
    let root = std::env::temp_dir().join(format!("flexrun-cli-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_flexrun"))
        .args(args)
        .env("FLEXRUN_LOG", "warn")
        .env("FLEXRUN_CHECKPOINT_DIR", root)
        .env_remove("BIGQUERY_EMULATOR_HOST")
        .env_remove("BIGQUERY_STORAGE_EMULATOR_HOST")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const GOOD: &str = "readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE";

fn run_with(params: &str) -> Output {
    flexrun(&[
        "--template",
        "kafka-to-bq",
        "--parameters",
        params,
        "--bigquery-endpoint",
        "127.0.0.1:1",
        "--bigquery-grpc-endpoint",
        "127.0.0.1:2",
    ])
}

#[test]
fn missing_required_parameter_exits_2() {
    let o = run_with("messageFormat=JSON");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing required parameter readBootstrapServerAndTopic"), "{}", stderr(&o));
}

#[test]
fn unknown_parameter_gets_the_nearest_name() {
    let o = run_with(&format!("{GOOD},outputTableSpek=p:d.t"));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .contains("unknown parameter outputTableSpek for template kafka-to-bq; did you mean outputTableSpec?"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_value_failing_its_pattern_names_the_expected_form() {
    let o = run_with("readBootstrapServerAndTopic=justahost,messageFormat=JSON,outputTableSpec=p:d.t");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .contains("invalid value \"justahost\" for parameter readBootstrapServerAndTopic: expected `host:port"),
        "{}",
        stderr(&o)
    );
    let o = run_with(&format!("{GOOD},numStorageWriteApiStreams=-3"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("numStorageWriteApiStreams"), "{}", stderr(&o));
}

#[test]
fn avro_formats_need_their_schema_and_unrunnable_parameters_are_refused() {
    let o = run_with("readBootstrapServerAndTopic=h:1;t,messageFormat=AVRO_BINARY_ENCODING,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("binaryAvroSchemaPath is required"), "{}", stderr(&o));
    let o = run_with(&format!("{GOOD},kafkaReadTruststorePasswordSecretId=secret"));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("parameter kafkaReadTruststorePasswordSecretId is not supported by flexrun yet"),
        "{}",
        stderr(&o)
    );
    let d = flexrun(&["templates", "describe", "kafka-to-bq"]);
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(text.contains("[not supported: Schema Registry OAuth is not implemented"), "{text}");
}

#[test]
fn malformed_parameter_lists_and_flags_exit_2() {
    let o = run_with("noequals");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("malformed --parameters entry \"noequals\""), "{}", stderr(&o));
    let o = flexrun(&["--template", "kafka-to-bq", "--idle-timeout", "forever"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid duration"), "{}", stderr(&o));
    let o = flexrun(&["--template", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown template \"nope\"; built-in templates: kafka-to-bq"), "{}", stderr(&o));
    let o = flexrun(&[]);
    assert_eq!(o.status.code(), Some(2));
    let o = flexrun(&["--template", "kafka-to-bq", "--parameters", GOOD, "--bigquery-endpoint", "127.0.0.1:1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("BIGQUERY_STORAGE_EMULATOR_HOST"), "{}", stderr(&o));
}

#[test]
fn the_gcloud_form_maps_the_template_path_and_reports_recorded_flags() {
    let o = flexrun(&[
        "dataflow",
        "flex-template",
        "run",
        "j",
        "--template-file-gcs-location=gs://my-bucket/x.json",
        "--parameters",
        GOOD,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a template flexrun has built in"), "{}", stderr(&o));
    // A valid gcloud command gets past validation (and then fails to reach the
    // non-existent broker, with status 1 and a message naming it).
    let o = flexrun(&[
        "dataflow", "flex-template", "run", "gcloud-job",
        "--template-file-gcs-location=gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex",
        "--parameters", "readBootstrapServerAndTopic=\"127.0.0.1:1;t\",messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE",
        "--num-workers=3", "--worker-machine-type=e2-standard-2", "--region=us-central1", "--enable-streaming-engine",
        "--bigquery-endpoint", "127.0.0.1:1", "--bigquery-grpc-endpoint", "127.0.0.1:2",
        "--checkpoint-dir", std::env::temp_dir().join("flexrun-cli-test").to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("--worker-machine-type=e2-standard-2: recorded"), "{e}");
    assert!(e.contains("Kafka 127.0.0.1:1 topic t"), "{e}");
}

#[test]
fn templates_list_and_describe() {
    let o = flexrun(&["templates", "list"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("kafka-to-bq"));
    let o = flexrun(&["templates", "describe", "kafka-to-bq"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Kafka_to_BigQuery_Flex"), "{out}");
    assert!(out.contains("readBootstrapServerAndTopic") && out.contains("useStorageWriteApiAtLeastOnce"), "{out}");
    let o = flexrun(&["templates", "describe", "kafka-to-bq", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["googleTemplateId"], "Kafka_to_BigQuery_Flex");
    let o = flexrun(&["templates", "describe", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

fn generator(params: &str) -> Output {
    flexrun(&["--template", "streaming-data-generator", "--parameters", params])
}

#[test]
fn generator_parameters_are_checked_before_anything_runs() {
    let dir = std::env::temp_dir().join(format!("flexrun-gen-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    std::fs::write(&good, r#"{"a": "{{alpha(3)}}"}"#).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\n  \"a\": \"{{alphaNumerc(3)}}\"\n}").unwrap();
    let cases: Vec<(String, &str)> = vec![
        ("schemaLocation=x.json,sinkType=STDOUT".into(), "missing required parameter qps"),
        ("qps=10,schemaLocation=gs://bucket/s.json,sinkType=STDOUT".into(), "cannot read it from Cloud Storage"),
        (
            format!("qps=10,schemaLocation={},sinkType=PUBSUB", good.display()),
            "sinkType=PUBSUB is Google's but not reachable",
        ),
        (format!("qps=10,schemaLocation={}", good.display()), "Google's default is PUBSUB"),
        (format!("qps=10,schemaLocation={},sinkType=KAFKA", good.display()), "sinkType=KAFKA needs bootstrapServer"),
        (
            format!("qps=0,schemaLocation={},sinkType=STDOUT", good.display()),
            "expected a number of messages per second above 0",
        ),
        (
            format!("qps=ten,schemaLocation={},sinkType=STDOUT", good.display()),
            "invalid value \"ten\" for parameter qps",
        ),
        (
            format!("qps=10,schemaLocation={},sinkType=STDOUT,outputType=AVRO", good.display()),
            "outputType=AVRO needs avroSchemaLocation",
        ),
        (
            format!("qps=10,schemaLocation={},sinkType=STDOUT,outputType=PARQUET", good.display()),
            "outputType=PARQUET is not supported by flexrun yet",
        ),
        (
            format!("qps=10,schemaLocation={}/missing.json,sinkType=STDOUT", dir.display()),
            "cannot read the schema file",
        ),
        (
            format!("qps=10,schemaLocation={},sinkType=STDOUT", bad.display()),
            "line 2, column 11: unknown function alphaNumerc()",
        ),
        ("qps=10,schemaTemplate=CLICKS,sinkType=STDOUT".into(), "schemaTemplate"),
        (format!("qps=10,schemaLocation={},sinkType=STDOUT,compactJson=maybe", good.display()), "compactJson"),
    ];
    for (params, want) in cases {
        let o = generator(&params);
        assert_eq!(o.status.code(), Some(2), "{params}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{params}: expected {want:?} in {}", stderr(&o));
    }
}

/// Google's built-in schemas run, and JSON goes out compact as Google's generator
/// re-serialises it (Gson), unless compactJson=false.
#[test]
fn generator_bundles_googles_schema_templates_and_sends_compact_json() {
    let run = |params: &str| {
        let o = flexrun(&["--template", "streaming-data-generator", "--seed", "7", "--parameters", params]);
        assert!(o.status.success(), "{params}: {}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    let game = run("qps=100000,schemaTemplate=GAME_EVENT,sinkType=STDOUT,messagesLimit=50");
    let lines: Vec<&str> = game.lines().collect();
    assert_eq!(lines.len(), 50, "one compact document per line: {game}");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(
            ["A Break In the Ice", "Ghosts of Perdition", "Survive the Low Road"]
                .contains(&v["quest"].as_str().unwrap()),
            "{l}"
        );
        let score = v["score"].as_i64().unwrap();
        assert!((100..=10000).contains(&score), "{l}");
        assert!(!l.contains(": ") && !l.contains(", "), "no whitespace between tokens: {l}");
    }
    assert!(lines[0].starts_with(r#"{"eventId":""#), "{}", lines[0]);
    let log = run("qps=100000,schemaTemplate=LOG_ENTRY,sinkType=STDOUT,messagesLimit=5");
    let first: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert!(first["jsonPayload"]["connection"]["dest_port"].is_i64(), "{first}");
    assert!(first["jsonPayload"]["dest_instance"]["project_id"].as_str().unwrap().starts_with("PROJECT"), "{first}");
    // As rendered: Google's template text is indented over several lines.
    let rendered = run("qps=100000,schemaTemplate=GAME_EVENT,sinkType=STDOUT,messagesLimit=1,compactJson=false");
    assert!(rendered.starts_with("{\n  \"eventId\": \""), "{rendered}");
    assert!(
        rendered.len() > lines[0].len() + 20,
        "compaction shortens the message: {} vs {}",
        rendered.len(),
        lines[0].len()
    );
}

#[test]
fn generator_writes_the_exact_count_to_stdout_and_a_seed_reproduces_it() {
    let dir = std::env::temp_dir().join(format!("flexrun-gen-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(&schema, r#"{"id": {{index()}}, "v": "{{alphaNumeric(8)}}"}"#).unwrap();
    let run = || {
        flexrun(&[
            "--template",
            "streaming-data-generator",
            "--seed",
            "42",
            "--parameters",
            &format!("qps=100000,schemaLocation={},sinkType=STDOUT,messagesLimit=1000", schema.display()),
        ])
    };
    let (a, b) = (run(), run());
    assert!(a.status.success(), "{}", stderr(&a));
    let lines: Vec<&str> = std::str::from_utf8(&a.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 1000);
    assert_eq!(a.stdout, b.stdout, "the same seed gives the same messages");
    let last: serde_json::Value = serde_json::from_str(lines[999]).unwrap();
    assert_eq!(last["id"], 999);
}

#[test]
fn estimate_gives_the_published_figures_and_rejects_bad_input() {
    // Seed 001's own load, the published 1 GiB/s (of 1 KiB messages): its 63 workers and
    // 58 SECU/h (the two CPU terms are calibrated to it, so this checks the arithmetic,
    // not the model), and its $15.75/h of Dataflow.
    let args = ["estimate", "--throughput", "1GiB/s", "--mode", "exactly-once"];
    let o = flexrun(&[&args[..], &["--format", "json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!((j["workers_exact"].as_f64().unwrap() - 63.0).abs() < 1e-4, "{}", j["workers_exact"]);
    assert!((j["secu_per_hour"].as_f64().unwrap() - 58.0).abs() < 1e-4, "{}", j["secu_per_hour"]);
    assert_eq!(j["workers"], 63);
    let out = String::from_utf8_lossy(&flexrun(&args).stdout).to_string();
    let dataflow = out.lines().find(|l| l.starts_with("dataflow") && l.contains("(line total)")).unwrap_or_default();
    assert!(dataflow.contains("15.75"), "{out}");
    // 100 MiB/s of 1 KiB messages: 102,400 msg/s at (49.37362 µs + 1,024 × 33.92622 ns)
    // on two vCPUs at 70 %: 63 × 100/1024 workers.
    let o = flexrun(&["estimate", "--throughput", "100MiB/s", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let want = 102400.0 * (49.37362e-6 + 33.92622e-9 * 1024.0) / 1.4;
    assert!((j["workers_exact"].as_f64().unwrap() - want).abs() < 1e-9, "{} vs {want}", j["workers_exact"]);
    assert_eq!(j["workers"], 7);
    // Issue 52: the text also gives seed 001's worked example as the page computes it.
    let text = String::from_utf8_lossy(&flexrun(&["estimate", "--throughput", "100MiB/s"]).stdout).to_string();
    assert!(text.contains("rule of thumb: factor 0.10") && text.contains("→ 6.3 workers, 5.8 SECU/h"), "{text}");
    let o = flexrun(&[
        "estimate",
        "--throughput",
        "5000msg/s",
        "--message-size",
        "1KiB",
        "--mode",
        "at-least-once",
        "--format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!((j["throughput_mib_s"].as_f64().unwrap() - 5000.0 / 1024.0).abs() < 1e-9);
    for (args, want) in [
        (vec!["--throughput", "100 lightyears/s"], "expected a positive number with a unit"),
        (vec!["--throughput", "-5MiB/s"], "expected a positive number with a unit"),
        (vec!["--throughput", "1MiB/s", "--mode", "twice"], "expected exactly-once or at-least-once"),
        (vec!["--throughput", "1MiB/s", "--machine-type", "m9-huge"], "unknown machine type \"m9-huge\""),
        (vec!["--throughput", "1MiB/s", "--commitment", "5y"], "expected none, 1y or 3y"),
        (vec!["--throughput", "1MiB/s", "--baseline", "/nonexistent/b.yaml"], "--baseline /nonexistent/b.yaml"),
        (vec!["--throughput", "1000000000GiB/s"], "--throughput: throughput"),
        (vec!["--throughput", "1MiB/s", "--dataset-location", "mars"], "--dataset-location: invalid dataset location"),
    ] {
        let mut a = vec!["estimate"];
        a.extend(args.iter());
        let o = flexrun(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

/// Issue 52: at 1 GiB/s into us-central1 the text and the JSON name the Storage Write
/// throughput quota and what to do; into US (the default) they do not; 20 GiB/s names
/// Dataflow's 1,000 workers per job too.
#[test]
fn estimate_names_the_limits_a_pipeline_crosses() {
    let est = |extra: &[&str]| flexrun(&[&["estimate", "--throughput", "1GiB/s"][..], extra].concat());
    let text = String::from_utf8_lossy(&est(&["--dataset-location", "us-central1"]).stdout).to_string();
    assert!(text.contains("LIMIT: Storage Write API throughput") && text.contains("multi-region"), "{text}");
    let o = est(&["--dataset-location", "us-central1", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["limits"][0]["limit"], "storage-write-throughput", "{j}");
    let us = String::from_utf8_lossy(&est(&[]).stdout).to_string();
    assert!(!us.contains("LIMIT:"), "{us}");
    let o = flexrun(&["estimate", "--throughput", "20GiB/s", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = j["limits"].as_array().unwrap().iter().map(|l| l["limit"].as_str().unwrap()).collect();
    assert!(names.contains(&"dataflow-max-workers"), "{names:?}");
}

/// kafka-to-gcs before a run: a 10-minute window at 1 GiB/s. Heap state is the whole
/// window spread over the workers, too much for an e2-standard-2; lsm holds its buffers
/// and fits; the largest checkpoint follows the state model.
#[test]
fn estimate_sizes_kafka_to_gcs_windows_state_and_checkpoints() {
    let run = |backend: &str, kind: &str, format: &str| {
        flexrun(&[
            "estimate",
            "--template",
            "kafka-to-gcs",
            "--throughput",
            "1GiB/s",
            "--parameters",
            "windowDuration=10m,numShards=2000",
            "--state-backend",
            backend,
            "--checkpoint-kind",
            kind,
            "--format",
            format,
        ])
    };
    let o = run("heap", "full", "json");
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let g = &j["kafka_to_gcs"];
    let workers = j["estimate"]["workers"].as_f64().unwrap();
    assert_eq!(g["peak_state_bytes"].as_f64().unwrap(), 600.0 * 1073741824.0);
    assert_eq!(g["files_per_window"], 2000.0);
    let per_worker = g["memory_per_worker_bytes"].as_f64().unwrap();
    assert!((per_worker - 600.0 * 1073741824.0 / workers * 3.0).abs() < 1.0, "{g}");
    assert_eq!(g["worker_memory_bytes"], 8e9, "e2-standard-2");
    assert_eq!(g["checkpoint"]["bytes"].as_f64().unwrap(), 600.0 * 1073741824.0, "heap writes the whole window");
    let table = String::from_utf8_lossy(&run("heap", "full", "table").stdout).into_owned();
    assert!(table.contains("does NOT fit"), "{table}");
    let table = String::from_utf8_lossy(&run("lsm", "incremental", "table").stdout).into_owned();
    assert!(table.contains(": fits") && table.contains("checkpoints (Incremental, every 180 s)"), "{table}");
    for (args, want) in [
        (vec!["--template", "kafka-to-gcs", "--parameters", "windowDuration=0s"], "windowDuration"),
        (
            vec!["--template", "kafka-to-gcs", "--state-backend", "heap", "--checkpoint-kind", "incremental"],
            "needs --state-backend lsm",
        ),
        (vec!["--state-backend", "heap"], "only for --template kafka-to-gcs"),
        (vec!["--template", "nope"], "estimate knows kafka-to-bq and kafka-to-gcs"),
    ] {
        let mut a = vec!["estimate", "--throughput", "1MiB/s"];
        a.extend(args.iter());
        let o = flexrun(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn async_progress_tracking_is_refused_with_exactly_once() {
    let o = flexrun(&[
        "--template",
        "kafka-to-bq",
        "--async-progress-tracking",
        "--parameters",
        GOOD,
        "--bigquery-endpoint",
        "127.0.0.1:1",
        "--bigquery-grpc-endpoint",
        "127.0.0.1:2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("--async-progress-tracking")
            && e.contains("at-least-once")
            && e.contains("cannot be combined with exactly-once"),
        "{e}"
    );
    let o = flexrun(&["--template", "kafka-to-bq", "--progress-checkpoint-interval", "never", "--parameters", GOOD]);
    assert_eq!(o.status.code(), Some(2));
    let o = flexrun(&["--template", "kafka-to-bq", "--async-log-purge", "maybe", "--parameters", GOOD]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn remaining_flags_and_files_reject_garbage_clearly() {
    let dir = std::env::temp_dir().join(format!("flexrun-cli-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = [
        "--template",
        "kafka-to-bq",
        "--parameters",
        GOOD,
        "--bigquery-endpoint",
        "127.0.0.1:1",
        "--bigquery-grpc-endpoint",
        "127.0.0.1:2",
    ];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        flexrun(&a)
    };
    for (extra, want) in [
        (vec!["--autoscaling-time-scale", "0"], "expected a positive number"),
        (vec!["--autoscaling-interval", "often"], "invalid duration"),
        (vec!["--worker-machine-type", "m9-huge"], "unknown --worker-machine-type \"m9-huge\""),
        (vec!["--web", "not-an-address"], "--web not-an-address: cannot listen"),
        (vec!["--sink", "stats"], "--sink stats needs --schema-file"),
    ] {
        let o = with(&extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
    }
    let o = flexrun(&["web", "--addr", "nowhere:xyz"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot listen"), "{}", stderr(&o));
    let o = flexrun(&["local", "create-topic", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--partitions", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let bad_schema = dir.join("schema.json");
    std::fs::write(&bad_schema, r#"[{"name": "a", "type": "WIDGET"}]"#).unwrap();
    let o = flexrun(&[
        "local",
        "create-table",
        "--table",
        "p:d.t",
        "--schema-file",
        bad_schema.to_str().unwrap(),
        "--bigquery-endpoint",
        "127.0.0.1:1",
        "--bigquery-grpc-endpoint",
        "127.0.0.1:2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("unsupported type \"WIDGET\""), "{}", stderr(&o));
}

#[test]
fn estimate_reads_a_locally_measured_baseline_and_rejects_a_broken_one() {
    let dir = std::env::temp_dir().join(format!("flexrun-baseline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("local.yaml");
    std::fs::write(
        &good,
        "source: this machine\ndate: 2026-11-30\ntemplate: kafka-to-bq\nmachine_type: e2-standard-2\nmessage_bytes: 1024\nbaselines:\n  - {mode: exactly-once, throughput_mib_s: 40, workers: 2, mean_cpu: 0.8, secu_per_hour: 1}\n",
    )
    .unwrap();
    let o =
        flexrun(&["estimate", "--throughput", "100MiB/s", "--baseline", good.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!((j["workers_exact"].as_f64().unwrap() - 5.0).abs() < 1e-9, "100/40 x 2 workers");
    assert!(j["notes"][0].as_str().unwrap().contains("this machine"));
    let o = flexrun(&[
        "estimate",
        "--throughput",
        "1MiB/s",
        "--mode",
        "at-least-once",
        "--baseline",
        good.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("has no at-least-once baseline"), "{}", stderr(&o));
    for (name, text, want) in [
        ("garbage.yaml", "{{{ not yaml", "baseline file"),
        ("negative.yaml", "source: s\ndate: d\ntemplate: t\nmachine_type: e2-standard-2\nbaselines:\n  - {mode: exactly-once, throughput_mib_s: 10, workers: -3, mean_cpu: 0.5, secu_per_hour: 1}\n", "workers must be above 0"),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        let o = flexrun(&["estimate", "--throughput", "1MiB/s", "--baseline", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{name}: {}", stderr(&o));
    }
}

#[test]
fn format_json_prints_dataflows_invalid_template_parameters_shape() {
    let o = flexrun(&[
        "--template",
        "kafka-to-bq",
        "--parameters",
        "readBootstrapServerAndTopic=h:1;t,messageFormat=AVRO_CONFLUENT_WIRE_FORMAT,schemaFormat=SCHEMA_REGISTRY,kafkaReadAuthenticationMode=NONE",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(j["error"]["code"], 400);
    assert_eq!(j["error"]["status"], "INVALID_ARGUMENT");
    let d = &j["error"]["details"][0];
    assert_eq!(d["@type"], "type.googleapis.com/google.dataflow.v1beta3.InvalidTemplateParameters");
    let v: Vec<(String, String)> = d["parameterViolations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["parameter"].as_str().unwrap().to_string(), x["description"].as_str().unwrap().to_string()))
        .collect();
    // schemaFormat=SCHEMA_REGISTRY needs the URL, the dataset and the project; nothing else.
    let names: Vec<&str> = v.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["schemaRegistryConnectionUrl", "outputDataset", "outputProject"], "{v:?}");
    // Unknown names are violations too, with the parameter named.
    let o = flexrun(&[
        "--template",
        "kafka-to-bq",
        "--parameters",
        "messageFormat=JSON,outputTablSpec=p:d.t",
        "--format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let v = &j["error"]["details"][0]["parameterViolations"];
    assert!(v.as_array().unwrap().iter().any(|x| x["parameter"] == "outputTablSpec"), "{v}");
    assert!(v.as_array().unwrap().iter().any(|x| x["parameter"] == "readBootstrapServerAndTopic"), "{v}");
}

#[test]
fn a_bad_avro_schema_file_is_a_bad_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("not json", "not a valid Avro schema"),
        (r#""string""#, "must be a record"),
        (
            r#"{"type":"record","name":"R","fields":[{"name":"x","type":["int","string"]}]}"#,
            "union of 2 non-null types",
        ),
    ];
    for (text, want) in cases {
        let f = dir.path().join("s.avsc");
        std::fs::write(&f, text).unwrap();
        let o = run_with(&format!(
            "readBootstrapServerAndTopic=h:1;t,messageFormat=AVRO_BINARY_ENCODING,binaryAvroSchemaPath={},outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE",
            f.display()
        ));
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        assert!(stderr(&o).contains("binaryAvroSchemaPath=") && stderr(&o).contains(want), "{text}: {}", stderr(&o));
    }
    let o = run_with("readBootstrapServerAndTopic=h:1;t,messageFormat=AVRO_CONFLUENT_WIRE_FORMAT,confluentAvroSchemaPath=/nonexistent.avsc,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read the schema file"), "{}", stderr(&o));
}

/// Split a shell command as a POSIX shell would for the forms `flexrun export` prints:
/// words, single quotes (with `'\''`), and backslash-newline continuations.
fn shell_words(cmd: &str) -> Vec<String> {
    let (mut words, mut cur, mut any, mut quoted) = (Vec::new(), String::new(), false, false);
    let mut chars = cmd.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => (quoted, any) = (!quoted, true),
            '\\' if !quoted => {
                if let Some(n) = chars.next().filter(|n| *n != '\n') {
                    cur.push(n);
                    any = true;
                }
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

#[test]
fn export_prints_a_gcloud_command_that_flexrun_reads_back_as_the_same_job() {
    let params = "readBootstrapServerAndTopic=127.0.0.1:19092;orders,messageFormat=JSON,outputTableSpec=flexrun-local:shop.orders,kafkaReadAuthenticationMode=NONE,useBigQueryDLQ=true,outputDeadletterTable=flexrun-local:shop.dlq,useStorageWriteApiAtLeastOnce=true";
    let o = flexrun(&[
        "export",
        "--template",
        "kafka-to-bq",
        "--job-name",
        "orders to bq",
        "--parameters",
        params,
        "--region",
        "europe-west1",
        "--worker-machine-type",
        "e2-standard-4",
        "--num-workers",
        "2",
        "--throughput",
        "200MiB/s",
        "--min-num-workers",
        "2",
        "--checkpoint-dir",
        "/tmp/nowhere",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let words = shell_words(j["gcloud"].as_str().unwrap());
    assert_eq!(&words[..5], ["gcloud", "dataflow", "flex-template", "run", "orders to bq"]);
    // Read back by flexrun's own gcloud form (the program name changed).
    let argv: Vec<&str> = std::iter::once("flexrun").chain(words[1..].iter().map(String::as_str)).collect();
    use clap::Parser;
    let cli = flexrun::cli::Cli::try_parse_from(argv).expect("flexrun parses the exported command");
    let Some(flexrun::cli::Command::Dataflow {
        group: flexrun::cli::DataflowGroup::FlexTemplate { action: flexrun::cli::FlexTemplateAction::Run(a) },
    }) = cli.command
    else {
        panic!("not the gcloud form");
    };
    assert_eq!(a.job_name, "orders to bq");
    let t = flexrun_templates::find_by_gcs_path(&a.template_file_gcs_location).expect("Google's template path");
    assert_eq!(t.name, "kafka-to-bq");
    assert!(a.template_file_gcs_location.starts_with("gs://dataflow-templates-europe-west1/"));
    let back = flexrun_templates::parse_parameter_list(&a.parameters.join(",")).unwrap();
    let mut want = flexrun_templates::parse_parameter_list(params).unwrap();
    for (_, v) in want.iter_mut() {
        *v = v.replace("127.0.0.1:19092", "KAFKA_BOOTSTRAP_ADDRESS:9092").replace("flexrun-local", "PROJECT_ID");
    }
    assert_eq!(back, want, "the same parameters, with placeholders for what is local");
    flexrun_templates::validate(t, &back).expect("the exported parameters are valid for the template");
    let s = &a.flags.scaling;
    assert_eq!(
        (s.region.as_deref(), s.worker_machine_type.as_deref(), s.num_workers),
        (Some("europe-west1"), Some("e2-standard-4"), Some(2))
    );
    assert!(s.enable_streaming_engine);
    // --max-workers sized from the estimate: twice the workers for 200 MiB/s at-least-once.
    let est = flexrun(&[
        "estimate",
        "--throughput",
        "200MiB/s",
        "--mode",
        "at-least-once",
        "--machine-type",
        "e2-standard-4",
        "--format",
        "json",
    ]);
    let e: serde_json::Value = serde_json::from_slice(&est.stdout).unwrap();
    assert_eq!(s.max_workers, Some((e["workers_exact"].as_f64().unwrap() * 2.0).ceil() as u32));
    // The REST body carries the same job.
    let body = &j["rest"]["body"]["launchParameter"];
    assert_eq!(body["environment"]["maxWorkers"].as_u64(), s.max_workers.map(u64::from));
    for (k, v) in &back {
        assert_eq!(body["parameters"][k], *v, "{k}");
    }
    assert_eq!(
        j["update_options"],
        "gcloud dataflow jobs update-options JOB_ID --region=europe-west1 --min-num-workers=2"
    );
    let notes = j["notes"].to_string();
    assert!(notes.contains("KAFKA_BOOTSTRAP_ADDRESS") && notes.contains("left out: --checkpoint-dir"), "{notes}");
}

/// Flexrun-only parameters stay out of the Dataflow launch (Google's template would
/// refuse it), and an Avro job names the columns whose mapping differs from Google's.
#[test]
fn export_leaves_out_flexrun_parameters_and_names_avro_mapping_differences() {
    let dir = tempfile::tempdir().unwrap();
    let avsc = dir.path().join("order.avsc");
    std::fs::write(
        &avsc,
        r#"{"type":"record","name":"Order","fields":[
        {"name":"id","type":"long"},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}}]}"#,
    )
    .unwrap();
    let params = format!("readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=AVRO_BINARY_ENCODING,binaryAvroSchemaPath={},outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,offsetGapPolicy=SKIP,kafkaIsolationLevel=read_uncommitted", avsc.display());
    let o = flexrun(&["export", "--template", "kafka-to-bq", "--parameters", &params, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sent = &j["rest"]["body"]["launchParameter"]["parameters"];
    assert!(sent.get("offsetGapPolicy").is_none() && sent.get("kafkaIsolationLevel").is_none(), "{sent}");
    assert!(!j["gcloud"].as_str().unwrap().contains("offsetGapPolicy"), "{}", j["gcloud"]);
    let notes = j["notes"].to_string();
    assert!(notes.contains("offsetGapPolicy=SKIP: flexrun's own parameter, left out"), "{notes}");
    assert!(notes.contains("has day (DATE), at (TIMESTAMP)"), "{notes}");
    // Nothing to say for a schema without logical types.
    std::fs::write(&avsc, r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#).unwrap();
    let o = flexrun(&["export", "--template", "kafka-to-bq", "--parameters", &params, "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!j["notes"].to_string().contains("Avro mapping"), "{}", j["notes"]);
}

#[test]
fn export_leaves_out_table_layout_and_metadata_columns_and_sizes_a_gcs_job() {
    let dir = tempfile::tempdir().unwrap();
    let avsc = dir.path().join("o.avsc");
    std::fs::write(&avsc, r#"{"type":"record","name":"O","fields":[{"name":"id","type":"long"}]}"#).unwrap();
    let params = format!("readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=AVRO_BINARY_ENCODING,binaryAvroSchemaPath={},outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,tablePartitioning=DAY,tableClusteringFields=id,kafkaMetadataColumns=topic|offset", avsc.display());
    let o = flexrun(&["export", "--template", "kafka-to-bq", "--parameters", &params, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sent = &j["rest"]["body"]["launchParameter"]["parameters"];
    for p in ["tablePartitioning", "tableClusteringFields", "kafkaMetadataColumns"] {
        assert!(sent.get(p).is_none(), "{p}: {sent}");
        assert!(j["notes"].to_string().contains(&format!("{p}=")), "{p}: {}", j["notes"]);
    }
    // --throughput sizes any template's job: for kafka-to-gcs it used to read a
    // parameter only kafka-to-bq has.
    let gcs = "readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=JSON,outputDirectory=gs://b/o/,kafkaReadAuthenticationMode=NONE";
    let o = flexrun(&["export", "--template", "kafka-to-gcs", "--throughput", "10MiB/s", "--parameters", gcs]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--max-workers="), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn export_refuses_what_dataflow_cannot_run() {
    for (args, needle) in [
        (vec!["export", "--template", "rate-to-stats"], "no template to export it to"),
        (vec!["export", "--template", "nope"], "nope"),
        (vec!["export", "--template", "kafka-to-bq", "--parameters", "messageFormat=XML"], "messageFormat"),
        (vec!["export", "--template", "kafka-to-bq", "--parameters", GOOD, "--throughput", "fast"], "invalid rate"),
    ] {
        let o = flexrun(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn cdc_parameters_that_cannot_work_exit_2_naming_the_parameter() {
    for (extra, want) in [
        ("cdcSequenceField=version", "cdcSequenceField needs cdcPrimaryKey"),
        ("cdcChangeTypeHeader=op", "cdcChangeTypeHeader needs cdcPrimaryKey"),
        ("cdcPrimaryKey=id|id", "cdcPrimaryKey: column id is named twice"),
        ("cdcPrimaryKey=id,useStorageWriteApiAtLeastOnce=false", "only on the _default stream"),
        ("cdcPrimaryKey=1id", "invalid value \"1id\" for parameter cdcPrimaryKey"),
        ("cdcPrimaryKey=id,cdcMaxStaleness=15m", "cdcMaxStaleness sets maxStaleness on a CDC table flexrun creates"),
        ("cdcPrimaryKey=id,cdcChangeTypeField=op,cdcChangeTypeHeader=op", "give one"),
        ("cdcChangeTypeField=op", "cdcChangeTypeField needs cdcPrimaryKey"),
    ] {
        let o = run_with(&format!("{GOOD},{extra}"));
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra}: want {want:?} in {}", stderr(&o));
    }
    // cdcMaxStaleness's value itself, where it applies (an Avro table flexrun creates).
    let dir = tempfile::tempdir().unwrap();
    let avsc = dir.path().join("k.avsc");
    std::fs::write(&avsc, r#"{"type":"record","name":"K","fields":[{"name":"id","type":"long"}]}"#).unwrap();
    for (v, want) in [
        ("soon", "cdcMaxStaleness=soon: invalid duration"),
        ("0s", "cdcMaxStaleness=0s: invalid duration \"0s\": expected a positive number"),
        ("500ms", "cdcMaxStaleness=500ms: expected a duration of a second or more"),
    ] {
        let o = run_with(&format!("readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=AVRO_BINARY_ENCODING,binaryAvroSchemaPath={},outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,cdcPrimaryKey=id,cdcMaxStaleness={v}", avsc.display()));
        assert_eq!(o.status.code(), Some(2), "{v}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{v}: want {want:?} in {}", stderr(&o));
    }
    // Flexrun's own parameters: describe marks them, export leaves them out and says so.
    let d = flexrun(&["templates", "describe", "kafka-to-bq"]);
    let text = String::from_utf8_lossy(&d.stdout);
    assert!(text.contains("cdcPrimaryKey") && text.contains("cdcSequenceField"), "{text}");
}

#[test]
fn quoted_ids_without_the_seed_shape_exit_2_naming_both_flags() {
    let o = flexrun(&["local", "produce", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--count", "1", "--quoted-id"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--quoted-id") && stderr(&o).contains("--seed-shape"), "{}", stderr(&o));
}

#[test]
fn bad_schema_update_options_exit_2_and_export_leaves_the_parameter_out() {
    for v in ["DROP_COLUMNS", "ALLOW_FIELD_ADDITION|", "allow"] {
        let o = run_with(&format!("{GOOD},schemaUpdateOptions={v}"));
        assert_eq!(o.status.code(), Some(2), "{v}: {}", stderr(&o));
        assert!(stderr(&o).contains("schemaUpdateOptions"), "{v}: {}", stderr(&o));
    }
    let params = format!("{GOOD},schemaUpdateOptions=ALLOW_FIELD_ADDITION|ALLOW_FIELD_RELAXATION");
    let o = flexrun(&["export", "--template", "kafka-to-bq", "--parameters", &params, "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["rest"]["body"]["launchParameter"]["parameters"].get("schemaUpdateOptions").is_none(), "{j}");
    assert!(j["notes"].to_string().contains("schemaUpdateOptions="), "{}", j["notes"]);
}

#[test]
fn several_topics_badly_written_exit_2_and_cannot_be_exported() {
    for (topics, extra, want) in [
        ("a||b", "", "is not a topic name"),
        ("a|a", "", "named twice"),
        ("/(/", "", "not a regular expression"),
        ("a|b", ",topicTableMap=a:x:y", "topicTableMap: a"),
        ("a|b", ",topicTableMap=a:t|a:u", "mapped twice"),
    ] {
        let o = run_with(&format!(
            "readBootstrapServerAndTopic=127.0.0.1:1;{topics},messageFormat=JSON,outputTableSpec=p:d.{{topic}},kafkaReadAuthenticationMode=NONE{extra}"
        ));
        assert_eq!(o.status.code(), Some(2), "{topics}{extra}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{topics}{extra}: want {want:?} in {}", stderr(&o));
    }
    let params = "readBootstrapServerAndTopic=127.0.0.1:1;a|b,messageFormat=JSON,outputTableSpec=p:d.{topic},kafkaReadAuthenticationMode=NONE";
    let o = flexrun(&["export", "--template", "kafka-to-bq", "--parameters", params]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("Google's template reads one per job"), "{}", stderr(&o));
}

#[test]
fn a_cdc_key_schema_is_for_avro_jobs_and_must_be_readable() {
    let o = run_with(&format!("{GOOD},cdcPrimaryKey=id,cdcKeySchemaPath=/tmp/k.avsc"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a JSON job reads a tombstone's key as JSON"), "{}", stderr(&o));
    let dir = tempfile::tempdir().unwrap();
    let avsc = dir.path().join("v.avsc");
    std::fs::write(&avsc, r#"{"type":"record","name":"V","fields":[{"name":"id","type":"long"}]}"#).unwrap();
    let bad = dir.path().join("bad.avsc");
    std::fs::write(&bad, "{not avro").unwrap();
    let avro = format!("readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=AVRO_BINARY_ENCODING,binaryAvroSchemaPath={},outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE", avsc.display());
    for (extra, want) in [
        (format!("cdcPrimaryKey=id,cdcKeySchemaPath={}", bad.display()), "cdcKeySchemaPath="),
        ("cdcPrimaryKey=id,cdcKeySchemaPath=/nonexistent/k.avsc".to_string(), "cannot read the schema file"),
        (format!("cdcKeySchemaPath={}", avsc.display()), "cdcKeySchemaPath needs cdcPrimaryKey"),
    ] {
        let o = run_with(&format!("{avro},{extra}"));
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra}: want {want:?} in {}", stderr(&o));
    }
}
