//! Faults that used to stall a partition or end an instance (issue 17), against the real
//! broker: records that can never be written, a dead letter over the size limit, a handler
//! slower than the transaction timeout, topics that are not co-partitioned, a processor
//! started without an instance id, and a seek back that fails (issue 49).

mod support;

use support::pipeline::{Instance, Pipeline};

use std::time::Duration;

use eosflow::internals::processor::Runtime;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::processor::{Application, Context, ProcessError, Processor, ProcessorSpec, Record};
use eosflow_verify::count::CountProcessor;
use eosflow_verify::Workload;

fn workload(records: u64) -> Workload {
    Workload {
        records,
        keys: 10,
        duplicate_every: 0,
        transient_every: 0,
    }
}

/// Produces one record of `bytes` bytes: the test producer may send up to the broker's limit.
fn produce_big(topic: &str, key: &str, bytes: usize, id: &str) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> = support::clients()
        .config(eosflow::kafka::ClientRole::Idempotent)
        .set("message.max.bytes", "1048588")
        .create()
        .expect("producer");
    let value = vec![b'x'; bytes];
    let h = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
        key: "id",
        value: Some(id.as_bytes()),
    });
    producer
        .send(BaseRecord::to(topic).key(key).payload(&value).headers(h))
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Incompressible bytes.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn outputs_that_can_never_be_written_are_dead_lettered_and_the_partition_moves_on() {
    /// Emits what cannot be written for three marked inputs; counts everything else.
    struct Hostile {
        inner: CountProcessor,
        output: String,
        missing: String,
        small: String,
    }
    impl Processor for Hostile {
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            match r.value {
                // Over the producer's message.max.bytes: refused as it is sent.
                Some(b"huge") => ctx.emit(&self.output, None, Some(vec![0u8; 1_200_000]), vec![]),
                // A topic that does not exist.
                Some(b"lost") => ctx.emit(&self.missing, None, Some(b"x".to_vec()), vec![]),
                // Under the producer's limit, over the topic's: refused by the broker later.
                // (Random bytes: zeros would compress under the limit.)
                Some(b"wide") => ctx.emit(&self.small, None, Some(noise(200_000)), vec![]),
                // A state value too large for its changelog record: no output names it.
                Some(b"fat") => ctx.put(r.key.unwrap_or_default(), vec![1u8; 1_200_000]),
                _ => return self.inner.process(ctx, r),
            }
            Ok(())
        }
    }

    let p = Pipeline::new("rb-unwritable", 2);
    let small = format!("{}.small", p.app);
    let mut spec = TopicSpec::new(&small, 1, "delete");
    spec.config
        .insert("max.message.bytes".into(), "100000".into());
    topics::apply_blocking(&support::clients(), &[spec], Duration::from_secs(30))
        .expect("creating the small topic");
    let w = workload(300);
    support::pipeline::produce_range(&p.input, &w, 0..150);
    for (k, v) in [("h", "huge"), ("l", "lost"), ("w", "wide"), ("f", "fat")] {
        support::pipeline::produce(&p.input, k, v, &format!("bad-{v}"));
    }
    support::pipeline::produce_range(&p.input, &w, 150..300);
    let inst = Instance::start(
        &p.config("a"),
        ProcessorSpec::new(Hostile {
            inner: CountProcessor::new(&p.output),
            output: p.output.clone(),
            missing: format!("{}.does-not-exist", p.app),
            small: small.clone(),
        })
        .store_name("count"),
    );
    // On the old loop this never drains: the batch aborts and is read again forever.
    p.wait_drained(Duration::from_secs(120));
    let summary = inst.stop();
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 300, "{verdict}");
    let dlt = p.dead_letters();
    assert_eq!(
        dlt.len(),
        4,
        "one letter per unwritable record: {summary:?}"
    );
    for (key, cause) in [
        ("h", "Message size too large"),
        ("l", "does-not-exist"),
        ("w", ".small"),
        ("f", "Message size too large"),
    ] {
        let l = dlt
            .iter()
            .find(|l| l.key.as_deref() == Some(key))
            .unwrap_or_else(|| panic!("no letter for {key}"));
        assert_eq!(l.dlt("error.class"), Some("unwritable"));
        let reason = l.dlt("error.message").unwrap_or_default();
        assert!(reason.contains(cause), "{key}: {reason}");
        assert!(l.dlt("original.offset").is_some());
    }
    assert_eq!(
        p.count(&small),
        0,
        "nothing of an aborted attempt is visible"
    );
}

#[test]
fn a_record_whose_dead_letter_is_over_the_limit_reaches_the_dlt_truncated_with_a_pointer() {
    let p = Pipeline::new("rb-near-limit", 2);
    let w = workload(200);
    support::pipeline::produce_range(&p.input, &w, 0..100);
    // Accepted by the broker (limit 1,048,588), not a number: its dead letter (the record plus
    // the eosflow.dlt.* headers) is over the producer's 1,000,000-byte limit.
    produce_big(&p.input, "big", 1_040_000, "big-1");
    support::pipeline::produce_range(&p.input, &w, 100..200);
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    p.wait_drained(Duration::from_secs(120));
    let summary = inst.stop();
    assert_eq!(summary.dead_lettered, 1, "{summary:?}");
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 200, "{verdict}");
    let dlt = p.dead_letters();
    assert_eq!(dlt.len(), 1);
    let l = &dlt[0];
    assert_eq!(l.key.as_deref(), Some("big"));
    assert_eq!(
        l.value.as_ref().map(Vec::len),
        Some(eosflow::internals::retry::dlt::TRUNCATE_VALUE_TO)
    );
    assert_eq!(
        l.header(eosflow::internals::retry::dlt::TRUNCATED_FROM),
        Some("1040000")
    );
    assert_eq!(
        l.dlt("original.topic"),
        Some(p.input.as_str()),
        "the pointer to the full record"
    );
    assert!(l.dlt("original.offset").is_some());
    assert_eq!(l.dlt("error.class"), Some("permanent"));
}

#[test]
fn a_handler_slower_than_the_transaction_timeout_does_not_stop_the_instance() {
    /// Sleeps past the transaction timeout (and the coordinator's 10 s sweep for timed-out
    /// transactions) the first time it meets one record.
    struct Sleepy {
        inner: CountProcessor,
        slow_id: String,
        slept: bool,
    }
    impl Processor for Sleepy {
        fn process(&mut self, ctx: &mut Context<'_>, r: &Record<'_>) -> Result<(), ProcessError> {
            if !self.slept && r.header("id") == Some(self.slow_id.as_bytes()) {
                self.slept = true;
                std::thread::sleep(Duration::from_secs(13));
            }
            self.inner.process(ctx, r)
        }
    }

    let p = Pipeline::new("rb-slow", 1);
    let w = workload(200);
    support::pipeline::produce_range(&p.input, &w, 0..200);
    let mut cfg = p.config("a");
    cfg.processor.transaction_timeout_ms = 2_000;
    // The coordinator aborts the transaction the slow call kept open and bumps the producer's
    // epoch. The old loop took that for a successor and exited (`fenced`); Instance::stop then
    // panics on the runtime's error.
    let inst = Instance::start(
        &cfg,
        ProcessorSpec::new(Sleepy {
            inner: CountProcessor::new(&p.output),
            slow_id: Workload::id(100),
            slept: false,
        })
        .store_name("count"),
    );
    p.wait_drained(Duration::from_secs(120));
    let summary = inst.stop();
    assert!(
        summary.aborts >= 1,
        "the slow batch must have failed: {summary:?}"
    );
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 200, "{verdict} {summary:?}");
    assert!(p.dead_letters().is_empty(), "nothing is dead-lettered");
}

#[test]
fn topics_that_are_not_co_partitioned_fail_at_start_naming_each_count() {
    let app = support::unique("rb-copart");
    let input = format!("{app}.input");
    let odd = format!("{input}.retry.2");
    let four: Vec<String> = [
        input.clone(),
        format!("{input}.retry.1"),
        format!("{input}.retry.3"),
        format!("{input}.DLT"),
        format!("{app}-count-changelog"),
    ]
    .into();
    support::create_topics(&four.iter().map(String::as_str).collect::<Vec<_>>(), 4);
    // One retry level created by hand with another count.
    support::create_topics(&[odd.as_str()], 2);
    let mut cfg = support::config();
    cfg.app.id = app.clone();
    cfg.app.instance_id = "a".into();
    cfg.processor.input_topics = vec![input.clone()];
    cfg.state.dir = std::env::temp_dir().join(format!("eosflow-test-{app}"));
    let err = match Runtime::new(&cfg, CountProcessor::new(format!("{app}.output"))) {
        Ok(_) => panic!("a runtime over mis-partitioned topics must not start"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("co-partitioned"), "{err}");
    assert!(err.contains(&format!("{odd}=2")), "{err}");
    assert!(err.contains(&format!("{input}=4")), "{err}");
}

/// Starts `eosflow run --topology count` of `p` with only `env` set besides the broker, the
/// app id, the input and the state dir, waits for it to exit and returns its log; panics when
/// it does not exit within 60 s or exits successfully.
fn refused_start(p: &Pipeline, env: &[(&str, &str)]) -> String {
    let log = p.state_root.with_extension("log");
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args(["run", "--topology", "count", "--output", &p.output])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .env("EOSFLOW_APP_ID", &p.app)
        .env("EOSFLOW_PROCESSOR_INPUT_TOPICS", &p.input)
        .env("EOSFLOW_STATE_DIR", &p.state_root)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("run eosflow");
    // Killed when dropped: a binary that does not refuse runs on.
    let mut child = support::pipeline::Running(child);
    let status = support::wait_for(
        "eosflow run to refuse to start",
        Duration::from_secs(60),
        || child.try_wait().ok().flatten(),
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success(), "it must not start: {text}");
    text
}

#[test]
fn a_processor_without_an_instance_id_refuses_to_start_naming_the_key() {
    // The old binary started with a constant id and ran on.
    let text = refused_start(&Pipeline::new("rb-noid", 1), &[]);
    assert!(text.contains("app.instance_id"), "{text}");
    assert!(text.contains("HOSTNAME"), "{text}");
}

#[test]
fn a_taken_metrics_port_stops_the_start_naming_the_key() {
    // Another process holds the port: the instance must say so and exit, not run on without
    // /metrics and /healthz (it used to log "serving" and then an error nobody acted on).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let text = refused_start(
        &Pipeline::new("rb-port", 1),
        &[
            ("EOSFLOW_APP_INSTANCE_ID", "a"),
            ("EOSFLOW_METRICS_LISTEN", &addr),
        ],
    );
    assert!(text.contains("metrics.listen"), "{text}");
    assert!(text.contains(&addr), "{text}");
    assert!(!text.contains("serving /metrics"), "{text}");
    drop(taken);
}

#[test]
fn a_commit_whose_answer_is_lost_is_neither_processed_twice_nor_lost() {
    // A private broker that advertises the proxy's port: every client talks through it.
    const BROKER: u16 = 21492;
    const PROXY: u16 = 21499;
    let proxy = support::proxy::Proxy::start(PROXY, BROKER);
    let run_dir = std::env::temp_dir().join(support::unique("eosflow-lost-commit"));
    let stack = eosflow_verify::stack::PrivateStack::new(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../dev/stack").into(),
        run_dir,
        BROKER,
        21502,
    )
    .advertising(PROXY);
    let _kafka = stack.up("kafka").expect("a private broker");
    let mut cfg = support::config();
    cfg.kafka.bootstrap = format!("127.0.0.1:{PROXY}");
    let clients = eosflow::kafka::KafkaClients::new(cfg.kafka.clone());
    let app = support::unique("rb-lost-commit");
    let input = format!("{app}.input");
    let output = format!("{app}.output");
    let changelog = format!("{app}-count-changelog");
    let mut names = eosflow::internals::retry::ladder_topics(std::slice::from_ref(&input), 3);
    names.extend([output.clone(), changelog.clone()]);
    let specs: Vec<TopicSpec> = names
        .iter()
        .map(|n| TopicSpec::new(n, 2, if *n == changelog { "compact" } else { "delete" }))
        .collect();
    topics::apply_blocking(&clients, &specs, Duration::from_secs(60)).expect("topics");
    cfg.app.id = app.clone();
    cfg.app.instance_id = "a".into();
    cfg.processor.input_topics = vec![input.clone()];
    cfg.processor.session_timeout_ms = 6000;
    cfg.state.dir = std::env::temp_dir().join(format!("eosflow-test-{app}"));
    let lag =
        || -> i64 { eosflow_verify::group_lag(&clients, &app, &input, 2).unwrap_or(i64::MAX) };
    let w = workload(2_000);
    let inst = Instance::start(&cfg, CountProcessor::new(&output));
    support::pipeline::produce_range_with(&clients, &input, &w, 0..1_000);
    support::wait_for("the first half to commit", Duration::from_secs(120), || {
        (lag() == 0).then_some(())
    });
    // The next commit reaches the coordinator, but its answer never comes back: the
    // connection is held past the transaction timeout (10 s), then cut.
    proxy.lose_next_commit_answer(Duration::from_secs(25));
    support::pipeline::produce_range_with(&clients, &input, &w, 1_000..2_000);
    support::wait_for("everything to commit", Duration::from_secs(180), || {
        (lag() == 0).then_some(())
    });
    let summary = inst.stop();
    assert_eq!(
        proxy.commits_cut(),
        1,
        "the fault was delivered: {summary:?}"
    );
    // On the old loop the commit that landed was aborted in its eyes and the batch processed
    // again: its records came out twice.
    let verdict =
        eosflow_verify::check::verify(&clients, &w, &output, &changelog, Duration::from_secs(60))
            .expect("reading output and changelog");
    assert!(verdict.ok(), "{verdict} {summary:?}");
    assert_eq!(verdict.outputs, 2_000, "{verdict}");
}

/// Issue 49 (9): a batch aborts (a test fault stands for any abortable transaction error) and
/// the seek back to its first records fails three times, each partition's entry in
/// `rd_kafka_seek_partitions`' answer carrying an error (a test fault again, which leaves the
/// consumer where it was: past the aborted records). The partitions stay paused, the seek is
/// tried again with a backoff, and until it succeeds no record of theirs is admitted, so no
/// transaction commits their offsets. Records produced after the abort then commit past the
/// aborted ones only once those were processed: every input comes out exactly once. (With the
/// answer's errors dropped, as before, the consumer goes on past the aborted batch and the
/// commit of the later records skips it: its records are missing from the output.)
#[test]
fn a_seek_back_that_fails_after_an_aborted_batch_is_retried_and_skips_no_record() {
    use eosflow::internals::processor::runtime::faults;
    let p = Pipeline::new("rb-seek-fails", 2);
    let w = workload(2_500);
    let inst = Instance::start(&p.config("a"), CountProcessor::new(&p.output));
    support::pipeline::produce_range(&p.input, &w, 0..1_000);
    p.wait_drained(Duration::from_secs(120));
    faults::fail_next_seeks(&p.app, 3);
    faults::abort_next_batch(&p.app);
    support::pipeline::produce_range(&p.input, &w, 1_000..2_000);
    support::wait_for("a batch aborted", Duration::from_secs(60), || {
        (!faults::abort_next_batch_armed(&p.app)).then_some(())
    });
    // Later records, whose commit would skip the aborted ones if the consumer were past them.
    support::pipeline::produce_range(&p.input, &w, 2_000..2_500);
    p.wait_drained(Duration::from_secs(120));
    let summary = inst.stop();
    assert!(summary.aborts >= 1, "the batch aborted: {summary:?}");
    let verdict = p.assert_exactly_once(&w);
    assert_eq!(verdict.outputs, 2_500, "{verdict} {summary:?}");
    assert_eq!(
        faults::seek_failures_left(&p.app),
        0,
        "the seek back failed, and was tried again until it succeeded"
    );
}
