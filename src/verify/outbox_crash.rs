//! The `outbox-crash` scenario (placeholder while it is written).

use super::scenario::{ScenarioEnv, ScenarioReport};
use super::stack::PrivateStack;
use crate::config::Config;

/// Shape of an outbox-crash run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Outbox rows written.
    pub rows: u64,
    /// kill -9s of the router.
    pub kills: u32,
}

impl Options {
    /// The `make test` version.
    pub fn short() -> Self {
        Self { rows: 5_000, kills: 3 }
    }
    /// The long version.
    pub fn long() -> Self {
        Self { rows: 200_000, kills: 20 }
    }
}

/// Runs the scenario.
pub fn run(
    _config: &Config,
    _stack: &PrivateStack,
    _env: &ScenarioEnv,
    _opts: &Options,
) -> Result<ScenarioReport, String> {
    Err("outbox-crash: not written yet".into())
}
