//! State TTL against the real broker (docs/ttl.md): keys a store expired are tombstoned in its
//! changelog in the batch's transaction, so they stay gone in a store restored from the
//! changelog on a wiped state directory and in a standby's warm copy, and the restored expiry
//! index goes on expiring what is left.
//!
//! The workload, in event time from `base`: ten keys written at `base` with a 60 s TTL, five
//! of them written again at `base + 50 s` (now due at `base + 110 s`), and a record at
//! `base + 100 s` whose stream time expires the other five.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::state::{restore, Column, Store, StoreCache};
use eosflow::processor::{
    Context, ProcessError, Processor, ProcessorSpec, Record, StoreHandle, TtlClock,
};
use eosflow::serdes::StringSerde;
use rdkafka::Message;
use support::pipeline::{Instance, Pipeline};

const TTL: Duration = Duration::from_secs(60);

/// `put` writes the key through the TTL handle; `get` emits `{"raw": .., "ttl": ..}`: whether
/// the key is in the store as a handle without a TTL reads it (what the store holds) and as
/// the TTL handle reads it; anything else only moves stream time.
struct Sessions {
    output: String,
    ttl: StoreHandle<String, String>,
    raw: StoreHandle<String, String>,
}

fn sessions(output: &str, store: &str) -> ProcessorSpec<Sessions> {
    let raw = StoreHandle::new(store, StringSerde, StringSerde);
    let ttl = raw
        .clone()
        .with_ttl(TTL, TtlClock::EventTime)
        .expect("a valid TTL");
    ProcessorSpec::new(Sessions {
        output: output.to_string(),
        ttl,
        raw,
    })
    .store_name("count")
    .store(store)
    .no_dedup()
}

impl Processor for Sessions {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        match r.value.unwrap_or_default() {
            b"put" => {
                let at = r.timestamp.unwrap_or_default().to_string();
                ctx.store(&self.ttl)?.put(&key, &at)?;
            }
            b"get" => {
                let raw = ctx.store(&self.raw)?.get(&key)?.is_some();
                let ttl = ctx.store(&self.ttl)?.get(&key)?.is_some();
                let v = serde_json::json!({"raw": raw, "ttl": ttl});
                ctx.emit(
                    self.output.clone(),
                    Some(key.into_bytes()),
                    Some(v.to_string().into_bytes()),
                    vec![],
                );
            }
            _ => {}
        }
        Ok(())
    }
}

fn keys(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("k{i}")).collect()
}

/// Produces the workload (see the module doc) on partition 0 and returns `base`.
fn produce_workload(topic: &str, base: i64) {
    let mut records: Vec<support::Timed> = Vec::new();
    for k in keys(0..10) {
        records.push((Some(0), k, "put".into(), base));
    }
    for k in keys(5..10) {
        records.push((Some(0), k, "put".into(), base + 50_000));
    }
    records.push((Some(0), "tick".into(), "tick".into(), base + 100_000));
    support::produce_timed(topic, &records);
}

/// An event-time base an hour ago: recent enough for the topics' time-based retention.
fn base() -> i64 {
    eosflow::internals::clock::now_ms() - 3_600_000
}

/// The last value of each key of `topic` (a tombstone is `None`): what compaction keeps and
/// what every restore replays.
fn folded(topic: &str) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        out.insert(
            m.key().unwrap_or_default().to_vec(),
            m.payload().map(<[u8]>::to_vec),
        );
        Ok(())
    })
    .expect("read the changelog");
    out
}

/// Where an instance keeps its copy of partition 0 of `changelog`'s store.
fn store_dir(state_dir: &Path, app: &str, instance: &str, changelog: &str) -> PathBuf {
    let dir = state_dir
        .join(app)
        .join(instance)
        .join(format!("{changelog}-0"));
    assert!(dir.is_dir(), "{} exists", dir.display());
    dir
}

/// The state keys of a store at `dir`, and how many keys its expiry index holds.
fn store_contents(dir: &Path, changelog: &str) -> (Vec<String>, usize) {
    let source = format!("{changelog}[0]");
    let (store, _) = Store::open(dir, &source, &StoreCache::new(8 << 20)).expect("open the store");
    let state = store
        .entries(Column::State)
        .expect("state")
        .into_iter()
        .map(|(k, _)| String::from_utf8_lossy(&k).to_string())
        .collect();
    let index = store.entries(Column::TimerIndex).expect("index").len();
    (state, index)
}

/// The last `{"raw", "ttl"}` answer per key on `topic`.
fn answers(topic: &str) -> BTreeMap<String, (bool, bool)> {
    let mut out = BTreeMap::new();
    read_all(&support::clients(), topic, Duration::from_secs(60), |m| {
        let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
        let v: serde_json::Value =
            serde_json::from_slice(m.payload().unwrap_or_default()).map_err(|e| e.to_string())?;
        out.insert(key, (v["raw"] == true, v["ttl"] == true));
        Ok(())
    })
    .expect("read the output");
    out
}

fn gets(topic: &str, at: i64) {
    let records: Vec<support::Timed> = keys(0..10)
        .into_iter()
        .map(|k| (Some(0), k, "get".to_string(), at))
        .collect();
    support::produce_timed(topic, &records);
}

/// The process's metrics, rendered as `/metrics` shows them (one recorder per process; both
/// tests read it).
struct Metrics(Box<dyn Fn() -> String + Send + Sync>);

impl Metrics {
    /// The value of the series of `name` whose labels include every one of `labels`.
    fn value(&self, name: &str, labels: &[&str]) -> Option<f64> {
        (self.0)().lines().find_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (series, value) = rest.rsplit_once(' ')?;
            if !series.starts_with('{') || !labels.iter().all(|want| series.contains(want)) {
                return None;
            }
            value.parse().ok()
        })
    }
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let handle = eosflow::internals::telemetry::http::install_recorder().expect("recorder");
        Metrics(Box::new(move || handle.render()))
    })
}

#[test]
fn expired_keys_stay_gone_in_the_changelog_and_in_a_store_restored_on_a_wiped_state_dir() {
    let metrics = metrics();
    let p = Pipeline::new("ttl-restore", 1);
    let store = "sessions-r";
    let changelog = format!("{}-{store}-changelog", p.app);
    support::create_topics(&[&changelog], 1);
    let base = base();
    produce_workload(&p.input, base);
    let a = Instance::start(&p.config("a"), sessions(&p.output, store));
    p.wait_drained(Duration::from_secs(90));
    a.stop();
    let expired = format!("store=\"{store}\"");
    assert!(
        metrics.value("eosflow_state_expired_total", &[&expired]) >= Some(5.0),
        "five keys expired: {:?}",
        metrics.value("eosflow_state_expired_total", &[&expired])
    );

    // The changelog: k0..k4 end in tombstones, k5..k9 in their second write.
    let log = folded(&changelog);
    for k in keys(0..10) {
        let state = Column::State.changelog_key(k.as_bytes());
        let last = log.get(&state).unwrap_or_else(|| panic!("{k} in {log:?}"));
        if k.as_str() < "k5" {
            assert_eq!(last, &None, "{k} expired: its last record is a tombstone");
        } else {
            assert_eq!(
                last.as_deref(),
                Some((base + 50_000).to_string().as_bytes())
            );
        }
    }

    // A store restored from the changelog alone, with nothing swept after: the five live keys
    // and their five expiry entries.
    let wiped = p.state_root.join("offline");
    let (restored, _) = Store::open(
        &wiped,
        &format!("{changelog}[0]"),
        &StoreCache::new(8 << 20),
    )
    .expect("open");
    restore(
        &support::clients(),
        &restored,
        &changelog,
        0,
        Duration::from_secs(60),
    )
    .expect("restore");
    drop(restored);
    let (state, index) = store_contents(&wiped, &changelog);
    assert_eq!(state, keys(5..10), "the restored store");
    assert_eq!(
        index, 5,
        "the restored expiry index: one entry per live key"
    );

    // An instance on a wiped state directory restores it, answers from it, and its restored
    // index expires the rest once stream time reaches base + 110 s.
    let mut cfg = p.config("b");
    cfg.state.dir = p.state_root.join("wiped");
    let b = Instance::start(&cfg, sessions(&p.output, store));
    gets(&p.input, base + 100_001);
    p.wait_drained(Duration::from_secs(90));
    let got = answers(&p.output);
    for k in keys(0..10) {
        let live = k.as_str() >= "k5";
        assert_eq!(got.get(&k), Some(&(live, live)), "{k} after the restore");
    }
    support::produce_timed(
        &p.input,
        &[(Some(0), "tick".into(), "tick".into(), base + 110_000)],
    );
    gets(&p.input, base + 110_000);
    p.wait_drained(Duration::from_secs(90));
    b.stop();
    let got = answers(&p.output);
    assert!(
        got.values().all(|v| *v == (false, false)),
        "every key expired: {got:?}"
    );
    assert_eq!(
        store_contents(
            &store_dir(&cfg.state.dir, &p.app, "b", &changelog),
            &changelog
        ),
        (Vec::new(), 0)
    );
}

#[test]
fn expired_keys_are_gone_from_a_standbys_warm_copy() {
    let metrics = metrics();
    let p = Pipeline::new("ttl-standby", 1);
    let store = "sessions-s";
    let changelog = format!("{}-{store}-changelog", p.app);
    support::create_topics(&[&changelog], 1);
    let config = |instance: &str| {
        let mut c = p.config(instance);
        c.processor.standby_replicas = 1;
        c.state.dir = p.state_root.join(instance);
        c
    };
    // a owns the partition (the range assignor orders members by id, `eosflow-a-…` first);
    // b, started second, keeps the warm copy.
    let a = Instance::start(&config("a"), sessions(&p.output, store));
    let base = base();
    support::produce_timed(&p.input, &[(Some(0), "warm".into(), "tick".into(), base)]);
    p.wait_drained(Duration::from_secs(90));
    let b = Instance::start(&config("b"), sessions(&p.output, store));
    let lag = format!("topic=\"{changelog}\"");
    support::wait_for("b to keep a warm copy", Duration::from_secs(60), || {
        metrics
            .value("eosflow_standby_lag_records", &[&lag])
            .map(|_| ())
    });
    produce_workload(&p.input, base);
    p.wait_drained(Duration::from_secs(90));
    // The lag gauge is refreshed every second: a zero read two seconds after the last commit
    // was measured after it.
    let drained = std::time::Instant::now();
    support::wait_for("the standby to catch up", Duration::from_secs(60), || {
        (drained.elapsed() > Duration::from_secs(2)
            && metrics.value("eosflow_standby_lag_records", &[&lag]) == Some(0.0))
        .then_some(())
    });
    let standby = b.stop();
    let active = a.stop();
    assert_eq!(standby.records, 0, "b never owned the partition");
    assert!(active.records >= 16, "a processed the workload: {active:?}");

    let copy = |instance: &str| {
        store_contents(
            &store_dir(&p.state_root.join(instance), &p.app, instance, &changelog),
            &changelog,
        )
    };
    assert_eq!(copy("b"), (keys(5..10), 5), "the standby's warm copy");
    assert_eq!(copy("a"), (keys(5..10), 5), "the active store");
}

#[test]
fn the_dedup_stores_retention_is_its_ttl_and_counts_its_expired_ids() {
    let metrics = metrics();
    let p = Pipeline::new("ttl-dedup", 1);
    let store = "sessions-d";
    support::create_topics(&[&format!("{}-{store}-changelog", p.app)], 1);
    let mut cfg = p.config("a");
    cfg.state.dedup_retention_secs = 1;
    cfg.state.dedup_purge_interval_secs = 0;
    // Deduplicated by the `id` header (the default), unlike the other tests' processor.
    let spec = ProcessorSpec::new(Sessions {
        output: p.output.clone(),
        ttl: StoreHandle::new(store, StringSerde, StringSerde)
            .with_ttl(TTL, TtlClock::WallClock)
            .expect("a valid TTL"),
        raw: StoreHandle::new(store, StringSerde, StringSerde),
    })
    .store_name("count")
    .store(store);
    let a = Instance::start(&cfg, spec);
    for i in 0..5 {
        support::pipeline::produce(&p.input, &format!("k{i}"), "put", &format!("id-{i}"));
    }
    p.wait_drained(Duration::from_secs(90));
    let dedup = "store=\"dedup\"";
    // Ids are purged by a batch that runs after their second of retention: keep batches coming.
    let mut n = 0;
    support::wait_for("the five ids to expire", Duration::from_secs(60), || {
        n += 1;
        support::pipeline::produce(&p.input, "tick", "tick", &format!("tick-{n}"));
        let expired = metrics.value("eosflow_state_expired_total", &[dedup])?;
        (expired >= 5.0).then_some(())
    });
    a.stop();
}

#[test]
fn a_wall_clock_ttl_expires_on_a_partition_that_receives_nothing_more() {
    let p = Pipeline::new("ttl-idle", 1);
    let store = "sessions-w";
    let changelog = format!("{}-{store}-changelog", p.app);
    support::create_topics(&[&changelog], 1);
    let spec = ProcessorSpec::new(Sessions {
        output: p.output.clone(),
        ttl: StoreHandle::new(store, StringSerde, StringSerde)
            .with_ttl(Duration::from_secs(2), TtlClock::WallClock)
            .expect("a valid TTL"),
        raw: StoreHandle::new(store, StringSerde, StringSerde),
    })
    .store_name("count")
    .store(store)
    .no_dedup();
    let a = Instance::start(&p.config("a"), spec);
    // Before the put is produced, so before it is processed and its TTL starts.
    let produced = std::time::Instant::now();
    support::produce_timed(&p.input, &[(Some(0), "k0".into(), "put".into(), base())]);
    p.wait_drained(Duration::from_secs(90));
    let state = Column::State.changelog_key(b"k0");
    // Nothing else arrives: the idle loop's check of due wall-clock work expires k0.
    support::wait_for(
        "k0's tombstone in the changelog",
        Duration::from_secs(60),
        || (folded(&changelog).get(&state) == Some(&None)).then_some(()),
    );
    assert!(
        produced.elapsed() >= Duration::from_millis(1_990),
        "not before its TTL: {:?}",
        produced.elapsed()
    );
    a.stop();
}
