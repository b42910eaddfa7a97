//! State TTL in the test driver (docs/ttl.md): a store opened with `StoreHandle::with_ttl`
//! forgets a key its TTL after the key's last write — by the task's stream time or by the
//! wall clock — a write moves the expiry, a delete removes it, reads never return an expired
//! key, and a burst of expiry is spread over several commits.

use std::time::Duration;

use eosflow::processor::{
    Context, ProcessError, Processor, ProcessorSpec, Record, StoreHandle, TtlClock, TtlError,
    MAX_EXPIRED_PER_BATCH, MAX_TTL,
};
use eosflow::serdes::StringSerde;
use eosflow::testing::{TestRecord, TopologyTestDriver};

const TTL: Duration = Duration::from_secs(10);

/// Commands by value: `put:<v>` (through the TTL handle), `keep:<v>` (through a handle of the
/// same store without a TTL), `del`, `get` (emits `<value or ->@<expires_at or ->` to `out`
/// as the TTL handle reads it), `tick` (only moves stream time).
struct Commands {
    ttl: StoreHandle<String, String>,
    plain: StoreHandle<String, String>,
}

fn app(clock: TtlClock) -> ProcessorSpec<Commands> {
    let plain = StoreHandle::new("sessions", StringSerde, StringSerde);
    let ttl = plain.clone().with_ttl(TTL, clock).expect("a valid TTL");
    ProcessorSpec::new(Commands { ttl, plain })
        .store("sessions")
        .inputs(["cmd"])
        .no_dedup()
}

impl Processor for Commands {
    fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
        let key = String::from_utf8_lossy(r.key.unwrap_or_default()).to_string();
        let cmd = String::from_utf8_lossy(r.value.unwrap_or_default()).to_string();
        if let Some(v) = cmd.strip_prefix("put:") {
            ctx.store(&self.ttl)?.put(&key, &v.to_string())?;
        } else if let Some(v) = cmd.strip_prefix("keep:") {
            ctx.store(&self.plain)?.put(&key, &v.to_string())?;
        } else if cmd == "del" {
            ctx.store(&self.ttl)?.delete(&key)?;
        } else if cmd == "get" {
            let store = ctx.store(&self.ttl)?;
            let value = store.get(&key)?.unwrap_or_else(|| "-".into());
            let at = store
                .expires_at(&key)?
                .map_or_else(|| "-".to_string(), |t| t.to_string());
            let live = store.all()?.count();
            ctx.emit(
                "out",
                Some(key.into_bytes()),
                Some(format!("{value}@{at} live={live}").into_bytes()),
                vec![],
            );
        }
        Ok(())
    }
}

fn cmd(key: &str, what: &str, at_ms: i64) -> TestRecord {
    TestRecord::new("cmd", Some(key), Some(what)).timestamp(at_ms)
}

fn answers(driver: &mut TopologyTestDriver<ProcessorSpec<Commands>>) -> Vec<String> {
    driver
        .read_raw_output("out")
        .iter()
        .map(|o| format!("{}={}", o.key_text(), o.value_text()))
        .collect()
}

#[test]
fn an_event_time_ttl_forgets_a_key_once_stream_time_passes_its_last_write_plus_the_ttl(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(app(TtlClock::EventTime))?;
    let store = StoreHandle::new("sessions", StringSerde, StringSerde);
    driver.pipe(cmd("a", "put:1", 1_000))?;
    driver.pipe(cmd("b", "put:2", 5_000))?;
    driver.pipe(cmd("a", "get", 5_000))?;
    assert_eq!(answers(&mut driver), ["a=1@11000 live=2"]);

    // Stream time 10 999: a's TTL is not over yet.
    driver.pipe(cmd("z", "tick", 10_999))?;
    assert_eq!(
        driver.store_get(&store, &"a".to_string())?,
        Some("1".into())
    );
    // 11 000 = a's write + 10 s: a is deleted in that record's batch, b stays.
    driver.pipe(cmd("z", "tick", 11_000))?;
    assert_eq!(driver.store_get(&store, &"a".to_string())?, None);
    assert_eq!(
        driver.store_get(&store, &"b".to_string())?,
        Some("2".into())
    );
    driver.pipe(cmd("a", "get", 11_000))?;
    assert_eq!(
        answers(&mut driver),
        ["a=-@- live=1"],
        "gone, with its expiry"
    );

    // A late record does not bring stream time back: b still expires at 15 000.
    driver.pipe(cmd("z", "tick", 2_000))?;
    driver.pipe(cmd("z", "tick", 15_000))?;
    assert_eq!(driver.store_entries(&store)?, Vec::new());
    Ok(())
}

#[test]
fn a_put_moves_the_expiry_a_delete_removes_it_and_a_write_without_a_ttl_keeps_the_key(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(app(TtlClock::EventTime))?;
    let store = StoreHandle::new("sessions", StringSerde, StringSerde);
    driver.pipe(cmd("a", "put:1", 1_000))?;
    driver.pipe(cmd("a", "put:2", 8_000))?; // refreshed: now expires at 18 000
    driver.pipe(cmd("a", "get", 8_000))?;
    driver.pipe(cmd("z", "tick", 17_999))?;
    assert_eq!(
        driver.store_get(&store, &"a".to_string())?,
        Some("2".into())
    );
    driver.pipe(cmd("z", "tick", 18_000))?;
    assert_eq!(driver.store_get(&store, &"a".to_string())?, None);
    assert_eq!(answers(&mut driver), ["a=2@18000 live=1"]);

    // A delete takes the expiry with it: a key written again later gets a new one only.
    driver.pipe(cmd("d", "put:x", 20_000))?;
    driver.pipe(cmd("d", "del", 21_000))?;
    driver.pipe(cmd("d", "get", 21_000))?;
    assert_eq!(answers(&mut driver), ["d=-@- live=0"]);

    // Written through a handle without a TTL, the key no longer expires.
    driver.pipe(cmd("k", "put:x", 22_000))?;
    driver.pipe(cmd("k", "keep:y", 23_000))?;
    driver.pipe(cmd("z", "tick", 1_000_000))?;
    assert_eq!(
        driver.store_get(&store, &"k".to_string())?,
        Some("y".into())
    );
    driver.pipe(cmd("k", "get", 1_000_000))?;
    assert_eq!(answers(&mut driver), ["k=y@- live=1"]);
    Ok(())
}

#[test]
fn a_read_never_returns_an_expired_key_even_in_the_batch_that_expires_it(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(app(TtlClock::EventTime))?;
    driver.pipe(cmd("a", "put:1", 1_000))?;
    driver.pipe(cmd("b", "put:2", 1_000))?;
    // This record moves stream time past both expiries; its handler runs before the sweep
    // that deletes them, and neither a get nor a scan sees them.
    driver.pipe(cmd("a", "get", 60_000))?;
    assert_eq!(answers(&mut driver), ["a=-@11000 live=0"]);
    driver.pipe(cmd("a", "get", 60_000))?;
    assert_eq!(answers(&mut driver), ["a=-@- live=0"], "and then deleted");
    Ok(())
}

#[test]
fn a_wall_clock_ttl_expires_on_a_partition_that_receives_nothing(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(app(TtlClock::WallClock))?;
    let store = StoreHandle::new("sessions", StringSerde, StringSerde);
    let start = driver.wall_clock_ms();
    // Event times far in the future do not matter to a wall-clock TTL.
    driver.pipe(cmd("a", "put:1", 9_000_000_000_000))?;
    driver.advance_wall_clock(Duration::from_secs(4))?;
    driver.pipe(cmd("b", "put:2", 1_000))?; // expires at start + 14 s
    driver.pipe(cmd("a", "get", 1_000))?;
    assert_eq!(
        answers(&mut driver),
        [format!("a=1@{} live=2", start + 10_000)]
    );
    driver.advance_wall_clock(Duration::from_millis(5_999))?;
    assert_eq!(
        driver.store_get(&store, &"a".to_string())?,
        Some("1".into())
    );
    // No record arrives: the clock alone expires a, then b.
    driver.advance_wall_clock(Duration::from_millis(1))?;
    assert_eq!(driver.store_get(&store, &"a".to_string())?, None);
    assert_eq!(
        driver.store_get(&store, &"b".to_string())?,
        Some("2".into())
    );
    driver.advance_wall_clock(Duration::from_secs(4))?;
    assert_eq!(driver.store_entries(&store)?, Vec::new());
    Ok(())
}

#[test]
fn a_burst_of_expiry_is_spread_over_several_commits_and_all_of_it_expires(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut driver = TopologyTestDriver::new(app(TtlClock::WallClock))?;
    let store = StoreHandle::new("sessions", StringSerde, StringSerde);
    let keys = 2 * MAX_EXPIRED_PER_BATCH + MAX_EXPIRED_PER_BATCH / 2;
    for i in 0..keys {
        driver.pipe(cmd(&format!("k{i:05}"), "put:v", 1_000))?;
    }
    driver.pipe(cmd("z", "keep:stays", 1_000))?;
    assert_eq!(driver.store_entries(&store)?.len(), keys + 1);
    let commits = driver.summary().commits;
    driver.advance_wall_clock(TTL)?;
    let entries = driver.store_entries(&store)?;
    assert_eq!(entries, vec![("z".to_string(), "stays".to_string())]);
    assert!(
        driver.summary().commits >= commits + 3,
        "{keys} expired entries, at most {MAX_EXPIRED_PER_BATCH} per batch: {} commits",
        driver.summary().commits - commits
    );
    Ok(())
}

#[test]
fn the_largest_event_times_and_ttls_do_not_overflow() -> Result<(), Box<dyn std::error::Error>> {
    // The latest event time a record may carry (the end of year 9999) plus a century.
    let last = 253_402_300_799_999;
    let plain = StoreHandle::new("sessions", StringSerde, StringSerde);
    let ttl = plain.clone().with_ttl(MAX_TTL, TtlClock::EventTime)?;
    let mut driver = TopologyTestDriver::new(
        ProcessorSpec::new(Commands { ttl, plain })
            .store("sessions")
            .inputs(["cmd"])
            .no_dedup(),
    )?;
    driver.pipe(cmd("a", "put:1", last))?;
    driver.pipe(cmd("a", "get", last))?;
    let century = MAX_TTL.as_millis() as i64;
    assert_eq!(
        answers(&mut driver),
        [format!("a=1@{} live=1", last + century)]
    );
    Ok(())
}

#[test]
fn a_ttl_of_zero_or_over_a_century_is_refused_naming_the_store() {
    let h = || StoreHandle::<String, String>::new("carts", StringSerde, StringSerde);
    for zero in [Duration::ZERO, Duration::from_micros(999)] {
        let e = h()
            .with_ttl(zero, TtlClock::EventTime)
            .expect_err("refused");
        assert_eq!(
            e,
            TtlError::TooShort {
                store: "carts".into()
            }
        );
        assert!(e.to_string().contains("store carts"), "{e}");
    }
    for huge in [MAX_TTL + Duration::from_millis(1), Duration::MAX] {
        let e = h()
            .with_ttl(huge, TtlClock::WallClock)
            .expect_err("refused");
        assert!(matches!(e, TtlError::TooLong { ref store, .. } if store == "carts"));
        assert!(e.to_string().contains("store carts"), "{e}");
    }
    assert!(h()
        .with_ttl(Duration::from_millis(1), TtlClock::WallClock)
        .is_ok());
}

#[test]
fn expiry_is_exactly_once_across_a_kill_at_every_batch_boundary(
) -> Result<(), Box<dyn std::error::Error>> {
    for clock in [TtlClock::EventTime, TtlClock::WallClock] {
        let mut crash = TopologyTestDriver::with_crashes(7, move || Ok::<_, String>(app(clock)));
        let mut t = 1_000;
        for i in 0..12 {
            let key = format!("k{}", i % 4);
            crash.pipe(cmd(&key, &format!("put:{i}"), t));
            crash.pipe(cmd(&key, "get", t));
            if i % 3 == 2 {
                crash.advance_wall_clock(Duration::from_secs(6));
            }
            t += 4_000;
        }
        // Everything left expires by either clock; the gets say so.
        crash.pipe(cmd("z", "tick", t + 20_000));
        crash.advance_wall_clock(TTL);
        for k in 0..4 {
            crash.pipe(cmd(&format!("k{k}"), "get", t + 20_000));
        }
        let summary = crash.run()?;
        assert!(
            summary.crashes.len() >= summary.batches,
            "{clock:?}: every batch boundary: {summary:?}"
        );
        assert_eq!(summary.written.get("out"), Some(&16), "{clock:?}");
    }
    Ok(())
}

/// The same TTL on a store of the lower-level builder's topology: a visit count per user
/// that starts again after 30 s of event time without a visit.
#[test]
fn a_topology_node_store_with_a_ttl_starts_again_after_the_ttl(
) -> Result<(), Box<dyn std::error::Error>> {
    use eosflow::serdes::I64Serde;
    use eosflow::topology::{ProcessorContext, Topology, TypedRecord};

    let visits = StoreHandle::new("visits", StringSerde, I64Serde)
        .with_ttl(Duration::from_secs(30), TtlClock::EventTime)?;
    let v = visits.clone();
    let count = move |ctx: &mut ProcessorContext<'_, '_, '_, String, i64>,
                      r: TypedRecord<String, String>| {
        let user = r.key.ok_or_else(|| ProcessError::permanent("no user"))?;
        let mut store = ctx.store(&v)?;
        let n = store.get(&user)?.unwrap_or(0) + 1;
        store.put(&user, &n)?;
        ctx.forward(TypedRecord::new(Some(user), Some(n)));
        Ok(())
    };
    let topology = Topology::builder()
        .add_source("clicks", &["clicks"], StringSerde, StringSerde)
        .add_processor("count", count, &["clicks"])
        .add_state_store(&visits, &["count"])
        .add_sink("out", "visits", StringSerde, I64Serde, &["count"])
        .build()?;
    let mut driver = TopologyTestDriver::new(topology)?;
    for at in [0, 10_000, 39_999, 70_000, 71_000] {
        driver.pipe(TestRecord::new("clicks", Some("ann"), Some("/")).timestamp(at))?;
    }
    let counts: Vec<i64> = driver
        .read_output("visits", &StringSerde, &I64Serde)?
        .into_iter()
        .filter_map(|(_, n)| n)
        .collect();
    // 39 999 is within 30 s of 10 000; 70 000 is not within 30 s of 39 999.
    assert_eq!(counts, [1, 2, 3, 1, 2]);
    Ok(())
}
