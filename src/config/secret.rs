//! [`Secret`]: a configured value (password, a URL carrying one) that no log line, error
//! message, `Debug` output or `eosflow config` listing may show.

use serde::{Deserialize, Serialize};

/// A secret value (password, or a URL with a password in it such as `postgres.url`): never
/// shown by `Debug` or serialization (which write `***`), so neither logs, error messages nor
/// `eosflow config` can leak it. [`Secret::expose`] is the one way to the value.
///
/// ```
/// use eosflow::config::Secret;
/// let s = Secret::new("postgres://app:hunter2@db:5432/app");
/// assert_eq!(format!("{s:?}"), "\"***\"");
/// assert_eq!(s.expose(), "postgres://app:hunter2@db:5432/app");
/// ```
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret read from a file or the environment.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that hands it to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether no secret was given (an empty password is treated as absent).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "\"***\"" })
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { "***" })
    }
}
