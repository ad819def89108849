//! Typed parameters, generated from the template YAML files by `build.rs`: for each
//! template a module with a `Name` enum of its parameters and a `Params` view whose
//! methods read each one as the YAML types it (a flag, a value the template always has,
//! or an optional value), defaults included. Code reads parameters only through these,
//! so a misspelt name fails to compile and a default lives only in the YAML
//! (`scripts/check_structure.py` refuses a read by string name anywhere else).
//!
//! ```
//! use flexrun_templates::{find, parse_parameter_list, typed::kafka_to_bq, validate};
//! let pairs = parse_parameter_list("readBootstrapServerAndTopic=h:9092;t,outputTableSpec=p:d.t,kafkaReadAuthenticationMode=NONE,messageFormat=JSON").unwrap();
//! let resolved = validate(find("kafka-to-bq").unwrap(), &pairs).unwrap();
//! let p = kafka_to_bq::Params(&resolved);
//! assert_eq!(p.message_format(), "JSON");
//! assert_eq!(p.storage_write_api_triggering_frequency_sec(), "5", "the YAML's default");
//! assert!(!p.use_storage_write_api_at_least_once());
//! assert_eq!(p.output_deadletter_table(), None);
//! ```

#![allow(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/typed.rs"));
