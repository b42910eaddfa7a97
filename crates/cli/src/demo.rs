//! `eosflow demo` (`make demo`): the orders application end to end on the local stack, with
//! no flags and no config file. An order service writes orders to Postgres; the outbox router
//! publishes them; the order processor (aggregate + fulfilment saga), the stock and payment
//! services and the customer read model run on the exactly-once runtime; a live progress line
//! shows it all; at the end the committed outputs are read back and checked.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use eosflow::config::Config;
use eosflow::internals::kafka::reader::ReaderContext;
use eosflow::internals::processor::Runtime;
use eosflow::kafka::topics::{self, TopicOutcome, TopicSpec};
use eosflow::kafka::{ClientRole, KafkaClients};
use eosflow::processor::{Application, RunSummary};
use eosflow_orders::aggregate::OrderProcessor;
use eosflow_orders::catalog;
use eosflow_orders::check::{self, Enrichment, Outputs, Verdict};
use eosflow_orders::messages::{SagaEnded, SagaOutcome, StatusChanged};
use eosflow_orders::projection::CustomersProcessor;
use eosflow_orders::services::{PaymentService, StockService};
use eosflow_orders::writer::{Mix, Tally, Writer};
use eosflow_orders::{self as orders, FailureRates, SagaTimeouts, Topics, Topology};

/// How long, how fast, how hostile.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Seconds the order service places orders.
    #[arg(long, default_value_t = 60)]
    pub duration_secs: u64,
    /// Orders per second.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Partitions of every topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Share of orders the customer cancels a moment after placing them.
    #[arg(long, default_value_t = 0.05)]
    pub cancel_rate: f64,
    /// Share of orders followed by a poison event (invalid order, unknown order, second placement).
    #[arg(long, default_value_t = 0.03)]
    pub poison_rate: f64,
    /// Share of events the order service sends twice with the same event id.
    #[arg(long, default_value_t = 0.02)]
    pub resend_rate: f64,
    /// Deadline for every saga to end once the order service stopped.
    #[arg(long, default_value_t = 120)]
    pub drain_timeout_secs: u64,
    /// Where the stores live.
    #[arg(long, default_value = "target/demo")]
    pub work_dir: PathBuf,
    /// Milliseconds the saga waits for any step's reply before its timeout fires (short, so
    /// the demo's lost and late replies show timeouts; `eosflow run` defaults to 30 s).
    #[arg(long, default_value_t = 2_000)]
    pub saga_timeout_ms: u64,
    /// Failure rates of the simulated services.
    #[command(flatten)]
    pub rates: FailureRates,
}

impl Default for DemoArgs {
    fn default() -> Self {
        Self {
            duration_secs: 60,
            rate: 20.0,
            partitions: 4,
            cancel_rate: 0.05,
            poison_rate: 0.03,
            resend_rate: 0.02,
            drain_timeout_secs: 120,
            work_dir: PathBuf::from("target/demo"),
            saga_timeout_ms: 2_000,
            rates: FailureRates::default(),
        }
    }
}

/// What a run did and whether its checks hold.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The topic namespace of the run.
    pub ns: String,
    /// The checks.
    pub verdict: Verdict,
    /// What the outputs hold.
    pub outputs: Outputs,
    /// Poison events written, by the code their dead letter must carry.
    pub poison: BTreeMap<&'static str, u64>,
    /// Customer cancellations requested.
    pub cancels: u64,
    /// Events re-sent with the same event id.
    pub resent: u64,
    /// Wall time from the first order to the last saga's end.
    pub elapsed: Duration,
    /// Whether every poison event is in the DLT under its code.
    pub poison_dead_lettered: bool,
    /// The read model's enrichment (customer profiles, catalog products) against what was
    /// written.
    pub enrichment: Enrichment,
    /// Customers registered and tier changes by the order service.
    pub profiles: (u64, u64),
}

impl DemoReport {
    /// Every check holds.
    pub fn ok(&self) -> bool {
        self.verdict.ok() && self.poison_dead_lettered && self.enrichment.ok()
    }
}

/// Skus in the demo's catalog: the order service orders `sku-000`…`sku-049`; the catalog
/// lacks the last five, so lines without a product name show in the summary too.
pub const CATALOG_SKUS: u32 = 45;

/// Live counts from a `read_committed` tail of the outputs.
#[derive(Debug, Default)]
struct Live {
    published: AtomicU64,
    finals: AtomicU64,
    completed: AtomicU64,
    compensated: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
}

impl Live {
    fn ended(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
            + self.compensated.load(Ordering::Relaxed)
            + self.failed.load(Ordering::Relaxed)
    }
}

fn tail(
    clients: KafkaClients,
    topics: Topics,
    partitions: i32,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    let consumer: BaseConsumer<ReaderContext> = clients
        .config(ClientRole::Reader)
        .create_with_context(ReaderContext)
        .map_err(|e| e.to_string())?;
    let dlts: Vec<String> = Topology::ALL
        .iter()
        .flat_map(|t| topics.inputs(*t))
        .map(|t| eosflow::internals::retry::dlt::topic_for(&t))
        .collect();
    let mut tpl = TopicPartitionList::new();
    for t in [&topics.orders, &topics.status, &topics.saga_events]
        .into_iter()
        .chain(dlts.iter())
    {
        for p in 0..partitions {
            tpl.add_partition_offset(t, p, Offset::Beginning)
                .map_err(|e| e.to_string())?;
        }
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    while !stop.load(Ordering::Relaxed) {
        let Some(m) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let Ok(m) = m else { continue };
        let t = m.topic();
        if t == topics.orders {
            live.published.fetch_add(1, Ordering::Relaxed);
        } else if t == topics.status {
            if serde_json::from_slice::<StatusChanged>(m.payload().unwrap_or_default())
                .is_ok_and(|s| s.to_status.is_final())
            {
                live.finals.fetch_add(1, Ordering::Relaxed);
            }
        } else if t == topics.saga_events {
            match serde_json::from_slice::<SagaEnded>(m.payload().unwrap_or_default())
                .map(|s| s.outcome)
            {
                Ok(SagaOutcome::Completed) => live.completed.fetch_add(1, Ordering::Relaxed),
                Ok(SagaOutcome::Compensated) => live.compensated.fetch_add(1, Ordering::Relaxed),
                Ok(SagaOutcome::CompensationFailed) => live.failed.fetch_add(1, Ordering::Relaxed),
                Err(_) => 0,
            };
        } else {
            live.dead.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// A processor running on its own thread until told to stop.
struct Running {
    name: &'static str,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<RunSummary, String>>,
}

fn start<P: Application + 'static>(
    name: &'static str,
    config: &Config,
    p: P,
) -> Result<Running, String> {
    let runtime = Runtime::new(config, p).map_err(|e| format!("starting {name}: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || runtime.run(s).map_err(|e| e.to_string()))
        .map_err(|e| format!("spawning {name}: {e}"))?;
    Ok(Running { name, stop, handle })
}

/// Starts the four processors of the application under `base` (app id, stack addresses) on
/// threads of this process; what `eosflow run --topology <t>` does one per process.
fn start_all(
    base: &Config,
    topics: &Topics,
    rates: FailureRates,
    timeouts: SagaTimeouts,
) -> Result<Vec<Running>, String> {
    let cfg = |t: Topology| orders::configure(base, t, topics);
    let group = orders::app_id(&base.app.id, Topology::Orders);
    Ok(vec![
        start(
            "orders",
            &cfg(Topology::Orders),
            OrderProcessor::new(topics.clone(), &group, &base.schema_registry.url)?
                .with_timeouts(timeouts)
                .spec(),
        )?,
        start(
            "stock",
            &cfg(Topology::Stock),
            StockService::new(topics.clone(), rates).spec(),
        )?,
        start(
            "payment",
            &cfg(Topology::Payment),
            PaymentService::new(topics.clone(), rates).spec(),
        )?,
        start(
            "customers",
            &cfg(Topology::Customers),
            CustomersProcessor::new(topics.clone()).spec(),
        )?,
    ])
}

fn stop_all(running: Vec<Running>) -> Result<(), String> {
    for r in &running {
        r.stop.store(true, Ordering::Relaxed);
    }
    for r in running {
        r.handle
            .join()
            .map_err(|_| format!("{} panicked", r.name))?
            .map_err(|e| format!("{}: {e}", r.name))?;
    }
    Ok(())
}

/// Creates the run's topics (all fresh).
pub fn create_topics(
    clients: &KafkaClients,
    topics: &Topics,
    app_id: &str,
    partitions: i32,
    levels: u32,
) -> Result<(), String> {
    let mut specs = topics.specs(app_id, partitions, levels);
    specs.push(TopicSpec::new(
        eosflow_outbox::offsets_topic(app_id),
        1,
        "compact",
    ));
    let outcomes = topics::apply_blocking(clients, &specs, Duration::from_secs(30))
        .map_err(|e| format!("creating the run's topics: {e}"))?;
    if let Some((t, o)) = outcomes.iter().find(|(_, o)| *o != TopicOutcome::Created) {
        return Err(format!(
            "topic {t} already existed ({o:?}); a run needs fresh topics"
        ));
    }
    wait_led(clients, &specs, Duration::from_secs(30))
}

/// Waits until every topic of `specs` is in the cluster metadata with a leader for each
/// partition: a created topic takes a moment to appear, and a runtime started before that
/// refuses to start ("topics missing").
fn wait_led(clients: &KafkaClients, specs: &[TopicSpec], timeout: Duration) -> Result<(), String> {
    let consumer: BaseConsumer<ReaderContext> = clients
        .config(ClientRole::Reader)
        .create_with_context(ReaderContext)
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    loop {
        let md = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .map_err(|e| format!("cluster metadata: {e}"))?;
        let led = |spec: &TopicSpec| {
            md.topics().iter().any(|t| {
                t.name() == spec.name
                    && t.error().is_none()
                    && t.partitions().len() == spec.partitions as usize
                    && t.partitions()
                        .iter()
                        .all(|p| p.leader() >= 0 && p.error().is_none())
            })
        };
        let waiting: Vec<&str> = specs
            .iter()
            .filter(|s| !led(s))
            .map(|s| s.name.as_str())
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "topics created but without a leader after {timeout:?}: {}",
                waiting.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The demo's settings on top of the user's: its own app id, fast retries, local stores.
pub fn demo_config(config: &Config, ns: &str, work_dir: &std::path::Path) -> Config {
    let mut c = config.clone();
    c.app.id = ns.to_string();
    c.app.instance_id = "demo".into();
    c.processor.commit_interval_ms = 100;
    c.processor.session_timeout_ms = 6000;
    c.retry.delays_ms = vec![200, 1000, 3000];
    c.state.dir = work_dir.join(ns).join("state");
    c.metrics.listen = String::new();
    let pg = ns.replace('-', "_");
    c.outbox.table = format!("{pg}_outbox");
    c.outbox.slot = pg.clone();
    c.outbox.publication = pg;
    c.outbox.topic_template = Topics::new(ns).orders;
    // The customer profiles: a second outbox table of the same router and slot.
    c.outbox.tables = vec![eosflow::config::OutboxTableConfig {
        table: format!("{}_customer_outbox", ns.replace('-', "_")),
        topic_template: Topics::new(ns).profiles,
        ..Default::default()
    }];
    c.outbox.prune_interval_secs = 0;
    c.outbox.heartbeat_interval_ms = 2000;
    c
}

fn group_lag(clients: &KafkaClients, group: &str, topics: &Topics, partitions: i32) -> i64 {
    [&topics.orders, &topics.replies]
        .iter()
        .map(|t| eosflow_verify::group_lag(clients, group, t, partitions).unwrap_or(-1))
        .sum()
}

/// Runs the demo: topics, schemas, processors, router, order service; progress on stderr
/// once a second (when `progress`); the outputs read back and judged.
pub fn run(config: &Config, args: &DemoArgs, progress: bool) -> Result<DemoReport, String> {
    args.rates.validate()?;
    let timeouts = SagaTimeouts::uniform(args.saga_timeout_ms);
    timeouts.validate()?;
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let ns = format!("demo-{run_id}");
    let topics = Topics::new(&ns);
    let cfg = demo_config(config, &ns, &args.work_dir);
    let clients = KafkaClients::new(cfg.kafka.clone());
    let levels = cfg.retry.delays_ms.len() as u32;
    create_topics(&clients, &topics, &ns, args.partitions, levels)?;
    let say = |s: String| {
        if progress {
            eprintln!("{s}");
        }
    };
    say(format!(
        "topics     {} (+ retry levels, DLTs, changelogs), {} partitions",
        ns, args.partitions
    ));
    match register_schemas(&cfg, &topics) {
        Ok(n) => say(format!(
            "schemas    {n} contracts registered at {}",
            cfg.schema_registry.url
        )),
        Err(e) => say(format!(
            "schemas    not registered ({e}); the demo's JSON events need none"
        )),
    }

    // The catalog service: the product catalog, written before the order processor starts
    // (it reads the whole topic as a global table before joining its group).
    let products = catalog::demo_catalog(CATALOG_SKUS);
    catalog::publish_catalog(
        &clients,
        &topics.products,
        &products,
        Duration::from_secs(30),
    )?;
    say(format!(
        "catalog    {} products on {} (a global table of the order processor)",
        products.len(),
        topics.products
    ));

    let orders_table = format!("{}_orders", ns.replace('-', "_"));
    let customers_table = format!("{}_customers", ns.replace('-', "_"));
    let connect = || {
        Writer::connect(
            cfg.postgres.url.expose(),
            &orders_table,
            &customers_table,
            &cfg.outbox,
        )
    };
    let mut writer = connect().map_err(|e| e.to_string())?;
    let mut sql = format!("drop publication if exists {};", cfg.outbox.publication);
    for t in cfg.outbox.served() {
        sql.push_str(&format!(
            " drop table if exists {};",
            eosflow_outbox::quoted_table(&t)
        ));
    }
    for t in [&orders_table, &customers_table] {
        sql.push_str(&format!(
            " drop table if exists {};",
            eosflow_outbox::quote_ident(t)
        ));
    }
    let cleanup = Cleanup {
        sql,
        slot: cfg.outbox.slot.clone(),
    };

    let result = (|| {
        let processors = start_all(&cfg, &topics, args.rates, timeouts)?;
        let router_stop = Arc::new(AtomicBool::new(false));
        let router = {
            let (c, s) = (cfg.clone(), router_stop.clone());
            std::thread::Builder::new()
                .name("outbox".into())
                .spawn(move || {
                    let health = eosflow::internals::telemetry::Health::always_ready();
                    eosflow_outbox::run(&c, s, &health).map_err(|e| e.to_string())
                })
                .map_err(|e| e.to_string())?
        };
        // CDC sees only what is written after the slot exists: wait for the router to stream.
        let q = eosflow_outbox::cdc::streaming_sql(&cfg.outbox.slot);
        let deadline = Instant::now() + Duration::from_secs(60);
        while writer.text(&q).map_err(|e| e.to_string())?.as_deref() != Some("true") {
            if router.is_finished() || Instant::now() > deadline {
                return Err(
                    "the outbox router did not start streaming from its slot within 60 s"
                        .to_string(),
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        say(format!(
            "running    order service {:.0}/s for {} s → outbox router → orders+saga, stock, payment, customers (failure rates: stock {}, payment {}, ship {}, release {}; replies lost {}, late {} by {} ms; saga timeout {} ms)",
            args.rate, args.duration_secs, args.rates.stock_failure_rate, args.rates.payment_failure_rate, args.rates.ship_failure_rate, args.rates.release_failure_rate,
            args.rates.lost_reply_rate, args.rates.late_reply_rate, args.rates.late_reply_delay_ms, args.saga_timeout_ms
        ));

        let live = Arc::new(Live::default());
        let tail_stop = Arc::new(AtomicBool::new(false));
        let tailer = {
            let (c, t, l, s, p) = (
                clients.clone(),
                topics.clone(),
                live.clone(),
                tail_stop.clone(),
                args.partitions,
            );
            std::thread::spawn(move || tail(c, t, p, l, s))
        };
        let tally = Arc::new(Tally::default());
        let writer_stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let mix = Mix {
            rate: args.rate,
            cancel_rate: args.cancel_rate,
            poison_rate: args.poison_rate,
            resend_rate: args.resend_rate,
            customers: 200,
            tier_change_rate: 0.02,
        };
        let duration = Duration::from_secs(args.duration_secs);
        let writing = {
            let (t, s) = (tally.clone(), writer_stop.clone());
            let prefix = format!("o{run_id}");
            std::thread::spawn(move || writer.run(&prefix, mix, duration, &t, &s).map(|()| writer))
        };
        let group = orders::app_id(&ns, Topology::Orders);
        // The lag is slow to ask for (committed records are counted): a thread keeps it fresh
        // so the progress line ticks once a second.
        let lag = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let lagger = {
            let (c, g, t, l, s, p) = (
                clients.clone(),
                group.clone(),
                topics.clone(),
                lag.clone(),
                tail_stop.clone(),
                args.partitions,
            );
            std::thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    l.store(group_lag(&c, &g, &t, p), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(500));
                }
            })
        };
        let mut writing = Some(writing);
        let mut writer_back: Option<Writer> = None;
        let mut last = Instant::now() - Duration::from_secs(1);
        let mut drain_deadline: Option<Instant> = None;
        let outcome = loop {
            if last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                if progress {
                    eprint!(
                        "\r  {:>4}s  placed {:>6}  published {:>6}  final {:>6}  sagas completed {:>6} compensated {:>5}  DLT {:>4}  lag {:>5} ",
                        started.elapsed().as_secs(),
                        tally.placed.load(Ordering::Relaxed),
                        live.published.load(Ordering::Relaxed),
                        live.finals.load(Ordering::Relaxed),
                        live.completed.load(Ordering::Relaxed),
                        live.compensated.load(Ordering::Relaxed) + live.failed.load(Ordering::Relaxed),
                        live.dead.load(Ordering::Relaxed),
                        lag.load(Ordering::Relaxed),
                    );
                }
            }
            if let Some(r) = processors.iter().find(|r| r.handle.is_finished()) {
                break Err(format!("processor {} stopped by itself", r.name));
            }
            if router.is_finished() {
                break Err("the outbox router stopped by itself".into());
            }
            if writing.as_ref().is_some_and(JoinHandle::is_finished) {
                let joined = writing.take().map(JoinHandle::join);
                match joined {
                    Some(Ok(Ok(w))) => writer_back = Some(w),
                    Some(Ok(Err(e))) => break Err(format!("order service: {e}")),
                    _ => break Err("the order service panicked".into()),
                }
                drain_deadline =
                    Some(Instant::now() + Duration::from_secs(args.drain_timeout_secs));
            }
            if let Some(d) = drain_deadline {
                let placed = tally.placed.load(Ordering::Relaxed);
                if live.ended() >= placed && live.finals.load(Ordering::Relaxed) >= placed {
                    break Ok(started.elapsed());
                }
                if Instant::now() > d {
                    break Err(format!(
                        "sagas still running {} s after the last order",
                        args.drain_timeout_secs
                    ));
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if progress {
            eprintln!();
        }
        writer_stop.store(true, Ordering::Relaxed);
        if let Some(h) = writing.take() {
            if let Ok(Ok(w)) = h.join() {
                writer_back = Some(w);
            }
        }
        tail_stop.store(true, Ordering::Relaxed);
        let _ = tailer.join();
        let _ = lagger.join();
        router_stop.store(true, Ordering::Relaxed);
        let routed = router
            .join()
            .map_err(|_| "the outbox router panicked".to_string())?;
        stop_all(processors)?;
        let routed = routed.map_err(|e| format!("outbox router: {e}"))?;
        tracing::info!(%routed, "outbox router stopped");
        let elapsed = outcome?;
        let writer = writer_back.ok_or_else(|| "the order service did not finish".to_string())?;
        let placed = writer.placed_orders().map_err(|e| e.to_string())?;
        let outputs = check::read(&clients, &topics, Duration::from_secs(60))?;
        let verdict = check::judge(&placed, &outputs);
        let profiles = writer.profiles().map_err(|e| e.to_string())?;
        let enrichment = check::enrichment(&profiles, writer.tier_history(), &products, &outputs);
        let poison = tally.poison();
        let orders_dlt = eosflow::internals::retry::dlt::topic_for(&topics.orders);
        let poison_dead_lettered = poison.iter().all(|(code, n)| {
            outputs
                .dead_letters
                .get(&orders_dlt)
                .and_then(|c| c.get(*code))
                .copied()
                .unwrap_or(0)
                == *n
        });
        Ok((
            writer,
            DemoReport {
                ns: ns.clone(),
                verdict,
                outputs,
                poison,
                cancels: tally.cancels.load(Ordering::Relaxed),
                resent: tally.resent.load(Ordering::Relaxed),
                elapsed,
                poison_dead_lettered,
                enrichment,
                profiles: (
                    tally.profiles.load(Ordering::Relaxed),
                    tally.tier_changes.load(Ordering::Relaxed),
                ),
            },
        ))
    })();
    match result {
        Ok((writer, report)) => {
            cleanup.run(&writer);
            // The stores are only this run's: their changelogs stay in Kafka.
            let _ = std::fs::remove_dir_all(args.work_dir.join(&report.ns));
            Ok(report)
        }
        Err(e) => {
            // The writer went into its thread; a fresh connection drops the slot and tables.
            if let Ok(w) = connect() {
                cleanup.run(&w);
            }
            Err(e)
        }
    }
}

/// Drops what the run created in Postgres: above all the replication slot, which would pin
/// WAL on the server forever.
struct Cleanup {
    sql: String,
    slot: String,
}

impl Cleanup {
    fn run(&self, w: &Writer) {
        let drop_slot = eosflow_outbox::cdc::drop_released_slot_sql(&self.slot);
        let still = format!(
            "select slot_name::text from pg_replication_slots where slot_name = '{}'",
            self.slot
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let _ = w.execute(&drop_slot);
            if matches!(w.text(&still), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Err(e) = w.execute(&self.sql) {
            tracing::warn!(error = %e, "dropping the demo's tables");
        }
    }
}

fn register_schemas(cfg: &Config, topics: &Topics) -> Result<usize, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let registry = eosflow::internals::codec::registry::Registry::new(&cfg.schema_registry.url);
    let catalog = eosflow_orders::contracts::catalog().map_err(|e| e.to_string())?;
    let done = rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                registry.register_catalog(
                    &catalog,
                    eosflow::internals::codec::SubjectStrategy::TopicRecord,
                    |c| {
                        if c.domain == "fulfilment" {
                            topics.replies.clone()
                        } else {
                            topics.orders.clone()
                        }
                    },
                ),
            )
            .await
        })
        .map_err(|_| "the registry did not answer within 20 s".to_string())?
        .map_err(|e| e.to_string())?;
    Ok(done.len())
}

/// The summary table printed at the end of `eosflow demo`.
pub fn summary(r: &DemoReport) -> String {
    let v = &r.verdict;
    let o = &r.outputs;
    let mut s = String::new();
    let mut row = |k: &str, val: String| s.push_str(&format!("  {k:<44} {val:>10}\n"));
    row("orders placed (Postgres)", v.orders.to_string());
    row(
        "  customers registered (profile rows)",
        r.profiles.0.to_string(),
    );
    row("  customer tier changes", r.profiles.1.to_string());
    row("  customer cancellations requested", r.cancels.to_string());
    row(
        "  events re-sent with the same event id",
        r.resent.to_string(),
    );
    for (code, n) in &r.poison {
        row(&format!("  poison events: {code}"), n.to_string());
    }
    row(
        "records published by the outbox router",
        o.published.to_string(),
    );
    row("status changes (read_committed)", o.transitions.to_string());
    row("orders shipped", v.shipped.to_string());
    row("orders cancelled", v.cancelled.to_string());
    for outcome in [
        SagaOutcome::Completed,
        SagaOutcome::Compensated,
        SagaOutcome::CompensationFailed,
    ] {
        row(
            &format!("sagas {}", outcome.as_str()),
            v.sagas.get(&outcome).copied().unwrap_or(0).to_string(),
        );
    }
    for step in orders::saga::TimedStep::ALL {
        row(
            &format!("saga timeouts: {}", step.as_str()),
            v.timeouts
                .get(step.as_str())
                .copied()
                .unwrap_or(0)
                .to_string(),
        );
    }
    let late: u64 = o
        .dead_letters
        .values()
        .filter_map(|codes| codes.get("late-reply"))
        .sum();
    row("late replies (after their timeout)", late.to_string());
    for (topic, codes) in &o.dead_letters {
        for (code, n) in codes {
            row(
                &format!(
                    "DLT {} {code}",
                    topic
                        .rsplit_once('.')
                        .map_or(topic.as_str(), |(a, _)| a.rsplit('.').next().unwrap_or(a))
                ),
                n.to_string(),
            );
        }
    }
    let e = &r.enrichment;
    row(
        "enriched: orders with customer tier",
        e.orders_with_tier.to_string(),
    );
    row(
        "enriched: lines with product names",
        format!("{} of {}", e.named_lines, e.lines),
    );
    row(
        "enriched: view updates without profile",
        format!("{} of {}", e.updates_without_profile, o.view_records),
    );
    row("seconds", format!("{:.1}", r.elapsed.as_secs_f64()));
    s.push('\n');
    let check = |ok: bool, what: String| format!("  [{}] {what}\n", if ok { "ok" } else { "FAIL" });
    s.push_str(&check(v.final_once == v.orders && v.final_twice == 0 && v.no_final == 0 && v.unexpected_finals == 0,
        format!("every placed order reached a final state exactly once ({} of {}; {} twice, {} never, {} unexpected)", v.final_once, v.orders, v.final_twice, v.no_final, v.unexpected_finals)));
    s.push_str(&check(v.saga_missing == 0 && v.saga_twice == 0 && v.disagreements == 0,
        format!("every saga ended once, completed or compensated, agreeing with its order ({} missing, {} twice, {} disagree)", v.saga_missing, v.saga_twice, v.disagreements)));
    s.push_str(&check(
        v.timeout_inconsistent == 0 && v.timeout_alerts_missing == 0,
        format!(
            "every timed-out saga ended as its step demands: cancelled before the pivot, shipped and alerted once per timeout after it ({} inconsistent, {} alerts missing)",
            v.timeout_inconsistent, v.timeout_alerts_missing
        ),
    ));
    s.push_str(&check(
        v.view_mismatches == 0,
        format!(
            "the customer read model shows every order's final status ({} mismatches)",
            v.view_mismatches
        ),
    ));
    s.push_str(&check(
        e.ok(),
        format!(
            "every customer view carries its profile (name, a tier they had) and every order line the catalog's product, or none for a sku the catalog lacks ({} profile mismatches of {} customers, {} product mismatches of {} lines)",
            e.profile_mismatches, e.customers, e.product_mismatches, e.lines
        ),
    ));
    s.push_str(&check(
        r.poison_dead_lettered,
        "every poison event is in the orders DLT under its reason".to_string(),
    ));
    for (code, example) in &o.examples {
        s.push_str(&format!(
            "      e.g. {}\n",
            if example.len() > 150 {
                format!(
                    "{}…",
                    &example[..example
                        .char_indices()
                        .nth(150)
                        .map_or(example.len(), |(i, _)| i)]
                )
            } else {
                example.clone()
            }
        ));
        let _ = code;
    }
    s
}
