//! The orders application as its own program, on the public API only: one topology instance
//! per process, as `eosflow run --topology …` starts it.
//!
//! ```text
//! eval "$(dev/stack env)"
//! EOSFLOW_APP_INSTANCE_ID=orders-1 cargo run --example orders -- --topology orders --output shop
//! ```

use clap::Parser;
use eosflow_orders::{FailureRates, SagaTimeouts, Topology};

/// Arguments: which topology, the topic namespace, the simulated services' failure rates, the
/// saga's timeouts.
#[derive(Parser)]
struct Args {
    /// `orders`, `stock`, `payment` or `customers`.
    #[arg(long)]
    topology: String,
    /// The topic namespace (`<ns>.orders`, …).
    #[arg(long)]
    output: String,
    #[command(flatten)]
    rates: FailureRates,
    #[command(flatten)]
    timeouts: SagaTimeouts,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    eosflow::init_logging();
    let args = Args::parse();
    let topology: Topology = args.topology.parse()?;
    let config = eosflow::Config::load(None)?;
    let summary =
        eosflow_orders::launch::run(&config, topology, &args.output, args.rates, args.timeouts)?;
    println!("{} records", summary.records);
    Ok(())
}
