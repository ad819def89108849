//! `--parameters` parsing (gcloud's dictionary syntax) and validation against a template.

use crate::metadata::Template;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Dataflow pipeline options that Google's tooling also accepts inside `--parameters`
/// (its own load tests pass them this way). They are not template parameters; they are
/// returned separately so the caller can apply or report them.
pub const PIPELINE_OPTIONS: &[&str] = &[
    "numWorkers",
    "maxNumWorkers",
    "autoscalingAlgorithm",
    "workerMachineType",
    "experiments",
    "enableStreamingEngine",
    "diskSizeGb",
    "region",
    "project",
    "stagingLocation",
    "tempLocation",
];

/// A problem with the parameters, naming the parameter and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// The `--parameters` text is not `name=value[,name=value...]`.
    #[error("malformed --parameters entry {entry:?}: expected name=value (use ^;^ as a prefix to split on ';' instead of ',')")]
    Malformed {
        /// The offending piece of text.
        entry: String,
    },
    /// The same parameter twice.
    #[error("parameter {name} is given more than once")]
    Duplicate {
        /// The parameter.
        name: String,
    },
    /// A required parameter is missing.
    #[error("missing required parameter {name}: {help}")]
    Missing {
        /// The parameter.
        name: String,
        /// Its help text, which says what it takes.
        help: String,
    },
    /// A name that the template does not have.
    #[error("unknown parameter {name} for template {template}{}", suggestion.as_ref().map(|s| format!("; did you mean {s}?")).unwrap_or_default())]
    Unknown {
        /// The unknown name.
        name: String,
        /// The template.
        template: String,
        /// The nearest valid name, if one is close.
        suggestion: Option<String>,
    },
    /// A parameter of Google's that flexrun does not run yet.
    #[error("parameter {name} is not supported by flexrun yet: {why}")]
    Unsupported {
        /// The parameter.
        name: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// A value outside the allowed set or not matching the regex.
    #[error("invalid value {value:?} for parameter {name}: expected {expected}")]
    Invalid {
        /// The parameter.
        name: String,
        /// The value given.
        value: String,
        /// What the template accepts.
        expected: String,
    },
    /// A combination of values that cannot work together.
    #[error("{0}")]
    Conflict(String),
    /// A launch rule of the template (what Google's pipeline checks when it starts,
    /// or a limit of flexrun's), found while the parameters are read into the
    /// template's typed configuration. The message names the parameter and the fix.
    #[error("{0}")]
    Launch(String),
}

impl From<String> for ParamError {
    /// A launch-rule message ([`ParamError::Launch`]).
    fn from(message: String) -> ParamError {
        ParamError::Launch(message)
    }
}

impl From<&str> for ParamError {
    /// A launch-rule message ([`ParamError::Launch`]).
    fn from(message: &str) -> ParamError {
        ParamError::Launch(message.to_string())
    }
}

/// All the problems found in one set of parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamErrors(pub Vec<ParamError>);

impl fmt::Display for ParamErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ParamErrors {}

/// The problems found while one template's parameters are read into its typed
/// configuration: every problem is collected, so a launch reports them all at once.
///
/// ```
/// use flexrun_templates::{ParamError, Problems};
/// let mut problems = Problems::default();
/// problems.push("windowDuration=7x: expected a duration such as 5m");
/// problems.push(ParamError::Invalid { name: "qps".into(), value: "-1".into(), expected: "above 0".into() });
/// let errors = problems.into_result().unwrap_err();
/// assert_eq!(errors.0.len(), 2);
/// assert!(errors.to_string().contains("windowDuration=7x"));
/// ```
#[derive(Debug, Default)]
pub struct Problems(Vec<ParamError>);

impl Problems {
    /// Record a problem: a [`ParamError`], or a launch-rule message naming its parameter.
    pub fn push(&mut self, problem: impl Into<ParamError>) {
        self.0.push(problem.into());
    }

    /// Whether nothing was found wrong so far.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(())` when nothing was found wrong, else every problem.
    pub fn into_result(self) -> Result<(), ParamErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ParamErrors(self.0))
        }
    }
}

impl ParamError {
    /// The parameter the error is about (None for a malformed list).
    pub fn parameter(&self) -> Option<&str> {
        match self {
            ParamError::Malformed { .. } | ParamError::Conflict(_) | ParamError::Launch(_) => None,
            ParamError::Duplicate { name }
            | ParamError::Missing { name, .. }
            | ParamError::Unknown { name, .. }
            | ParamError::Unsupported { name, .. }
            | ParamError::Invalid { name, .. } => Some(name),
        }
    }
}

/// One entry of Dataflow's `InvalidTemplateParameters.parameterViolations`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ParameterViolation {
    /// The parameter ("" when the problem is not about one parameter).
    pub parameter: String,
    /// What is wrong and what is expected.
    pub description: String,
}

impl ParameterViolation {
    /// A violation for a launch-rule message: the parameter is the template parameter
    /// the message names first.
    pub fn from_message(template: &crate::Template, message: &str) -> ParameterViolation {
        let parameter = template
            .parameters
            .iter()
            .filter_map(|p| message.find(p.name.as_str()).map(|at| (at, std::cmp::Reverse(p.name.len()), &p.name)))
            .min()
            .map(|(_, _, n)| n.clone())
            .unwrap_or_default();
        ParameterViolation { parameter, description: message.to_string() }
    }

    /// The violation for one problem: its own parameter where it names one, else the
    /// template parameter its message names first.
    pub fn from_error(template: &crate::Template, e: &ParamError) -> ParameterViolation {
        match e.parameter() {
            Some(name) => ParameterViolation { parameter: name.to_string(), description: e.to_string() },
            None => ParameterViolation::from_message(template, &e.to_string()),
        }
    }
}

/// The error Dataflow's API returns for bad template parameters (HTTP 400,
/// `google.dataflow.v1beta3.InvalidTemplateParameters` in `error.details`).
pub fn invalid_template_parameters(violations: &[ParameterViolation]) -> serde_json::Value {
    serde_json::json!({
        "error": {
            "code": 400,
            "message": "The template parameters are invalid.",
            "status": "INVALID_ARGUMENT",
            "details": [{
                "@type": "type.googleapis.com/google.dataflow.v1beta3.InvalidTemplateParameters",
                "parameterViolations": violations,
            }],
        }
    })
}

/// Parameters after validation: every template parameter that was given or has a
/// default, plus the pipeline options found among them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResolvedParams {
    /// Template parameters by name (defaults filled in).
    pub values: BTreeMap<String, String>,
    /// Names the user actually gave (as opposed to defaults).
    pub given: Vec<String>,
    /// Dataflow pipeline options passed inside `--parameters`.
    pub pipeline_options: BTreeMap<String, String>,
    /// Every parameter name the template's YAML defines (filled by [`validate`]).
    pub known: BTreeSet<String>,
}

impl ResolvedParams {
    /// The value of a parameter, if given or defaulted.
    ///
    /// # Panics
    /// When `name` is not a parameter of the template these values were validated
    /// against: the code would read a name that no user can set, and the YAML's
    /// default would never apply. That is a bug in flexrun, and every test that
    /// launches a template finds it on the path it runs.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.check_known(name);
        self.values.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    fn check_known(&self, name: &str) {
        assert!(
            self.known.is_empty() || self.known.contains(name) || PIPELINE_OPTIONS.contains(&name),
            "flexrun reads parameter {name:?}, which the template's YAML does not define"
        );
    }

    /// A parameter parsed as `T`, with the template's default filled in (so a default
    /// is written once, in the YAML): `Ok(None)` when neither given nor defaulted, or
    /// [`ParamError::Invalid`] naming the parameter, its value and `expected`.
    ///
    /// ```
    /// use flexrun_templates::{find, parse_parameter_list, validate};
    /// let t = find("kafka-to-bq").unwrap();
    /// let pairs = parse_parameter_list("readBootstrapServerAndTopic=h:9092;t,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,messageFormat=JSON").unwrap();
    /// let p = validate(t, &pairs).unwrap();
    /// let f: Option<f64> = p.parsed("storageWriteApiTriggeringFrequencySec", "seconds").unwrap();
    /// assert_eq!(f, Some(5.0), "the YAML's default");
    /// ```
    pub fn parsed<T: std::str::FromStr>(&self, name: &str, expected: &str) -> Result<Option<T>, ParamError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| ParamError::Invalid {
                name: name.to_string(),
                value: v.to_string(),
                expected: expected.to_string(),
            }),
        }
    }

    /// A boolean parameter (validated as `true|false` by the template's regex).
    pub fn flag(&self, name: &str) -> bool {
        self.get(name) == Some("true")
    }

    /// Whether the template defines `name` (code shared between templates asks this
    /// before it reads a parameter only some of them have).
    pub fn defines(&self, name: &str) -> bool {
        self.known.is_empty() || self.known.contains(name)
    }

    /// Whether the user set this parameter explicitly.
    pub fn was_given(&self, name: &str) -> bool {
        self.check_known(name);
        self.given.iter().any(|g| g == name)
    }
}

/// Split one `--parameters` value the way gcloud does: `k=v,k=v`, or with a custom
/// delimiter `^;^k=v;k=v`. Surrounding quotes on a value (`k="a;b"`) are removed.
pub fn parse_parameter_list(text: &str) -> Result<Vec<(String, String)>, ParamError> {
    let (delim, body) = match text.strip_prefix('^').and_then(|r| r.split_once('^')) {
        Some((d, rest)) if !d.is_empty() => (d.to_string(), rest),
        _ => (",".to_string(), text),
    };
    let mut out = Vec::new();
    for entry in body.split(delim.as_str()) {
        if entry.trim().is_empty() {
            continue;
        }
        let (k, v) = entry.split_once('=').ok_or_else(|| ParamError::Malformed { entry: entry.to_string() })?;
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(ParamError::Malformed { entry: entry.to_string() });
        }
        out.push((k.to_string(), unquote(v.trim()).to_string()));
    }
    Ok(out)
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let lower = name.to_lowercase();
    candidates
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_string())
}

/// Check `pairs` against the template: unknown names (with the nearest valid name),
/// duplicates, values outside `enumOptions` or not matching `regexes`, and missing
/// required parameters. Returns every problem found, not just the first.
pub fn validate(template: &Template, pairs: &[(String, String)]) -> Result<ResolvedParams, ParamErrors> {
    let mut errors = Vec::new();
    let mut out = ResolvedParams {
        known: template.parameters.iter().map(|p| p.name.clone()).collect(),
        ..ResolvedParams::default()
    };
    for (name, value) in pairs {
        if out.given.contains(name) || out.pipeline_options.contains_key(name) {
            errors.push(ParamError::Duplicate { name: name.clone() });
            continue;
        }
        if PIPELINE_OPTIONS.contains(&name.as_str()) {
            out.pipeline_options.insert(name.clone(), value.clone());
            continue;
        }
        let Some(p) = template.parameter(name) else {
            let names = template.parameters.iter().map(|p| p.name.as_str()).chain(PIPELINE_OPTIONS.iter().copied());
            errors.push(ParamError::Unknown {
                name: name.clone(),
                template: template.name.clone(),
                suggestion: nearest(name, names),
            });
            continue;
        };
        if let Some(why) = &p.unsupported {
            if !value.is_empty() && Some(value) != p.default_value.as_ref() {
                errors.push(ParamError::Unsupported { name: name.clone(), why: why.clone() });
                continue;
            }
        }
        if !p.enum_options.is_empty() && !p.enum_options.iter().any(|o| o == value) {
            errors.push(ParamError::Invalid {
                name: name.clone(),
                value: value.clone(),
                expected: format!("one of {}", p.enum_options.join(", ")),
            });
            continue;
        }
        let mut ok = true;
        for r in &p.regexes {
            // Built-in regexes are checked by the metadata tests, a template file's by
            // `parse_template` as it loads.
            let re = regex::Regex::new(r).expect("template regexes are checked before use");
            if !re.is_match(value) {
                errors.push(ParamError::Invalid {
                    name: name.clone(),
                    value: value.clone(),
                    expected: format!("{} (pattern {r})", p.help_text),
                });
                ok = false;
                break;
            }
        }
        if ok {
            out.given.push(name.clone());
            out.values.insert(name.clone(), value.clone());
        }
    }
    for p in &template.parameters {
        if out.values.contains_key(&p.name) {
            continue;
        }
        match (&p.default_value, p.is_optional) {
            (Some(d), _) => {
                out.values.insert(p.name.clone(), d.clone());
            }
            (None, false)
                if !errors.iter().any(|e| matches!(e, ParamError::Invalid { name, .. } if name == &p.name)) =>
            {
                errors.push(ParamError::Missing { name: p.name.clone(), help: p.help_text.clone() })
            }
            _ => {}
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(ParamErrors(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::find;

    fn k2bq() -> &'static Template {
        find("kafka-to-bq").unwrap()
    }

    fn pairs(s: &str) -> Vec<(String, String)> {
        parse_parameter_list(s).unwrap()
    }

    #[test]
    fn parses_gcloud_syntax_with_quotes_and_custom_delimiters() {
        assert_eq!(
            pairs("readBootstrapServerAndTopic=\"h:1;t\",messageFormat=JSON"),
            vec![("readBootstrapServerAndTopic".into(), "h:1;t".into()), ("messageFormat".into(), "JSON".into())]
        );
        assert_eq!(pairs("^~^a=h:1,h:2;t~b=c"), vec![("a".into(), "h:1,h:2;t".into()), ("b".into(), "c".into())]);
        assert_eq!(pairs("a=x=y"), vec![("a".into(), "x=y".into())]);
        assert!(matches!(parse_parameter_list("novalue"), Err(ParamError::Malformed { .. })));
        assert!(matches!(parse_parameter_list("=v"), Err(ParamError::Malformed { .. })));
    }

    #[test]
    fn defaults_fill_in_and_required_are_enforced() {
        let r = validate(k2bq(), &pairs("readBootstrapServerAndTopic=h:9092;t,messageFormat=JSON")).unwrap();
        assert_eq!(r.get("kafkaReadOffset"), Some("latest"));
        assert_eq!(r.get("storageWriteApiTriggeringFrequencySec"), Some("5"));
        assert!(r.was_given("messageFormat"));
        assert!(!r.was_given("kafkaReadOffset"));
        let e = validate(k2bq(), &pairs("messageFormat=JSON")).unwrap_err();
        assert!(matches!(&e.0[0], ParamError::Missing { name, .. } if name == "readBootstrapServerAndTopic"), "{e}");
    }

    #[test]
    fn unknown_names_get_a_suggestion() {
        let e = validate(k2bq(), &pairs("readBootstrapServerAndTopic=h:1;t,outputTablespec=p:d.t")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown parameter outputTablespec for template kafka-to-bq; did you mean outputTableSpec?"
        );
        let e = validate(k2bq(), &pairs("readBootstrapServerAndTopic=h:1;t,zzz=1")).unwrap_err();
        assert_eq!(e.to_string(), "unknown parameter zzz for template kafka-to-bq");
    }

    #[test]
    fn bad_values_name_the_expected_form() {
        let e = validate(k2bq(), &pairs("readBootstrapServerAndTopic=nohostport,messageFormat=XML,useBigQueryDLQ=yes"))
            .unwrap_err();
        let s = e.to_string();
        assert_eq!(e.0.len(), 3, "{s}");
        assert!(
            s.contains("invalid value \"nohostport\" for parameter readBootstrapServerAndTopic: expected `host:port"),
            "{s}"
        );
        assert!(
            s.contains(
                "parameter messageFormat: expected one of AVRO_CONFLUENT_WIRE_FORMAT, AVRO_BINARY_ENCODING, JSON"
            ),
            "{s}"
        );
        assert!(s.contains("useBigQueryDLQ"), "{s}");
        assert!(
            !s.contains("missing required parameter readBootstrapServerAndTopic"),
            "an invalid value is not also missing: {s}"
        );
    }

    #[test]
    fn duplicates_and_pipeline_options() {
        let e = validate(k2bq(), &pairs("readBootstrapServerAndTopic=h:1;t,readBootstrapServerAndTopic=h:2;t"))
            .unwrap_err();
        assert!(matches!(&e.0[0], ParamError::Duplicate { .. }));
        let r = validate(k2bq(), &pairs("readBootstrapServerAndTopic=h:1;t,maxNumWorkers=10")).unwrap();
        assert_eq!(r.pipeline_options.get("maxNumWorkers").map(String::as_str), Some("10"));
        assert!(r.get("maxNumWorkers").is_none());
    }

    #[test]
    #[should_panic(expected = "which the template's YAML does not define")]
    fn reading_a_name_the_yaml_lacks_is_a_bug_that_panics() {
        let r = validate(k2bq(), &pairs("readBootstrapServerAndTopic=h:1;t")).unwrap();
        assert_eq!(r.get("outputTableSpec"), None, "a known name reads");
        let _ = r.get("outputTableSpc");
    }

    #[test]
    fn launch_problems_are_collected_and_keep_their_parameter() {
        let mut p = Problems::default();
        assert!(p.is_empty());
        p.push("useBigQueryDLQ=true requires outputDeadletterTable");
        p.push(ParamError::Invalid { name: "qps".into(), value: "x".into(), expected: "a number".into() });
        let e = p.into_result().unwrap_err();
        let v: Vec<_> = e.0.iter().map(|e| ParameterViolation::from_error(k2bq(), e)).collect();
        assert_eq!(v[0].parameter, "useBigQueryDLQ");
        assert_eq!(v[1].parameter, "qps");
        assert!(Problems::default().into_result().is_ok());
    }

    #[test]
    fn table_specs_accept_colon_and_dot_forms() {
        for ok in ["p:d.t", "p.d.t", "my-proj:ds_1.tbl"] {
            assert!(
                validate(k2bq(), &pairs(&format!("readBootstrapServerAndTopic=h:1;t,outputTableSpec={ok}"))).is_ok(),
                "{ok}"
            );
        }
        for bad in ["d.t", "p:d", "p:d.t.x"] {
            assert!(
                validate(k2bq(), &pairs(&format!("readBootstrapServerAndTopic=h:1;t,outputTableSpec={bad}"))).is_err(),
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        /// Any text as `--parameters`: parsed pairs or an error that says what is wrong,
        /// and validation of whatever parsed never panics either.
        #[test]
        fn arbitrary_parameter_text_parses_or_says_why(text in "[\\^,=;:a-zA-Z0-9 _./-]{0,80}") {
            match parse_parameter_list(&text) {
                Ok(pairs) => {
                    if let Err(errs) = validate(k2bq(), &pairs) {
                        proptest::prop_assert!(!errs.to_string().is_empty());
                    }
                }
                Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
            }
        }
    }
}
