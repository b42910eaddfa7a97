//! `[metrics]`: where the operations endpoints (`/metrics`, `/healthz`, `/readyz`) listen.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// The Prometheus endpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `ip:port` for `/metrics`, `/healthz` and `/readyz` (e.g. `0.0.0.0:9464`); empty disables
    /// the listener.
    pub listen: String,
}

impl MetricsConfig {
    /// `listen` is empty or an `ip:port`.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.listen.is_empty() && self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::invalid(
                "metrics.listen",
                format!("{:?} is not ip:port (e.g. 0.0.0.0:9464)", self.listen),
            ));
        }
        Ok(())
    }
}
