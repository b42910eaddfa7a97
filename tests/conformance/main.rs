//! Kafka Streams' own tests as the yardstick (issue #48).
//!
//! Each test here is one test method of Kafka Streams' unit tests
//! (`streams/src/test/java/org/apache/kafka/streams/kstream/internals/*Test.java` in
//! apache/kafka), re-expressed with eosflow's DSL and `TopologyTestDriver`: the inputs, their
//! timestamps and the expected outputs are Kafka Streams'; the code is ours. A test is named
//! after the method it ports, with the Kafka Streams file and method in a comment above it.
//!
//! Where eosflow deliberately differs, the test asserts eosflow's output on Kafka Streams'
//! input, says Kafka Streams' output beside it, and the difference has a row in the
//! "Semantics differences" section of docs/coming-from-kafka-streams.md.
//!
//! No broker: these run in the test driver, in milliseconds, in every `make test`.

mod fk_joins;
mod grouped;
mod stream_joins;
mod suppress;
mod tables;
mod windows;
