//! Every metric eosflow emits goes through one function here (Vector's "internal event"
//! shape), so names and labels live in one place; [`catalog`] lists them with their HELP text
//! and unit. `/metrics` ([`http`]) is served when `metrics.listen` is set.

use std::time::Duration;

use crate::state::RestoreStats;

pub mod catalog;
pub mod config;
mod health;
pub mod http;
pub mod trace;
mod waits;

pub use health::Health;
pub use waits::{Wait, WaitingOn, Waits};

/// A transaction committed `records` input records after `elapsed`.
pub fn committed(records: usize, elapsed: Duration) {
    metrics::counter!("eosflow_transactions_committed_total").increment(1);
    metrics::counter!("eosflow_records_committed_total").increment(records as u64);
    metrics::histogram!("eosflow_batch_records").record(records as f64);
    metrics::histogram!("eosflow_batch_seconds").record(elapsed.as_secs_f64());
}

/// A batch committed, making its input records' effects visible at `now_ms`: observes each
/// record's end-to-end latency (its Kafka timestamp → now). One histogram handle per batch;
/// runs of equal timestamps are recorded at once.
pub fn end_to_end_latency(now_ms: i64, input_timestamps_ms: impl IntoIterator<Item = i64>) {
    let histogram = metrics::histogram!("eosflow_end_to_end_latency_seconds");
    let mut run: Option<(i64, usize)> = None;
    let flush = |(ts, n): (i64, usize)| {
        histogram.record_many((now_ms - ts).max(0) as f64 / 1000.0, n);
    };
    for ts in input_timestamps_ms {
        match run {
            Some((t, n)) if t == ts => run = Some((t, n + 1)),
            Some(done) => {
                flush(done);
                run = Some((ts, 1));
            }
            None => run = Some((ts, 1)),
        }
    }
    if let Some(done) = run {
        flush(done);
    }
}

/// What processing thread `thread`'s record cache did so far (set after each commit).
pub fn record_cache(thread: usize, stats: crate::state::record_cache::CacheStats) {
    let thread = thread.to_string();
    metrics::counter!("eosflow_record_cache_hits_total", "thread" => thread.clone())
        .absolute(stats.hits);
    metrics::counter!("eosflow_record_cache_misses_total", "thread" => thread.clone())
        .absolute(stats.misses);
    metrics::counter!("eosflow_record_cache_evictions_total", "thread" => thread.clone())
        .absolute(stats.evictions);
    metrics::gauge!("eosflow_record_cache_bytes", "thread" => thread).set(stats.bytes as f64);
}

/// A transaction was aborted.
pub fn aborted() {
    metrics::counter!("eosflow_transactions_aborted_total").increment(1);
}

/// Records of `topic` the handler processed in a committed batch.
pub fn processed(topic: &str, n: u64) {
    metrics::counter!("eosflow_records_processed_total", "topic" => topic.to_string()).increment(n);
}

/// A record was skipped as an already-processed id.
pub fn dedup_hit(topic: &str) {
    metrics::counter!("eosflow_dedup_hits_total", "topic" => topic.to_string()).increment(1);
}

/// A DLT holds `letters` dead letters (committed, not purged), the oldest of which has waited
/// `oldest_age_secs` (0 when none waits).
pub fn dlt_depth(topic: &str, letters: usize, oldest_age_secs: f64) {
    metrics::gauge!("eosflow_dlt_depth_records", "topic" => topic.to_string()).set(letters as f64);
    metrics::gauge!("eosflow_dlt_oldest_age_seconds", "topic" => topic.to_string())
        .set(oldest_age_secs);
}

/// A record was dead-lettered to `topic`.
pub fn dead_lettered(topic: &str) {
    metrics::counter!("eosflow_dlt_records_total", "topic" => topic.to_string()).increment(1);
}

/// A record went up to retry `level` of `topic`'s ladder.
pub fn retried(topic: &str, level: u32) {
    metrics::counter!("eosflow_retries_total", "topic" => topic.to_string(), "level" => level.to_string()).increment(1);
}

/// A timer of `kind` (`event-time` or `wall-clock`) fired inside a batch.
pub fn timer_fired(kind: &str) {
    metrics::counter!("eosflow_timers_fired_total", "kind" => kind.to_string()).increment(1);
}

/// `n` entries of `store` expired by their TTL inside a batch (a named store's TTL, or the
/// `dedup` store's retention).
pub fn state_expired(store: &str, n: usize) {
    metrics::counter!("eosflow_state_expired_total", "store" => store.to_string())
        .increment(n as u64);
}

/// An interactive query request on `/stores` for `store` ended with `outcome`.
pub fn query_request(store: &str, outcome: &'static str) {
    metrics::counter!("eosflow_query_requests_total", "store" => store.to_string(), "outcome" => outcome)
        .increment(1);
}

/// A timer's callback failed and the timer was dead-lettered.
pub fn timer_failed(kind: &str) {
    metrics::counter!("eosflow_timers_failed_total", "kind" => kind.to_string()).increment(1);
}

/// Records of a repartition topic deleted once every reader committed past them
/// (`DeleteRecords`), or a purge that failed (`outcome` = `deleted` / `failed`).
pub fn repartition_purged(topic: &str, outcome: &str) {
    metrics::counter!(
        "eosflow_repartition_purges_total",
        "topic" => topic.to_string(),
        "outcome" => outcome.to_string()
    )
    .increment(1);
}

/// Watermark records a task broadcast to the repartition topics it writes.
pub fn watermarks_sent(n: usize) {
    metrics::counter!("eosflow_watermarks_sent_total").increment(n as u64);
}

/// A table topic's record without a key, skipped (it cannot be a table row).
pub fn table_record_skipped(table: &str) {
    metrics::counter!("eosflow_table_records_skipped_total", "table" => table.to_string())
        .increment(1);
}

/// A stream record a stream-table or stream-global-table join node dropped, by node and
/// reason (`no-key`, `no-value`, `no-table-value`: an inner join's stream record whose key the
/// table lacks; `no-global-value`, `no-global-key`: an inner global join without a row or
/// without a key from its extractor).
pub fn join_dropped(node: &str, reason: &'static str) {
    metrics::counter!("eosflow_join_dropped_records_total", "node" => node.to_string(), "reason" => reason)
        .increment(1);
}

/// How many records global table `table` is behind its topic's end (summed over partitions).
pub fn global_table_lag(table: &str, records: i64) {
    metrics::gauge!("eosflow_global_table_lag_records", "table" => table.to_string())
        .set(records as f64);
}

/// Global table `table` was read to its topic's end: `records` read from the checkpoint on,
/// in `elapsed`.
pub fn global_table_bootstrapped(table: &str, records: u64, elapsed: Duration) {
    metrics::gauge!("eosflow_global_table_bootstrap_seconds", "table" => table.to_string())
        .set(elapsed.as_secs_f64());
    metrics::gauge!("eosflow_global_table_bootstrap_records", "table" => table.to_string())
        .set(records as f64);
}

/// A record of global table `table`'s topic was skipped (`no-key`, `undecodable`).
pub fn global_table_skipped(table: &str, reason: &'static str) {
    metrics::counter!("eosflow_global_table_skipped_records_total", "table" => table.to_string(), "reason" => reason)
        .increment(1);
}

/// A windowed aggregate node met a record too late for every window it belongs to (it went
/// to the DLT or the node's late-record sink).
pub fn late_record(node: &str) {
    metrics::counter!("eosflow_late_records_total", "node" => node.to_string()).increment(1);
}

/// A record of a parked key was forwarded behind its key's head.
pub fn parked_follower(topic: &str) {
    metrics::counter!("eosflow_parked_followers_total", "topic" => topic.to_string()).increment(1);
}

/// A record of a parked key was dead-lettered because too many records already wait behind
/// its head (`retry.max_parked_followers_per_key`).
pub fn parked_overflow(topic: &str) {
    metrics::counter!("eosflow_parked_overflow_total", "topic" => topic.to_string()).increment(1);
}

/// A record reused a processed message id with another key or value, and was dead-lettered.
pub fn id_conflict(topic: &str) {
    metrics::counter!("eosflow_id_conflicts_total", "topic" => topic.to_string()).increment(1);
}

/// A partition's store was restored.
pub fn restored(partition: i32, stats: &RestoreStats) {
    restored_records(partition, stats.records);
    metrics::histogram!("eosflow_restore_seconds", "partition" => partition.to_string())
        .record(stats.millis as f64 / 1000.0);
}

/// Records a named store or a table of `partition` replayed from its changelog (or table
/// topic): counted with the default store's, so the counter is the partition's whole restore.
pub fn restored_records(partition: i32, records: u64) {
    metrics::counter!("eosflow_restore_records_total", "partition" => partition.to_string())
        .increment(records);
}

/// How many changelog records a standby replica of `topic[partition]` has yet to apply (0 once
/// it stopped keeping the partition).
pub fn standby_lag(topic: &str, partition: i32, lag: i64) {
    metrics::gauge!("eosflow_standby_lag_records", "topic" => topic.to_string(), "partition" => partition.to_string())
        .set(lag.max(0) as f64);
}

/// How many changelogs of this application no store of its topology owns (a store renamed or
/// removed), found at start: each is named in a WARN; not 0 means state is left behind.
pub fn orphaned_changelogs(n: usize) {
    metrics::gauge!("eosflow_orphaned_changelogs").set(n as f64);
}

/// How many partitions this instance keeps warm as a standby replica.
pub fn standby_partitions(n: usize) {
    metrics::gauge!("eosflow_standby_partitions").set(n as f64);
}

/// The group rebalanced (`assign` or `revoke`).
pub fn rebalance(kind: &'static str) {
    metrics::counter!("eosflow_rebalances_total", "kind" => kind).increment(1);
}

/// librdkafka's view of one partition's lag (high watermark minus position), from its stats.
pub fn consumer_lag(topic: &str, partition: i32, lag: i64) {
    metrics::gauge!("eosflow_consumer_lag_records", "topic" => topic.to_string(), "partition" => partition.to_string())
        .set(lag as f64);
}

/// Output records produced to `topic` in committed transactions (the producer's partitioner
/// places them, so they are counted per topic).
pub fn produced(topic: &str, n: u64) {
    metrics::counter!("eosflow_records_produced_total", "topic" => topic.to_string()).increment(n);
}

/// Records consumed from a partition (its position moved by `n`).
pub fn consumed(topic: &str, partition: i32, n: u64) {
    metrics::counter!("eosflow_records_consumed_total", "topic" => topic.to_string(), "partition" => partition.to_string())
        .increment(n);
}

/// Time from a batch's begin to its commit returning.
pub fn commit_latency(elapsed: Duration) {
    metrics::histogram!("eosflow_commit_seconds").record(elapsed.as_secs_f64());
}

/// The consumer reported an error.
pub fn consumer_error() {
    metrics::counter!("eosflow_consumer_errors_total").increment(1);
}

/// A seek of `topic[partition]` failed (a rewind after an aborted batch, or to the group's
/// committed offset): the partition stays paused, and no offset past its records is committed,
/// until a seek succeeds.
pub fn seek_failed(topic: &str, partition: i32) {
    metrics::counter!("eosflow_seek_failures_total", "topic" => topic.to_string(), "partition" => partition.to_string())
        .increment(1);
}

/// A record that could not be written was isolated from its batch and dead-lettered; `reason`
/// is the DLT class (`unwritable`).
pub fn record_isolated(topic: &str, reason: &'static str) {
    metrics::counter!("eosflow_records_isolated_total", "topic" => topic.to_string(), "reason" => reason)
        .increment(1);
}

/// A dead letter had to be cut down to be written: `stage` is `truncated` (value cut, pointer to
/// the original offset) or `pointer` (no value, only the pointer and the reason).
pub fn dead_letter_reduced(topic: &str, stage: &'static str) {
    metrics::counter!("eosflow_dead_letters_reduced_total", "topic" => topic.to_string(), "stage" => stage)
        .increment(1);
}

/// Not even a pointer to the record could be written to its dead-letter topic: the record was
/// skipped so its partition keeps moving; its coordinates are in the ERROR log.
pub fn record_skipped_unwritable(topic: &str) {
    metrics::counter!("eosflow_records_skipped_unwritable_total", "topic" => topic.to_string())
        .increment(1);
}

/// The producer was recreated in place: `cause` is `epoch-bumped` (the coordinator aborted a
/// transaction that outlived `transaction.timeout.ms`, or a restart's epoch), `fatal`,
/// `commit-unknown`, or `stuck` (a call missed its deadline, see [`kafka_call_stuck`]).
pub fn producer_recovered(cause: &'static str) {
    metrics::counter!("eosflow_producer_recoveries_total", "cause" => cause).increment(1);
}

/// A commit whose outcome was unknown was resolved from the group's stable committed offsets:
/// `outcome` is `committed` or `not-committed`.
pub fn commit_resolved(outcome: &'static str) {
    metrics::counter!("eosflow_commit_outcome_resolved_total", "outcome" => outcome).increment(1);
}

/// A batch was closed early because its transaction had used half of `transaction.timeout.ms`.
pub fn batch_closed_early() {
    metrics::counter!("eosflow_batches_closed_early_total").increment(1);
}

/// A handler call outlived half the transaction timeout in a batch that then failed: the record
/// runs again in a transaction of its own.
pub fn slow_handler_call(topic: &str) {
    metrics::counter!("eosflow_slow_handler_calls_total", "topic" => topic.to_string())
        .increment(1);
}

/// A projection committed a batch of `applied` records to Postgres in `took`.
pub(crate) fn projection_batch(projection: &str, took: Duration, applied: usize) {
    metrics::histogram!("eosflow_projection_batch_seconds", "projection" => projection.to_string())
        .record(took.as_secs_f64());
    metrics::counter!("eosflow_projection_records_applied_total", "projection" => projection.to_string())
        .increment(applied as u64);
}

/// A projection's batch or claim failed and is tried again.
pub(crate) fn projection_retry(projection: &str) {
    metrics::counter!("eosflow_projection_retries_total", "projection" => projection.to_string())
        .increment(1);
}

/// A projection was fenced by a newer owner of its partitions and rejoined the group.
pub(crate) fn projection_fenced(projection: &str) {
    metrics::counter!("eosflow_projection_fenced_total", "projection" => projection.to_string())
        .increment(1);
}

/// A projection sent a record to its topic's DLT.
pub(crate) fn projection_dead_lettered(projection: &str) {
    metrics::counter!("eosflow_projection_dead_letters_total", "projection" => projection.to_string())
        .increment(1);
}

/// Dead letters a projection committed to `eosflow_dead_letters` but could not publish.
pub(crate) fn projection_unpublished_dead_letters(projection: &str, n: usize) {
    metrics::counter!("eosflow_projection_unpublished_dead_letters_total", "projection" => projection.to_string())
        .increment(n as u64);
}

/// A blocking Kafka call (`call`: librdkafka's name for it) missed its deadline and was given
/// up on, with the producer it ran on: the instance recreates the producer in place.
pub fn kafka_call_stuck(call: &'static str) {
    metrics::counter!("eosflow_kafka_calls_stuck_total", "call" => call).increment(1);
}

/// A changelog restore could not reach the broker and is waiting for it to come back
/// (`eosflow_restore_broker_waits_total`, one per failed attempt).
pub fn restore_waiting_for_broker(partition: i32) {
    metrics::counter!("eosflow_restore_broker_waits_total", "partition" => partition.to_string())
        .increment(1);
}

/// A loop began to wait for the cluster to give back `on` (see [`Waits`]).
pub fn wait_started(on: &'static str) {
    metrics::counter!("eosflow_waits_total", "on" => on).increment(1);
    metrics::gauge!("eosflow_waiting", "on" => on).increment(1.0);
}

/// A loop's wait on `on` ended after `seconds`: the next commit landed, or the coordinator
/// came back.
pub fn wait_ended(on: &'static str, seconds: f64) {
    metrics::gauge!("eosflow_waiting", "on" => on).decrement(1.0);
    metrics::histogram!("eosflow_wait_seconds", "on" => on).record(seconds);
}

/// Whether `/readyz` answers 200 (exported so an alert can see a pod that stays unready).
pub fn ready(ready: bool) {
    metrics::gauge!("eosflow_ready").set(if ready { 1.0 } else { 0.0 });
}

/// Whether a state restore is running (a restore that never ends is an alert).
pub fn restoring(restoring: bool) {
    metrics::gauge!("eosflow_restore_in_progress").set(if restoring { 1.0 } else { 0.0 });
}
