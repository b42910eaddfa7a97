//! The write-up of a run: `report.md` (medians with min–max spread, ratios to the raw pipe and
//! of eosflow exactly-once to Kafka Streams and, with `--baseline-exe`, to the baseline binary,
//! latency percentiles, recovery, the windowed shape's table), `results.json` (every sample),
//! and two SVG charts drawn with plotters (the count shape); plus the `perf` helpers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use plotters::prelude::*;

use super::{BenchArgs, BenchError, Contender, Point, Results, Sample, Shape};

/// The `q`-th percentile (0..=100) of sorted values; NaN when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, 50.0)
}

fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

/// `bytes` for the report: whole MiB as `N MiB`, anything else also in bytes.
fn mib(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{:.1} MiB ({bytes} B)", bytes as f64 / MIB as f64)
    }
}

/// The report's line on the Kafka Streams peer: its version and the RocksDB memory
/// configuration it ran with (`--kstreams-memory-bytes`). Its peak RSS beside eosflow's means
/// little without saying whether its stores were bounded: at Kafka Streams' defaults memory
/// grows with the partitions an instance owns.
pub fn kstreams_setting(version: Option<&str>, memory_bytes: u64) -> String {
    let rocksdb = if memory_bytes == 0 {
        "RocksDB at Kafka Streams' defaults (per store: its own 50 MiB block cache, up to 3 × 16 MiB memtables; no bound per instance)".to_string()
    } else {
        format!(
            "RocksDB bounded to {} per instance (Kafka Streams' documented bounded-memory `RocksDBConfigSetter`: one LRU cache shared by all stores, memtables charged to it up to {}, index and filter blocks cached at high priority; `--kstreams-memory-bytes`)",
            mib(memory_bytes),
            mib(memory_bytes / 2)
        )
    };
    format!(
        "{} `exactly_once_v2` (benches/peer); {rocksdb}",
        version.map_or_else(
            || "Kafka Streams (version unknown)".to_string(),
            |v| format!("Kafka Streams {v}")
        )
    )
}

/// The report's line on eosflow's RocksDB memory (`state.memory_bytes` of the instances, or
/// why it is unknown), the budget the Kafka Streams line compares with.
pub fn eosflow_memory_setting(bytes: Result<u64, String>) -> String {
    match bytes {
        Ok(b) => format!(
            "`state.memory_bytes` = {} per instance ({}one block cache shared by all stores, memtables charged to it up to half)",
            mib(b),
            if b == eosflow::config::StateConfig::default().memory_bytes {
                "the default; "
            } else {
                ""
            }
        ),
        Err(e) => format!("`state.memory_bytes` unknown: {e}"),
    }
}

/// How `c` is named in the tables and charts: its name, and the baseline's also its label.
fn who(c: Contender, results: &Results) -> String {
    match (c, &results.baseline) {
        (Contender::EosflowEosBaseline, Some(b)) => format!("{} ({})", c.name(), b.label),
        _ => c.name().to_string(),
    }
}

/// Per-partition throughputs, latency percentiles (p50, p99, p999) and the largest instance's
/// peak RSS (MiB) of each round.
type Rounds = (Vec<f64>, Vec<[f64; 3]>, Vec<f64>);

/// [`Rounds`] by point.
type Grouped = BTreeMap<Point, Rounds>;

/// The count shape's samples by point.
fn group(samples: &[Sample]) -> Grouped {
    let mut g: Grouped = BTreeMap::new();
    for s in samples.iter().filter(|s| s.point.shape == Shape::Count) {
        let e = g.entry(s.point).or_default();
        e.0.push(s.per_partition);
        e.1.push([
            percentile(&s.latencies_ms, 50.0),
            percentile(&s.latencies_ms, 99.0),
            percentile(&s.latencies_ms, 99.9),
        ]);
        e.2.push(s.peak_rss_mib);
    }
    g
}

/// The markdown tables (also pasted into docs/benchmarks.md).
pub fn tables(results: &Results) -> String {
    let g = group(&results.samples);
    let mut md = String::new();
    if g.is_empty() {
        return baseline_table(results) + &takeover_tables(results);
    }
    let _ = writeln!(
        md,
        "| contender | partitions | instances | commit ms | records/s per partition (median [min–max]) | ratio to raw pipe | p50 ms | p99 ms | p999 ms | peak RSS MiB per instance (max) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows: Vec<(&Point, &Rounds)> = g.iter().collect();
    rows.sort_by_key(|(p, _)| (p.partitions, p.instances, p.commit_interval_ms, p.contender));
    for (point, (tput, lat, rss)) in rows {
        let raw = g
            .get(&Point {
                contender: Contender::Raw,
                commit_interval_ms: 100,
                ..*point
            })
            .map(|(t, _, _)| median(t));
        let m = median(tput);
        let (lo, hi) = min_max(tput);
        let ratio = raw
            .map(|r| format!("{:.2}", m / r))
            .unwrap_or_else(|| "–".into());
        let lat_med = |k: usize| median(&lat.iter().map(|l| l[k]).collect::<Vec<_>>());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} [{:.0}–{:.0}] | {} | {:.1} | {:.1} | {:.1} | {:.0} |",
            who(point.contender, results),
            point.partitions,
            point.instances,
            point.commit_interval_ms,
            m,
            lo,
            hi,
            ratio,
            lat_med(0),
            lat_med(1),
            lat_med(2),
            rss.iter().copied().fold(0.0, f64::max)
        );
    }
    let _ = writeln!(
        md,
        "\n**eosflow exactly-once ÷ Kafka Streams exactly_once_v2, its best configuration at each point** (same partitions, instances, 100 ms commits; {BEST}; per-round ratios, against that configuration's rounds, in brackets):\n"
    );
    let _ = writeln!(
        md,
        "| partitions | instances | best Kafka Streams | throughput ratio (median [per round]) | p99 latency ratio | eosflow EOS ÷ eosflow ALO | eosflow EOS ÷ raw pipe |"
    );
    let _ = writeln!(md, "|---:|---:|---|---:|---:|---:|---:|");
    for r in kafka_streams_ratios(results)
        .iter()
        .filter(|r| r.shape == Shape::Count)
    {
        let point = Point {
            shape: Shape::Count,
            contender: Contender::EosflowEos,
            partitions: r.partitions,
            instances: r.instances,
            commit_interval_ms: 100,
        };
        // The exactly-once cost and the distance to the ceiling, from the same run.
        let versus = |who: Contender| {
            g.get(&Point {
                contender: who,
                ..point
            })
            .map(|(t, _, _)| format!("{:.2}", r.eosflow_per_partition / median(t)))
            .unwrap_or_else(|| "–".into())
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.partitions,
            r.instances,
            r.best.name(),
            r.throughput_cell(),
            r.p99_latency_ratio
                .map_or_else(|| "–".to_string(), |x| format!("{x:.2}")),
            versus(Contender::EosflowAlo),
            versus(Contender::Raw)
        );
    }
    md.push_str(&baseline_table(results));
    if !results.recovery.is_empty() {
        let _ = writeln!(
            md,
            "\n**Recovery** (kill -9, restart, until every partition processes again; seconds, median [all rounds]):\n"
        );
        let _ = writeln!(md, "| contender | seconds |");
        let _ = writeln!(md, "|---|---:|");
        for (who, secs) in &results.recovery {
            let all: Vec<String> = secs.iter().map(|s| format!("{s:.1}")).collect();
            let _ = writeln!(md, "| {who} | {:.1} [{}] |", median(secs), all.join(", "));
        }
    }
    md.push_str(&takeover_tables(results));
    md
}

/// One row of the "eosflow exactly-once ÷ baseline" table: eosflow-eos (this binary) against
/// eosflow-eos-baseline (`--baseline-exe`) at the same shape, partitions and instances, 100 ms
/// commits. A throughput ratio above 1, or a latency ratio below 1, favours this binary.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BaselineRatio {
    /// What was computed.
    pub shape: Shape,
    /// Partitions of input and output.
    pub partitions: i32,
    /// Instances (processes).
    pub instances: usize,
    /// eosflow-eos's records/s per partition, median over its rounds.
    pub eosflow_per_partition: f64,
    /// The baseline's records/s per partition, median over its rounds.
    pub baseline_per_partition: f64,
    /// `eosflow_per_partition ÷ baseline_per_partition`.
    pub throughput_ratio: f64,
    /// eosflow-eos ÷ baseline records/s of each round both completed, in round order.
    pub per_round: Vec<f64>,
    /// eosflow-eos's p99 latency ÷ the baseline's (medians over the rounds); the count shape
    /// only (the windowed and join shapes measure no latency).
    pub p99_latency_ratio: Option<f64>,
}

/// eosflow exactly-once ÷ the baseline wherever both ran at 100 ms commits, by shape,
/// partitions and instances; empty without baseline samples.
pub fn baseline_ratios(results: &Results) -> Vec<BaselineRatio> {
    type Both<'a> = (Vec<&'a Sample>, Vec<&'a Sample>);
    let mut g: BTreeMap<(Shape, i32, usize), Both<'_>> = BTreeMap::new();
    for s in &results.samples {
        let p = s.point;
        let side = match p.contender {
            Contender::EosflowEos => 0,
            Contender::EosflowEosBaseline => 1,
            _ => continue,
        };
        if p.commit_interval_ms != 100 {
            continue;
        }
        let e = g.entry((p.shape, p.partitions, p.instances)).or_default();
        if side == 0 {
            e.0.push(s);
        } else {
            e.1.push(s);
        }
    }
    let tput = |v: &[&Sample]| median(&v.iter().map(|s| s.per_partition).collect::<Vec<_>>());
    let p99 = |v: &[&Sample]| {
        median(
            &v.iter()
                .map(|s| percentile(&s.latencies_ms, 99.0))
                .collect::<Vec<_>>(),
        )
    };
    g.into_iter()
        .filter(|(_, (ours, theirs))| !ours.is_empty() && !theirs.is_empty())
        .map(|((shape, partitions, instances), (ours, theirs))| {
            let per_round = ours
                .iter()
                .filter_map(|o| {
                    theirs
                        .iter()
                        .find(|t| t.round == o.round)
                        .map(|t| o.per_partition / t.per_partition)
                })
                .collect();
            let (a, b) = (tput(&ours), tput(&theirs));
            let p99_latency_ratio = (shape == Shape::Count)
                .then(|| p99(&ours) / p99(&theirs))
                .filter(|r| r.is_finite());
            BaselineRatio {
                shape,
                partitions,
                instances,
                eosflow_per_partition: a,
                baseline_per_partition: b,
                throughput_ratio: a / b,
                per_round,
                p99_latency_ratio,
            }
        })
        .collect()
}

/// The "eosflow exactly-once ÷ baseline (label)" table of [`baseline_ratios`], its header naming
/// the baseline's binary; empty without a baseline.
pub fn baseline_table(results: &Results) -> String {
    let rows = baseline_ratios(results);
    let mut md = String::new();
    if rows.is_empty() {
        return md;
    }
    let (label, exe) = results.baseline.as_ref().map_or_else(
        || ("?".to_string(), "?".to_string()),
        |b| (b.label.clone(), b.exe.display().to_string()),
    );
    let _ = writeln!(
        md,
        "\n**eosflow exactly-once ÷ baseline ({label})** (eosflow-eos, this binary, against eosflow-eos-baseline, `{exe}`: the same topology, configuration, partitions, instances and 100 ms commits, rounds interleaved; a throughput ratio above 1 or a p99 latency ratio below 1 favours this binary; per-round ratios in brackets):\n"
    );
    let _ = writeln!(
        md,
        "| shape | partitions | instances | throughput ratio (median [per round]) | p99 latency ratio |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for r in rows {
        let per_round: Vec<String> = r.per_round.iter().map(|x| format!("{x:.2}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2} [{}] | {} |",
            r.shape.name(),
            r.partitions,
            r.instances,
            r.throughput_ratio,
            per_round.join(", "),
            r.p99_latency_ratio
                .map_or_else(|| "–".to_string(), |x| format!("{x:.2}"))
        );
    }
    md
}

/// The restore-alone and failover tables: per case, the median of each phase over the rounds
/// and every round's total.
pub fn takeover_tables(results: &Results) -> String {
    let mut md = String::new();
    for (scenario, title) in [
        (
            "restore",
            "**Restore alone** (one instance, kill -9, restart; seconds, median over the restarts)",
        ),
        (
            "failover",
            "**Failover** (two instances, kill -9 of one; seconds, median over the rounds)",
        ),
    ] {
        let rows = takeover_cases(results, scenario);
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(md, "\n{title}:\n");
        let _ = writeln!(
            md,
            "| case | keys | partitions | {} → assigned | restore (longest partition) | records replayed [each round] | assigned → processing | total [each round] |",
            if scenario == "restore" { "restart" } else { "kill" }
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---:|");
        for (case, ts) in rows {
            let med = |f: &dyn Fn(&super::restore::Takeover) -> Option<f64>| {
                let v: Vec<f64> = ts.iter().filter_map(|t| f(t)).collect();
                if v.is_empty() {
                    "–".to_string()
                } else {
                    format!("{:.2}", median(&v))
                }
            };
            let totals: Vec<f64> = ts.iter().map(|t| t.total_s).collect();
            let each: Vec<String> = totals.iter().map(|s| format!("{s:.2}")).collect();
            let replayed: Vec<String> = ts.iter().map(|t| t.replayed.to_string()).collect();
            let _ = writeln!(
                md,
                "| {case} | {} | {} | {} | {} | {} | {} | {:.2} [{}] |",
                ts[0].keys,
                ts[0].partitions,
                med(&|t| t.to_assigned_s),
                med(&|t| t.restore_s),
                replayed.join(", "),
                med(&|t| t.assigned_to_processing_s),
                median(&totals),
                each.join(", ")
            );
        }
    }
    md
}

/// The takeovers of `scenario` by case, in run order of first appearance.
fn takeover_cases<'a>(
    results: &'a Results,
    scenario: &str,
) -> Vec<(&'a str, Vec<&'a super::restore::Takeover>)> {
    let mut rows: Vec<(&str, Vec<&super::restore::Takeover>)> = vec![];
    for t in results.takeovers.iter().filter(|t| t.scenario == scenario) {
        match rows.iter_mut().find(|(c, _)| *c == t.case) {
            Some((_, v)) => v.push(t),
            None => rows.push((&t.case, vec![t])),
        }
    }
    rows
}

/// A windowed or join sample's result check: whether it held, and what it saw.
fn result_check(s: &Sample) -> Option<(bool, String)> {
    if let Some(c) = &s.windows {
        return Some((
            c.ok,
            format!(
                "{} / {}, {} duplicates, counts {} / {}",
                c.emitted.windows,
                c.expected.windows,
                c.emitted.duplicates,
                c.emitted.records,
                c.expected.records
            ),
        ));
    }
    s.join.as_ref().map(|c| {
        (
            c.ok,
            format!(
                "{} / {}, amounts {} / {}, {} wrong rows",
                c.joined.results, c.expected.0, c.joined.amount, c.expected.1, c.joined.wrong_rows
            ),
        )
    })
}

/// A shape measured from committed offsets (windowed, join): records/s per partition, the
/// result check, peak RSS (and for joins the state's disk) per point, then eosflow ÷ Kafka
/// Streams per round. Empty without samples of `shape`.
pub fn polled_tables(results: &Results, shape: Shape) -> String {
    let mut g: BTreeMap<Point, Vec<&Sample>> = BTreeMap::new();
    for s in results.samples.iter().filter(|s| s.point.shape == shape) {
        g.entry(s.point).or_default().push(s);
    }
    let mut md = String::new();
    if g.is_empty() {
        return md;
    }
    let what = if shape == Shape::Join {
        "join results / expected"
    } else {
        "window results emitted / expected"
    };
    let _ = writeln!(
        md,
        "| contender | partitions | instances | records/s per partition (median [min–max]) | {what} | peak RSS MiB per instance (max) | state on disk MiB (max) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
    let mut rows: Vec<(&Point, &Vec<&Sample>)> = g.iter().collect();
    rows.sort_by_key(|(p, _)| (p.partitions, p.instances, p.contender));
    for (point, samples) in &rows {
        let tput: Vec<f64> = samples.iter().map(|s| s.per_partition).collect();
        let (lo, hi) = min_max(&tput);
        let checks: Vec<(bool, String)> = samples.iter().filter_map(|s| result_check(s)).collect();
        let check = match checks.last() {
            Some((_, last)) if checks.iter().all(|c| c.0) => format!("{last} (every round)"),
            _ => {
                let bad: Vec<&str> = checks
                    .iter()
                    .filter(|c| !c.0)
                    .map(|c| c.1.as_str())
                    .collect();
                format!("**WRONG**: {}", bad.join("; "))
            }
        };
        let rss = samples.iter().map(|s| s.peak_rss_mib).fold(0.0, f64::max);
        let disk = samples
            .iter()
            .filter_map(|s| s.join.as_ref().map(|j| j.state_disk_mib))
            .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))))
            .map_or_else(|| "–".to_string(), |d| format!("{d:.0}"));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} [{:.0}–{:.0}] | {} | {:.0} | {} |",
            who(point.contender, results),
            point.partitions,
            point.instances,
            median(&tput),
            lo,
            hi,
            check,
            rss,
            disk
        );
    }
    let _ = writeln!(
        md,
        "\n**{}: eosflow exactly-once ÷ Kafka Streams exactly_once_v2, its best configuration at each point** (same partitions and instances; {BEST}; per-round ratios, against that configuration's rounds, in brackets):\n",
        if shape == Shape::Join { "Stream-table join" } else { "Windowed" }
    );
    let _ = writeln!(
        md,
        "| partitions | instances | best Kafka Streams | throughput ratio (median [per round]) |"
    );
    let _ = writeln!(md, "|---:|---:|---|---:|");
    for r in kafka_streams_ratios(results)
        .iter()
        .filter(|r| r.shape == shape)
    {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            r.partitions,
            r.instances,
            r.best.name(),
            r.throughput_cell()
        );
    }
    md
}

/// How the ratio tables say which Kafka Streams configuration they divide by.
const BEST: &str = "the best Kafka Streams configuration is the one of those measured at the point (kstreams-eos, kstreams-eos-txn, kstreams-eos-streams) with the highest median records/s per partition";

/// The report's line on the Kafka Streams configurations of a run: what each measured one sets
/// beside the peer's common configuration. Empty when none is measured.
pub fn kstreams_configurations(contenders: &[Contender]) -> String {
    contenders
        .iter()
        .filter_map(|c| {
            let what = match c {
                Contender::KafkaStreams => "as it comes",
                Contender::KafkaStreamsTxn => "KIP-892 transactional state stores (`enable.transactional.statestores=true`, `statestore.uncommitted.max.bytes` at its 64 MiB default)",
                Contender::KafkaStreamsStreams => "the KIP-1071 streams rebalance protocol (`group.protocol=streams`; session timeout and heartbeat are the broker's `group.streams.*`)",
                _ => return None,
            };
            Some(format!("{} = {what}", c.name()))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// eosflow exactly-once ÷ the best Kafka Streams configuration at one shape, partitions and
/// instances (100 ms commits). A throughput ratio above 1, or a latency ratio below 1, favours
/// eosflow.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KafkaStreamsRatio {
    /// What was computed.
    pub shape: Shape,
    /// Partitions of input and output.
    pub partitions: i32,
    /// Instances (processes).
    pub instances: usize,
    /// The Kafka Streams configuration divided by: of those measured here, the one with the
    /// highest median records/s per partition ([`best_kafka_streams`]).
    #[serde(serialize_with = "crate::ser_contender")]
    pub best: Contender,
    /// Every Kafka Streams configuration measured here and its median records/s per partition,
    /// in contender order.
    pub kafka_streams: Vec<(String, f64)>,
    /// eosflow-eos's records/s per partition, median over its rounds.
    pub eosflow_per_partition: f64,
    /// The best configuration's records/s per partition, median over its rounds.
    pub best_per_partition: f64,
    /// `eosflow_per_partition ÷ best_per_partition`.
    pub throughput_ratio: f64,
    /// eosflow-eos ÷ the best configuration's records/s of each round both completed, in
    /// eosflow's round order.
    pub per_round: Vec<f64>,
    /// eosflow-eos's p99 latency ÷ the best configuration's (medians over the rounds); the count
    /// shape only (the windowed and join shapes measure no latency).
    pub p99_latency_ratio: Option<f64>,
}

impl KafkaStreamsRatio {
    /// `ratio [per round]`, two decimals.
    fn throughput_cell(&self) -> String {
        let per_round: Vec<String> = self.per_round.iter().map(|x| format!("{x:.2}")).collect();
        format!("{:.2} [{}]", self.throughput_ratio, per_round.join(", "))
    }
}

/// The best of the Kafka Streams configurations given with their median records/s per
/// partition: the highest median; a tie goes to the one given first (the run's contender
/// order: kstreams-eos before its variants). Anything but a Kafka Streams contender, and a
/// median that is not a number, is not a candidate; `None` without a candidate.
pub fn best_kafka_streams(
    medians: impl IntoIterator<Item = (Contender, f64)>,
) -> Option<(Contender, f64)> {
    medians
        .into_iter()
        .filter(|(c, m)| c.is_kafka_streams() && !m.is_nan())
        .fold(None, |best, (c, m)| match best {
            Some((_, b)) if b >= m => best,
            _ => Some((c, m)),
        })
}

/// eosflow exactly-once ÷ the best Kafka Streams configuration wherever eosflow-eos and at
/// least one Kafka Streams configuration ran at 100 ms commits, by shape, partitions and
/// instances.
pub fn kafka_streams_ratios(results: &Results) -> Vec<KafkaStreamsRatio> {
    let mut g: BTreeMap<(Shape, i32, usize), BTreeMap<Contender, Vec<&Sample>>> = BTreeMap::new();
    for s in &results.samples {
        let p = s.point;
        if p.commit_interval_ms != 100
            || !(p.contender == Contender::EosflowEos || p.contender.is_kafka_streams())
        {
            continue;
        }
        g.entry((p.shape, p.partitions, p.instances))
            .or_default()
            .entry(p.contender)
            .or_default()
            .push(s);
    }
    let tput = |v: &[&Sample]| median(&v.iter().map(|s| s.per_partition).collect::<Vec<_>>());
    let p99 = |v: &[&Sample]| {
        median(
            &v.iter()
                .map(|s| percentile(&s.latencies_ms, 99.0))
                .collect::<Vec<_>>(),
        )
    };
    g.into_iter()
        .filter_map(|((shape, partitions, instances), by)| {
            let ours = by.get(&Contender::EosflowEos)?;
            let kafka_streams: Vec<(Contender, f64)> = Contender::KAFKA_STREAMS
                .iter()
                .filter_map(|c| by.get(c).map(|v| (*c, tput(v))))
                .collect();
            let (best, best_per_partition) = best_kafka_streams(kafka_streams.iter().copied())?;
            let theirs = by.get(&best)?;
            let per_round = ours
                .iter()
                .filter_map(|o| {
                    theirs
                        .iter()
                        .find(|t| t.round == o.round)
                        .map(|t| o.per_partition / t.per_partition)
                })
                .collect();
            let eosflow_per_partition = tput(ours);
            let p99_latency_ratio = (shape == Shape::Count)
                .then(|| p99(ours) / p99(theirs))
                .filter(|r| r.is_finite());
            Some(KafkaStreamsRatio {
                shape,
                partitions,
                instances,
                best,
                kafka_streams: kafka_streams
                    .iter()
                    .map(|(c, m)| (c.name().to_string(), *m))
                    .collect(),
                eosflow_per_partition,
                best_per_partition,
                throughput_ratio: eosflow_per_partition / best_per_partition,
                per_round,
                p99_latency_ratio,
            })
        })
        .collect()
}

/// Writes report.md, results.json and the charts into `args.out`.
pub fn write(args: &BenchArgs, results: &Results) -> Result<(), BenchError> {
    let out = &args.out;
    let rerr = |e: std::io::Error| BenchError::Report(e.to_string());
    let json =
        serde_json::to_string_pretty(results).map_err(|e| BenchError::Report(e.to_string()))?;
    std::fs::write(out.join("results.json"), json).map_err(rerr)?;
    let mut md = String::from("# eosflow benchmark report\n\n");
    for (k, v) in &results.settings {
        let _ = writeln!(md, "- {k}: {v}");
    }
    let count = tables(results);
    let has_count = results
        .samples
        .iter()
        .any(|s| s.point.shape == Shape::Count);
    if has_count {
        let _ = writeln!(md, "\nThroughput is the steady state (10th→90th percentile of the backlog's output arrivals) divided by the partitions; latency is send → `read_committed` visibility of the output at a paced rate. Ratios come from this run only.\n");
    }
    md.push_str(&count);
    let windowed = polled_tables(results, Shape::Windowed);
    if !windowed.is_empty() {
        let _ = writeln!(
            md,
            "\n## Windowed aggregation\n\nTumbling {} s event-time windows with {} s grace, count and sum of the amount per key, one result per window when it closes (eosflow `EmitStrategy::OnWindowClose`, Kafka Streams `suppress(untilWindowCloses(unbounded()))`), exactly-once, 100 ms commits, the same backlog with event times {} ms apart ({} keys). Records/s per partition from the group's committed input offsets, polled every {} ms (10th→90th percentile of the progress summed over the partitions, divided by the partitions). After the backlog one record per partition far ahead in event time closes every window; the committed results must be one per (key, window) of the input, their counts and sums adding up to the input's.\n",
            super::windowed::SIZE_MS / 1000,
            super::windowed::GRACE_MS / 1000,
            args.event_time_step_ms,
            args.keys,
            super::windowed::POLL_MS
        );
        md.push_str(&windowed);
    }
    let join = polled_tables(results, Shape::Join);
    if !join.is_empty() {
        let _ = writeln!(
            md,
            "\n## Stream-table join\n\nEach record of the backlog inner-joined by key with its customer's row ({} B) from a table of {} rows co-partitioned with it (eosflow `add_stream_table_join`, Kafka Streams `KStream#join(KTable)` with `topology.optimization=all`: the table's topic is its changelog in both), exactly-once, 100 ms commits, {} keys. Records/s per partition from the group's committed input offsets, as for the windowed shape. The committed results must be one per backlog record, with the backlog's amounts and each key's row. State on disk: the instance's state directory at the end (eosflow's RocksDB stores, Kafka Streams' state.dir).\n",
            super::join::ROW_BYTES,
            super::join_rows(args),
            args.keys
        );
        md.push_str(&join);
    }
    if !results.failures.is_empty() {
        let _ = writeln!(md, "\n**Failed points**\n");
        for (p, e) in &results.failures {
            let _ = writeln!(md, "- {p}: {e}");
        }
    }
    if has_count {
        let _ = writeln!(
            md,
            "\n![throughput](throughput.svg)\n\n![latency CDF](latency-cdf.svg)"
        );
    }
    for scenario in ["restore", "failover"] {
        if results.takeovers.iter().any(|t| t.scenario == scenario) {
            let _ = writeln!(md, "\n![{scenario}]({scenario}.svg)");
        }
    }
    let perf = out.join("perf-eosflow-eos.txt");
    if let Ok(p) = std::fs::read_to_string(&perf) {
        let _ = writeln!(
            md,
            "\n## Profile of eosflow exactly-once (perf, top symbols)\n\n```\n{p}```"
        );
    }
    for shape in ["windowed", "join"] {
        let perf = out.join(format!("perf-eosflow-{shape}.txt"));
        if let Ok(p) = std::fs::read_to_string(&perf) {
            let _ = writeln!(
                md,
                "\n## Profile of eosflow exactly-once, {shape} shape (perf, top symbols)\n\n```\n{p}```"
            );
        }
    }
    std::fs::write(out.join("report.md"), md).map_err(rerr)?;
    throughput_chart(&out.join("throughput.svg"), results)?;
    latency_chart(&out.join("latency-cdf.svg"), results)?;
    for scenario in ["restore", "failover"] {
        takeover_chart(&out.join(format!("{scenario}.svg")), results, scenario)?;
    }
    Ok(())
}

/// One stacked bar per case (medians): restart or kill → assigned, the longest restore,
/// the rest of assigned → processing. Nothing is drawn when the scenario did not run.
fn takeover_chart(path: &Path, results: &Results, scenario: &str) -> Result<(), BenchError> {
    let rows = takeover_cases(results, scenario);
    if rows.is_empty() {
        return Ok(());
    }
    let med = |ts: &[&super::restore::Takeover],
               f: &dyn Fn(&super::restore::Takeover) -> Option<f64>| {
        let v: Vec<f64> = ts.iter().filter_map(|t| f(t)).collect();
        if v.is_empty() {
            0.0
        } else {
            median(&v)
        }
    };
    // (case, [to assigned, restore, rest of assigned → processing]).
    let bars: Vec<(String, [f64; 3])> = rows
        .iter()
        .map(|(case, ts)| {
            let a = med(ts, &|t| t.to_assigned_s);
            let r = med(ts, &|t| t.restore_s);
            let p = med(ts, &|t| t.assigned_to_processing_s);
            (case.to_string(), [a, r.min(p), (p - r).max(0.0)])
        })
        .collect();
    let max_x = bars
        .iter()
        .map(|(_, b)| b.iter().sum::<f64>())
        .fold(1.0, f64::max)
        * 1.6;
    let n = bars.len();
    let root = SVGBackend::new(path, (1000, 140 + 50 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let caption = if scenario == "restore" {
        "restore alone: restart → processing (s, median)"
    } else {
        "failover: kill -9 → every partition processing (s, median)"
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(260)
        .build_cartesian_2d(0.0..max_x, (0..n).into_segmented())
        .map_err(perr)?;
    let labels: Vec<String> = bars.iter().map(|(c, _)| c.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("seconds")
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .draw()
        .map_err(perr)?;
    let phases = [
        (
            if scenario == "restore" {
                "restart → assigned"
            } else {
                "kill → assigned (detection)"
            },
            RGBColor(160, 160, 160),
        ),
        ("restore", RGBColor(214, 39, 40)),
        ("rest of assigned → processing", RGBColor(31, 119, 180)),
    ];
    for (k, (name, col)) in phases.into_iter().enumerate() {
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, b))| {
                let x0: f64 = b[..k].iter().sum();
                Rectangle::new(
                    [
                        (x0, SegmentValue::Exact(i)),
                        (x0 + b[k], SegmentValue::Exact(i + 1)),
                    ],
                    col.filled(),
                )
            }))
            .map_err(perr)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], col.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)
}

fn colour(c: Contender) -> RGBColor {
    match c {
        Contender::Raw => RGBColor(90, 90, 90),
        Contender::EosflowAlo => RGBColor(31, 119, 180),
        Contender::EosflowEos => RGBColor(214, 39, 40),
        Contender::EosflowEosBaseline => RGBColor(255, 127, 14),
        Contender::KafkaStreams => RGBColor(44, 160, 44),
        Contender::KafkaStreamsTxn => RGBColor(23, 190, 207),
        Contender::KafkaStreamsStreams => RGBColor(148, 103, 189),
    }
}

fn perr<E: std::fmt::Display>(e: E) -> BenchError {
    BenchError::Report(format!("chart: {e}"))
}

/// Records/s per partition against partitions (one instance, 100 ms commits), one line each.
fn throughput_chart(path: &Path, results: &Results) -> Result<(), BenchError> {
    let g = group(&results.samples);
    let mut series: BTreeMap<Contender, Vec<(f64, f64)>> = BTreeMap::new();
    for (p, (t, _, _)) in &g {
        if p.instances == 1 && p.commit_interval_ms == 100 {
            series
                .entry(p.contender)
                .or_default()
                .push((p.partitions as f64, median(t)));
        }
    }
    let max_y = series
        .values()
        .flatten()
        .map(|(_, y)| *y)
        .fold(1.0, f64::max)
        * 1.1;
    let max_x = series
        .values()
        .flatten()
        .map(|(x, _)| *x)
        .fold(1.0, f64::max)
        + 1.0;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "records/s per partition (1 instance, 100 ms commits)",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("partitions")
        .y_desc("records/s per partition")
        .draw()
        .map_err(perr)?;
    for (c, pts) in series {
        let col = colour(c);
        chart
            .draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))
            .map_err(perr)?
            .label(who(c, results))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, col.filled())))
            .map_err(perr)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)
}

/// CDF of latencies (all rounds) at the middle partition count, one instance, 100 ms commits.
fn latency_chart(path: &Path, results: &Results) -> Result<(), BenchError> {
    let count = || {
        results
            .samples
            .iter()
            .filter(|s| s.point.shape == Shape::Count)
    };
    let mut parts: Vec<i32> = count().map(|s| s.point.partitions).collect();
    parts.sort_unstable();
    parts.dedup();
    let mid = parts.get(parts.len() / 2).copied().unwrap_or(1);
    let mut series: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
    for s in count() {
        let p = s.point;
        if p.partitions == mid && p.instances == 1 && p.commit_interval_ms == 100 {
            series
                .entry(p.contender)
                .or_default()
                .extend(&s.latencies_ms);
        }
    }
    for v in series.values_mut() {
        v.sort_by(f64::total_cmp);
    }
    let max_x = series
        .values()
        .map(|v| percentile(v, 99.9))
        .filter(|x| x.is_finite())
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("latency CDF, send → read_committed output ({mid} partitions, 1 instance)"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_x, 0.0..1.0)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("ms")
        .y_desc("fraction of records")
        .draw()
        .map_err(perr)?;
    for (c, v) in series {
        let n = v.len().max(1) as f64;
        let step = (v.len() / 400).max(1);
        let pts: Vec<(f64, f64)> = v
            .iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0 || *i + 1 == v.len())
            .map(|(i, x)| (x.min(max_x), (i + 1) as f64 / n))
            .collect();
        let col = colour(c);
        chart
            .draw_series(LineSeries::new(pts, col.stroke_width(2)))
            .map_err(perr)?
            .label(who(c, results))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)
}

/// Starts `perf record` on `pid` (call graphs, 499 Hz); `None` if perf is not there.
pub fn start_perf(pid: u32, data: &Path) -> Option<Child> {
    Command::new("perf")
        .args(["record", "-F", "499", "-g", "-p", &pid.to_string(), "-o"])
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| eprintln!("bench: perf not started ({e}); install linux-perf for the profile"))
        .ok()
}

/// Stops `perf record` (SIGINT, so it writes its data) and keeps the top symbols as text in
/// `text`.
pub fn stop_perf(mut perf: Child, data: &Path, text_path: &Path) {
    let _ = Command::new("kill")
        .args(["-INT", &perf.id().to_string()])
        .status();
    let _ = perf.wait();
    let report = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "dso,symbol",
            "-g",
            "none",
            "--percent-limit",
            "1",
            "-i",
        ])
        .arg(data)
        .stderr(Stdio::null())
        .output();
    if let Ok(r) = report {
        let text: String = String::from_utf8_lossy(&r.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(30)
            // perf pads every line to the terminal width and ends it with two `-` columns.
            .map(|l| format!("{}\n", l.trim_end_matches([' ', '-'])))
            .collect();
        let _ = std::fs::write(text_path, text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Baseline;

    /// A sample of `c` at `(shape, partitions, commit ms)`, one instance, in `round`, at `v`
    /// records/s per partition and a p99 latency of `p99` ms (count shape).
    fn sample(
        c: Contender,
        (shape, p, ci): (Shape, i32, u64),
        round: usize,
        v: f64,
        p99: f64,
    ) -> Sample {
        Sample {
            point: Point {
                shape,
                contender: c,
                partitions: p,
                instances: 1,
                commit_interval_ms: ci,
            },
            round,
            records_per_sec: v * f64::from(p),
            per_partition: v,
            latencies_ms: if shape == Shape::Count {
                (1..=100).map(|i| p99 * f64::from(i) / 99.0).collect()
            } else {
                Vec::new()
            },
            repeats: 0,
            peak_rss_mib: 60.0,
            windows: None,
            join: None,
        }
    }

    /// Three rounds of eosflow-eos, the baseline and Kafka Streams in the count (1 and 4
    /// partitions) and windowed (4) shapes, plus a 50 ms commit point; the baseline's second
    /// round of the windowed shape failed.
    fn results(baseline: bool) -> Results {
        let mut samples = Vec::new();
        for round in 1..=3 {
            let r = round as f64;
            for p in [1, 4] {
                let at = (Shape::Count, p, 100);
                samples.push(sample(Contender::EosflowEos, at, round, 1100.0 * r, 99.0));
                if baseline {
                    samples.push(sample(
                        Contender::EosflowEosBaseline,
                        at,
                        round,
                        1000.0 * r,
                        110.0,
                    ));
                }
                samples.push(sample(Contender::KafkaStreams, at, round, 500.0, 200.0));
            }
            let at = (Shape::Windowed, 4, 100);
            samples.push(sample(Contender::EosflowEos, at, round, 900.0 + r, 0.0));
            if baseline && round != 2 {
                samples.push(sample(
                    Contender::EosflowEosBaseline,
                    at,
                    round,
                    1000.0,
                    0.0,
                ));
            }
            samples.push(sample(Contender::KafkaStreams, at, round, 300.0, 0.0));
            samples.push(sample(
                Contender::EosflowEos,
                (Shape::Count, 4, 50),
                round,
                700.0,
                80.0,
            ));
        }
        Results {
            samples,
            baseline: baseline.then(|| Baseline {
                exe: "/opt/old/eosflow".into(),
                label: "6bf8937".into(),
            }),
            ..Results::default()
        }
    }

    #[test]
    fn eosflow_exactly_once_divided_by_the_baseline_per_shape_and_round() {
        let r = results(true);
        let rows = baseline_ratios(&r);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert_eq!(
            (rows[0].shape, rows[0].partitions, rows[0].instances),
            (Shape::Count, 1, 1)
        );
        assert_eq!(rows[0].eosflow_per_partition, 2200.0);
        assert_eq!(rows[0].baseline_per_partition, 2000.0);
        assert!((rows[0].throughput_ratio - 1.1).abs() < 1e-9);
        assert_eq!(rows[0].per_round.len(), 3);
        assert!((rows[0].p99_latency_ratio.expect("count has latencies") - 0.9).abs() < 1e-9);
        assert_eq!((rows[1].shape, rows[1].partitions), (Shape::Count, 4));
        // The windowed shape: no latency, and only the rounds both completed.
        assert_eq!((rows[2].shape, rows[2].partitions), (Shape::Windowed, 4));
        assert_eq!(rows[2].p99_latency_ratio, None);
        assert_eq!(rows[2].per_round, [0.901, 0.903]);

        let md = baseline_table(&r);
        let expected = "
**eosflow exactly-once ÷ baseline (6bf8937)** (eosflow-eos, this binary, against eosflow-eos-baseline, `/opt/old/eosflow`: the same topology, configuration, partitions, instances and 100 ms commits, rounds interleaved; a throughput ratio above 1 or a p99 latency ratio below 1 favours this binary; per-round ratios in brackets):

| shape | partitions | instances | throughput ratio (median [per round]) | p99 latency ratio |
|---|---:|---:|---:|---:|
| count | 1 | 1 | 1.10 [1.10, 1.10, 1.10] | 0.90 |
| count | 4 | 1 | 1.10 [1.10, 1.10, 1.10] | 0.90 |
| windowed | 4 | 1 | 0.90 [0.90, 0.90] | – |
";
        assert_eq!(md, expected);
        // In the count tables, after the Kafka Streams ratios; the baseline's rows labelled.
        let all = tables(&r);
        let ks = all.find("÷ Kafka Streams").expect("Kafka Streams ratios");
        assert!(all.find(expected).is_some_and(|at| at > ks), "{all}");
        assert!(
            all.contains("| eosflow-eos-baseline (6bf8937) | 4 | 1 | 100 | 2000 [1000–3000] |"),
            "{all}"
        );
        let windowed = polled_tables(&r, Shape::Windowed);
        assert!(
            windowed.contains("| eosflow-eos-baseline (6bf8937) | 4 | 1 | 1000 [1000–1000] |"),
            "{windowed}"
        );
        // Without count samples the table still comes.
        let only_windowed = Results {
            samples: r
                .samples
                .iter()
                .filter(|s| s.point.shape == Shape::Windowed)
                .cloned()
                .collect(),
            baseline: r.baseline.clone(),
            ..Results::default()
        };
        assert!(tables(&only_windowed).contains("| windowed | 4 | 1 | 0.90 [0.90, 0.90] | – |"));
    }

    #[test]
    fn without_a_baseline_the_report_has_no_trace_of_it() {
        let r = results(false);
        assert!(baseline_ratios(&r).is_empty());
        assert_eq!(baseline_table(&r), "");
        assert!(!tables(&r).contains("baseline"));
        assert!(!polled_tables(&r, Shape::Windowed).contains("baseline"));
        let json = serde_json::to_string(&r).expect("json");
        assert!(!json.contains("baseline"), "{json}");
    }

    #[test]
    fn the_report_files_carry_the_baseline() {
        let out = std::env::temp_dir().join(format!(
            "eosflow-bench-{}-report-baseline",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).expect("out dir");
        let mut args = crate::tests::args(&["--baseline-exe", "/opt/old/eosflow"]);
        args.out = out.clone();
        let mut r = results(true);
        r.baseline_ratios = baseline_ratios(&r);
        write(&args, &r).expect("the report is written");
        let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
        assert!(
            md.contains("**eosflow exactly-once ÷ baseline (6bf8937)**"),
            "{md}"
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("json"))
                .expect("results.json is JSON");
        assert_eq!(json["baseline"]["label"], "6bf8937");
        assert_eq!(json["baseline"]["exe"], "/opt/old/eosflow");
        let ratios = json["baseline_ratios"].as_array().expect("ratios");
        assert_eq!(ratios.len(), 3);
        assert_eq!(ratios[2]["shape"], "windowed");
        assert_eq!(ratios[2]["p99_latency_ratio"], serde_json::Value::Null);
        assert!(json["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .any(|s| s["point"]["contender"] == "eosflow-eos-baseline"));
        // The charts draw it in its own colour, under its label.
        let svg = std::fs::read_to_string(out.join("throughput.svg")).expect("svg");
        assert!(
            svg.contains("eosflow-eos-baseline (6bf8937)"),
            "no legend entry"
        );
        assert!(svg.contains("#FF7F0E"), "no orange line");
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn the_best_kafka_streams_configuration_has_the_highest_median() {
        use Contender::{EosflowEos, KafkaStreams, KafkaStreamsStreams, KafkaStreamsTxn};
        assert_eq!(best_kafka_streams([]), None);
        assert_eq!(
            best_kafka_streams([(KafkaStreams, 500.0)]),
            Some((KafkaStreams, 500.0))
        );
        assert_eq!(
            best_kafka_streams([
                (KafkaStreams, 500.0),
                (KafkaStreamsTxn, 650.0),
                (KafkaStreamsStreams, 600.0)
            ]),
            Some((KafkaStreamsTxn, 650.0))
        );
        // A tie goes to the first given; eosflow and NaN are never candidates.
        assert_eq!(
            best_kafka_streams([(KafkaStreamsStreams, 600.0), (KafkaStreamsTxn, 600.0)]),
            Some((KafkaStreamsStreams, 600.0))
        );
        assert_eq!(
            best_kafka_streams([
                (EosflowEos, 9000.0),
                (KafkaStreams, f64::NAN),
                (KafkaStreamsStreams, 10.0)
            ]),
            Some((KafkaStreamsStreams, 10.0))
        );
        assert_eq!(best_kafka_streams([(EosflowEos, 9000.0)]), None);
    }

    /// [`results`] without a baseline plus kstreams-eos-txn and kstreams-eos-streams: at 1
    /// partition the transactional stores are best (600 a round), at 4 the plain configuration
    /// (500) beats both (txn 400, streams 450 in rounds 1 and 3 but 1000 in round 2: median 450);
    /// in the windowed shape the streams protocol is best (round 3 of it failed).
    fn results_with_every_kafka_streams_configuration() -> Results {
        let mut r = results(false);
        for round in 1..=3 {
            r.samples.push(sample(
                Contender::KafkaStreamsTxn,
                (Shape::Count, 1, 100),
                round,
                600.0,
                150.0,
            ));
            r.samples.push(sample(
                Contender::KafkaStreamsStreams,
                (Shape::Count, 1, 100),
                round,
                550.0,
                100.0,
            ));
            r.samples.push(sample(
                Contender::KafkaStreamsTxn,
                (Shape::Count, 4, 100),
                round,
                400.0,
                100.0,
            ));
            r.samples.push(sample(
                Contender::KafkaStreamsStreams,
                (Shape::Count, 4, 100),
                round,
                if round == 2 { 1000.0 } else { 450.0 },
                100.0,
            ));
            if round != 3 {
                r.samples.push(sample(
                    Contender::KafkaStreamsStreams,
                    (Shape::Windowed, 4, 100),
                    round,
                    451.0,
                    0.0,
                ));
            }
        }
        r
    }

    #[test]
    fn every_ratio_is_against_the_best_kafka_streams_configuration_of_its_point() {
        let r = results_with_every_kafka_streams_configuration();
        let rows = kafka_streams_ratios(&r);
        assert_eq!(rows.len(), 3, "{rows:?}");
        let at = |shape, p| {
            rows.iter()
                .find(|x| x.shape == shape && x.partitions == p)
                .expect("a ratio row")
        };
        // Count, 1 partition: eosflow 1100/2200/3300 against txn's 600 a round.
        let one = at(Shape::Count, 1);
        assert_eq!(one.best, Contender::KafkaStreamsTxn);
        assert_eq!(one.best_per_partition, 600.0);
        assert_eq!(one.eosflow_per_partition, 2200.0);
        assert!((one.throughput_ratio - 2200.0 / 600.0).abs() < 1e-9);
        let expected: Vec<f64> = [1100.0, 2200.0, 3300.0].iter().map(|e| e / 600.0).collect();
        assert_eq!(one.per_round, expected);
        assert!((one.p99_latency_ratio.expect("count") - 99.0 / 150.0).abs() < 1e-9);
        assert_eq!(
            one.kafka_streams,
            [
                ("kstreams-eos".to_string(), 500.0),
                ("kstreams-eos-txn".to_string(), 600.0),
                ("kstreams-eos-streams".to_string(), 550.0)
            ]
        );
        // Count, 4 partitions: the median, not one fast round, picks the best.
        let four = at(Shape::Count, 4);
        assert_eq!(four.best, Contender::KafkaStreams);
        assert_eq!(four.per_round, [2.2, 4.4, 6.6]);
        assert!((four.p99_latency_ratio.expect("count") - 99.0 / 200.0).abs() < 1e-9);
        // Windowed: per round only where both completed; no latency.
        let w = at(Shape::Windowed, 4);
        assert_eq!(w.best, Contender::KafkaStreamsStreams);
        assert_eq!(w.per_round, [901.0 / 451.0, 902.0 / 451.0]);
        assert_eq!(w.p99_latency_ratio, None);

        let md = tables(&r);
        assert!(
            md.contains("| partitions | instances | best Kafka Streams | throughput ratio (median [per round]) |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | 1 | kstreams-eos-txn | 3.67 [1.83, 3.67, 5.50] | 0.66 | – | – |"),
            "{md}"
        );
        assert!(
            md.contains("| 4 | 1 | kstreams-eos | 4.40 [2.20, 4.40, 6.60] | 0.49 | – | – |"),
            "{md}"
        );
        let windowed = polled_tables(&r, Shape::Windowed);
        assert!(
            windowed.contains("| 4 | 1 | kstreams-eos-streams | 2.00 [2.00, 2.00] |"),
            "{windowed}"
        );
        assert!(
            windowed.contains("| kstreams-eos-streams | 4 | 1 | 451 [451–451] |"),
            "{windowed}"
        );
        // Only kstreams-eos measured: the same figures as before there were variants.
        let plain = kafka_streams_ratios(&results(false));
        assert!(plain.iter().all(|x| x.best == Contender::KafkaStreams));
        assert!(tables(&results(false))
            .contains("| 1 | 1 | kstreams-eos | 4.40 [2.20, 4.40, 6.60] | 0.49 | – | – |"));
        // In results.json, named.
        let mut r = r;
        r.kafka_streams_ratios = kafka_streams_ratios(&r);
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["kafka_streams_ratios"][0]["best"], "kstreams-eos-txn");
        // Without eosflow-eos there is nothing to divide.
        r.samples
            .retain(|s| s.point.contender != Contender::EosflowEos);
        assert!(kafka_streams_ratios(&r).is_empty());
        assert_eq!(
            kstreams_configurations(&Contender::ALL),
            "kstreams-eos = as it comes; kstreams-eos-txn = KIP-892 transactional state stores (`enable.transactional.statestores=true`, `statestore.uncommitted.max.bytes` at its 64 MiB default); kstreams-eos-streams = the KIP-1071 streams rebalance protocol (`group.protocol=streams`; session timeout and heartbeat are the broker's `group.streams.*`)"
        );
    }

    #[test]
    fn the_settings_say_how_each_contenders_rocksdb_memory_is_bounded() {
        let d = kstreams_setting(Some("4.4.0"), 0);
        assert!(
            d.starts_with("Kafka Streams 4.4.0 `exactly_once_v2`") && d.contains("defaults"),
            "{d}"
        );
        let b = kstreams_setting(Some("4.4.0"), 128 * 1024 * 1024);
        assert!(
            b.contains("bounded to 128 MiB per instance") && b.contains("up to 64 MiB"),
            "{b}"
        );
        let odd = kstreams_setting(None, 100_000_000);
        assert!(
            odd.contains("version unknown") && odd.contains("95.4 MiB (100000000 B)"),
            "{odd}"
        );
        let e = eosflow_memory_setting(Ok(128 * 1024 * 1024));
        assert!(e.contains("= 128 MiB per instance (the default; "), "{e}");
        let e = eosflow_memory_setting(Ok(64 * 1024 * 1024));
        assert!(e.contains("= 64 MiB per instance (one block"), "{e}");
        let e = eosflow_memory_setting(Err("bad file".into()));
        assert!(e.contains("unknown: bad file"), "{e}");
    }
}
