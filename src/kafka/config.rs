//! `[kafka]` and `[kafka.security]`: how every client role reaches the brokers, and the checks
//! that keep the exactly-once settings and the security settings out of `[kafka.properties]`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::choice::choice_strings;
use crate::config::{ConfigError, Secret};

/// How to reach Kafka.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `bootstrap.servers`: `host:port[,host:port]`.
    pub bootstrap: String,
    /// Authentication and encryption to the brokers (SASL, TLS), applied to every client role.
    pub security: KafkaSecurityConfig,
    /// Passed to librdkafka as they are: the escape hatch for whatever a cluster needs that
    /// eosflow does not model (prefer `[kafka.security]` for SASL and TLS). Each entry also has
    /// an environment variable: `EOSFLOW_KAFKA_PROPERTY_<NAME>` (`_` for `.`).
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            bootstrap: "127.0.0.1:19092".into(),
            security: KafkaSecurityConfig::default(),
            properties: BTreeMap::new(),
        }
    }
}

/// librdkafka's `security.protocol`: what the connection to the brokers authenticates and
/// encrypts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// Neither TLS nor SASL.
    #[default]
    Plaintext,
    /// TLS, no SASL.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// The name librdkafka and the configuration use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }
}

/// librdkafka's `sasl.mechanisms`: how a `sasl_*` protocol authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    /// User name and password in the clear (only over TLS in production).
    #[serde(rename = "PLAIN")]
    Plain,
    /// SCRAM with SHA-256.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// SCRAM with SHA-512.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The name librdkafka and the configuration use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

choice_strings!(SecurityProtocol, SaslMechanism);

/// `""` ↔ `None` for an optional choice, so the key keeps a default (and with it an environment
/// variable) while meaning "not set".
mod unset_is_empty {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<super::SaslMechanism>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_str(value.map_or("", super::SaslMechanism::as_str))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<super::SaslMechanism>, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() {
            return Ok(None);
        }
        crate::config::choice::parse(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// SASL and TLS settings for the brokers; mapped to librdkafka's `security.protocol`, `sasl.*`
/// and `ssl.*` for every client role. Empty strings mean "not set".
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaSecurityConfig {
    /// librdkafka's `security.protocol`.
    pub protocol: SecurityProtocol,
    /// The SASL mechanism; required by the `sasl_*` protocols, empty otherwise.
    #[serde(with = "unset_is_empty")]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name; required by the `sasl_*` protocols.
    pub username: String,
    /// SASL password; prefer `password_file` (a mounted Secret) or the environment variable.
    pub password: Secret,
    /// File holding the SASL password (read once at start; one trailing newline is dropped).
    pub password_file: PathBuf,
    /// CA bundle (PEM) that verifies the brokers' certificates (`ssl.ca.location`); empty:
    /// the system trust store.
    pub ssl_ca_location: PathBuf,
    /// Client certificate (PEM) for mutual TLS (`ssl.certificate.location`).
    pub ssl_certificate_location: PathBuf,
    /// Client private key (PEM) for mutual TLS (`ssl.key.location`).
    pub ssl_key_location: PathBuf,
    /// Password of the client private key (`ssl.key.password`).
    pub ssl_key_password: Secret,
    /// File holding the private key's password (read once at start).
    pub ssl_key_password_file: PathBuf,
}

impl KafkaSecurityConfig {
    /// Whether the protocol authenticates with SASL.
    pub fn uses_sasl(&self) -> bool {
        matches!(
            self.protocol,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Whether the protocol encrypts with TLS.
    pub fn uses_tls(&self) -> bool {
        matches!(
            self.protocol,
            SecurityProtocol::Ssl | SecurityProtocol::SaslSsl
        )
    }

    /// The librdkafka properties these settings stand for (secrets included: for clients only).
    pub fn librdkafka_properties(&self) -> Vec<(&'static str, String)> {
        let mut props = vec![("security.protocol", self.protocol.to_string())];
        if self.uses_sasl() {
            props.push((
                "sasl.mechanisms",
                self.sasl_mechanism
                    .map_or_else(String::new, |m| m.to_string()),
            ));
            props.push(("sasl.username", self.username.clone()));
            props.push(("sasl.password", self.password.expose().to_string()));
        }
        if self.uses_tls() {
            for (key, value) in [
                ("ssl.ca.location", &self.ssl_ca_location),
                ("ssl.certificate.location", &self.ssl_certificate_location),
                ("ssl.key.location", &self.ssl_key_location),
            ] {
                if !value.as_os_str().is_empty() {
                    props.push((key, value.display().to_string()));
                }
            }
            if !self.ssl_key_password.is_empty() {
                props.push((
                    "ssl.key.password",
                    self.ssl_key_password.expose().to_string(),
                ));
            }
        }
        props
    }

    /// Checks `[kafka.security]` once its secret files are read; `properties` are the
    /// `[kafka.properties]`, which must not set what this section owns.
    pub(crate) fn validate(
        &self,
        properties: &BTreeMap<String, String>,
    ) -> Result<(), ConfigError> {
        let protocol = self.protocol;
        if self.uses_sasl() {
            if self.sasl_mechanism.is_none() {
                return Err(ConfigError::invalid(
                    "kafka.security.sasl_mechanism",
                    format!(
                        "empty: protocol {protocol} needs one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"
                    ),
                ));
            }
            if self.username.is_empty() {
                return Err(ConfigError::invalid(
                    "kafka.security.username",
                    format!("empty: protocol {protocol} needs a user name"),
                ));
            }
            if self.password.is_empty() {
                return Err(ConfigError::invalid(
                    "kafka.security.password",
                    format!(
                        "empty: protocol {protocol} needs a password (or kafka.security.password_file, env {})",
                        crate::config::env_name("kafka.security.password_file")
                    ),
                ));
            }
        } else {
            for (key, set) in [
                (
                    "kafka.security.sasl_mechanism",
                    self.sasl_mechanism.is_some(),
                ),
                ("kafka.security.username", !self.username.is_empty()),
                ("kafka.security.password", !self.password.is_empty()),
            ] {
                if set {
                    return Err(ConfigError::invalid(
                        key,
                        format!("is set but protocol {protocol} does not use SASL (use sasl_plaintext or sasl_ssl)"),
                    ));
                }
            }
        }
        if !self.uses_tls() {
            for (key, set) in [
                (
                    "kafka.security.ssl_ca_location",
                    !self.ssl_ca_location.as_os_str().is_empty(),
                ),
                (
                    "kafka.security.ssl_certificate_location",
                    !self.ssl_certificate_location.as_os_str().is_empty(),
                ),
                (
                    "kafka.security.ssl_key_location",
                    !self.ssl_key_location.as_os_str().is_empty(),
                ),
                (
                    "kafka.security.ssl_key_password",
                    !self.ssl_key_password.is_empty(),
                ),
            ] {
                if set {
                    return Err(ConfigError::invalid(
                        key,
                        format!(
                            "is set but protocol {protocol} does not use TLS (use ssl or sasl_ssl)"
                        ),
                    ));
                }
            }
        }
        if self.ssl_certificate_location.as_os_str().is_empty()
            != self.ssl_key_location.as_os_str().is_empty()
        {
            return Err(ConfigError::invalid(
                "kafka.security.ssl_key_location",
                "mutual TLS needs both ssl_certificate_location and ssl_key_location",
            ));
        }
        if protocol != SecurityProtocol::Plaintext {
            for key in properties.keys() {
                if SECURITY_KAFKA_PROPERTIES.contains(&key.as_str()) {
                    return Err(ConfigError::invalid(
                        "kafka.properties",
                        format!(
                            "`{key}` is set by [kafka.security]; remove it from [kafka.properties]"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl KafkaConfig {
    /// `kafka.bootstrap` is a list of `host:port`, and `[kafka.properties]` leaves alone what
    /// the exactly-once guarantee depends on. (`[kafka.security]` is checked once its secret
    /// files are read: [`KafkaSecurityConfig`].)
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.bootstrap.trim().is_empty() {
            return Err(ConfigError::invalid(
                "kafka.bootstrap",
                "empty: give host:port[,host:port]",
            ));
        }
        for server in self.bootstrap.split(',') {
            let ok = server
                .trim()
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(ConfigError::invalid(
                    "kafka.bootstrap",
                    format!("{server:?} is not host:port"),
                ));
            }
        }
        for key in self.properties.keys() {
            if RESERVED_KAFKA_PROPERTIES.contains(&key.as_str()) {
                return Err(ConfigError::invalid(
                    "kafka.properties",
                    format!("`{key}` is set by eosflow itself (its exactly-once guarantee depends on it); remove it"),
                ));
            }
        }
        Ok(())
    }
}

/// librdkafka properties `[kafka.security]` owns: setting them in `[kafka.properties]` too
/// would leave two answers to one question.
const SECURITY_KAFKA_PROPERTIES: &[&str] = &[
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
];

/// librdkafka properties whose values the exactly-once guarantee depends on.
const RESERVED_KAFKA_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "transactional.id",
    "isolation.level",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.idempotence",
    "partition.assignment.strategy",
];
