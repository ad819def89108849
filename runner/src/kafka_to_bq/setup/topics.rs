//! Several topics in one job (flexrun's extension): which topics a job reads, and the
//! table and dead-letter table each one's records go to. Pure; [`crate::kafka_to_bq::fan_out`] runs
//! one pipeline per topic.
//!
//! - `readBootstrapServerAndTopic=host:port;orders|refunds|returns` reads those topics;
//!   `host:port;/orders-.*/` reads every topic the regular expression matches in full,
//!   including topics created while the job runs.
//! - `outputTableSpec` and `outputDeadletterTable` may name `{topic}`, replaced by the
//!   topic's name (`.` becomes `_`, which BigQuery table names cannot hold);
//!   `topicTableMap=orders:orders_v2|refunds:finance.refunds` names a topic's table
//!   outright (a table in `outputTableSpec`'s dataset, `dataset.table` or
//!   `project:dataset.table`), as Kafka Connect's `topic2TableMap` does.
//!
//! ```
//! use flexrun::kafka_to_bq::setup::topics::{Topics, TopicRoutes};
//! use flexrun::bigquery::TableRef;
//! let t = Topics::parse("/shop[.].*/").unwrap();
//! assert!(t.matches("shop.orders") && !t.matches("xshop.orders"));
//! let r = TopicRoutes::parse(TableRef::parse("p:d.raw_{topic}").unwrap(), None, "shop.refunds:refunds").unwrap();
//! assert_eq!(r.route("shop.orders").0.to_string(), "p:d.raw_shop_orders");
//! assert_eq!(r.route("shop.refunds").0.to_string(), "p:d.refunds");
//! ```

use crate::bigquery::TableRef;
use std::collections::BTreeMap;

/// What `{topic}` in a table spec is replaced by.
pub const TOPIC_PLACEHOLDER: &str = "{topic}";

/// The topics a job reads.
#[derive(Debug, Clone)]
pub enum Topics {
    /// One topic (Google's template).
    One(String),
    /// A list of topics.
    List(Vec<String>),
    /// Every topic whose whole name the expression matches, now and later.
    Pattern(regex::Regex),
}

/// Kafka's rule for topic names: up to 249 of `[a-zA-Z0-9._-]`.
fn valid_topic(t: &str) -> bool {
    !t.is_empty() && t.len() <= 249 && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Topics {
    /// Parse the topic part of `readBootstrapServerAndTopic`.
    pub fn parse(part: &str) -> Result<Topics, String> {
        if let Some(re) = part.strip_prefix('/').and_then(|r| r.strip_suffix('/')) {
            return regex::Regex::new(&format!("^(?:{re})$")).map(Topics::Pattern).map_err(|e| {
                format!("readBootstrapServerAndTopic: topic pattern /{re}/ is not a regular expression: {e}")
            });
        }
        let list: Vec<String> = part.split('|').map(str::trim).map(str::to_string).collect();
        if let Some(bad) = list.iter().find(|t| !valid_topic(t)) {
            return Err(format!("readBootstrapServerAndTopic: {bad:?} is not a topic name (letters, digits, '.', '_' and '-'); several topics are separated by |, a pattern is written /regex/"));
        }
        let mut uniq = list.clone();
        uniq.sort();
        uniq.dedup();
        if uniq.len() != list.len() {
            return Err(format!("readBootstrapServerAndTopic: a topic is named twice in {part:?}"));
        }
        Ok(match list.len() {
            1 => Topics::One(list.into_iter().next().expect("one")),
            _ => Topics::List(list),
        })
    }

    /// Whether the job may read more than one topic.
    pub fn is_several(&self) -> bool {
        !matches!(self, Topics::One(_))
    }

    /// Whether the job reads `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            Topics::One(t) => t == topic,
            Topics::List(ts) => ts.iter().any(|t| t == topic),
            Topics::Pattern(re) => re.is_match(topic),
        }
    }

    /// The topics to read now, given the broker's topics: a list as given (a missing topic
    /// then fails its own pipeline, naming it), a pattern's matches.
    pub fn select(&self, existing: &[String]) -> Vec<String> {
        match self {
            Topics::One(t) => vec![t.clone()],
            Topics::List(ts) => ts.clone(),
            Topics::Pattern(_) => existing.iter().filter(|t| self.matches(t)).cloned().collect(),
        }
    }
}

/// The table (and dead-letter table) of each topic.
#[derive(Debug, Clone)]
pub struct TopicRoutes {
    table: TableRef,
    dlq: Option<TableRef>,
    map: BTreeMap<String, TableRef>,
}

impl TopicRoutes {
    /// Routes from `outputTableSpec` and `outputDeadletterTable` (either may name
    /// `{topic}`) and `topicTableMap` (`topic:table|...`).
    pub fn parse(table: TableRef, dlq: Option<TableRef>, map: &str) -> Result<TopicRoutes, String> {
        let mut m = BTreeMap::new();
        for item in map.split('|').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((topic, spec)) = item.split_once(':') else {
                return Err(format!("topicTableMap: {item:?} is not topic:table"));
            };
            if !valid_topic(topic) {
                return Err(format!("topicTableMap: {topic:?} is not a topic name"));
            }
            let t = match spec.matches(['.', ':']).count() {
                0 => Ok(TableRef { table: spec.to_string(), ..table.clone() }),
                1 if !spec.contains(':') => TableRef::parse(&format!("{}:{spec}", table.project)),
                _ => TableRef::parse(spec),
            }
            .map_err(|e| format!("topicTableMap: {topic}: {e}"))?;
            if m.insert(topic.to_string(), t).is_some() {
                return Err(format!("topicTableMap: topic {topic} is mapped twice"));
            }
        }
        Ok(TopicRoutes { table, dlq, map: m })
    }

    /// The table and dead-letter table of `topic`.
    pub fn route(&self, topic: &str) -> (TableRef, Option<TableRef>) {
        let fill = |t: &TableRef| TableRef {
            table: t.table.replace(TOPIC_PLACEHOLDER, &topic.replace('.', "_")),
            ..t.clone()
        };
        let table = self.map.get(topic).cloned().unwrap_or_else(|| fill(&self.table));
        (table, self.dlq.as_ref().map(fill))
    }

    /// Two of `topics` that write to one table, if any: for a list, two whose routes
    /// meet; for a pattern, the shared `outputTableSpec` (without `{topic}`), or two
    /// topics `topicTableMap` sends to one table.
    ///
    /// ```
    /// use flexrun::kafka_to_bq::setup::topics::{Topics, TopicRoutes};
    /// use flexrun::bigquery::TableRef;
    /// let r = TopicRoutes::parse(TableRef::parse("p:d.{topic}").unwrap(), None, "b:a").unwrap();
    /// let (a, b) = r.shared_table(&Topics::parse("a|b").unwrap()).unwrap();
    /// assert_eq!((a.as_str(), b.as_str()), ("a", "b"));
    /// assert!(r.shared_table(&Topics::parse("a|c").unwrap()).is_none());
    /// ```
    pub fn shared_table(&self, topics: &Topics) -> Option<(String, String)> {
        let list: Vec<String> = match topics {
            Topics::One(_) => return None,
            Topics::List(ts) => ts.clone(),
            Topics::Pattern(_) if !self.per_topic() => {
                return Some(("every topic the pattern matches".into(), self.table.to_string()))
            }
            Topics::Pattern(_) => self.map.keys().cloned().collect(),
        };
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for t in list {
            if let Some(other) = seen.insert(self.route(&t).0.to_string(), t.clone()) {
                return Some((other, t));
            }
        }
        None
    }

    /// Whether every topic gets a table of its own name (`{topic}` in `outputTableSpec`).
    pub fn per_topic(&self) -> bool {
        self.table.table.contains(TOPIC_PLACEHOLDER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_parts_parse_into_one_a_list_or_a_pattern() {
        assert!(matches!(Topics::parse("orders").unwrap(), Topics::One(t) if t == "orders"));
        let l = Topics::parse("a|b.c|d-e").unwrap();
        assert!(l.is_several() && l.matches("b.c") && !l.matches("b"));
        assert_eq!(l.select(&[]), ["a", "b.c", "d-e"]);
        let p = Topics::parse("/ord.*/").unwrap();
        assert_eq!(p.select(&["ord".into(), "orders".into(), "xorders".into()]), ["ord", "orders"]);
        for (bad, want) in [
            ("a||b", "not a topic name"),
            ("a|a", "named twice"),
            ("/(/", "not a regular expression"),
            ("a b", "not a topic name"),
        ] {
            let e = Topics::parse(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn routes_fill_the_topic_and_the_map_wins() {
        let t = TableRef::parse("p:d.in_{topic}").unwrap();
        let dlq = TableRef::parse("p:d.{topic}_dlq").unwrap();
        let r = TopicRoutes::parse(t, Some(dlq), "a:ta|b:other.tb|c:q:e.tc").unwrap();
        let show = |topic: &str| {
            let (t, d) = r.route(topic);
            (t.to_string(), d.map(|d| d.to_string()).unwrap_or_default())
        };
        assert_eq!(show("x.y"), ("p:d.in_x_y".into(), "p:d.x_y_dlq".into()));
        assert_eq!(show("a").0, "p:d.ta");
        assert_eq!(show("b").0, "p:other.tb");
        assert_eq!(show("c").0, "q:e.tc");
        assert!(r.per_topic());
        for (bad, want) in [("a", "is not topic:table"), ("a:t|a:u", "mapped twice"), ("a:x:y", "topicTableMap: a")] {
            let e = TopicRoutes::parse(TableRef::parse("p:d.t").unwrap(), None, bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
