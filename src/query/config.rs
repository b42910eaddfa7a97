//! `[queries]`: the interactive query listener (`/stores/...`), separate from the operations
//! port: where it listens, its TLS, who may ask, how much one request may cost, and which
//! partitioner placed the inputs' keys.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::partitioner::Partitioner;
use crate::config::{ConfigError, Secret};

/// The most entries `queries.max_limit` accepts.
pub const MAX_LIMIT_CEILING: usize = 10_000;

/// The interactive query listener. Off unless `listen` is set; once set, every request must
/// authenticate (a bearer token, a client certificate, or both accepted) and travel over TLS,
/// unless `allow_anonymous` / `allow_plaintext` say otherwise.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QueriesConfig {
    /// `ip:port` of the query listener (`/stores/...`, e.g. `0.0.0.0:9465`); empty (the default)
    /// serves no queries over HTTP. `processor.application_server` must then name this port as
    /// the other instances reach it: requests for keys owned elsewhere are proxied there.
    pub listen: String,
    /// Server certificate chain (PEM) the listener presents, and the client certificate this
    /// instance presents when it proxies to another one under `ssl_client_auth`. Empty: plain
    /// HTTP, refused unless `allow_plaintext`.
    pub ssl_certificate_location: PathBuf,
    /// Private key (PEM, PKCS#8, PKCS#1 or SEC1) of `ssl_certificate_location`.
    pub ssl_key_location: PathBuf,
    /// CA bundle (PEM) that verifies the other instances' certificates when a request is
    /// proxied, and the clients' certificates under `ssl_client_auth`. Required with TLS.
    pub ssl_ca_location: PathBuf,
    /// Accept a client certificate signed by `ssl_ca_location` as authentication (mutual TLS);
    /// the instances then present their own certificate to each other when proxying.
    pub ssl_client_auth: bool,
    /// Bearer token every request must carry (`Authorization: Bearer <token>`), compared in
    /// constant time; the instances send it to each other when proxying. Set it through the
    /// environment (`EOSFLOW_QUERIES_TOKEN`, e.g. from a Kubernetes Secret) or `token_file`.
    pub token: Secret,
    /// File holding the bearer token (read once at start; one trailing newline is dropped).
    pub token_file: PathBuf,
    /// Serve without authentication (no token, no client certificate): anyone who can reach
    /// the port reads every served store. For local development only.
    pub allow_anonymous: bool,
    /// Serve plain HTTP (no `ssl_certificate_location`): tokens and data cross the network
    /// unencrypted. For local development, or behind a mesh that encrypts.
    pub allow_plaintext: bool,
    /// The most entries one range request returns (`limit=` above it is lowered to it; the
    /// answer's `next` resumes after the last one). At most 10 000.
    pub max_limit: usize,
    /// Requests answered at the same time; one more gets `429` with `Retry-After: 1`.
    pub max_concurrent: usize,
    /// A request's deadline: a scan stops at its next chunk past it and the answer is `504`.
    pub request_timeout_ms: u64,
    /// The partitioner the inputs' keys were produced with, which a query uses to find a key's
    /// partition. Defaults to what eosflow's own producers use (`murmur2`, as the Java clients).
    pub partitioner: Partitioner,
}

impl Default for QueriesConfig {
    fn default() -> Self {
        Self {
            listen: String::new(),
            ssl_certificate_location: PathBuf::new(),
            ssl_key_location: PathBuf::new(),
            ssl_ca_location: PathBuf::new(),
            ssl_client_auth: false,
            token: Secret::default(),
            token_file: PathBuf::new(),
            allow_anonymous: false,
            allow_plaintext: false,
            max_limit: 1_000,
            max_concurrent: 16,
            request_timeout_ms: 10_000,
            partitioner: Partitioner::default(),
        }
    }
}

fn set(p: &std::path::Path) -> bool {
    !p.as_os_str().is_empty()
}

impl QueriesConfig {
    /// Whether the listener speaks TLS.
    pub fn uses_tls(&self) -> bool {
        set(&self.ssl_certificate_location)
    }

    /// Range checks and combinations (the token file is read afterwards: whether a token is
    /// configured at all is checked by [`QueriesConfig::validate_auth`]).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.listen.is_empty() && self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::invalid(
                "queries.listen",
                format!("{:?} is not ip:port (e.g. 0.0.0.0:9465)", self.listen),
            ));
        }
        if !(1..=MAX_LIMIT_CEILING).contains(&self.max_limit) {
            return Err(ConfigError::invalid(
                "queries.max_limit",
                format!("{} is outside 1..={MAX_LIMIT_CEILING}", self.max_limit),
            ));
        }
        if !(1..=1024).contains(&self.max_concurrent) {
            return Err(ConfigError::invalid(
                "queries.max_concurrent",
                format!("{} is outside 1..=1024", self.max_concurrent),
            ));
        }
        if !(10..=600_000).contains(&self.request_timeout_ms) {
            return Err(ConfigError::invalid(
                "queries.request_timeout_ms",
                format!("{} is outside 10..=600000", self.request_timeout_ms),
            ));
        }
        if set(&self.ssl_certificate_location) != set(&self.ssl_key_location) {
            return Err(ConfigError::invalid(
                "queries.ssl_key_location",
                "TLS needs both ssl_certificate_location and ssl_key_location",
            ));
        }
        if self.uses_tls() && !set(&self.ssl_ca_location) {
            return Err(ConfigError::invalid(
                "queries.ssl_ca_location",
                "with TLS, the CA (PEM) that verifies the other instances' certificates (proxying) is required",
            ));
        }
        if self.ssl_client_auth && !self.uses_tls() {
            return Err(ConfigError::invalid(
                "queries.ssl_client_auth",
                "client certificates need TLS: set ssl_certificate_location and ssl_key_location",
            ));
        }
        if !self.uses_tls() && (set(&self.ssl_ca_location)) {
            return Err(ConfigError::invalid(
                "queries.ssl_ca_location",
                "set without ssl_certificate_location: the listener would not use TLS",
            ));
        }
        Ok(())
    }

    /// Once secrets are read: a listener must authenticate (or say `allow_anonymous`) and
    /// encrypt (or say `allow_plaintext`).
    pub(crate) fn validate_auth(&self) -> Result<(), ConfigError> {
        if self.listen.is_empty() {
            return Ok(());
        }
        if self.token.is_empty() && !self.ssl_client_auth && !self.allow_anonymous {
            return Err(ConfigError::invalid(
                "queries.token",
                "queries.listen is set but no authentication is: set a bearer token (EOSFLOW_QUERIES_TOKEN or queries.token_file), queries.ssl_client_auth, or — for local development only — queries.allow_anonymous = true",
            ));
        }
        if !self.uses_tls() && !self.allow_plaintext {
            return Err(ConfigError::invalid(
                "queries.ssl_certificate_location",
                "queries.listen is set without TLS: set ssl_certificate_location, ssl_key_location and ssl_ca_location, or — for local development or behind an encrypting mesh — queries.allow_plaintext = true",
            ));
        }
        Ok(())
    }
}
