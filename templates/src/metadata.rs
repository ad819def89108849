//! The template metadata model and the catalogue of built-in templates.

use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// One template parameter, in the shape of Google's flex-template metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Parameter {
    /// The parameter's name as passed in `--parameters name=value`.
    pub name: String,
    /// A short human label.
    pub label: String,
    /// What the parameter does and which values it takes.
    pub help_text: String,
    /// False for required parameters.
    #[serde(default)]
    pub is_optional: bool,
    /// The value used when the parameter is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value: Option<String>,
    /// Allowed values, when the parameter is an enumeration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enum_options: Vec<String>,
    /// Regular expressions that a value must match (all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regexes: Vec<String>,
    /// Google's parameter that flexrun does not run yet, and why: a value other than
    /// the default is refused (exit 2) with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
    /// flexrun's own parameter, which Google's template does not have: `export`
    /// leaves it out of the Dataflow launch and says what Dataflow does instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flexrun_only: bool,
}

/// A pipeline template: its identity, description and parameters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    /// flexrun's name for the template (`kafka-to-bq`).
    pub name: String,
    /// Google's template id (`Kafka_to_BigQuery_Flex`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub google_template_id: Option<String>,
    /// Google's public template spec path, with `REGION` standing for the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs_path: Option<String>,
    /// STREAMING or BATCH.
    pub category: String,
    /// What the template does.
    pub description: String,
    /// The parameters it takes.
    pub parameters: Vec<Parameter>,
}

impl Template {
    /// The parameter with this exact name.
    pub fn parameter(&self, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.name == name)
    }
}

/// A template file that does not load.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The YAML does not describe a template.
    #[error("template {file}: {source}")]
    Yaml {
        /// Which file.
        file: String,
        /// What serde_yaml said.
        source: serde_yaml::Error,
    },
    /// A validation regex does not compile.
    #[error("template {template}: parameter {param} has an invalid regex {regex:?}: {source}")]
    Regex {
        /// Which template.
        template: String,
        /// Which parameter.
        param: String,
        /// The regex text.
        regex: String,
        /// What the regex crate said.
        source: regex::Error,
    },
}

/// A built-in template's source and the names it answers to. The names are repeated
/// here so that [`find`] parses only the template asked for: a job's start-up then reads
/// one YAML file, not five, and compiles no regex it will not use (a test checks that the
/// names match the files and that every regex compiles).
struct Builtin {
    file: &'static str,
    name: &'static str,
    google_template_id: Option<&'static str>,
    yaml: &'static str,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        file: "kafka-to-bq.yaml",
        name: "kafka-to-bq",
        google_template_id: Some("Kafka_to_BigQuery_Flex"),
        yaml: include_str!("../kafka-to-bq.yaml"),
    },
    Builtin {
        file: "streaming-data-generator.yaml",
        name: "streaming-data-generator",
        google_template_id: Some("Streaming_Data_Generator"),
        yaml: include_str!("../streaming-data-generator.yaml"),
    },
    Builtin {
        file: "kafka-to-kafka.yaml",
        name: "kafka-to-kafka",
        google_template_id: Some("Kafka_to_Kafka"),
        yaml: include_str!("../kafka-to-kafka.yaml"),
    },
    Builtin {
        file: "rate-to-stats.yaml",
        name: "rate-to-stats",
        google_template_id: None,
        yaml: include_str!("../rate-to-stats.yaml"),
    },
    Builtin {
        file: "kafka-to-gcs.yaml",
        name: "kafka-to-gcs",
        google_template_id: Some("Kafka_to_Gcs_Flex"),
        yaml: include_str!("../kafka-to-gcs.yaml"),
    },
];

/// Parse one template from YAML text and check that its regexes compile.
pub fn parse_template(file: &str, yaml: &str) -> Result<Template, TemplateError> {
    let t = read_template(file, yaml)?;
    for p in &t.parameters {
        for r in &p.regexes {
            regex::Regex::new(r).map_err(|source| TemplateError::Regex {
                template: t.name.clone(),
                param: p.name.clone(),
                regex: r.clone(),
                source,
            })?;
        }
    }
    Ok(t)
}

/// Parse one template from YAML text, without compiling its regexes.
fn read_template(file: &str, yaml: &str) -> Result<Template, TemplateError> {
    serde_yaml::from_str(yaml).map_err(|source| TemplateError::Yaml { file: file.to_string(), source })
}

/// Built-in template `i`, parsed on first use. Its regexes are compiled where a value is
/// checked against them ([`crate::params::validate`]), and by this module's tests.
fn builtin_at(i: usize) -> &'static Template {
    static CELLS: [OnceLock<Template>; BUILTINS.len()] = [const { OnceLock::new() }; BUILTINS.len()];
    CELLS[i].get_or_init(|| {
        let b = &BUILTINS[i];
        read_template(b.file, b.yaml).unwrap_or_else(|e| panic!("built-in template is broken: {e}"))
    })
}

/// All built-in templates, parsed once.
pub fn builtin() -> &'static [Template] {
    static CELL: OnceLock<Vec<Template>> = OnceLock::new();
    CELL.get_or_init(|| (0..BUILTINS.len()).map(|i| builtin_at(i).clone()).collect())
}

/// The built-in template with this name (flexrun's or Google's id).
pub fn find(name: &str) -> Option<&'static Template> {
    let i = BUILTINS.iter().position(|b| b.name == name || b.google_template_id == Some(name))?;
    Some(builtin_at(i))
}

/// Map a `--template-file-gcs-location` such as
/// `gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex` (any region or
/// version folder) to the built-in template.
pub fn find_by_gcs_path(path: &str) -> Option<&'static Template> {
    let rest = path.strip_prefix("gs://")?;
    let (bucket, object) = rest.split_once('/')?;
    if !bucket.starts_with("dataflow-templates") {
        return None;
    }
    let id = object.rsplit('/').next()?;
    let i = BUILTINS.iter().position(|b| b.google_template_id == Some(id))?;
    Some(builtin_at(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_load_and_have_unique_parameter_names() {
        for (b, t) in BUILTINS.iter().zip(builtin()) {
            let checked = parse_template(b.file, b.yaml).expect("every built-in regex compiles");
            assert_eq!(&checked, t);
            assert_eq!(
                (b.name, b.google_template_id),
                (t.name.as_str(), t.google_template_id.as_deref()),
                "{}",
                b.file
            );
            let mut names: Vec<_> = t.parameters.iter().map(|p| &p.name).collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(n, names.len(), "duplicate parameter in {}", t.name);
        }
        assert!(find("kafka-to-bq").is_some());
        assert_eq!(find("Kafka_to_BigQuery_Flex").unwrap().name, "kafka-to-bq");
        assert_eq!(find("Streaming_Data_Generator").unwrap().name, "streaming-data-generator");
    }

    #[test]
    fn gcs_paths_map_for_any_region_and_version() {
        for p in [
            "gs://dataflow-templates-us-central1/latest/flex/Kafka_to_BigQuery_Flex",
            "gs://dataflow-templates-europe-west1/2024-06-01-00_RC00/flex/Kafka_to_BigQuery_Flex",
            "gs://dataflow-templates/latest/flex/Kafka_to_BigQuery_Flex",
        ] {
            assert_eq!(find_by_gcs_path(p).map(|t| t.name.as_str()), Some("kafka-to-bq"), "{p}");
        }
        assert!(find_by_gcs_path("gs://my-bucket/flex/Kafka_to_BigQuery_Flex").is_none());
        assert!(find_by_gcs_path("gs://dataflow-templates-us-central1/latest/flex/Nope").is_none());
        assert!(find_by_gcs_path("/local/file").is_none());
    }

    #[test]
    fn a_broken_regex_is_reported_with_its_parameter() {
        let yaml = "name: t\ncategory: STREAMING\ndescription: d\nparameters:\n  - name: p\n    label: l\n    helpText: h\n    regexes: ['(']\n";
        let e = parse_template("t.yaml", yaml).unwrap_err().to_string();
        assert!(e.contains("parameter p"), "{e}");
        let e = parse_template("t.yaml", "name: [").unwrap_err().to_string();
        assert!(e.contains("t.yaml"), "{e}");
    }
}
