//! Typed parameters, generated from the template YAML files by `build.rs`: for each
//! template a module with a `Name` enum of its parameters and a `Params` view whose
//! methods read each one as the YAML types it (a flag, an enum of its `enumOptions`, a
//! value the template always has, or an optional value), defaults included. Code reads parameters only through these,
//! so a misspelt name fails to compile and a default lives only in the YAML
//! (`scripts/check_structure.py` refuses a read by string name anywhere else).
//!
//! ```
//! use flexrun_templates::{find, parse_parameter_list, typed::kafka_to_bq, validate};
//! use kafka_to_bq::{MessageFormat, WriteDisposition};
//! let pairs = parse_parameter_list("readBootstrapServerAndTopic=h:9092;t,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,messageFormat=JSON").unwrap();
//! let resolved = validate(find("kafka-to-bq").unwrap(), &pairs).unwrap();
//! let p = kafka_to_bq::Params(&resolved);
//! assert_eq!(p.message_format(), MessageFormat::Json);
//! assert_eq!(p.write_disposition(), WriteDisposition::WriteAppend, "the YAML's default");
//! assert_eq!(p.storage_write_api_triggering_frequency_sec(), "5", "the YAML's default");
//! assert!(!p.use_storage_write_api_at_least_once());
//! assert_eq!(p.output_deadletter_table(), None);
//! ```

#![allow(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/typed.rs"));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::find;

    /// A generated enum's values, spelt as the YAML spells them.
    fn spelt<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> Vec<&'static str> {
        all.iter().map(|v| as_str(*v)).collect()
    }

    fn yaml_options(template: &str, name: &str) -> Vec<String> {
        let t = find(template).unwrap();
        t.parameters.iter().find(|p| p.name == name).unwrap().enum_options.clone()
    }

    #[test]
    fn each_enum_has_exactly_the_yaml_options_and_reads_them_back() {
        use kafka_to_bq::{MessageFormat, TablePartitioning};
        assert_eq!(spelt(MessageFormat::ALL, MessageFormat::as_str), yaml_options("kafka-to-bq", "messageFormat"));
        assert_eq!(
            spelt(TablePartitioning::ALL, TablePartitioning::as_str),
            yaml_options("kafka-to-bq", "tablePartitioning")
        );
        use streaming_data_generator::SinkType;
        assert_eq!(spelt(SinkType::ALL, SinkType::as_str), yaml_options("streaming-data-generator", "sinkType"));
        assert_eq!(SinkType::parse("NULL"), Some(SinkType::Null), "a YAML keyword kept as the word");
        assert_eq!(MessageFormat::parse("json"), None, "spelt exactly as the YAML spells it");
    }

    #[test]
    fn a_shared_enum_holds_every_kafka_template_option() {
        use kafka_source::MessageFormat;
        let shared = spelt(MessageFormat::ALL, MessageFormat::as_str);
        for t in ["kafka-to-bq", "kafka-to-gcs"] {
            for o in yaml_options(t, "messageFormat") {
                assert!(shared.contains(&o.as_str()), "{t}'s messageFormat {o} is missing from {shared:?}");
            }
        }
    }
}
