//! `eosflow topics plan|apply` and the start-up check against the real broker: a co-partitioned
//! group whose topics have different partition counts is reported naming every topic and its
//! count — by the library's plan, by the CLI (exit 3, nothing created by `plan`), and by
//! `eosflow run`, which refuses to start.

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use eosflow::kafka::topics::{self, CoPartitioned, PlanItem, TopicSpec};

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
