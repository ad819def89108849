//! Export: the same job as a launch of Google's template on Dataflow, for when a job
//! outgrows one machine.
//!
//! [`Launch`] holds what Dataflow needs (template path, parameters, region, worker
//! range, machine type, experiments) and prints it as the `gcloud dataflow
//! flex-template run` command ([`Launch::gcloud_command`]) and as the REST body of
//! `projects.locations.flexTemplates.launch` ([`Launch::rest_body`]). Settings Dataflow
//! takes only on a running job (the worker floor and the utilization hint) follow as a
//! `gcloud dataflow jobs update-options` command. [`localize`] replaces what points at
//! this machine (a loopback broker, the emulator's project, local files) with
//! placeholders and says what to fill in.
//!
//! ```
//! use flexrun_templates::export::{localize, Launch};
//! let t = flexrun_templates::find("kafka-to-bq").unwrap();
//! let pairs = vec![
//!     ("readBootstrapServerAndTopic".to_string(), "127.0.0.1:9092;orders".to_string()),
//!     ("outputTableSpec".to_string(), "flexrun-local:shop.orders".to_string()),
//! ];
//! let (pairs, notes) = localize(t, &pairs);
//! assert_eq!(pairs[0].1, "KAFKA_BOOTSTRAP_ADDRESS:9092;orders");
//! assert_eq!(pairs[1].1, "PROJECT_ID:shop.orders");
//! let l = Launch::new(t, "orders-to-bq", pairs, notes, "us-central1");
//! assert!(l.gcloud_command().contains("Kafka_to_BigQuery_Flex"));
//! ```

use crate::Template;
use serde_json::json;

/// The project placeholder, and the emulator's project it stands in for.
pub const PROJECT_PLACEHOLDER: &str = "PROJECT_ID";
/// The BigQuery emulator's project in the local stack.
pub const LOCAL_PROJECT: &str = "flexrun-local";

/// A Dataflow launch of a built-in template.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The job name.
    pub job_name: String,
    /// Google's template ID (`Kafka_to_BigQuery_Flex`).
    pub template_id: String,
    /// The project (`PROJECT_ID` until the user fills it in).
    pub project: String,
    /// The region.
    pub region: String,
    /// Template parameters, in the order given.
    pub parameters: Vec<(String, String)>,
    /// Worker machine type.
    pub machine_type: Option<String>,
    /// Workers at the start.
    pub num_workers: Option<u32>,
    /// The autoscaling ceiling.
    pub max_workers: Option<u32>,
    /// `--additional-experiments`.
    pub experiments: Vec<String>,
    /// The autoscaling floor (set after launch with `update-options`).
    pub min_workers: Option<u32>,
    /// The utilization hint (set after launch with `update-options`).
    pub utilization_hint: Option<f64>,
    /// What the user must fill in or know.
    pub notes: Vec<String>,
}

fn is_loopback(host: &str) -> bool {
    let h = host.trim().trim_start_matches('[');
    h.starts_with("127.") || h.starts_with("localhost") || h.starts_with("::1") || h.starts_with("0.0.0.0")
}

/// Replace values that point at this machine with placeholders, and leave out
/// flexrun's own parameters (Google's template refuses a launch with a parameter it
/// does not know), saying so for each. Returns the pairs and the notes.
pub fn localize(template: &Template, pairs: &[(String, String)]) -> (Vec<(String, String)>, Vec<String>) {
    let own = |k: &str| template.parameter(k).is_some_and(|p| p.flexrun_only);
    let mut notes: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| own(k))
        .map(|(k, v)| format!("{k}={v}: flexrun's own parameter, left out (Google's template has none by that name and would refuse the launch); on Dataflow the job behaves as Google's template does, which `flexrun templates describe {}` gives for {k}", template.name))
        .collect();
    let out = pairs
        .iter()
        .filter(|(k, _)| !own(k))
        .map(|(k, v)| {
            let new = placeholder(template, k, v);
            if let Some((new, note)) = new {
                notes.push(format!("{k}: {note}"));
                (k.clone(), new)
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect();
    (out, notes)
}

fn placeholder(template: &Template, k: &str, v: &str) -> Option<(String, String)> {
    if k == "readBootstrapServerAndTopic" {
        let (servers, topic) = v.split_once(';')?;
        return servers.split(',').any(is_loopback).then(|| {
            (format!("KAFKA_BOOTSTRAP_ADDRESS:9092;{topic}"), format!("{servers} is this machine: replace KAFKA_BOOTSTRAP_ADDRESS:9092 with brokers Dataflow's workers can reach"))
        });
    }
    if let Some(rest) = v.strip_prefix(LOCAL_PROJECT).filter(|r| r.starts_with(':') || r.starts_with('.')) {
        return Some((
            format!("{PROJECT_PLACEHOLDER}{rest}"),
            format!("{LOCAL_PROJECT} is the local emulator's project: replace {PROJECT_PLACEHOLDER}"),
        ));
    }
    if let Some(url) = v.strip_prefix("http://").or_else(|| v.strip_prefix("https://")) {
        return is_loopback(url).then(|| {
            (
                "SCHEMA_REGISTRY_URL".into(),
                format!("{v} is this machine: replace SCHEMA_REGISTRY_URL with a registry Dataflow can reach"),
            )
        });
    }
    if k == "outputDirectory" && !v.starts_with("gs://") {
        return Some((
            "gs://BUCKET/output/".into(),
            format!("{v} is a local directory: replace gs://BUCKET/output/ with a bucket the job may write"),
        ));
    }
    let is_path = template.parameter(k).is_some_and(|p| {
        let n = p.name.to_lowercase();
        n.ends_with("path") || n.ends_with("location") || n.contains("gcspath")
    });
    if is_path && !v.starts_with("gs://") && !v.is_empty() {
        let file = v.rsplit('/').next().unwrap_or(v);
        return Some((format!("gs://BUCKET/{file}"), format!("{v} is a local file: upload it to gs://BUCKET/{file}")));
    }
    None
}

/// Quote a shell word when it holds anything a POSIX shell would act on.
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+^".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

impl Launch {
    /// A launch of `template` with `parameters` (already through [`localize`]).
    pub fn new(
        template: &Template,
        job_name: &str,
        parameters: Vec<(String, String)>,
        notes: Vec<String>,
        region: &str,
    ) -> Launch {
        Launch {
            job_name: job_name.into(),
            template_id: template.google_template_id.clone().unwrap_or_else(|| template.name.clone()),
            project: PROJECT_PLACEHOLDER.into(),
            region: region.into(),
            parameters,
            machine_type: None,
            num_workers: None,
            max_workers: None,
            experiments: Vec::new(),
            min_workers: None,
            utilization_hint: None,
            notes,
        }
    }

    /// Google's public copy of the template in the launch region.
    pub fn template_gcs_path(&self) -> String {
        format!("gs://dataflow-templates-{}/latest/flex/{}", self.region, self.template_id)
    }

    /// The parameters as gcloud takes them: `k=v,k=v`, or `^~^k=v~k=v` when a value
    /// holds a comma.
    pub fn parameter_list(&self) -> String {
        let commas = self.parameters.iter().any(|(_, v)| v.contains(','));
        let sep = if commas { "~" } else { "," };
        let body = self.parameters.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(sep);
        if commas {
            format!("^~^{body}")
        } else {
            body
        }
    }

    /// The `gcloud dataflow flex-template run` command, one flag per line.
    pub fn gcloud_command(&self) -> String {
        let mut args = vec![
            format!("--project={}", self.project),
            format!("--region={}", self.region),
            format!("--template-file-gcs-location={}", self.template_gcs_path()),
            "--enable-streaming-engine".to_string(),
        ];
        if let Some(m) = &self.machine_type {
            args.push(format!("--worker-machine-type={m}"));
        }
        if let Some(n) = self.num_workers {
            args.push(format!("--num-workers={n}"));
        }
        if let Some(n) = self.max_workers {
            args.push(format!("--max-workers={n}"));
        }
        if !self.experiments.is_empty() {
            args.push(format!("--additional-experiments={}", self.experiments.join(",")));
        }
        args.push(format!("--parameters={}", self.parameter_list()));
        let mut out = format!("gcloud dataflow flex-template run {}", shell_word(&self.job_name));
        for a in args {
            out.push_str(" \\\n  ");
            out.push_str(&shell_word(&a));
        }
        out
    }

    /// The `gcloud dataflow jobs update-options` command for what Dataflow sets on a
    /// running job (the floor and the hint), if any was set.
    pub fn update_options_command(&self) -> Option<String> {
        let mut flags = Vec::new();
        if let Some(n) = self.min_workers {
            flags.push(format!("--min-num-workers={n}"));
        }
        if let Some(h) = self.utilization_hint {
            flags.push(format!("--worker-utilization-hint={h}"));
        }
        (!flags.is_empty())
            .then(|| format!("gcloud dataflow jobs update-options JOB_ID --region={} {}", self.region, flags.join(" ")))
    }

    /// The REST endpoint the body is POSTed to.
    pub fn rest_url(&self) -> String {
        format!(
            "https://dataflow.googleapis.com/v1b3/projects/{}/locations/{}/flexTemplates:launch",
            self.project, self.region
        )
    }

    /// The body of `projects.locations.flexTemplates.launch`.
    pub fn rest_body(&self) -> serde_json::Value {
        let mut env = serde_json::Map::new();
        env.insert("enableStreamingEngine".into(), json!(true));
        if let Some(m) = &self.machine_type {
            env.insert("machineType".into(), json!(m));
        }
        if let Some(n) = self.num_workers {
            env.insert("numWorkers".into(), json!(n));
        }
        if let Some(n) = self.max_workers {
            env.insert("maxWorkers".into(), json!(n));
        }
        if !self.experiments.is_empty() {
            env.insert("additionalExperiments".into(), json!(self.experiments));
        }
        let params: serde_json::Map<String, serde_json::Value> =
            self.parameters.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        json!({ "launchParameter": {
            "jobName": self.job_name,
            "containerSpecGcsPath": self.template_gcs_path(),
            "parameters": params,
            "environment": env,
        }})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_values_become_placeholders_and_others_stay() {
        let t = crate::find("kafka-to-bq").unwrap();
        let pairs: Vec<(String, String)> = [
            ("readBootstrapServerAndTopic", "broker-1.prod:9092,localhost:9093;orders"),
            ("outputDeadletterTable", "flexrun-local.shop.dlq"),
            ("schemaRegistryConnectionUrl", "http://127.0.0.1:8081"),
            ("confluentAvroSchemaPath", "/home/me/order.avsc"),
            ("messageFormat", "JSON"),
            ("outputTableSpec", "real-project:shop.orders"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (out, notes) = localize(t, &pairs);
        let v: Vec<&str> = out.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(
            v,
            [
                "KAFKA_BOOTSTRAP_ADDRESS:9092;orders",
                "PROJECT_ID.shop.dlq",
                "SCHEMA_REGISTRY_URL",
                "gs://BUCKET/order.avsc",
                "JSON",
                "real-project:shop.orders"
            ]
        );
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[3].contains("upload it to gs://BUCKET/order.avsc"));
    }

    #[test]
    fn flexrun_only_parameters_are_left_out_with_a_note() {
        let t = crate::find("kafka-to-bq").unwrap();
        let pairs = vec![
            ("offsetGapPolicy".to_string(), "SKIP".to_string()),
            ("kafkaIsolationLevel".to_string(), "read_uncommitted".to_string()),
            ("outputTableSpec".to_string(), "p:d.t".to_string()),
        ];
        let (out, notes) = localize(t, &pairs);
        assert_eq!(out, vec![("outputTableSpec".to_string(), "p:d.t".to_string())]);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("offsetGapPolicy=SKIP: flexrun's own parameter, left out"), "{notes:?}");
    }

    #[test]
    fn a_local_output_directory_becomes_a_bucket_placeholder() {
        let t = crate::find("kafka-to-gcs").unwrap();
        let pairs = vec![("outputDirectory".to_string(), "file:///tmp/out/".to_string())];
        let (out, notes) = localize(t, &pairs);
        assert_eq!(out[0].1, "gs://BUCKET/output/");
        assert!(notes[0].contains("local directory"), "{notes:?}");
        let kept = vec![("outputDirectory".to_string(), "gs://real/out/".to_string())];
        assert_eq!(localize(t, &kept).0[0].1, "gs://real/out/", "a bucket is kept");
    }

    #[test]
    fn commas_in_values_switch_the_delimiter_and_the_body_carries_everything() {
        let t = crate::find("kafka-to-bq").unwrap();
        let mut l =
            Launch::new(t, "j", vec![("a".into(), "x,y".into()), ("b".into(), "it's".into())], vec![], "europe-west1");
        l.max_workers = Some(12);
        l.experiments = vec!["streaming_mode_at_least_once".into()];
        assert_eq!(l.parameter_list(), "^~^a=x,y~b=it's");
        let cmd = l.gcloud_command();
        assert!(cmd.contains(r"'--parameters=^~^a=x,y~b=it'\''s'"), "{cmd}");
        assert!(cmd.contains(
            "--template-file-gcs-location=gs://dataflow-templates-europe-west1/latest/flex/Kafka_to_BigQuery_Flex"
        ));
        let b = l.rest_body();
        assert_eq!(b["launchParameter"]["environment"]["maxWorkers"], 12);
        assert_eq!(b["launchParameter"]["parameters"]["b"], "it's");
        assert!(l.update_options_command().is_none());
        l.utilization_hint = Some(0.7);
        assert_eq!(
            l.update_options_command().unwrap(),
            "gcloud dataflow jobs update-options JOB_ID --region=europe-west1 --worker-utilization-hint=0.7"
        );
    }
}
