//! `eosflow topics plan|apply` and the start-up check against the real broker: a co-partitioned
//! group whose topics have different partition counts is reported naming every topic and its
//! count — by the library's plan, by the CLI (exit 3, nothing created by `plan`), and by
//! `eosflow run`, which refuses to start. And the internal topics a topology needs are created
//! when it starts, with its input's partition count (`processor.create_topics`).

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use eosflow::internals::kafka::reader::read_all;
use eosflow::internals::processor::Runtime;
use eosflow::kafka::topics::{self, CoPartitioned, PlanItem, TopicSpec};
use rdkafka::Message;

fn eosflow(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(args)
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .envs(env.iter().copied())
        .output()
        .expect("running eosflow")
}

#[test]
fn a_mis_partitioned_group_is_named_with_every_count_by_plan_apply_and_run() {
    let app = support::unique("topics-app");
    let input = format!("{app}.in");
    let dlt = format!("{input}.DLT");
    let output = format!("{app}.out");
    // The input with 4 partitions, its DLT with 2: the mismatch under test.
    topics::apply_blocking(
        &support::clients(),
        &[
            TopicSpec::new(input.clone(), 4, "delete"),
            TopicSpec::new(dlt.clone(), 2, "delete"),
        ],
        Duration::from_secs(30),
    )
    .expect("creating the topics");

    // The library's plan.
    let group = CoPartitioned {
        name: app.clone(),
        topics: vec![input.clone(), dlt.clone()],
    };
    let items = topics::plan_blocking(&support::clients(), &[], &[group], Duration::from_secs(30))
        .expect("plan");
    assert_eq!(
        items,
        vec![PlanItem::Mismatch {
            group: app.clone(),
            counts: vec![(input.clone(), 4), (dlt.clone(), 2)],
        }]
    );

    // The CLI: the count topology over that input, one retry level.
    let empty = std::env::temp_dir().join(support::unique("topics-dir"));
    std::fs::create_dir_all(&empty).expect("temp dir");
    let dir = empty.to_str().expect("utf-8");
    let env = [
        ("EOSFLOW_APP_ID", app.as_str()),
        ("EOSFLOW_PROCESSOR_INPUT_TOPICS", input.as_str()),
        ("EOSFLOW_RETRY_DELAYS_MS", "1000"),
    ];
    let args = |action| {
        [
            "topics",
            action,
            "--dir",
            dir,
            "--topology",
            "count",
            "--output",
            output.as_str(),
            "--partitions",
            "4",
        ]
    };
    let plan = eosflow(&args("plan"), &env);
    let stdout = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(
        plan.status.code(),
        Some(3),
        "{stdout}\n{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let retry = format!("{input}.retry.1");
    let changelog = format!("{app}-count-changelog");
    for line in [
        format!("create    {retry} (4 partitions)"),
        format!("create    {changelog} (4 partitions)"),
        format!("create    {output} (4 partitions)"),
    ] {
        assert!(stdout.contains(&line), "{line:?} missing:\n{stdout}");
    }
    let mismatch = stdout
        .lines()
        .find(|l| l.starts_with("MISMATCH"))
        .unwrap_or_else(|| panic!("no MISMATCH line:\n{stdout}"));
    for named in [
        format!("{input}=4"),
        format!("{dlt}=2"),
        format!("{retry}=4"),
        format!("{changelog}=4"),
    ] {
        assert!(mismatch.contains(&named), "{named} missing: {mismatch}");
    }
    let after_plan = topics::plan_blocking(
        &support::clients(),
        &[TopicSpec::new(retry.clone(), 4, "delete")],
        &[],
        Duration::from_secs(30),
    )
    .expect("plan");
    assert!(
        after_plan
            .iter()
            .any(|i| matches!(i, PlanItem::Create { topic, .. } if *topic == retry)),
        "plan created {retry}"
    );

    // apply creates what is missing and still fails on the mismatch it cannot fix.
    let apply = eosflow(&args("apply"), &env);
    let stdout = String::from_utf8_lossy(&apply.stdout);
    assert_eq!(apply.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains(&format!("created   {retry}")), "{stdout}");
    assert!(stdout.contains(&format!("{dlt}=2")), "{stdout}");

    // eosflow run (eosflow::run) refuses to start, naming the odd topic and the counts.
    let run = eosflow(
        &["run", "--topology", "count", "--output", output.as_str()],
        &[
            env[0],
            env[1],
            env[2],
            ("EOSFLOW_STATE_DIR", dir),
            ("EOSFLOW_APP_INSTANCE_ID", "topics-test-1"),
            ("RUST_LOG", "error"),
        ],
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("partition counts differ")
            && stderr.contains(&format!("{input}=4"))
            && stderr.contains(&format!("{dlt}=2")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn a_topology_started_with_only_its_input_and_output_creates_its_internal_topics() {
    let app = support::unique("topics-create");
    let (input, output) = (format!("{app}.in"), format!("{app}.out"));
    support::create_topics(&[&input, &output], 3);
    let mut cfg = support::instance_config(&app, 100);
    cfg.retry.delays_ms = vec![1000];
    let internal = [
        format!("{input}.retry.1"),
        format!("{input}.DLT"),
        format!("{app}-by-customer-repartition"),
        format!("{app}-by-customer-repartition.retry.1"),
        format!("{app}-by-customer-repartition.DLT"),
        format!("{app}-counts-changelog"),
        format!("{app}-state-changelog"),
    ];

    // Off: the start refuses, naming every missing internal topic, and creates none.
    let mut off = cfg.clone();
    off.processor.create_topics = false;
    let refused = match Runtime::new(&off, support::rekeyed_count(&input, &output)) {
        Ok(_) => panic!("started without its internal topics"),
        Err(e) => e.to_string(),
    };
    for t in &internal {
        assert!(refused.contains(t.as_str()), "{t} not named: {refused}");
    }
    assert!(
        refused.contains("processor.create_topics is off"),
        "{refused}"
    );
    let none = topics::describe_blocking(&support::clients(), &internal, Duration::from_secs(30))
        .expect("describe");
    assert!(none.is_empty(), "created with creation off: {none:?}");

    // On (the default): it creates them with the input's partition count and runs.
    let shutdown = Arc::new(AtomicBool::new(false));
    let worker = {
        let (cfg, shutdown) = (cfg.clone(), shutdown.clone());
        let t = support::rekeyed_count(&input, &output);
        std::thread::spawn(move || Runtime::new(&cfg, t).and_then(|r| r.run(shutdown)))
    };
    let orders: Vec<(String, String)> = (0..30)
        .map(|i| (format!("o-{i}"), format!("c-{}:o-{i}", i % 3)))
        .collect();
    for (k, v) in &orders {
        support::pipeline::produce(&input, k, v, &format!("id-{k}"));
    }
    let last = support::wait_for("every customer counted", Duration::from_secs(90), || {
        let mut last: BTreeMap<String, i64> = BTreeMap::new();
        read_all(&support::clients(), &output, Duration::from_secs(30), |m| {
            let n = m
                .payload()
                .and_then(|p| <[u8; 8]>::try_from(p).ok())
                .map(i64::from_be_bytes);
            if let (Some(k), Some(n)) = (m.key(), n) {
                last.insert(String::from_utf8_lossy(k).into_owned(), n);
            }
            Ok(())
        })
        .ok()?;
        (last.values().sum::<i64>() == 30).then_some(last)
    });
    assert_eq!(
        last,
        BTreeMap::from([("c-0".into(), 10), ("c-1".into(), 10), ("c-2".into(), 10)])
    );
    shutdown.store(true, Ordering::Relaxed);
    worker
        .join()
        .expect("the instance's thread")
        .expect("the instance ran and stopped cleanly");
    let made = topics::describe_blocking(&support::clients(), &internal, Duration::from_secs(30))
        .expect("describe");
    for t in &internal {
        let b = made
            .get(t)
            .unwrap_or_else(|| panic!("{t} was not created: {made:?}"));
        assert_eq!(b.partitions, 3, "{t}: the input's partition count");
        let policy = b.cleanup_policy.as_deref();
        if t.ends_with("-changelog") {
            assert_eq!(policy, Some("compact"), "{t}");
        } else {
            assert_eq!(policy, Some("delete"), "{t}");
        }
    }
}

#[test]
fn topics_plan_covers_a_shipped_topology_built_on_the_topology_builder() {
    let app = support::unique("topics-shipped");
    let input = format!("{app}.clicks");
    let output = format!("{app}.per-region");
    let env = [
        ("EOSFLOW_APP_ID", app.as_str()),
        ("EOSFLOW_PROCESSOR_INPUT_TOPICS", input.as_str()),
        ("EOSFLOW_RETRY_DELAYS_MS", "1000"),
    ];
    let empty = std::env::temp_dir().join(support::unique("topics-dir"));
    std::fs::create_dir_all(&empty).expect("temp dir");
    let plan = eosflow(
        &[
            "topics",
            "plan",
            "--dir",
            empty.to_str().expect("utf-8"),
            "--topology",
            "repartition-windows",
            "--output",
            output.as_str(),
            "--partitions",
            "3",
        ],
        &env,
    );
    let stdout = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(
        plan.status.code(),
        Some(0),
        "only creations, which apply fixes:\n{stdout}\n{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let repartition = format!("{app}-by-region-repartition");
    for topic in [
        input.clone(),
        format!("{input}.retry.1"),
        format!("{input}.DLT"),
        eosflow_verify::repartition_backlog::users_topic(&input),
        repartition.clone(),
        format!("{repartition}.retry.1"),
        format!("{repartition}.DLT"),
        format!("{app}-state-changelog"),
        format!("{app}-per-region-changelog"),
        output.clone(),
    ] {
        let line = format!("create    {topic} (3 partitions)");
        assert!(
            stdout.lines().any(|l| l == line),
            "{line:?} missing:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("<app>"),
        "a placeholder name leaked:\n{stdout}"
    );
    let _ = std::fs::remove_dir_all(&empty);
}
