//! A topology whose co-partitioned inputs have different partition counts is refused at start,
//! against the real broker, with a message naming every topic and its count; its internal
//! topics come from the topology itself.

mod support;

use std::time::Duration;

use eosflow::internals::processor::Runtime;
use eosflow::kafka::topics::{self, TopicSpec};
use eosflow::serdes::StringSerde;
use eosflow::topology::{ProcessorContext, Topology, TypedRecord};

fn two_input_topology(a: &str, b: &str) -> Topology {
    let noop = |_: &mut ProcessorContext<'_, '_, '_, String, String>,
                _: TypedRecord<String, String>| Ok(());
    Topology::builder()
        .add_source("in", &[a, b], StringSerde, StringSerde)
        .add_processor("p", noop, &["in"])
        .build()
        .expect("valid topology")
}

#[test]
fn inputs_with_different_partition_counts_fail_at_start_naming_each_topic_and_count() {
    let app = support::unique("topo-copart");
    let a = format!("{app}.a");
    let b = format!("{app}.b");
    let topology = two_input_topology(&a, &b);
    let mut config = support::config();
    config.app.id = app.clone();
    config.app.instance_id = "i1".into();
    config.state.dir = std::env::temp_dir().join(format!("eosflow-test-{app}"));
    // The inputs are the user's: 4 and 3 partitions. The internal topics (retry levels, DLTs,
    // changelog) are derived from the topology and created with the first input's count.
    let mut specs = vec![
        TopicSpec::new(&a, 4, "delete"),
        TopicSpec::new(&b, 3, "delete"),
    ];
    let internal = topology.internal_topics(&config, 4);
    let names: Vec<&str> = internal.iter().map(|s| s.name.as_str()).collect();
    for want in [
        format!("{a}.retry.1"),
        format!("{b}.retry.3"),
        format!("{b}.DLT"),
        format!("{app}-state-changelog"),
    ] {
        assert!(names.contains(&want.as_str()), "{want} not in {names:?}");
    }
    specs.extend(internal);
    topics::apply_blocking(&support::clients(), &specs, Duration::from_secs(30))
        .expect("creating topics");

    let err = match Runtime::new(&config, topology) {
        Ok(_) => panic!("a runtime over inputs of 4 and 3 partitions must not start"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("not co-partitioned"), "{err}");
    assert!(err.contains(&format!("{a}=4")), "{err}");
    assert!(err.contains(&format!("{b}=3")), "{err}");
    assert!(err.contains(&format!("{app}-state-changelog=4")), "{err}");
}
