//! flexrun's built-in pipeline templates, as data.
//!
//! A template is a YAML file beside this crate (`kafka-to-bq.yaml`, ...) in the
//! shape of Google's flex-template metadata: a name, a description and a list of
//! parameters with their label, help text, default, allowed values and
//! validation regexes. The files are compiled into the binary.
//!
//! Layout:
//! - [`metadata`]: the YAML model ([`Template`], [`Parameter`]) and the catalogue
//!   of built-in templates ([`builtin`], [`find`], [`find_by_gcs_path`]).
//! - [`params`]: parsing `--parameters k=v,k=v` the way gcloud does and checking
//!   the values against a template ([`params::validate`]), which yields the
//!   resolved parameters with defaults filled in or a [`ParamError`] that names
//!   the parameter and the expected form.
//!
//! - [`typed`]: each template's parameters as typed methods, generated from its YAML
//!   by `build.rs`; the only way the runner reads a parameter.
//! - [`export`]: the same job as a Dataflow launch of Google's template (gcloud command
//!   and REST body), with local endpoints replaced by placeholders.
//!
//! Nothing here connects to anything: validation happens before a job starts.

pub mod export;
pub mod metadata;
pub mod params;
pub mod typed;

pub use metadata::{builtin, find, find_by_gcs_path, Parameter, Template, TemplateError};
pub use params::{
    invalid_template_parameters, parse_parameter_list, validate, ParamError, ParamErrors, ParameterViolation, Problems,
    ResolvedParams,
};
