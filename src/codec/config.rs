//! `[schema_registry]`: where the Confluent-compatible registry is and how to authenticate to it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, Secret};

/// The Confluent-compatible schema registry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaRegistryConfig {
    /// Base URL of the Confluent API, `http://` or `https://` (Apicurio: `…/apis/ccompat/v7`).
    pub url: String,
    /// CA bundle (PEM) that verifies an `https://` registry signed by a private CA.
    pub ca_file: PathBuf,
    /// HTTP basic-auth user (Confluent Cloud: the API key); empty = no authentication.
    pub username: String,
    /// Basic-auth password; prefer `password_file` (a mounted Secret) or the environment.
    pub password: Secret,
    /// File holding the basic-auth password (read once at start).
    pub password_file: PathBuf,
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:18081/apis/ccompat/v7".into(),
            ca_file: PathBuf::new(),
            username: String::new(),
            password: Secret::default(),
            password_file: PathBuf::new(),
        }
    }
}

impl SchemaRegistryConfig {
    /// The URL is HTTP(S), the CA file exists, and a password comes with a user.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(ConfigError::invalid(
                "schema_registry.url",
                format!("{:?} is not an http:// or https:// URL", self.url),
            ));
        }
        if !self.ca_file.as_os_str().is_empty() && !self.ca_file.is_file() {
            return Err(ConfigError::invalid(
                "schema_registry.ca_file",
                format!(
                    "{:?} is not a readable file (a PEM CA bundle)",
                    self.ca_file.display().to_string()
                ),
            ));
        }
        if self.username.is_empty() && !self.password.is_empty() {
            return Err(ConfigError::invalid(
                "schema_registry.username",
                "empty, but a password is set: basic auth needs both",
            ));
        }
        Ok(())
    }
}
