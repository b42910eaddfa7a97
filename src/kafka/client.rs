//! librdkafka settings for each role eosflow plays, built from the one [`KafkaConfig`].

use std::time::Duration;

use rdkafka::config::ClientConfig;

use crate::config::KafkaConfig;

/// Which client is being built: each role fixes the settings its guarantees depend on.
#[derive(Debug, Clone)]
pub enum ClientRole<'a> {
    /// Group member reading inputs: `read_committed`, no auto-commit, range assignor.
    GroupConsumer {
        /// `group.id`.
        group: &'a str,
        /// `session.timeout.ms`.
        session_timeout: Duration,
        /// `group.instance.id` (static membership) when set.
        instance: Option<&'a str>,
    },
    /// Manually assigned reader (changelog restore, verifier): `read_committed`, no group commits.
    Reader,
    /// Producer whose writes commit atomically with input offsets.
    Transactional {
        /// `transactional.id`: stable per instance so a restart fences its predecessor.
        id: &'a str,
        /// `transaction.timeout.ms`.
        timeout: Duration,
    },
    /// Idempotent producer without transactions (tools, workload generators).
    Idempotent,
    /// Admin client.
    Admin,
}

/// Builds librdkafka configurations that share the connection and security settings.
#[derive(Debug, Clone)]
pub struct KafkaClients {
    base: KafkaConfig,
}

impl KafkaClients {
    /// Wraps the connection settings.
    pub fn new(base: KafkaConfig) -> Self {
        Self { base }
    }

    /// Bootstrap servers, for messages.
    pub fn bootstrap(&self) -> &str {
        &self.base.bootstrap
    }

    /// The librdkafka configuration for `role`.
    pub fn config(&self, role: ClientRole<'_>) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.base.bootstrap);
        c.set("client.dns.lookup", "use_all_dns_ips");
        match role {
            ClientRole::GroupConsumer {
                group,
                session_timeout,
                instance,
            } => {
                c.set("group.id", group)
                    .set("isolation.level", "read_committed")
                    .set("enable.auto.commit", "false")
                    .set("enable.auto.offset.store", "false")
                    .set("auto.offset.reset", "earliest")
                    // Range keeps partition i of every input and retry topic on one member.
                    .set("partition.assignment.strategy", "range")
                    .set(
                        "session.timeout.ms",
                        session_timeout.as_millis().to_string(),
                    )
                    .set(
                        "heartbeat.interval.ms",
                        (session_timeout.as_millis() / 5).max(100).to_string(),
                    )
                    .set("enable.partition.eof", "false")
                    .set("fetch.wait.max.ms", "50")
                    // Feeds eosflow_consumer_lag_records (high watermark minus position).
                    .set("statistics.interval.ms", "5000");
                if let Some(i) = instance {
                    c.set("group.instance.id", i);
                }
            }
            ClientRole::Reader => {
                c.set("group.id", "eosflow-reader-unused")
                    .set("isolation.level", "read_committed")
                    .set("enable.auto.commit", "false")
                    .set("enable.auto.offset.store", "false")
                    .set("auto.offset.reset", "earliest")
                    .set("enable.partition.eof", "true")
                    .set("fetch.wait.max.ms", "50");
            }
            ClientRole::Transactional { id, timeout } => {
                // Java clients' partitioner: a key lands where Kafka Streams would put it.
                c.set("partitioner", "murmur2_random")
                    .set("transactional.id", id)
                    .set("transaction.timeout.ms", timeout.as_millis().to_string())
                    .set("enable.idempotence", "true")
                    .set("acks", "all")
                    .set("linger.ms", "5")
                    .set("compression.type", "lz4")
                    .set("message.timeout.ms", timeout.as_millis().to_string());
            }
            ClientRole::Idempotent => {
                c.set("partitioner", "murmur2_random")
                    .set("enable.idempotence", "true")
                    .set("acks", "all")
                    .set("linger.ms", "5")
                    .set("compression.type", "lz4");
            }
            ClientRole::Admin => {}
        }
        for (k, v) in &self.base.properties {
            c.set(k, v);
        }
        c
    }
}
