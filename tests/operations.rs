//! Operating an instance: `/metrics` moving during a real run (and passing `promtool`),
//! `/readyz` false while a store restores, SIGTERM committing within its deadline, and a
//! static member restarting without a rebalance.

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use eosflow_verify::count::CountProcessor;
use eosflow_verify::Workload;
use support::http::{free_addr, get, metric};
use support::pipeline::{produce, Instance, Pipeline};

fn work_dir(p: &Pipeline) -> PathBuf {
    std::fs::create_dir_all(&p.state_root).expect("state root");
    p.state_root.clone()
}

#[test]
fn metrics_show_lag_commit_latency_and_dead_letters_during_a_real_run() {
    let p = Pipeline::new("ops-metrics", 2);
    let w = Workload {
        records: 20_000,
        keys: 200,
        duplicate_every: 0,
        transient_every: 0,
    };
    w.produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    produce(&p.input, "k1", "not-a-number", "bad-1");
    let addr = free_addr();
    let log = work_dir(&p).join("metrics.log");
    let mut child = p.spawn(
        "m",
        &log,
        &[
            ("EOSFLOW_METRICS_LISTEN", &addr),
            ("EOSFLOW_KAFKA_PROPERTY_STATISTICS_INTERVAL_MS", "500"),
            ("EOSFLOW_RETRY_DLT_DEPTH_INTERVAL_MS", "300"),
        ],
    );
    // Lag is reported while the backlog is worked off, then drains to zero.
    let mut max_lag = 0.0f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = String::new();
    let text = loop {
        if let Some((_, text)) = get(&addr, "/metrics") {
            let lag = metric(
                &text,
                "eosflow_consumer_lag_records",
                &[&format!("topic=\"{}\"", p.input)],
            );
            max_lag = max_lag.max(lag.unwrap_or(0.0));
            let committed = metric(&text, "eosflow_records_committed_total", &[]).unwrap_or(0.0);
            if committed >= 20_001.0 && lag == Some(0.0) {
                break text;
            }
            last = text;
        }
        assert!(
            Instant::now() < deadline,
            "lag never back to 0 after 20 001 committed records; last scrape:\n{}",
            last.lines()
                .filter(|l| l.contains("lag") || l.contains("committed"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // DLT depth: the one dead letter waits (transaction markers are not counted) until an
    // operator purges it.
    let dlt = format!("{}.DLT", p.input);
    let depth_label = format!("topic=\"{dlt}\"");
    let depth = |want: f64| {
        support::wait_for(
            &format!("eosflow_dlt_depth_records{{{depth_label}}} == {want}"),
            Duration::from_secs(30),
            || {
                let (_, text) = get(&addr, "/metrics")?;
                (metric(&text, "eosflow_dlt_depth_records", &[&depth_label]) == Some(want))
                    .then_some(())
            },
        )
    };
    depth(1.0);
    // Its age: how long the oldest letter not purged has waited (it grows while it waits).
    let age = |what: &str, ok: fn(f64) -> bool| {
        support::wait_for(what, Duration::from_secs(30), || {
            let (_, text) = get(&addr, "/metrics")?;
            metric(&text, "eosflow_dlt_oldest_age_seconds", &[&depth_label])
                .filter(|a| ok(*a))
                .map(|_| ())
        })
    };
    age("eosflow_dlt_oldest_age_seconds > 0.5", |a| a > 0.5);
    let purge = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["dlt", "purge", &dlt, "--reason", "test: depth gauge"])
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .env("EOSFLOW_APP_ID", &p.app)
        .output()
        .expect("eosflow dlt purge");
    assert!(
        purge.status.success(),
        "{}",
        String::from_utf8_lossy(&purge.stderr)
    );
    depth(0.0);
    age("eosflow_dlt_oldest_age_seconds == 0 once purged", |a| {
        a == 0.0
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        max_lag > 0.0,
        "a backlog of 20 000 records must show as lag at least once"
    );
    // The record cache (state.cache_bytes, on by default): 200 keys counted over several
    // batches, so a key's first read in a later batch is answered from memory.
    let cache = |name: &str| metric(&text, name, &["thread=\"0\""]).unwrap_or(-1.0);
    let (hits, misses) = (
        cache("eosflow_record_cache_hits_total"),
        cache("eosflow_record_cache_misses_total"),
    );
    assert!(
        hits > 0.0 && misses >= 200.0 && cache("eosflow_record_cache_bytes") > 0.0,
        "record cache: hits {hits}, misses {misses} (200 keys: each missed once at least)"
    );
    let commits = metric(&text, "eosflow_commit_seconds_count", &[]).unwrap_or(0.0);
    assert!(commits >= 1.0, "commit latency histogram has samples");
    assert!(metric(&text, "eosflow_commit_seconds_bucket", &["le=\"+Inf\""]).is_some());
    // End-to-end latency: one observation per committed input record (the 20 000 good ones and
    // the dead-lettered one), each after its Kafka timestamp, in buckets that reach an hour.
    let e2e = metric(&text, "eosflow_end_to_end_latency_seconds_count", &[]).unwrap_or(0.0);
    assert!(e2e >= 20_001.0, "end-to-end latency observations: {e2e}");
    assert!(metric(&text, "eosflow_end_to_end_latency_seconds_sum", &[]).unwrap_or(0.0) > 0.0);
    assert!(metric(
        &text,
        "eosflow_end_to_end_latency_seconds_bucket",
        &["le=\"3600"]
    )
    .is_some());
    assert_eq!(
        metric(
            &text,
            "eosflow_dlt_records_total",
            &[&format!("topic=\"{}\"", p.input)]
        ),
        Some(1.0),
        "the bad record counted as a dead letter"
    );
    assert!(metric(&text, "eosflow_transactions_committed_total", &[]).unwrap_or(0.0) >= 1.0);
    assert_eq!(
        metric(
            &text,
            "eosflow_records_produced_total",
            &[&format!("topic=\"{}\"", p.output)]
        ),
        Some(20_000.0),
        "one committed output per good input"
    );
    // Every metric shown carries the HELP text of its table (src/telemetry/catalog.rs).
    for name in [
        "eosflow_commit_seconds",
        "eosflow_end_to_end_latency_seconds",
        "eosflow_transactions_committed_total",
        "eosflow_dlt_records_total",
    ] {
        let help = eosflow::internals::telemetry::catalog::FRAMEWORK
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.help)
            .unwrap_or_default();
        assert!(
            text.contains(&format!("# HELP {name} {help}")),
            "/metrics lacks the HELP line of {name}"
        );
    }
    // The exposition is valid Prometheus text format.
    if let Ok(mut promtool) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        promtool
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to promtool");
        let out = promtool.wait_with_output().expect("promtool");
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // promtool exits 0, or 3 for lint hints only; 1 is a parse error.
        assert_ne!(
            out.status.code(),
            Some(1),
            "promtool check metrics: {report}"
        );
    } else if std::env::var("CI").is_ok() {
        panic!("promtool not found: dev/deps installs Debian's prometheus package");
    }
}

#[test]
fn readyz_is_false_while_a_store_restores_and_true_after() {
    let p = Pipeline::new("ops-ready", 1);
    // A changelog worth restoring: 40 000 keys (state + dedup entries).
    let w = Workload {
        records: 40_000,
        keys: 40_000,
        duplicate_every: 0,
        transient_every: 0,
    };
    w.produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    let a = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(120));
    a.stop();
    // A new instance on an empty disk must rebuild the store before it is ready.
    let addr = free_addr();
    let log = work_dir(&p).join("ready.log");
    let fresh = p.state_root.join("fresh-disk");
    let fresh = fresh.to_string_lossy().to_string();
    let mut child = p.spawn(
        "b",
        &log,
        &[
            ("EOSFLOW_METRICS_LISTEN", &addr),
            ("EOSFLOW_STATE_DIR", &fresh),
        ],
    );
    let started = Instant::now();
    let mut seen_unready_alive = false;
    let mut first_ready: Option<Instant> = None;
    while started.elapsed() < Duration::from_secs(120) && first_ready.is_none() {
        match (get(&addr, "/readyz"), get(&addr, "/healthz")) {
            (Some((503, _)), Some((200, _))) => seen_unready_alive = true,
            (Some((200, _)), _) => first_ready = Some(Instant::now()),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let restored = text
        .lines()
        .find(|l| l.contains("restored partition=0"))
        .unwrap_or_else(|| panic!("no restore in {}", log.display()));
    assert!(
        seen_unready_alive,
        "alive but not ready before the restore ended"
    );
    assert!(first_ready.is_some(), "ready after the restore");
    let replayed: u64 = restored
        .split("replayed=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        replayed >= 40_000,
        "the fresh store was rebuilt from the changelog: {restored}"
    );
}

#[test]
fn sigterm_commits_within_its_deadline_and_a_static_member_restarts_without_a_rebalance() {
    let p = Pipeline::new("ops-sigterm", 4);
    let w = Workload {
        records: 30_000,
        keys: 300,
        duplicate_every: 0,
        transient_every: 0,
    };
    let producer = {
        let input = p.input.clone();
        std::thread::spawn(move || w.produce(&support::clients(), &input, Duration::from_secs(15)))
    };
    let dir = work_dir(&p);
    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
    let static_env = [
        ("EOSFLOW_PROCESSOR_STATIC_MEMBERSHIP", "true"),
        ("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS", "30000"),
        ("EOSFLOW_PROCESSOR_SHUTDOWN_TIMEOUT_MS", "10000"),
    ];
    let mut a = p.spawn("a", &log_a, &static_env);
    let mut b = p.spawn("b", &log_b, &static_env);
    support::wait_for("both members processing", Duration::from_secs(60), || {
        let la = std::fs::read_to_string(&log_a).unwrap_or_default();
        let lb = std::fs::read_to_string(&log_b).unwrap_or_default();
        (la.contains("restored partition=")
            && lb.contains("restored partition=")
            && p.count(&p.output) > 2000)
            .then_some(())
    });
    let b_revokes_before = std::fs::read_to_string(&log_b)
        .unwrap_or_default()
        .matches("partitions revoked")
        .count();
    // SIGTERM mid-stream: the open batch commits and the process exits well within 10 s.
    let pid = a.id().to_string();
    let sent = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = support::wait_for("a to exit after SIGTERM", Duration::from_secs(15), || {
        a.try_wait().ok().flatten()
    });
    let took = sent.elapsed();
    assert!(exit.success(), "a exits 0 after SIGTERM: {exit}");
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    // Restart within the session timeout with the same instance id: no rebalance for b.
    let mut a2 = p.spawn("a", &log_a, &static_env);
    producer.join().expect("producer thread").expect("produce");
    p.wait_drained(Duration::from_secs(120));
    let b_revokes_after = std::fs::read_to_string(&log_b)
        .unwrap_or_default()
        .matches("partitions revoked")
        .count();
    for c in [&mut a2, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_eq!(
        b_revokes_after,
        b_revokes_before,
        "the static member's restart must not rebalance the group (b saw a revoke); see {}",
        log_b.display()
    );
    p.assert_exactly_once(&w);
}

#[test]
fn outputs_carry_the_envelope_and_join_the_inputs_trace_as_a_child_span() {
    let p = Pipeline::new("ops-trace", 1);
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    support::pipeline::produce_with(&p.input, "k", "5", &[("id", "t1"), ("traceparent", parent)]);
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(60));
    inst.stop();
    let mut seen = Vec::new();
    let mut headers: Vec<(String, String)> = Vec::new();
    eosflow::internals::kafka::reader::read_all(
        &support::clients(),
        &p.output,
        Duration::from_secs(30),
        |m| {
            use rdkafka::message::{Headers, Message};
            if let Some(h) = m.headers() {
                for h in h.iter() {
                    let v = String::from_utf8_lossy(h.value.unwrap_or_default()).to_string();
                    if h.key == "traceparent" {
                        seen.push(v.clone());
                    }
                    headers.push((h.key.to_string(), v));
                }
            }
            Ok(())
        },
    )
    .expect("read output");
    let get = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("causation_id").as_deref(), Some("t1"), "{headers:?}");
    assert_eq!(get("correlation_id").as_deref(), Some("t1"), "{headers:?}");
    assert_eq!(get("aggregate_id").as_deref(), Some("k"), "{headers:?}");
    assert!(
        get("id").is_some_and(|i| i.len() == 36 && i != "t1"),
        "a fresh id: {headers:?}"
    );
    assert!(
        get("occurred_at").is_some_and(|t| t.ends_with('Z')),
        "{headers:?}"
    );
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "same trace: {}",
        seen[0]
    );
    assert!(seen[0].ends_with("-01"));
    assert!(
        !seen[0].contains("00f067aa0ba902b7"),
        "a new span id: {}",
        seen[0]
    );
}
