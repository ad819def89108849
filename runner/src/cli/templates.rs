//! `flexrun templates list | describe NAME`.

use super::flags::Format;
use crate::usage;
use anyhow::Result;
use clap::Subcommand;
use flexrun_templates::{find, Template};

/// `flexrun templates ...`
#[derive(Debug, Subcommand)]
pub enum TemplatesAction {
    /// One line per template.
    List,
    /// A template's description and parameters.
    Describe {
        /// Template name (or Google's id).
        name: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

/// The error for a template name flexrun does not know, listing the ones it does.
pub fn unknown_template(name: &str) -> anyhow::Error {
    let names: Vec<_> = flexrun_templates::builtin().iter().map(|t| t.name.as_str()).collect();
    usage(format!("unknown template {name:?}; built-in templates: {}", names.join(", ")))
}

/// List or describe templates.
pub fn run(action: TemplatesAction) -> Result<()> {
    match action {
        TemplatesAction::List => {
            for t in flexrun_templates::builtin() {
                let first = t.description.split(". ").next().unwrap_or_default();
                println!("{:<28} {:<10} {}", t.name, t.category, first);
            }
        }
        TemplatesAction::Describe { name, format } => {
            let t = find(&name).ok_or_else(|| unknown_template(&name))?;
            match format {
                Format::Json => println!("{}", serde_json::to_string_pretty(t)?),
                Format::Yaml => print!("{}", serde_yaml::to_string(t)?),
                Format::Table => describe(t),
            }
        }
    }
    Ok(())
}

fn describe(t: &Template) {
    println!("{} ({})", t.name, t.google_template_id.as_deref().unwrap_or("flexrun only"));
    if let Some(p) = &t.gcs_path {
        println!("gcloud path: {p}");
    }
    println!("{}\n", t.description);
    println!("{:<40} {:<9} {:<28} help", "parameter", "required", "default");
    for p in &t.parameters {
        let mut help = match &p.unsupported {
            Some(why) => format!("[not supported: {why}] {}", p.help_text),
            None => p.help_text.clone(),
        };
        if p.flexrun_only {
            help = format!("[flexrun only: export leaves it out] {help}");
        }
        if !p.enum_options.is_empty() {
            help.push_str(&format!(" [{}]", p.enum_options.join("|")));
        }
        println!(
            "{:<40} {:<9} {:<28} {}",
            p.name,
            if p.is_optional { "no" } else { "yes" },
            p.default_value.as_deref().unwrap_or("-"),
            help
        );
    }
}
