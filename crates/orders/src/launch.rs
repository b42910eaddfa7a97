//! Starting one of the application's topologies as a processor instance, through the core's
//! public entry point ([`eosflow::run`]) — what `eosflow run --topology orders|stock|payment|customers`
//! and `cargo run -p eosflow-orders --example orders` both call.

use eosflow::processor::RunSummary;
use eosflow::{Config, RunError};

use crate::aggregate::OrderProcessor;
use crate::projection::CustomersProcessor;
use crate::services::{PaymentService, StockService};
use crate::{configure, FailureRates, SagaTimeouts, Topics, Topology};

/// Why a topology did not start or stopped on an error.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A failure rate or a saga timeout is out of range.
    #[error("{0}")]
    Rates(String),
    /// The processor could not be built (its contracts, the registry).
    #[error("building the {topology} topology: {reason}")]
    Build {
        /// Which topology.
        topology: &'static str,
        /// Why.
        reason: String,
    },
    /// The runtime stopped on an error.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Runs `topology` under topic namespace `ns` (`<ns>.orders`, …) until SIGTERM/SIGINT, in its
/// own group `<app.id>-<topology>`; `rates` drive the simulated stock and payment services,
/// `timeouts` the order processor's saga.
pub fn run(
    config: &Config,
    topology: Topology,
    ns: &str,
    rates: FailureRates,
    timeouts: SagaTimeouts,
) -> Result<RunSummary, LaunchError> {
    rates.validate().map_err(LaunchError::Rates)?;
    timeouts.validate().map_err(LaunchError::Rates)?;
    eosflow::telemetry::catalog::register(crate::telemetry::METRICS);
    let topics = Topics::new(ns);
    let c = configure(config, topology, &topics);
    Ok(match topology {
        Topology::Orders => {
            let p = OrderProcessor::new(topics, &c.app.id, &c.schema_registry.url)
                .map_err(|reason| LaunchError::Build {
                    topology: topology.name(),
                    reason,
                })?
                .with_timeouts(timeouts);
            eosflow::run(&c, p)?
        }
        Topology::Stock => eosflow::run(&c, StockService::new(topics, rates))?,
        Topology::Payment => eosflow::run(&c, PaymentService::new(topics, rates))?,
        Topology::Customers => eosflow::run(&c, CustomersProcessor::new(topics))?,
    })
}
