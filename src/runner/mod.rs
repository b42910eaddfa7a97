//! The entry point a user's `main` calls: [`run`] turns a processor and a [`Config`] into a
//! running consumer-group member — the connection check, the `/metrics`, `/healthz` and
//! `/readyz` endpoints, the processing thread, SIGTERM/SIGINT handling with a bounded graceful
//! shutdown, and static membership (`processor.static_membership`, applied by the runtime).
//! `eosflow run --topology …` goes through the same function.
//!
//! ```no_run
//! use eosflow::processor::{Context, ProcessError, Processor, Record};
//!
//! /// Copies every record of `in` to `out`, exactly once.
//! struct Echo;
//!
//! impl Processor for Echo {
//!     fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
//!         ctx.emit("out", r.key.map(<[u8]>::to_vec), r.value.map(<[u8]>::to_vec), vec![]);
//!         Ok(())
//!     }
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     eosflow::init_logging();
//!     let mut config = eosflow::Config::load(None)?;
//!     config.processor.input_topics = vec!["in".into()];
//!     let summary = eosflow::run(&config, Echo)?;
//!     println!("{} records", summary.records);
//!     Ok(())
//! }
//! ```

mod endpoints;
mod logging;
mod signal;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use endpoints::{serve_endpoints, serve_queries, Endpoints, QueryListener};
pub use logging::init_logging;
pub use signal::{wait_for_signal_or, wait_for_signal_or_until, Signal};

use crate::config::Config;
use crate::kafka::client::ConnectError;
use crate::kafka::KafkaClients;
use crate::processor::{Application, ProcessorThreads, RunSummary, RuntimeError, StoreHandle};
use crate::query::{QueryService, ReadOnlyKeyValueStore, ReadOnlyWindowStore};
use crate::telemetry::http::HttpError;
use crate::topology::windows::WindowStoreHandle;

/// How long [`run`] waits for the broker to answer before giving up (a wrong password or an
/// unreachable broker then fails clearly instead of as endless retries).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why [`run`] (or one of its parts) stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The broker did not answer, or refused the credentials.
    #[error("connecting to Kafka: {0}")]
    Connect(#[from] ConnectError),
    /// The runtime could not start, or stopped on an error.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// `metrics.listen` is not a socket address.
    #[error("metrics.listen (EOSFLOW_METRICS_LISTEN) {value:?}: {source}")]
    Listen {
        /// The configured value.
        value: String,
        /// Why it does not parse.
        source: std::net::AddrParseError,
    },
    /// The metrics port is taken, or the metrics recorder could not be installed.
    #[error(transparent)]
    Endpoints(#[from] HttpError),
    /// The query listener (`[queries]`) could not start: its port is taken, or a certificate,
    /// key or CA file cannot be used (the error names the key).
    #[error(transparent)]
    Queries(#[from] crate::query::QueryListenerError),
    /// A thread or the signal runtime could not be created.
    #[error("{what}: {source}")]
    Io {
        /// What was being started.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A signal arrived but the open batch did not commit within `processor.shutdown_timeout_ms`.
    #[error("shutdown did not finish within processor.shutdown_timeout_ms ({0} ms); exiting: the open transaction is aborted when this instance restarts")]
    ShutdownTimeout(u64),
    /// The processing thread panicked.
    #[error("the processing thread panicked")]
    Panicked,
}

/// Runs `processor` — a [`crate::topology::Topology`], a [`crate::processor::ProcessorSpec`] or
/// a bare [`crate::processor::Processor`] — as one instance of its consumer group until
/// SIGTERM/SIGINT (a graceful stop:
/// the open batch commits, then the instance leaves the group or, with static membership, keeps
/// its assignment for a restart within the session timeout) or until the loop stops by itself.
///
/// Serves `/metrics`, `/healthz` and `/readyz` on `metrics.listen` when it is set. Logging is
/// the caller's choice ([`init_logging`] is the one `eosflow` uses). One processor runs one
/// processing thread: with `processor.threads` > 1 use [`run_threads`], which builds one per
/// thread.
pub fn run<P: Application + 'static>(
    config: &Config,
    processor: P,
) -> Result<RunSummary, RunError> {
    run_threads(config, one_thread(config, processor, "run", "run_threads")?)
}

/// The `make` of an instance with one processor, refusing `processor.threads > 1` and naming
/// the function to call instead (`called` was called; `instead` builds one per thread).
fn one_thread<P>(
    config: &Config,
    processor: P,
    called: &str,
    instead: &str,
) -> Result<impl FnMut(usize) -> Result<P, &'static str>, RunError> {
    if config.processor.threads > 1 {
        return Err(RunError::Runtime(RuntimeError::Config(format!(
            "processor.threads = {} needs one processor per thread: start the instance with eosflow::{instead}(&config, |_thread| build()) instead of {called}(&config, processor)",
            config.processor.threads
        ))));
    }
    let mut one = Some(processor);
    Ok(move |_| {
        one.take()
            .ok_or("one processor serves one processing thread")
    })
}

/// Runs `processor.threads` processing threads of one instance, each with the processor
/// `make(thread index)` builds (a topology built again, a handler constructed again: threads do
/// not share a processor's fields), until SIGTERM/SIGINT or until a thread fails; see [`run`]
/// for the rest and `processor::threads` for what the threads share.
///
/// ```no_run
/// # use eosflow::processor::{Context, ProcessError, Processor, Record};
/// # struct Echo;
/// # impl Processor for Echo {
/// #     fn process(&mut self, _: &mut Context<'_>, _: &Record<'_>) -> Result<(), ProcessError> { Ok(()) }
/// # }
/// let config = eosflow::config::Config::load(None)?;
/// eosflow::run_threads(&config, |_thread| Ok::<_, std::convert::Infallible>(Echo))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_threads<P, F, E>(config: &Config, make: F) -> Result<RunSummary, RunError>
where
    P: Application + 'static,
    F: FnMut(usize) -> Result<P, E>,
    E: std::fmt::Display,
{
    start_threads(config, make)?.wait()
}

/// Starts `processor` as one instance of its consumer group in the background (the connection
/// check, the endpoints, the processing thread) and returns at once: what [`run`] does, with
/// an [`Instance`] to query the instance's state with while it runs (see [`crate::query`]).
/// [`Instance::wait`] then blocks until SIGTERM/SIGINT as [`run`] does.
///
/// ```no_run
/// use eosflow::processor::StoreHandle;
/// use eosflow::serdes::{I64Serde, StringSerde};
/// # fn topology() -> eosflow::topology::Topology { unimplemented!() }
/// let counts: StoreHandle<String, i64> = StoreHandle::new("counts", StringSerde, I64Serde);
/// let config = eosflow::Config::load(None)?;
/// let instance = eosflow::start(&config, topology())?;
/// instance.queries().serve_store(&counts);
/// let ann = instance.store(&counts).get(&"ann".to_string());
/// instance.wait()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn start<P: Application + 'static>(
    config: &Config,
    processor: P,
) -> Result<Instance, RunError> {
    start_threads(
        config,
        one_thread(config, processor, "start", "start_threads")?,
    )
}

/// [`start`] with `processor.threads` processing threads, each with the processor `make`
/// builds (see [`run_threads`]).
pub fn start_threads<P, F, E>(config: &Config, make: F) -> Result<Instance, RunError>
where
    P: Application + 'static,
    F: FnMut(usize) -> Result<P, E>,
    E: std::fmt::Display,
{
    let clients = KafkaClients::new(config.kafka.clone());
    clients.check_connection(CONNECT_TIMEOUT)?;
    let threads = ProcessorThreads::new(config, make)?;
    let health = threads.health();
    let local = threads.local_stores();
    let endpoint = (!config.processor.application_server.is_empty())
        .then(|| config.processor.application_server.clone());
    let router = endpoint.map(|e| {
        let instance = config.instance_id().unwrap_or_default();
        crate::query::Router::new(clients.clone(), &config.app.id, &instance, Some(e))
    });
    if let Some(r) = &router {
        if let Err(e) = r.advertise() {
            tracing::error!(error = %e, topic = %crate::query::endpoints_topic(&config.app.id), "the interactive query endpoint could not be advertised: other instances answer 503 for this instance's keys instead of redirecting");
        }
    }
    local.set_partitioner(config.queries.partitioner);
    let queries = Arc::new(QueryService::new(
        local.clone(),
        router,
        config.queries.max_limit,
    ));
    // Before the loop starts: a taken port or an unusable certificate stops the start with
    // nothing running.
    let endpoints = serve_endpoints(config, health)?;
    let query_listener = serve_queries(config, queries.clone())?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let worker = {
        let shutdown = shutdown.clone();
        std::thread::Builder::new()
            .name("eos-loop".into())
            .spawn(move || threads.run(shutdown))
            .map_err(|source| RunError::Io {
                what: "spawning the processing thread",
                source,
            })?
    };
    Ok(Instance {
        worker,
        shutdown,
        local,
        queries,
        _endpoints: endpoints,
        _query_listener: query_listener,
        shutdown_timeout_ms: config.processor.shutdown_timeout_ms,
    })
}

/// A running instance (Kafka Streams' `KafkaStreams` after `start()`): its state can be
/// queried while it runs, and [`Instance::wait`] or [`Instance::close`] ends it.
pub struct Instance {
    worker: std::thread::JoinHandle<Result<RunSummary, RuntimeError>>,
    shutdown: Arc<AtomicBool>,
    local: Arc<crate::query::LocalStores>,
    queries: Arc<QueryService>,
    _endpoints: Option<Endpoints>,
    _query_listener: Option<QueryListener>,
    shutdown_timeout_ms: u64,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("running", &!self.worker.is_finished())
            .finish()
    }
}

impl Instance {
    /// Read-only access to key-value store `handle` over this instance's open tasks.
    pub fn store<K, V>(&self, handle: &StoreHandle<K, V>) -> ReadOnlyKeyValueStore<K, V> {
        ReadOnlyKeyValueStore::new(self.local.clone(), handle)
    }

    /// Read-only access to windowed store `handle` over this instance's open tasks.
    pub fn window_store<K, V>(
        &self,
        handle: &WindowStoreHandle<K, V>,
    ) -> ReadOnlyWindowStore<K, V> {
        ReadOnlyWindowStore::new(self.local.clone(), handle)
    }

    /// The HTTP side: which stores `/stores/...` serves.
    pub fn queries(&self) -> &QueryService {
        &self.queries
    }

    /// Whether the processing loop still runs.
    pub fn is_running(&self) -> bool {
        !self.worker.is_finished()
    }

    /// Blocks until SIGTERM/SIGINT (then stops gracefully, within
    /// `processor.shutdown_timeout_ms`) or until the loop stops by itself; what [`run`] returns.
    pub fn wait(self) -> Result<RunSummary, RunError> {
        let signal = wait_for_signal_or(&self.worker)?;
        if let Some(signal) = signal {
            tracing::info!(signal = signal.name(), "shutting down");
        }
        self.stop(signal.is_some())
    }

    /// Stops the instance now, gracefully (the open batch commits, the instance leaves its
    /// group), within `processor.shutdown_timeout_ms`.
    pub fn close(self) -> Result<RunSummary, RunError> {
        self.stop(true)
    }

    fn stop(self, bounded: bool) -> Result<RunSummary, RunError> {
        self.shutdown.store(true, Ordering::Relaxed);
        if bounded {
            let deadline = Instant::now() + Duration::from_millis(self.shutdown_timeout_ms);
            while !self.worker.is_finished() {
                if Instant::now() >= deadline {
                    return Err(RunError::ShutdownTimeout(self.shutdown_timeout_ms));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let summary = self.worker.join().map_err(|_| RunError::Panicked)??;
        tracing::info!(
            records = summary.records,
            commits = summary.commits,
            aborts = summary.aborts,
            dedup_hits = summary.dedup_hits,
            dead_lettered = summary.dead_lettered,
            retried = summary.retried,
            "stopped"
        );
        Ok(summary)
    }
}
