//! Generates the typed parameter readers (`src/typed.rs` includes the output): for each
//! template YAML, a `Name` enum of its parameters and a `Params` view over the resolved
//! values with one method per parameter, typed by the YAML (a boolean, a value the
//! template always has, or an optional value). A misspelt parameter is then a compile
//! error, and a default is written only in the YAML. A parameter with `enumOptions`
//! reads as a Rust enum of those options, so a value the code forgot is a compile error
//! in its `match`. `kafka_source` holds the parameters every Kafka-reading template
//! shares, for the code they share (an enum there has every template's options).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

const TEMPLATES: &[(&str, &str)] = &[
    ("kafka_to_bq", "kafka-to-bq.yaml"),
    ("kafka_to_gcs", "kafka-to-gcs.yaml"),
    ("kafka_to_kafka", "kafka-to-kafka.yaml"),
    ("rate_to_stats", "rate-to-stats.yaml"),
    ("streaming_data_generator", "streaming-data-generator.yaml"),
];

/// The templates whose shared parameters make `kafka_source`.
const KAFKA_SOURCES: &[&str] = &["kafka_to_bq", "kafka_to_gcs"];

#[derive(Clone, PartialEq)]
enum Kind {
    Flag { default: bool },
    Always { default: String },
    Optional,
}

#[derive(Clone, PartialEq)]
struct Param {
    name: String,
    label: String,
    kind: Kind,
    /// `enumOptions` in the YAML's order (none for a true/false parameter).
    options: Vec<String>,
}

fn options_of(p: &serde_yaml::Value, kind: &Kind) -> Vec<String> {
    if matches!(kind, Kind::Flag { .. }) {
        return Vec::new();
    }
    let text = |x: &serde_yaml::Value| {
        x.as_str().expect("enumOptions are strings: quote a YAML keyword such as \"NULL\"").to_string()
    };
    let list: Vec<String> =
        p.get("enumOptions").and_then(|v| v.as_sequence()).map(|s| s.iter().map(text).collect()).unwrap_or_default();
    if let Kind::Always { default } = kind {
        assert!(list.is_empty() || list.contains(default), "default {default:?} is not one of {list:?}");
    }
    list
}

/// An option's Rust name: `AVRO_BINARY_ENCODING` is `AvroBinaryEncoding`, `read_committed` is `ReadCommitted`.
fn variant(option: &str) -> String {
    option
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|s| !s.is_empty())
        .map(|s| {
            let lower = s.to_ascii_lowercase();
            lower[..1].to_ascii_uppercase() + &lower[1..]
        })
        .collect()
}

fn kind_of(p: &serde_yaml::Value) -> Kind {
    let text = |k: &str| p.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let list = |k: &str| -> Vec<String> {
        p.get(k)
            .and_then(|v| v.as_sequence())
            .map(|s| s.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let default = text("defaultValue").unwrap_or_default();
    let mut options = list("enumOptions");
    options.sort();
    let boolean = options == ["false", "true"] || list("regexes").iter().any(|r| r == "^(true|false)$");
    let required = p.get("isOptional").and_then(|v| v.as_bool()) == Some(false);
    match (boolean, default.is_empty(), required) {
        (true, _, _) => Kind::Flag { default: default == "true" },
        (false, false, _) | (false, true, true) => Kind::Always { default },
        (false, true, false) => Kind::Optional,
    }
}

fn params_of(path: &Path) -> Vec<Param> {
    let text = std::fs::read_to_string(path).expect("template YAML");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("template YAML parses");
    let list = doc.get("parameters").and_then(|v| v.as_sequence()).cloned().unwrap_or_default();
    list.iter()
        .map(|p| {
            let kind = kind_of(p);
            Param {
                name: p["name"].as_str().expect("a parameter's name").to_string(),
                label: p.get("label").and_then(|v| v.as_str()).unwrap_or_default().to_string(),
                options: options_of(p, &kind),
                kind,
            }
        })
        .collect()
}

fn snake(name: &str) -> String {
    let mut out = String::new();
    let mut lower_before = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && lower_before {
            out.push('_');
        }
        lower_before = c.is_ascii_lowercase() || c.is_ascii_digit();
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn pascal(name: &str) -> String {
    let mut s = name.to_string();
    s[..1].make_ascii_uppercase();
    s
}

/// The enum of a parameter's options, with its spelling both ways.
fn value_enum(out: &mut String, p: &Param) {
    let ty = pascal(&p.name);
    let _ = writeln!(
        out,
        "    /// The values of `{}`.\n    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\n    pub enum {ty} {{",
        p.name
    );
    for o in &p.options {
        let _ = writeln!(out, "        /// `{o}`.\n        {},", variant(o));
    }
    let _ = writeln!(out, "    }}\n\n    impl {ty} {{\n        /// Every value, in the YAML's order.\n        pub const ALL: &'static [{ty}] = &[{}];\n", p.options.iter().map(|o| format!("{ty}::{}", variant(o))).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "        /// The value as the template's YAML spells it.\n        pub fn as_str(self) -> &'static str {{\n            match self {{");
    for o in &p.options {
        let _ = writeln!(out, "                {ty}::{} => {o:?},", variant(o));
    }
    let _ = writeln!(out, "            }}\n        }}\n\n        /// The value spelt `s`, if the template has it.\n        pub fn parse(s: &str) -> Option<{ty}> {{\n            Self::ALL.iter().copied().find(|v| v.as_str() == s)\n        }}\n    }}\n");
    let _ = writeln!(out, "    impl std::fmt::Display for {ty} {{\n        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n            f.write_str(self.as_str())\n        }}\n    }}\n");
}

/// The reader of one parameter: its signature and body.
fn reader(p: &Param) -> String {
    let (name, f, ty) = (&p.name, snake(&p.name), pascal(&p.name));
    let read = |s: &str| format!("{ty}::parse({s}).expect(\"validated against the template's enumOptions\")");
    match (&p.kind, p.options.is_empty()) {
        (Kind::Flag { default: false }, _) => {
            format!("pub fn {f}(&self) -> bool {{\n            self.0.flag({name:?})\n        }}")
        }
        (Kind::Flag { default: true }, _) => {
            format!("pub fn {f}(&self) -> bool {{\n            self.0.get({name:?}) != Some(\"false\")\n        }}")
        }
        (Kind::Always { default }, true) => format!(
            "pub fn {f}(&self) -> &'a str {{\n            self.0.get({name:?}).unwrap_or({default:?})\n        }}"
        ),
        (Kind::Always { default }, false) => format!(
            "pub fn {f}(&self) -> {ty} {{\n            self.0.get({name:?}).map_or({ty}::{}, |v| {})\n        }}",
            variant(default),
            read("v")
        ),
        (Kind::Optional, true) => {
            format!("pub fn {f}(&self) -> Option<&'a str> {{\n            self.0.get({name:?})\n        }}")
        }
        (Kind::Optional, false) => {
            format!(
                "pub fn {f}(&self) -> Option<{ty}> {{\n            self.0.get({name:?}).map(|v| {})\n        }}",
                read("v")
            )
        }
    }
}

fn module(out: &mut String, module: &str, what: &str, params: &[Param]) {
    let _ = writeln!(out, "/// {what}\npub mod {module} {{\n    use crate::{{ParamError, ResolvedParams}};\n");
    let _ = writeln!(
        out,
        "    /// Every parameter's name.\n    #[derive(Debug, Clone, Copy, PartialEq, Eq)]\n    pub enum Name {{"
    );
    for p in params {
        let _ = writeln!(out, "        /// `{}`.\n        {},", p.name, pascal(&p.name));
    }
    let _ = writeln!(out, "    }}\n\n    impl Name {{\n        /// The name as the template's YAML spells it.\n        pub fn as_str(self) -> &'static str {{\n            match self {{");
    for p in params {
        let _ = writeln!(out, "                Name::{} => {:?},", pascal(&p.name), p.name);
    }
    let _ = writeln!(out, "            }}\n        }}\n    }}\n");
    for p in params.iter().filter(|p| !p.options.is_empty()) {
        value_enum(out, p);
    }
    let _ = writeln!(out, "    /// Typed reads of validated parameters.\n    #[derive(Debug, Clone, Copy)]\n    pub struct Params<'a>(pub &'a ResolvedParams);\n\n    impl<'a> Params<'a> {{");
    for p in params {
        let doc = format!("        /// `{}`: {}.", p.name, p.label.replace('`', "'"));
        let _ = writeln!(out, "{doc}\n        {}\n", reader(p));
    }
    let _ = writeln!(out, "        /// Whether the user set `name` (rather than its default).\n        pub fn was_given(&self, name: Name) -> bool {{\n            self.0.was_given(name.as_str())\n        }}\n");
    let _ = writeln!(out, "        /// Whether the template these values were validated against has `name`.\n        pub fn defines(&self, name: Name) -> bool {{\n            self.0.defines(name.as_str())\n        }}\n");
    let _ = writeln!(out, "        /// `name` parsed as `T` (None when neither given nor defaulted), or an error naming\n        /// the parameter, its value and `expected`.\n        pub fn parsed<T: std::str::FromStr>(&self, name: Name, expected: &str) -> Result<Option<T>, ParamError> {{\n            self.0.parsed(name.as_str(), expected)\n        }}\n    }}\n}}\n");
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = String::new();
    let mut by: BTreeMap<&str, Vec<Param>> = BTreeMap::new();
    for (m, file) in TEMPLATES {
        println!("cargo:rerun-if-changed={file}");
        let params = params_of(&dir.join(file));
        module(&mut out, m, &format!("The parameters of template `{file}`, as its YAML defines them."), &params);
        by.insert(m, params);
    }
    let first = &by[KAFKA_SOURCES[0]];
    // Alike: the same name, read the same way with the same default (labels may differ).
    // An enum's shared type has every template's options, so any validated value parses.
    let alike = |p: &Param, t: &str| by[t].iter().any(|q| q.name == p.name && q.kind == p.kind);
    let mut shared: Vec<Param> =
        first.iter().filter(|p| KAFKA_SOURCES[1..].iter().all(|t| alike(p, t))).cloned().collect();
    for p in shared.iter_mut().filter(|p| !p.options.is_empty()) {
        for t in &KAFKA_SOURCES[1..] {
            let q = by[t].iter().find(|q| q.name == p.name).expect("alike");
            for o in &q.options {
                if !p.options.contains(o) {
                    p.options.push(o.clone());
                }
            }
        }
    }
    module(
        &mut out,
        "kafka_source",
        "The parameters every Kafka-reading template (kafka-to-bq, kafka-to-gcs) has alike.",
        &shared,
    );
    let path = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("typed.rs");
    std::fs::write(path, out).expect("writing typed.rs");
}
