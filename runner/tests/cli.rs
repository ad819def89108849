//! The command line: bad input exits with status 2 and a message that names the
//! problem, before anything connects (these tests need no running services).

use std::process::{Command, Output};

fn flexrun(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flexrun")).args(args).env("FLEXRUN_LOG", "warn").env_remove("BIGQUERY_EMULATOR_HOST").env_remove("BIGQUERY_STORAGE_EMULATOR_HOST").output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const GOOD: &str = "readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE";

fn run_with(params: &str) -> Output {
    flexrun(&["--template", "kafka-to-bq", "--parameters", params, "--bigquery-endpoint", "127.0.0.1:1", "--bigquery-grpc-endpoint", "127.0.0.1:2"])
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
    assert!(stderr(&o).contains("unknown parameter outputTableSpek for template kafka-to-bq; did you mean outputTableSpec?"), "{}", stderr(&o));
}

#[test]
fn a_value_failing_its_pattern_names_the_expected_form() {
    let o = run_with("readBootstrapServerAndTopic=justahost,messageFormat=JSON,outputTableSpec=p:d.t");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid value \"justahost\" for parameter readBootstrapServerAndTopic: expected `host:port"), "{}", stderr(&o));
    let o = run_with(&format!("{GOOD},numStorageWriteApiStreams=-3"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("numStorageWriteApiStreams"), "{}", stderr(&o));
}

#[test]
fn avro_formats_are_refused_clearly() {
    let o = run_with("readBootstrapServerAndTopic=h:1;t,messageFormat=AVRO_BINARY_ENCODING,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("messageFormat=AVRO_BINARY_ENCODING is not supported yet"), "{}", stderr(&o));
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
    let o = flexrun(&["dataflow", "flex-template", "run", "j", "--template-file-gcs-location=gs://my-bucket/x.json", "--parameters", GOOD]);
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
    assert!(e.contains("--num-workers=3: recorded"), "{e}");
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
