//! Permanent record failures dead-letter one record; transient failures commit nothing.

mod common;

use common::*;
use eosflow_projection::{ProjectionError, RowOp, Value};

fn put(table: &str, k: i64, qty: i64) -> RowOp {
    RowOp::Upsert {
        table: table.into(),
        key: vec![("k".into(), Value::Int(k))],
        columns: vec![("qty".into(), Value::Int(qty))],
        version: None,
    }
}

#[tokio::test]
async fn a_permanent_error_dead_letters_exactly_that_record_and_the_rest_commits() {
    let admin = admin().await;
    let name = unique("dlt");
    let t = format!("{name}_t");
    let log = format!("{name}_log");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {t} (k bigint PRIMARY KEY, qty bigint NOT NULL CHECK (qty >= 0));
             CREATE TABLE {log} (k bigint NOT NULL);"
        ))
        .await
        .expect("tables");
    let s = store(&name).await;
    s.open("in", &[0], 1).await.expect("open");
    let records = (0..10)
        .map(|i| {
            let qty = if i == 5 { -1 } else { i };
            rec(
                100 + i,
                vec![
                    RowOp::Insert {
                        table: log.clone(),
                        columns: vec![("k".into(), Value::Int(i))],
                    },
                    put(&t, i, qty),
                ],
            )
        })
        .collect();
    let applied = s.apply(&batch(1, "in", 0, records)).await.expect("apply");
    assert_eq!(applied.applied, 9, "{applied:?}");
    assert_eq!(applied.dead_lettered.len(), 1, "{applied:?}");
    let d = &applied.dead_lettered[0];
    assert_eq!((d.topic.as_str(), d.partition, d.offset), ("in", 0, 105));
    assert_eq!(d.sqlstate, "23514", "{d:?}");
    assert!(d.message.contains("check constraint"), "{d:?}");
    assert_eq!(applied.positions, vec![("in".to_string(), 0, 110)]);
    let ks: Vec<i64> = admin
        .query(&format!("SELECT k FROM {t} ORDER BY k"), &[])
        .await
        .expect("read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ks, vec![0, 1, 2, 3, 4, 6, 7, 8, 9]);
    // The bad record's other op (its log row) was rolled back with it.
    assert_eq!(count(&admin, &log).await, 9);
    assert_eq!(
        s.positions("in", &[0]).await.expect("positions")[&0],
        Some(110)
    );

    // Other permanent failures: an unknown table, a value that does not fit its column.
    let applied = s
        .apply(&batch(
            1,
            "in",
            0,
            vec![
                rec(110, vec![put(&format!("{name}_missing"), 1, 1)]),
                rec(
                    111,
                    vec![RowOp::Upsert {
                        table: t.clone(),
                        key: vec![("k".into(), Value::from("not a number"))],
                        columns: vec![],
                        version: None,
                    }],
                ),
                rec(112, vec![put(&t, 20, 20)]),
            ],
        ))
        .await
        .expect("apply");
    let states: Vec<&str> = applied
        .dead_lettered
        .iter()
        .map(|d| d.sqlstate.as_str())
        .collect();
    assert_eq!(states, vec!["42P01", "42804"], "{applied:?}");
    assert_eq!(applied.applied, 1);
    assert_eq!(count(&admin, &t).await, 10);

    // Every dead letter was kept with its batch, until the loop says it reached the DLT.
    let kept = s
        .unpublished_dead_letters("in", &[0])
        .await
        .expect("unpublished");
    let offsets: Vec<i64> = kept.iter().map(|d| d.offset).collect();
    assert_eq!(offsets, vec![105, 110, 111], "{kept:?}");
    assert_eq!(kept[0].sqlstate, "23514");
    s.mark_published(&kept[..2]).await.expect("mark");
    let left = s
        .unpublished_dead_letters("in", &[0])
        .await
        .expect("unpublished");
    assert_eq!(left.iter().map(|d| d.offset).collect::<Vec<_>>(), vec![111]);
    assert!(s
        .unpublished_dead_letters("in", &[1])
        .await
        .expect("other partition")
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_killed_mid_batch_commits_nothing_and_the_retry_applies_it_once() {
    let admin = admin().await;
    let name = unique("kill");
    let t = format!("{name}_t");
    let switch = format!("{name}_switch");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {t} (k bigint NOT NULL);
             CREATE TABLE {switch} (armed boolean NOT NULL);
             INSERT INTO {switch} VALUES (true);"
        ))
        .await
        .expect("tables");
    let s = store(&name).await;
    s.open("in", &[0], 1).await.expect("open");
    let insert = |k: i64| RowOp::Insert {
        table: t.clone(),
        columns: vec![("k".into(), Value::Int(k))],
    };
    // Record 2 terminates its own backend while the switch is armed: the connection dies
    // after records 0 and 1 were written inside the transaction.
    let records = vec![
        rec(0, vec![insert(0)]),
        rec(1, vec![insert(1)]),
        rec(
            2,
            vec![
                RowOp::Sql {
                    statement: format!(
                        "SELECT pg_terminate_backend(pg_backend_pid()) FROM {switch} WHERE armed"
                    ),
                    params: vec![],
                },
                insert(2),
            ],
        ),
        rec(3, vec![insert(3)]),
    ];
    let b = batch(1, "in", 0, records);
    let err = s.apply(&b).await.expect_err("the backend was terminated");
    assert!(matches!(err, ProjectionError::Transient { .. }), "{err:?}");
    assert!(err.is_transient());
    assert_eq!(count(&admin, &t).await, 0, "nothing of the batch committed");
    assert_eq!(
        s.positions("in", &[0])
            .await
            .expect("positions (reconnected)")[&0],
        None
    );

    admin
        .batch_execute(&format!("UPDATE {switch} SET armed = false"))
        .await
        .expect("disarm");
    let applied = s.apply_retrying(&b).await.expect("retry");
    assert_eq!(applied.applied, 4, "{applied:?}");
    // A second retry (the loop not knowing the first one committed) changes nothing.
    let again = s.apply_retrying(&b).await.expect("retry again");
    assert_eq!((again.applied, again.replayed), (0, 4));
    let ks: Vec<i64> = admin
        .query(&format!("SELECT k FROM {t} ORDER BY k"), &[])
        .await
        .expect("read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ks, vec![0, 1, 2, 3], "applied exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_from_outside_while_blocked_is_survived_by_apply_retrying() {
    // The store's backend is killed by someone else (an admin, a fail-over) while it waits on
    // a lock; apply_retrying reconnects and applies the batch once.
    let admin = admin().await;
    let locker = common::admin().await;
    let name = unique("outside");
    let t = format!("{name}_t");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {t} (k bigint PRIMARY KEY, n bigint NOT NULL); INSERT INTO {t} VALUES (1, 0);"
        ))
        .await
        .expect("table");
    let s = std::sync::Arc::new(store(&name).await);
    s.open("in", &[0], 1).await.expect("open");
    locker
        .batch_execute(&format!("BEGIN; SELECT * FROM {t} WHERE k = 1 FOR UPDATE"))
        .await
        .expect("lock");
    let b = batch(
        1,
        "in",
        0,
        vec![rec(
            0,
            vec![RowOp::Sql {
                statement: format!("UPDATE {t} SET n = n + 1 WHERE k = $1"),
                params: vec![Value::Int(1)],
            }],
        )],
    );
    let task = {
        let (s, b) = (s.clone(), b.clone());
        tokio::spawn(async move { s.apply_retrying(&b).await })
    };
    // Wait until the store's backend is blocked on our lock, then kill it and release.
    let mut killed = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let rows = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE $1",
                &[&format!("UPDATE {t}%")],
            )
            .await
            .expect("terminate");
        if !rows.is_empty() {
            killed = true;
            break;
        }
    }
    assert!(killed, "the store never blocked on the lock");
    locker.batch_execute("COMMIT").await.expect("release");
    let applied = task.await.expect("task").expect("apply_retrying");
    assert_eq!(applied.applied, 1);
    let n: i64 = admin
        .query_one(&format!("SELECT n FROM {t} WHERE k = 1"), &[])
        .await
        .expect("read")
        .get(0);
    assert_eq!(n, 1, "applied exactly once");
}
