//! Recovery: with N keys in state, `kill -9` the only instance, restart it, and time until
//! every partition processes records again (a probe per partition, written at the restart,
//! reaches the `read_committed` output). eosflow reopens its RocksDB stores at their checkpoint;
//! Kafka Streams under exactly-once wipes state that was not closed cleanly and restores it
//! from the changelog. Both pay the group's session timeout (6 s) for the dead member.

use std::path::Path;
use std::time::Duration;

use super::contender::{self, Contender, Instance, Launch};
use super::reader::Reader;
use super::workload::{self, now_us};
use super::{wait_until, BenchArgs, BenchError, Point, Shape};
use eosflow::kafka::KafkaClients;

/// Runs the recovery benchmark for eosflow exactly-once and Kafka Streams; seconds per restart.
pub fn run(
    clients: &KafkaClients,
    args: &BenchArgs,
    exe: &Path,
    peer: Option<&str>,
    run_id: &str,
) -> Result<Vec<(String, Vec<f64>)>, BenchError> {
    let mut out = vec![];
    for who in [Contender::EosflowEos, Contender::KafkaStreams] {
        if !args.contenders.iter().any(|c| c == who.name()) {
            continue;
        }
        let app = format!("bench-{run_id}-rec-{}", who.name());
        let launch = Launch::count(clients.bootstrap(), args, (exe, peer), &app, 0);
        let result = one(clients, args, who, &launch);
        if let Err(e) = workload::delete_topics_with_prefix(clients, &app) {
            eprintln!("bench: {e}");
        }
        let _ = std::fs::remove_dir_all(launch.dir.join("state-i0"));
        match result {
            Ok(secs) => {
                eprintln!(
                    "bench: recovery {} with {} keys: {secs:?} s",
                    who.name(),
                    args.recovery_keys
                );
                out.push((who.name().to_string(), secs));
            }
            Err(e) => eprintln!("bench: recovery {} FAILED: {e}", who.name()),
        }
    }
    Ok(out)
}

fn one(
    clients: &KafkaClients,
    args: &BenchArgs,
    who: Contender,
    launch: &Launch,
) -> Result<Vec<f64>, BenchError> {
    let p = args.recovery_partitions;
    let point = Point {
        shape: Shape::Count,
        contender: who,
        partitions: p,
        instances: 1,
        commit_interval_ms: 100,
    };
    let levels = eosflow::internals::retry::ladder_topics(
        std::slice::from_ref(&launch.input),
        eosflow::internals::retry::RetryPolicy::default().levels(),
    );
    workload::create_topics(clients, &super::topic_specs(&point, launch, &levels))?;
    let n = args.recovery_keys;
    // Every record its own key: N keys in state.
    workload::preload(clients, &launch.input, n, n)?;
    let reader = Reader::start(clients, &launch.output, p)?;
    let mut instances: Vec<Instance> = vec![contender::spawn(who, launch, 0)?];
    wait_until(
        "the state was loaded",
        Duration::from_secs(300 + n / 200),
        &mut instances,
        || reader.counts().0 >= n as usize,
    )?;
    // Let the last commit (and Kafka Streams' cache flush) land.
    std::thread::sleep(Duration::from_secs(2));
    let mut secs = vec![];
    for r in 1..=args.recovery_restarts {
        instances[0].kill9();
        instances[0] = contender::spawn(who, launch, 0)?;
        let t0 = now_us();
        let base = r * 1000;
        workload::probes(clients, &launch.input, p, base)?;
        wait_until(
            "every partition processing after the restart",
            Duration::from_secs(600),
            &mut instances,
            || reader.probes_arrived(base, p as u64).is_some(),
        )?;
        let last = reader
            .probes_arrived(base, p as u64)
            .and_then(|v| v.into_iter().max())
            .unwrap_or(t0);
        secs.push(last.saturating_sub(t0) as f64 / 1e6);
    }
    for i in instances.iter_mut() {
        i.kill9();
    }
    reader.finish()?;
    Ok(secs)
}
