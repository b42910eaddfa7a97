//! `eosflow topics plan|apply`: the declared topics (`topics/*.toml`) plus, with `--topology`,
//! the topics a shipped topology needs (inputs with their retry levels and DLTs, changelogs,
//! outputs), checked against the broker: missing topics, partition drift, partition counts that
//! differ inside a co-partitioned group (every topic and its count named), changelogs that are
//! not compacted. `plan` changes nothing; `apply` creates what is missing, never alters what
//! exists.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use eosflow::kafka::topics::{self, CoPartitioned, PlanItem, TopicOutcome, TopicSpec};
use eosflow::kafka::KafkaClients;
use eosflow::topology::{Topology, TopologyError};
use eosflow::Config;

/// Exit code when something needs a person: drift, a mismatch, an uncompacted changelog.
const PROBLEM: u8 = 3;

/// The two actions.
#[derive(clap::Subcommand)]
pub enum TopicsAction {
    /// Print what `apply` would create and every mismatch; change nothing (exit 3 on a
    /// problem `apply` cannot fix).
    Plan(TopicsArgs),
    /// Create missing topics, then check them (exit 3 on drift or a mismatch; nothing existing
    /// is changed).
    Apply(TopicsArgs),
}

/// Which topics.
#[derive(clap::Args)]
pub struct TopicsArgs {
    /// Folder of declarations.
    #[arg(long, default_value = "topics")]
    dir: PathBuf,
    /// Also the topics of a shipped topology (as for `run`): `count`, `order-lifecycle`, one
    /// built on the topology builder (`windowed-count`, `windowed-sum`, `repartition-windows`,
    /// `saga-timeouts`, `table-join`, `stream-table-join`), or any of the orders application's
    /// (`orders`, `stock`, `payment`, `customers`: the whole application's topics). Inputs of
    /// all but the orders application are processor.input_topics.
    #[arg(long, requires = "output")]
    topology: Option<String>,
    /// Output topic of `count`/`order-lifecycle`; the namespace of the orders topologies.
    #[arg(long)]
    output: Option<String>,
    /// Partition count of the topology's topics.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
}

/// Runs `plan` or `apply`.
pub fn cmd(config: &Config, action: TopicsAction) -> Result<ExitCode> {
    let (args, apply) = match action {
        TopicsAction::Plan(a) => (a, false),
        TopicsAction::Apply(a) => (a, true),
    };
    let (specs, groups) = wanted(config, &args)?;
    let clients = KafkaClients::new(config.kafka.clone());
    let timeout = Duration::from_secs(30);
    let mut problem = false;
    let mut drifted = Vec::new();
    if apply {
        let outcomes = topics::apply_blocking(&clients, &specs, timeout)
            .with_context(|| format!("applying topics at {}", clients.bootstrap()))?;
        for (name, outcome) in outcomes {
            match outcome {
                TopicOutcome::Created => println!("created   {name}"),
                TopicOutcome::Unchanged => println!("ok        {name}"),
                TopicOutcome::Drift(diffs) => {
                    problem = true;
                    for d in diffs {
                        println!("DRIFT     {name}: {d}");
                    }
                    drifted.push(name);
                }
            }
        }
    }
    let items = topics::plan_blocking(&clients, &specs, &groups, timeout)
        .with_context(|| format!("reading topics at {}", clients.bootstrap()))?;
    for item in &items {
        // After `apply`, drift was printed with its details already.
        let already = match item {
            PlanItem::PartitionDrift { topic, .. } | PlanItem::NotCompacted { topic, .. } => {
                drifted.contains(topic)
            }
            _ => false,
        };
        if !already {
            println!("{item}");
        }
        problem |= !item.is_fixed_by_apply();
    }
    if !apply && items.is_empty() {
        println!("{} topics as declared; nothing to do", specs.len());
    }
    Ok(if problem {
        ExitCode::from(PROBLEM)
    } else {
        ExitCode::SUCCESS
    })
}

/// The declarations of `--dir` and of `--topology`, with the topology's co-partitioned groups.
fn wanted(config: &Config, args: &TopicsArgs) -> Result<(Vec<TopicSpec>, Vec<CoPartitioned>)> {
    let mut specs =
        topics::load_dir(&args.dir, &config.app.id).context("reading topic declarations")?;
    let mut groups = Vec::new();
    if let (Some(topology), Some(output)) = (&args.topology, &args.output) {
        let n = args.partitions;
        let (more, group) = match topology.as_str() {
            "count" => processor(config, "count", output, n),
            "order-lifecycle" => processor(config, "orders", output, n),
            name if SHIPPED_TOPOLOGIES.contains(&name) => {
                let input = config
                    .processor
                    .input_topics
                    .first()
                    .with_context(|| format!("{name} reads processor.input_topics"))?;
                let t = shipped_topology(name, input, output, &config.schema_registry.url)
                    .with_context(|| format!("building the {name} topology"))?;
                let (specs, group) = t.topics(config, n);
                (specs, vec![group])
            }
            name => orders_app(config, name, output, n)?,
        };
        for s in more {
            // A declaration in --dir wins over the derived one.
            if !specs.iter().any(|d| d.name == s.name) {
                specs.push(s);
            }
        }
        groups.extend(group);
    }
    Ok((specs, groups))
}

/// The shipped topologies built on the topology builder, which `eosflow run --topology` runs
/// and `eosflow topics --topology` plans from the topology itself ([`Topology::topics`]).
pub const SHIPPED_TOPOLOGIES: [&str; 6] = [
    "windowed-count",
    "windowed-sum",
    "repartition-windows",
    "saga-timeouts",
    "table-join",
    "stream-table-join",
];

/// Shipped topology `name` (one of [`SHIPPED_TOPOLOGIES`]) reading `input`, writing `output`
/// (Avro ones register with `registry`).
pub fn shipped_topology(
    name: &str,
    input: &str,
    output: &str,
    registry: &str,
) -> Result<Topology, TopologyError> {
    use eosflow_verify as verify;
    match name {
        "windowed-count" => verify::windows::topology(input, output),
        "repartition-windows" => verify::repartition_backlog::topology(input, output),
        "saga-timeouts" => verify::saga_timeouts::topology(input, output),
        "table-join" => verify::joins::topology(input, output),
        "windowed-sum" => eosflow_bench::windowed::topology(input, output, registry),
        "stream-table-join" => eosflow_bench::join::topology(input, output, registry),
        other => Err(TopologyError::Invalid(format!(
            "{other} is not one of {SHIPPED_TOPOLOGIES:?}"
        ))),
    }
}

/// A single-processor topology: its inputs' ladders, changelog and output.
fn processor(
    config: &Config,
    store: &str,
    output: &str,
    n: i32,
) -> (Vec<TopicSpec>, Vec<CoPartitioned>) {
    let (mut specs, group) = topics::processor_topics(config, store, n);
    specs.push(TopicSpec::new(output, n, "delete"));
    (specs, vec![group])
}

/// The orders application under namespace `ns`: every topic, one group per topology.
fn orders_app(
    config: &Config,
    topology: &str,
    ns: &str,
    n: i32,
) -> Result<(Vec<TopicSpec>, Vec<CoPartitioned>)> {
    use eosflow_orders::{configure, Topics, Topology};
    let _: Topology = topology.parse().map_err(anyhow::Error::msg)?;
    let t = Topics::new(ns);
    let levels = config.retry.delays_ms.len() as u32;
    let specs = t.specs(&config.app.id, n, levels);
    let groups = Topology::ALL
        .iter()
        .map(|&tp| topics::processor_topics(&configure(config, tp, &t), tp.store(), n).1)
        .collect();
    Ok((specs, groups))
}
