//! The benchmark driver's smoke run (part of `make test`): one tiny point of every contender,
//! Kafka Streams peer included, against the local broker, in every shape (the recovery
//! benchmark is left to `make bench`), with this same binary also as `--baseline-exe` (three
//! more eosflow points, about 15 s). It checks that the driver measures and reports, and that
//! the windowed and join shapes' contenders emit the right results — never how fast anything
//! is.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn java_and_maven() -> bool {
    ["java", "mvn"].iter().all(|t| {
        Command::new(t)
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn bench_smoke_measures_every_contender_and_writes_the_report() {
    let out = std::env::temp_dir().join(support::unique("eosflow-bench-smoke"));
    let mut contenders = "raw-pipe,eosflow-alo,eosflow-eos,kstreams-eos";
    if !java_and_maven() {
        eprintln!("SKIPPING the Kafka Streams peer: java or mvn is not installed");
        contenders = "raw-pipe,eosflow-alo,eosflow-eos";
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args([
            "bench",
            "--records",
            "2000",
            "--keys",
            "100",
            "--partitions",
            "2",
            "--instances",
            "1",
            "--commit-intervals",
            "100",
            "--repeats",
            "1",
            "--latency-rate",
            "200",
            "--latency-secs",
            "1",
            // The recovery benchmark (a kill -9 and restart each) runs in `make bench` only.
            "--recovery-keys",
            "0",
            "--contenders",
            contenders,
            "--shapes",
            "count,windowed,join",
            "--windowed-partitions",
            "2",
            "--join-partitions",
            "2",
            // 2 000 records 20 ms apart: 40 s of event time, four 10 s windows per key, three
            // of them closed by the backlog itself and the last by the closing records.
            "--event-time-step-ms",
            "20",
            // The same binary as the baseline: its contender runs beside eosflow-eos in every
            // shape and the report compares the two.
            "--baseline-exe",
            env!("CARGO_BIN_EXE_eosflow"),
            "--baseline-label",
            "same-binary",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--repo")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("eosflow bench starts");
    let deadline = Instant::now() + Duration::from_secs(360);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("eosflow bench did not finish within 360 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.success(), "eosflow bench failed: {status}");

    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("results.json is JSON");
    let samples = results["samples"].as_array().expect("samples");
    for c in contenders.split(',') {
        assert!(
            report.contains(&format!("| {c} |")),
            "no row for {c} in\n{report}"
        );
        let s = samples
            .iter()
            .find(|s| s["point"]["contender"] == c && s["point"]["shape"] == "count")
            .unwrap_or_else(|| panic!("no sample of {c}"));
        assert!(
            s["records_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
            "{c}: {s}"
        );
        // 200 paced records, every one seen at the output.
        assert_eq!(s["latencies_ms"].as_array().map(Vec::len), Some(200), "{c}");
        // Memory is reported per instance: a running process has a peak RSS of some MiB.
        assert!(s["peak_rss_mib"].as_f64().unwrap_or(0.0) > 1.0, "{c}: {s}");
    }
    let baseline = samples
        .iter()
        .find(|s| {
            s["point"]["contender"] == "eosflow-eos-baseline" && s["point"]["shape"] == "count"
        })
        .expect("a count sample of the baseline");
    assert!(
        baseline["records_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "{baseline}"
    );
    assert_eq!(
        baseline["latencies_ms"].as_array().map(Vec::len),
        Some(200),
        "{baseline}"
    );
    assert!(
        report.contains("| eosflow-eos-baseline (same-binary) | 2 | 1 | 100 |"),
        "{report}"
    );
    assert!(
        report.contains("**eosflow exactly-once ÷ baseline (same-binary)**"),
        "{report}"
    );
    for shape in ["count", "windowed", "join"] {
        assert!(
            report.contains(&format!("| {shape} | 2 | 1 | ")),
            "no {shape} row in the baseline table of\n{report}"
        );
    }
    assert_eq!(results["baseline"]["label"], "same-binary");
    assert_eq!(
        results["baseline_ratios"].as_array().map(Vec::len),
        Some(3),
        "{}",
        results["baseline_ratios"]
    );
    assert!(report.contains("ratio to raw pipe"), "{report}");
    assert!(report.contains("peak RSS MiB per instance"), "{report}");
    for f in ["throughput.svg", "latency-cdf.svg"] {
        let svg = std::fs::read_to_string(out.join(f)).expect(f);
        assert!(svg.contains("<svg"), "{f}");
    }

    // The windowed shape: eosflow, its baseline and (with Java) Kafka Streams exactly-once,
    // each with a rate from the committed offsets and exactly the window results the input
    // implies — so the same number for all.
    let windowed: Vec<&serde_json::Value> = samples
        .iter()
        .filter(|s| s["point"]["shape"] == "windowed")
        .collect();
    let windowed_contenders: Vec<&str> = contenders
        .split(',')
        .filter(|c| *c == "eosflow-eos" || *c == "kstreams-eos")
        .chain(["eosflow-eos-baseline"])
        .collect();
    assert_eq!(
        windowed.len(),
        windowed_contenders.len(),
        "one windowed sample per exactly-once contender: {windowed:?}"
    );
    let mut emitted = Vec::new();
    for s in &windowed {
        let w = &s["windows"];
        assert_eq!(w["ok"], true, "window results: {s}");
        assert_eq!(w["emitted"]["duplicates"], 0, "{s}");
        // 100 keys × 4 windows (40 s of event time) and one probe per partition; counts add up
        // to the backlog and the probes.
        assert_eq!(w["expected"]["windows"], 402, "{s}");
        assert_eq!(w["emitted"]["records"], 2_002, "{s}");
        assert!(s["per_partition"].as_f64().unwrap_or(0.0) > 0.0, "{s}");
        assert_eq!(
            w["partition_rates"].as_array().map(Vec::len),
            Some(2),
            "{s}"
        );
        assert!(s["peak_rss_mib"].as_f64().unwrap_or(0.0) > 1.0, "{s}");
        emitted.push(w["emitted"]["windows"].as_u64());
    }
    emitted.dedup();
    assert_eq!(
        emitted.len(),
        1,
        "every contender emits as many window results"
    );
    assert!(report.contains("## Windowed aggregation"), "{report}");

    // The join shape: every backlog record joined once with its key's row, by every
    // exactly-once contender (the probes have no customer: an inner join drops them).
    let joins: Vec<&serde_json::Value> = samples
        .iter()
        .filter(|s| s["point"]["shape"] == "join")
        .collect();
    assert_eq!(
        joins.len(),
        windowed_contenders.len(),
        "one join sample per exactly-once contender: {joins:?}"
    );
    for s in &joins {
        let j = &s["join"];
        assert_eq!(j["ok"], true, "join results: {s}");
        assert_eq!(j["joined"]["results"], 2_000, "{s}");
        assert_eq!(j["joined"]["wrong_rows"], 0, "{s}");
        assert!(s["per_partition"].as_f64().unwrap_or(0.0) > 0.0, "{s}");
    }
    assert!(report.contains("## Stream-table join"), "{report}");
    let _ = std::fs::remove_dir_all(&out);
}

/// The benchmarks' at-least-once baseline is the same loop without transactions: every record
/// is counted once in a crash-free run, offsets are committed, and the output carries no
/// transaction markers (its high watermarks equal the record count).
#[test]
fn at_least_once_mode_counts_everything_and_writes_no_transaction_markers() {
    use eosflow_verify::count::CountProcessor;
    use eosflow_verify::Workload;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use support::pipeline::{Instance, Pipeline};

    let p = Pipeline::new("bench-alo", 2);
    let w = Workload {
        records: 500,
        keys: 7,
        duplicate_every: 0,
        transient_every: 0,
    };
    w.produce(&support::clients(), &p.input, Duration::ZERO)
        .expect("produce");
    let mut config = p.config("a");
    config.processor.guarantee = eosflow::config::Guarantee::AtLeastOnce;
    let inst = Instance::start(&config, CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(90));
    let summary = inst.stop();
    assert!(summary.commits > 0, "{summary:?}");
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 500);
    let reader: BaseConsumer = support::clients()
        .config(eosflow::kafka::ClientRole::Reader)
        .create()
        .expect("reader");
    let high: i64 = (0..p.partitions)
        .map(|part| {
            reader
                .fetch_watermarks(&p.output, part, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .sum();
    assert_eq!(high, 500, "an at-least-once output has no commit markers");
}
