//! Topic creation, for the local stack helpers, the tests and the demo.

use super::connection::Connection;
use super::KafkaError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use std::time::Duration;

/// Create a topic with `partitions` partitions; an existing topic is fine.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), KafkaError> {
    let err = |message: String| KafkaError::Broker { bootstrap: bootstrap.into(), topic: topic.into(), message };
    let admin: AdminClient<DefaultClientContext> = Connection::plaintext(bootstrap).client("an admin client", &[])?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let res = admin
        .create_topics(&[new], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))))
        .await
        .map_err(|e| err(e.to_string()))?;
    for r in res {
        match r {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(err(format!("create topic: {code:?}"))),
        }
    }
    Ok(())
}
