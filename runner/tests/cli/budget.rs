//! `--memory-budget`: a size under 64 MiB or without a unit flexrun knows exits 2
//! before anything connects, naming the form it expects.

use std::process::Command;

#[test]
fn a_memory_budget_too_small_or_without_a_size_exits_2_naming_the_form() {
    let params = "readBootstrapServerAndTopic=127.0.0.1:1;t,messageFormat=JSON,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE";
    for (budget, want) in [("1MiB", "expected at least 64 MiB"), ("lots", "expected a size such as 1GiB")] {
        let o = Command::new(env!("CARGO_BIN_EXE_flexrun"))
            .args(["--template", "kafka-to-bq", "--parameters", params, "--memory-budget", budget])
            .env("FLEXRUN_LOG", "warn")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{budget}: {err}");
    }
}
