//! The `eosflow` command line: parses arguments, loads the config, and hands over to the library.
//! Errors are reported here, with context, and turned into exit codes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

mod project_cmd;
mod topics_cmd;

use eosflow_verify::count::CountProcessor;

/// mimalloc for every Rust allocation of the binary: the record path's many small, cross-thread
/// allocations cost a quarter of the processing thread under glibc malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use eosflow::internals::runner::{serve_endpoints, wait_for_signal_or};
use eosflow::internals::telemetry::Health;
use eosflow::kafka::KafkaClients;
use eosflow::Config;
use eosflow_verify::{self as verify, VerifyOptions, Workload};

#[derive(Parser)]
#[command(
    name = "eosflow",
    version,
    about = "Exactly-once stream processing on Kafka"
)]
struct Cli {
    /// TOML config file; every key can also be set as EOSFLOW_<SECTION>_<KEY>.
    #[arg(long, global = true, env = "EOSFLOW_CONFIG_FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a processor instance (a consumer-group member) until SIGTERM/SIGINT.
    Run {
        /// Which topology: `count` (per-key count and sum; the verifier's and benchmark's); one
        /// of the orders application's: `orders` (aggregate + saga), `stock`, `payment`,
        /// `customers`; `order-lifecycle` (Avro order lifecycle; the poison scenario's);
        /// `windowed-count` (per-key counts in tumbling event-time windows; the windows
        /// scenario's); `windowed-sum` (per-key count and sum of order amounts in 10 s
        /// tumbling windows, emitted on close; the benchmarks' windowed shape); or
        /// `stream-table-join` (each order joined with its customer's row from the table
        /// `<input>.customers`; the benchmarks' join shape); or `table-join` (each record
        /// left-joined with the table `<input>.table`; the joins scenario's); or
        /// `repartition-windows` (clicks joined with `<input>.users`, re-keyed by region, counted
        /// in 1-minute windows; the repartition-backlog scenario's); or `saga-timeouts` (each
        /// record schedules a wall-clock timeout whose callback emits its result; the
        /// saga-timeouts scenario's).
        #[arg(long, default_value = "count")]
        topology: String,
        /// Output topic of `count`; the topic namespace (`<ns>.orders`, …) of the orders topologies.
        #[arg(long)]
        output: String,
        /// Failure rates of the simulated stock and payment services.
        #[command(flatten)]
        rates: eosflow_orders::FailureRates,
        /// The orders topology's saga step timeouts.
        #[command(flatten)]
        timeouts: eosflow_orders::SagaTimeouts,
    },
    /// Declared topics (`topics/*.toml`) and a topology's: plan (check) or apply (create).
    Topics {
        #[command(subcommand)]
        action: topics_cmd::TopicsAction,
    },
    /// Prove exactly-once: workload in, processes kill -9'ed, committed output checked.
    Verify(VerifyArgs),
    /// The orders application end to end (order service → outbox → processors + saga), a live
    /// progress line, a summary and its checks; exit 0 only if they hold.
    Demo(eosflow_cli::demo::DemoArgs),
    /// Benchmarks against the raw pipe and Kafka Streams: target/bench/report.md and charts.
    Bench(Box<eosflow_bench::BenchArgs>),
    /// (internal) The benchmarks' raw consume → produce pipe, their throughput ceiling.
    #[command(hide = true)]
    BenchPipe {
        /// Topic read.
        #[arg(long)]
        input: String,
        /// Topic written.
        #[arg(long)]
        output: String,
        /// Consumer group.
        #[arg(long)]
        group: String,
    },
    /// Print the effective configuration (secrets redacted) or the first error in it.
    Config,
    /// Dead letters: list, show, redrive, purge.
    Dlt {
        #[command(subcommand)]
        action: DltAction,
    },
    /// Outbox router: Postgres outbox table → Kafka (Debezium Outbox Event Router semantics).
    Outbox(OutboxArgs),
    /// Project topics into Postgres exactly once: each record's JSON value upserted into a
    /// table by its key, offsets in the same transaction (docs/projections.md).
    Project(project_cmd::ProjectArgs),
    /// A topology's committed state, read from its changelog (read_committed).
    State {
        #[command(subcommand)]
        action: StateAction,
    },
    /// Event contracts (`schemas/`): register them, check their compatibility.
    Schemas {
        #[command(subcommand)]
        action: SchemasAction,
    },
}

#[derive(clap::Args, Clone)]
struct SchemasArgs {
    /// The schema directory (`<domain>/<event>.v<n>.avsc`).
    #[arg(long, default_value = "schemas")]
    dir: PathBuf,
    /// Subject naming: topic-record (`<topic>-<record>`), topic (`<topic>-value`), record.
    #[arg(long, default_value = "topic-record")]
    strategy: eosflow::internals::codec::SubjectStrategy,
    /// The topic in subject names; `${domain}` is the schema's domain directory.
    #[arg(long, default_value = "${domain}")]
    topic: String,
}

#[derive(Subcommand)]
enum SchemasAction {
    /// Register every schema in the directory with the registry (idempotent).
    Register(SchemasArgs),
    /// Check every schema against its previous version (repo, git HEAD, registry); exit 1 on a break.
    /// Store value schemas (`stores/<store>.v<n>.avsc`) are checked BACKWARD against every
    /// version registered under `<app.id>-<store>-changelog-value`.
    Check {
        #[command(flatten)]
        args: SchemasArgs,
        /// The application whose stores' changelog subjects are checked (default: `app.id`).
        #[arg(long)]
        app_id: Option<String>,
        /// Skip the registry comparison.
        #[arg(long)]
        no_registry: bool,
        /// Skip the comparison with the last committed text.
        #[arg(long)]
        no_git: bool,
    },
}

#[derive(clap::Args, Clone)]
struct DltSelect {
    /// Only records with this key.
    #[arg(long)]
    key: Option<String>,
    /// Only the record with this `id` header.
    #[arg(long)]
    id: Option<String>,
    /// Only DLT offsets in this range, `FROM..TO` (inclusive).
    #[arg(long, value_parser = parse_range)]
    offsets: Option<(i64, i64)>,
    /// Only failures in this time range, `FROM..TO` in ms since the epoch (inclusive).
    #[arg(long, value_parser = parse_range)]
    time: Option<(i64, i64)>,
}

fn parse_range(s: &str) -> std::result::Result<(i64, i64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("{s:?}: expected FROM..TO"))?;
    let a = a
        .trim()
        .parse()
        .map_err(|_| format!("{a:?} is not an integer"))?;
    let b = b
        .trim()
        .parse()
        .map_err(|_| format!("{b:?} is not an integer"))?;
    Ok((a, b))
}

impl From<DltSelect> for eosflow::internals::retry::tooling::Selector {
    fn from(s: DltSelect) -> Self {
        Self {
            key: s.key,
            id: s.id,
            offsets: s.offsets,
            time: s.time,
        }
    }
}

#[derive(Subcommand)]
enum DltAction {
    /// Counts by error class and the oldest failure.
    List {
        /// The input topic or its DLT (`orders` or `orders.DLT`).
        topic: String,
    },
    /// Records with their error headers.
    Show {
        /// The input topic or its DLT.
        topic: String,
        #[command(flatten)]
        select: DltSelect,
        /// At most this many records.
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// Send selected records back to their original topic (ids kept: dedup holds).
    Redrive {
        /// The input topic or its DLT.
        topic: String,
        #[command(flatten)]
        select: DltSelect,
        /// Recorded in the audit topic.
        #[arg(long)]
        reason: String,
        /// Print what would be redriven, send nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete records before an offset (all when omitted); the reason is audited.
    Purge {
        /// The input topic or its DLT.
        topic: String,
        /// Recorded in the audit topic; required.
        #[arg(long)]
        reason: String,
        /// Delete records below this offset in every partition.
        #[arg(long)]
        before_offset: Option<i64>,
    },
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct OutboxArgs {
    /// `cdc` (logical replication, exactly-once) or `poll` (at-least-once); overrides outbox.mode.
    #[arg(long)]
    mode: Option<eosflow::config::OutboxMode>,
    #[command(subcommand)]
    action: Option<OutboxAction>,
}

#[derive(Subcommand)]
enum OutboxAction {
    /// Create the outbox table and its index of unsent rows if absent (migrations/).
    Migrate,
}

#[derive(Subcommand)]
enum StateAction {
    /// Print `{"key": …, "value": …}` per key (one key with --key).
    Dump {
        /// The changelog topic (`<app.id>-<store>-changelog`).
        #[arg(long)]
        changelog: String,
        /// How values are rendered: count (the count topology), json, hex.
        #[arg(long, default_value = "hex")]
        format: verify::query::StateFormat,
        /// Only this key.
        #[arg(long)]
        key: Option<String>,
    },
}

#[derive(clap::Args)]
struct VerifyArgs {
    /// Distinct input records.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Partitions of every topic.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Processor processes.
    #[arg(long, default_value_t = 2)]
    instances: usize,
    /// kill -9s during the run.
    #[arg(long, default_value_t = 10)]
    kills: u32,
    /// Seconds over which the workload is produced (kills are spread over them).
    #[arg(long, default_value_t = 40)]
    duration_secs: u64,
    /// Every n-th record is re-sent with the same id (0 = none).
    #[arg(long, default_value_t = 50)]
    duplicate_every: u64,
    /// Every n-th record fails transiently once and succeeds on retry level 1 (0 = none).
    #[arg(long, default_value_t = 0)]
    transient_every: u64,
    /// Commit interval of the instances.
    #[arg(long, default_value_t = 100)]
    commit_interval_ms: u64,
    /// Where instance stores and logs go.
    #[arg(long, default_value = "target/verify")]
    work_dir: PathBuf,
    /// Seconds allowed for the lag to drain after the workload is in.
    #[arg(long, default_value_t = 180)]
    drain_timeout_secs: u64,
    /// A named fault scenario (kill-processors, broker-restart, zombie, outbox-crash, poison,
    /// broker-pause, slow-handler, outbox-oversize, parked-flood, stale-store, rebalance-storm,
    /// …; an unknown name lists them all) or `all`, with its fixed shape; the sizing flags above
    /// then do not apply.
    #[arg(long)]
    scenario: Option<String>,
    /// The short version of the scenario (what `make test` runs).
    #[arg(long, requires = "scenario")]
    short: bool,
    /// `dev/stack`, which starts the private broker/Postgres of broker-restart, broker-pause,
    /// saga-timeouts and outbox-crash; the cluster scenarios (leader-bounce, coordinator-bounce,
    /// broker-pause-one, isr-shrink, outbox-leader-bounce) run `dev/cluster` from the same
    /// directory.
    #[arg(long, default_value = "dev/stack")]
    stack_script: PathBuf,
    /// First port of that private stack (Kafka uses it to +2, Postgres +10, a cluster +40 to
    /// +61); keep it below the ephemeral range (32768+), where any client connection may be
    /// holding it.
    #[arg(long, default_value_t = 23092)]
    private_port: u16,
    /// `processor.threads` of every instance (`EOSFLOW_PROCESSOR_THREADS`), for the plain run
    /// and the scenarios on the counting topology (kill-processors, rebalance-storm, …);
    /// unset: the instances' default.
    #[arg(long)]
    threads: Option<usize>,
    /// `processor.standby_replicas` of every instance (`EOSFLOW_PROCESSOR_STANDBY_REPLICAS`),
    /// like `--threads`.
    #[arg(long)]
    standby_replicas: Option<u32>,
    /// Testing the verifier itself: every n-th record is sent to a partition that does not
    /// exist, so its sends fail; the closing line must count them as not_produced, not lost.
    #[arg(long, default_value_t = 0, hide = true)]
    unsendable_every: u64,
    /// Seed of the rebalance storm's RNG (its closing line prints the one used), to replay a
    /// run's sequence of events.
    #[arg(long)]
    seed: Option<u64>,
}

/// The instance settings `--threads` / `--standby-replicas` ask for, as `EOSFLOW_*` variables,
/// checked here against this build's configuration keys: a setting the instances do not know
/// would make every one of them refuse to start.
fn verify_instance_env(args: &VerifyArgs) -> Result<Vec<(String, String)>> {
    let mut env = Vec::new();
    if let Some(n) = args.threads {
        env.push(("EOSFLOW_PROCESSOR_THREADS".to_string(), n.to_string()));
    }
    if let Some(k) = args.standby_replicas {
        env.push((
            "EOSFLOW_PROCESSOR_STANDBY_REPLICAS".to_string(),
            k.to_string(),
        ));
    }
    Config::from_sources(None, None, &env).context("--threads / --standby-replicas")?;
    Ok(env)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    eosflow::init_logging();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn dispatch(cli: Cli) -> Result<std::process::ExitCode> {
    let config = Config::load(cli.config.as_deref()).context("loading configuration")?;
    // The outbox router's contracts for `payload_format = "avro"` without a schemas_dir: the
    // orders application's, compiled into this binary.
    let contracts = eosflow_orders::contracts::catalog().context("the built-in contracts")?;
    eosflow_outbox::avro::set_builtin_contracts(contracts);
    // `run` checks the connection itself (eosflow::run).
    if !matches!(
        cli.command,
        Command::Config | Command::Schemas { .. } | Command::Run { .. }
    ) {
        // A wrong password or an unreachable broker fails here, clearly, instead of as retries.
        KafkaClients::new(config.kafka.clone())
            .check_connection(Duration::from_secs(30))
            .context("connecting to Kafka")?;
    }
    match cli.command {
        Command::Run {
            topology,
            output,
            rates,
            timeouts,
        } => run(&config, &topology, &output, rates, timeouts),
        Command::Topics { action } => topics_cmd::cmd(&config, action),
        Command::Verify(args) => verify_cmd(&config, args),
        Command::Demo(args) => demo(&config, &args),
        Command::Bench(args) => {
            let results = eosflow_bench::run(&config, &args)?;
            println!("{}", eosflow_bench::report::tables(&results));
            println!("report: {}", args.out.join("report.md").display());
            Ok(if results.failures.is_empty() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(2)
            })
        }
        Command::BenchPipe {
            input,
            output,
            group,
        } => {
            let shutdown = Arc::new(AtomicBool::new(false));
            let clients = KafkaClients::new(config.kafka.clone());
            eosflow_bench::pipe::run(&clients, &input, &output, &group, &shutdown)?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Dlt { action } => dlt_cmd(&config, action),
        Command::Outbox(args) => outbox_cmd(config, args),
        Command::Project(args) => project_cmd::cmd(&config, args),
        Command::Schemas { action } => schemas_cmd(&config, action),
        Command::State {
            action:
                StateAction::Dump {
                    changelog,
                    format,
                    key,
                },
        } => {
            let clients = KafkaClients::new(config.kafka.clone());
            let state = verify::query::dump(
                &clients,
                &changelog,
                format,
                key.as_deref(),
                Duration::from_secs(60),
            )
            .with_context(|| format!("reading {changelog}"))?;
            for line in verify::query::lines(&state) {
                println!("{line}");
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Config => {
            let mut shown = config.clone();
            for (k, v) in shown.kafka.properties.iter_mut() {
                if k.contains("password") || k.contains("secret") || k.contains("key") {
                    *v = "***".into();
                }
            }
            println!(
                "{}",
                toml::to_string_pretty(&shown).context("rendering the config")?
            );
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

fn run(
    config: &Config,
    topology: &str,
    output: &str,
    rates: eosflow_orders::FailureRates,
    timeouts: eosflow_orders::SagaTimeouts,
) -> Result<std::process::ExitCode> {
    use eosflow_orders::Topology;
    let registry = config.schema_registry.url.as_str();
    let input = || {
        config
            .processor
            .input_topics
            .first()
            .with_context(|| format!("{topology} reads processor.input_topics"))
    };
    let built = |what: &str| format!("building the {what} topology");
    match topology {
        "count" => {
            let count = || CountProcessor::new(output).with_registry(registry);
            // The verifier's slow-handler fault, when its variables are set.
            match verify::slow::settings_from_env() {
                Some((every, sleep)) => run_with(config, |_| {
                    Ok::<_, String>(verify::slow::SlowSometimes::new(count(), every, sleep))
                }),
                None => run_with(config, |_| Ok::<_, String>(count())),
            }
        }
        name if topics_cmd::SHIPPED_TOPOLOGIES.contains(&name) => {
            let input = input()?;
            run_with(config, |_| {
                topics_cmd::shipped_topology(name, input, output, registry)
                    .map_err(|e| format!("{}: {e}", built(topology)))
            })
        }
        "order-lifecycle" => run_with(config, |_| {
            eosflow_orders::poison_lifecycle::PoisonLifecycleProcessor::new(registry, output)
                .map(|p| p.spec())
                .map_err(|e| format!("{}: {e}", built(topology)))
        }),
        _ => {
            let t: Topology = topology.parse().map_err(anyhow::Error::msg)?;
            eosflow_orders::launch::run(config, t, output, rates, timeouts)?;
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

/// One processor per processing thread through the public entry point, exactly as a user's
/// `main` would run it.
fn run_with<P, F, E>(config: &Config, make: F) -> Result<std::process::ExitCode>
where
    P: eosflow::processor::Application + 'static,
    F: FnMut(usize) -> std::result::Result<P, E>,
    E: std::fmt::Display,
{
    eosflow::run_threads(config, make)?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn outbox_cmd(mut config: Config, args: OutboxArgs) -> Result<std::process::ExitCode> {
    if let Some(mode) = args.mode {
        config.outbox.mode = mode;
        config.validate().context("--mode")?;
    }
    if let Some(OutboxAction::Migrate) = args.action {
        let created = eosflow_outbox::migrate_cmd(&config).context("migrating the outbox")?;
        println!(
            "{} {}",
            if created { "created" } else { "ok     " },
            config.outbox.table
        );
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let health = Arc::new(Health::new(Duration::from_millis(
        config.processor.stuck_after_ms,
    )));
    eosflow::internals::telemetry::catalog::register(eosflow_outbox::telemetry::METRICS);
    let _endpoints = serve_endpoints(&config, health.clone())?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let worker = {
        let shutdown = shutdown.clone();
        let config = config.clone();
        std::thread::Builder::new()
            .name("outbox".into())
            .spawn(move || eosflow_outbox::run(&config, shutdown, &health))
            .context("spawning the outbox thread")?
    };
    wait_for_signal_or(&worker)?;
    shutdown.store(true, Ordering::Relaxed);
    let summary = worker
        .join()
        .map_err(|_| anyhow::anyhow!("the outbox thread panicked"))?
        .context("outbox router")?;
    tracing::info!(%summary, "outbox router stopped");
    Ok(std::process::ExitCode::SUCCESS)
}

fn verify_options(args: &VerifyArgs) -> Result<VerifyOptions> {
    Ok(VerifyOptions {
        workload: Workload {
            records: args.records,
            keys: args.keys,
            duplicate_every: args.duplicate_every,
            transient_every: args.transient_every,
        },
        partitions: args.partitions,
        instances: args.instances.max(1),
        kills: args.kills,
        fault: verify::Fault::Kill9,
        duration: Duration::from_secs(args.duration_secs),
        commit_interval_ms: args.commit_interval_ms,
        exe: std::env::current_exe().context("locating the eosflow binary")?,
        work_dir: args.work_dir.clone(),
        drain_timeout: Duration::from_secs(args.drain_timeout_secs),
        extra_env: verify_instance_env(args)?,
        unsendable_every: args.unsendable_every,
    })
}

fn verify_cmd(config: &Config, args: VerifyArgs) -> Result<std::process::ExitCode> {
    if let Some(name) = &args.scenario {
        return scenario_cmd(config, name, &args);
    }
    let opts = verify_options(&args)?;
    let report = verify::run(config, &opts).map_err(anyhow::Error::msg)?;
    println!("{}", report.line());
    Ok(if report.verdict.ok() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(2)
    })
}

/// `eosflow verify --scenario …`: one closing line per scenario; exit 2 on any violation.
fn scenario_cmd(config: &Config, name: &str, args: &VerifyArgs) -> Result<std::process::ExitCode> {
    let scenarios: Vec<verify::Scenario> = if name == "all" {
        verify::Scenario::ALL.to_vec()
    } else {
        vec![name.parse().map_err(anyhow::Error::msg)?]
    };
    let env = verify::scenario::ScenarioEnv {
        exe: std::env::current_exe().context("locating the eosflow binary")?,
        work_dir: args.work_dir.clone(),
        stack_script: args.stack_script.clone(),
        private_port: args.private_port,
        instance_env: verify_instance_env(args)?,
        storm_seed: args.seed,
    };
    let mut ok = true;
    for s in scenarios {
        // One scenario failing to run does not skip the others; it fails the command.
        match verify::scenario::run(config, s, args.short, &env) {
            Ok(report) => {
                println!("{report}");
                ok &= report.ok();
            }
            Err(e) => {
                eprintln!("error: scenario {}: {e}", s.name());
                println!("scenario={} error ok=false", s.name());
                ok = false;
            }
        }
    }
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(2)
    })
}

fn demo(config: &Config, args: &eosflow_cli::demo::DemoArgs) -> Result<std::process::ExitCode> {
    println!(
        "eosflow demo: the orders application for {} s at {} orders/s (order service → Postgres outbox → Kafka → orders+saga, stock, payment, customers; exactly-once)",
        args.duration_secs, args.rate
    );
    let report = eosflow_cli::demo::run(config, args, true).map_err(anyhow::Error::msg)?;
    println!();
    print!("{}", eosflow_cli::demo::summary(&report));
    println!();
    let e = &report.enrichment;
    println!(
        "{} profile_mismatches={} product_mismatches={} ns={}",
        report.verdict, e.profile_mismatches, e.product_mismatches, report.ns
    );
    if report.verdict.ok() && !report.ok() {
        println!("FAIL: a check above failed");
    }
    Ok(if report.ok() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(2)
    })
}

fn dlt_topic(topic: &str) -> String {
    if topic.ends_with(".DLT") {
        topic.to_string()
    } else {
        eosflow::internals::retry::dlt::topic_for(topic)
    }
}

fn dlt_cmd(config: &Config, action: DltAction) -> Result<std::process::ExitCode> {
    use eosflow::internals::retry::tooling::{self, Selector};
    let clients = KafkaClients::new(config.kafka.clone());
    match action {
        DltAction::List { topic } => {
            let t = dlt_topic(&topic);
            let letters = tooling::read(&clients, &t, &Selector::default())
                .with_context(|| format!("reading {t}"))?;
            let s = tooling::summarize(&letters);
            println!("{t}: {} records", letters.len());
            for (class, n) in &s.by_class {
                println!("  {class:<28} {n:>8}");
            }
            if let Some(oldest) = s.oldest {
                let age = (eosflow::internals::clock::now_ms() - oldest).max(0) / 1000;
                println!("  oldest failure {age} s ago");
            }
        }
        DltAction::Show {
            topic,
            select,
            limit,
        } => {
            let t = dlt_topic(&topic);
            let letters = tooling::read(&clients, &t, &select.into())
                .with_context(|| format!("reading {t}"))?;
            for d in letters.iter().take(limit) {
                println!(
                    "--- {t}[{}]@{}  key={}",
                    d.partition,
                    d.offset,
                    d.key.as_deref().unwrap_or("(none)")
                );
                let value = d
                    .value
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                let shown: String = value.chars().take(200).collect();
                println!("    value: {shown}");
                for (k, v) in &d.headers {
                    println!("    {k}: {v}");
                }
            }
            println!(
                "{} of {} selected records shown",
                letters.len().min(limit),
                letters.len()
            );
        }
        DltAction::Redrive {
            topic,
            select,
            reason,
            dry_run,
        } => {
            let t = dlt_topic(&topic);
            let letters = tooling::read(&clients, &t, &select.into())
                .with_context(|| format!("reading {t}"))?;
            if dry_run {
                for d in &letters {
                    println!(
                        "would redrive {t}[{}]@{} key={:?} id={:?}",
                        d.partition,
                        d.offset,
                        d.key,
                        d.header("id")
                    );
                }
                println!("{} records selected (dry run: nothing sent)", letters.len());
                return Ok(std::process::ExitCode::SUCCESS);
            }
            let total = letters.len();
            let n = tooling::redrive(&clients, &config.app.id, &t, &letters, &reason, |i| {
                progress("redrive", i, total)
            })
            .with_context(|| format!("redriving from {t}"))?;
            eprintln!();
            println!("redriven {n} records from {t} (ids kept; a second redrive is deduplicated)");
        }
        DltAction::Purge {
            topic,
            reason,
            before_offset,
        } => {
            if reason.trim().is_empty() {
                bail!("--reason must say why the records are purged (it is audited)");
            }
            let t = dlt_topic(&topic);
            let rt = tokio::runtime::Runtime::new().context("tokio")?;
            let n = rt
                .block_on(tooling::purge(
                    &clients,
                    &config.app.id,
                    &t,
                    before_offset,
                    &reason,
                ))
                .with_context(|| format!("purging {t}"))?;
            println!(
                "purged {n} records from {t}; audited in {}",
                tooling::AUDIT_TOPIC
            );
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A one-line progress bar on stderr for long operations.
fn progress(what: &str, done: usize, total: usize) {
    if total == 0 || (!done.is_multiple_of(100) && done != total) {
        return;
    }
    let width = 30;
    let filled = done * width / total;
    eprint!(
        "\r{what} [{}{}] {done}/{total}",
        "#".repeat(filled),
        "-".repeat(width - filled)
    );
}

fn schemas_cmd(config: &Config, action: SchemasAction) -> Result<std::process::ExitCode> {
    use eosflow::internals::codec::check::{self, CheckOptions};
    use eosflow::internals::codec::registry::Registry;
    let rt = tokio::runtime::Runtime::new().context("tokio")?;
    let registry = Registry::from_config(&config.schema_registry)?;
    match action {
        SchemasAction::Register(a) => {
            let opts = CheckOptions {
                dir: a.dir,
                git: false,
                registry: None,
                strategy: a.strategy,
                topic_template: a.topic,
                app_id: None,
            };
            let done = rt
                .block_on(check::register(&opts, &registry))
                .context("registering schemas")?;
            for r in done {
                println!(
                    "registered {:<40} subject {} id {} rule {}",
                    r.type_name, r.subject, r.id, r.rule
                );
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        SchemasAction::Check {
            args,
            app_id,
            no_registry,
            no_git,
        } => {
            let opts = CheckOptions {
                dir: args.dir,
                git: !no_git,
                registry: (!no_registry).then_some(registry),
                strategy: args.strategy,
                topic_template: args.topic,
                app_id: Some(app_id.unwrap_or_else(|| config.app.id.clone())),
            };
            let outcomes = rt
                .block_on(check::check(&opts))
                .context("checking schemas")?;
            let failed = outcomes.iter().filter(|o| !o.problems.is_empty()).count();
            for o in &outcomes {
                println!("{o}");
            }
            println!("{} comparisons, {failed} incompatible", outcomes.len());
            Ok(if failed == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            })
        }
    }
}
