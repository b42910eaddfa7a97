//! librdkafka settings for each role eosflow plays, built from the one [`KafkaConfig`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::config::KafkaConfig;

/// How long librdkafka postpones a partition's next fetch once its prefetch queue is over
/// `queued.min.messages` (librdkafka's default is 1 s). At the default a partition whose backlog
/// exceeds that queue (100 000 records) was fetched in bursts with a second's pause between
/// them: a one-partition windowed instance that processes faster than the queue refills sat in
/// `poll` most of the time (12–15 k records/s instead of over 60 k; see docs/benchmarks.md).
/// A re-check every 20 ms costs nothing measurable. `[kafka.properties]` can override it.
const FETCH_QUEUE_BACKOFF_MS: &str = "20";

/// How long the broker may hold a group consumer's fetch that finds no data (librdkafka's
/// default: 500 ms; eosflow used 50). A fetch carries every assigned partition of a broker,
/// the inputs' empty retry levels included, and librdkafka keeps one fetch in flight per
/// broker: while a request made only of partitions with nothing new waits out this time, a
/// busy input on the same broker is not fetched. At 50 ms a one-partition windowed instance
/// (input plus three retry levels) processed 60–63 k records/s, at 10 ms 84–90 k, and with no
/// retry levels 82 k even at 50 ms (release build, 600 000 records; docs/benchmarks.md). An
/// idle instance sends about 100 empty fetches a second per broker it reads from: cheap for
/// a broker, and `[kafka.properties]` can raise it.
const GROUP_FETCH_WAIT_MAX_MS: &str = "10";

/// Bytes one fetch returns per partition (librdkafka's default: 1 MiB, about 3 000 of the
/// benchmarks' 300-byte records). 4 MiB lets one fetch round trip carry a batch's worth of a
/// single busy partition; `fetch.max.bytes` (50 MiB) still caps a whole fetch response.
const MAX_PARTITION_FETCH_BYTES: &str = "4194304";

/// Why [`KafkaClients::check_connection`] failed: authentication is told apart from an
/// unreachable broker so a wrong password is reported as such instead of as a hang.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The broker rejected the SASL credentials.
    #[error("Kafka authentication failed for user `{user}` with SASL mechanism {mechanism} at {bootstrap}: {detail}")]
    Authentication {
        /// `kafka.security.username`.
        user: String,
        /// `kafka.security.sasl_mechanism`.
        mechanism: String,
        /// `kafka.bootstrap`.
        bootstrap: String,
        /// librdkafka's reason (it never contains the password).
        detail: String,
    },
    /// The TLS handshake failed: the broker's certificate is not trusted (or not TLS at all).
    #[error("TLS handshake with Kafka at {bootstrap} failed: {detail} (check kafka.security.ssl_ca_location {ca:?}: it must hold the CA that signed the broker's certificate, and kafka.bootstrap must name a TLS listener)")]
    Tls {
        /// `kafka.bootstrap`.
        bootstrap: String,
        /// `kafka.security.ssl_ca_location` (empty: the system trust store).
        ca: String,
        /// librdkafka's reason.
        detail: String,
    },
    /// No broker answered before the deadline.
    #[error("cannot reach Kafka at {bootstrap} (security.protocol {protocol}) within {timeout:?}: {detail}")]
    Unreachable {
        /// `kafka.bootstrap`.
        bootstrap: String,
        /// `kafka.security.protocol`.
        protocol: String,
        /// How long was waited.
        timeout: Duration,
        /// The last error librdkafka reported.
        detail: String,
    },
    /// librdkafka refused the configuration.
    #[error("cannot create a Kafka client: {0}")]
    Client(#[from] KafkaError),
}

/// Keeps the last error librdkafka reports, so a failed metadata request can say why.
#[derive(Default)]
struct ErrorRecorder {
    last: Mutex<Option<(Option<RDKafkaErrorCode>, String)>>,
}

impl ClientContext for ErrorRecorder {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(%error, reason, "librdkafka error during connection check");
        if let Ok(mut last) = self.last.lock() {
            *last = Some((error.rdkafka_error_code(), format!("{error}: {reason}")));
        }
    }
}

impl ProducerContext for ErrorRecorder {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {}
}

fn is_auth_error(code: Option<RDKafkaErrorCode>, text: &str) -> bool {
    matches!(
        code,
        Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed)
    ) || text.contains("Authentication failed")
}

fn is_tls_error(code: Option<RDKafkaErrorCode>, text: &str) -> bool {
    matches!(code, Some(RDKafkaErrorCode::SSL)) || text.contains("SSL handshake failed")
}

/// Turns a [`ClientRole::GroupConsumer`] configuration into a member of the KIP-848 consumer
/// group protocol: `group.protocol=consumer` with the broker's `range` assignor (it gives
/// partition `p` of every subscribed topic with equal partition counts to one member, which
/// eosflow's tasks need; the broker's default `uniform` does not). librdkafka refuses the
/// classic protocol's client-side settings under it (`partition.assignment.strategy`,
/// `session.timeout.ms`, `heartbeat.interval.ms`: the broker owns them), so they are removed.
///
/// ```
/// use std::time::Duration;
/// use eosflow::internals::kafka::client::consumer_protocol;
/// use eosflow::kafka::{ClientRole, KafkaClients};
/// let clients = KafkaClients::new(Default::default());
/// let mut c = clients.config(ClientRole::GroupConsumer {
///     group: "g",
///     session_timeout: Duration::from_secs(10),
///     instance: None,
/// });
/// consumer_protocol(&mut c);
/// assert_eq!(c.get("group.protocol"), Some("consumer"));
/// assert_eq!(c.get("group.remote.assignor"), Some("range"));
/// assert_eq!(c.get("session.timeout.ms"), None);
/// ```
pub fn consumer_protocol(c: &mut ClientConfig) {
    c.remove("partition.assignment.strategy")
        .remove("session.timeout.ms")
        .remove("heartbeat.interval.ms")
        .set("group.protocol", "consumer")
        .set("group.remote.assignor", "range");
}

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
                    .set("fetch.wait.max.ms", GROUP_FETCH_WAIT_MAX_MS)
                    .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
                    .set("max.partition.fetch.bytes", MAX_PARTITION_FETCH_BYTES)
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
                    .set("fetch.wait.max.ms", "50")
                    .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
                    .set("max.partition.fetch.bytes", MAX_PARTITION_FETCH_BYTES);
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
        for (k, v) in self.base.security.librdkafka_properties() {
            c.set(k, v);
        }
        for (k, v) in &self.base.properties {
            c.set(k, v);
        }
        c
    }

    /// Fetches cluster metadata once, within `timeout`: fails fast, and clearly, on a wrong
    /// password or an unreachable broker, where a consumer or producer would retry forever.
    pub fn check_connection(&self, timeout: Duration) -> Result<(), ConnectError> {
        // A producer, because its poll hands librdkafka's error events (with their reason) to
        // the context; it never sends anything.
        let probe: BaseProducer<ErrorRecorder> = self
            .config(ClientRole::Admin)
            .create_with_context(ErrorRecorder::default())?;
        let deadline = Instant::now() + timeout;
        let security = &self.base.security;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = probe
                .client()
                .fetch_metadata(None, left.min(Duration::from_millis(500)));
            probe.poll(Duration::ZERO);
            let recorded = probe.context().last.lock().ok().and_then(|mut l| l.take());
            let (code, detail) = match (&attempt, recorded) {
                (Ok(_), _) => return Ok(()),
                (Err(_), Some(r)) => r,
                (Err(e), None) => (e.rdkafka_error_code(), e.to_string()),
            };
            if security.uses_sasl() && is_auth_error(code, &detail) {
                return Err(ConnectError::Authentication {
                    user: security.username.clone(),
                    mechanism: security
                        .sasl_mechanism
                        .map_or_else(String::new, |m| m.to_string()),
                    bootstrap: self.base.bootstrap.clone(),
                    detail,
                });
            }
            if security.uses_tls() && is_tls_error(code, &detail) {
                return Err(ConnectError::Tls {
                    bootstrap: self.base.bootstrap.clone(),
                    ca: security.ssl_ca_location.display().to_string(),
                    detail,
                });
            }
            if Instant::now() >= deadline {
                return Err(ConnectError::Unreachable {
                    bootstrap: self.base.bootstrap.clone(),
                    protocol: security.protocol.to_string(),
                    timeout,
                    detail,
                });
            }
        }
    }
}
