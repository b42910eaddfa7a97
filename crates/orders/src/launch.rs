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
    eosflow::metric_catalog::register(crate::telemetry::METRICS);
    let topics = Topics::new(ns);
    let c = configure(config, topology, &topics);
    // One processor per processing thread (`processor.threads`), each built the same way.
    Ok(match topology {
        Topology::Orders => {
            let (group, registry) = (c.app.id.clone(), c.schema_registry.url.clone());
            eosflow::run_threads(&c, |_| {
                OrderProcessor::new(topics.clone(), &group, &registry)
                    .map(|p| p.with_timeouts(timeouts).spec())
            })?
        }
        Topology::Stock => eosflow::run_threads(&c, |_| {
            Ok::<_, std::convert::Infallible>(StockService::new(topics.clone(), rates).spec())
        })?,
        Topology::Payment => eosflow::run_threads(&c, |_| {
            Ok::<_, std::convert::Infallible>(PaymentService::new(topics.clone(), rates).spec())
        })?,
        Topology::Customers => eosflow::run_threads(&c, |_| {
            Ok::<_, std::convert::Infallible>(CustomersProcessor::new(topics.clone()).spec())
        })?,
    })
}
