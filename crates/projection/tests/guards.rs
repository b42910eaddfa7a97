//! Version guards, inbox dedup, identifier safety.

mod common;

use common::*;
use eosflow_projection::{Record, RowOp, Value};

fn versioned(table: &str, k: i64, name: &str, version: i64) -> RowOp {
    RowOp::Upsert {
        table: table.into(),
        key: vec![("id".into(), Value::Int(k))],
        columns: vec![("name".into(), Value::from(name))],
        version: Some(version),
    }
}

#[tokio::test]
async fn a_reordered_older_version_does_not_regress_the_row() {
    let admin = admin().await;
    let name = unique("version");
    let t = format!("{name}_t");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {t} (id bigint PRIMARY KEY, name text, version bigint)"
        ))
        .await
        .expect("table");
    let s = store(&name).await;
    s.open("in", &[0], 1).await.expect("open");
    // v3 arrives first, then v2 (reordered) in the same batch, then v1 in a later batch.
    s.apply(&batch(
        1,
        "in",
        0,
        vec![
            rec(0, vec![versioned(&t, 1, "v3", 3)]),
            rec(1, vec![versioned(&t, 1, "v2", 2)]),
            rec(2, vec![versioned(&t, 2, "b-v1", 1)]),
        ],
    ))
    .await
    .expect("apply");
    s.apply(&batch(
        1,
        "in",
        0,
        vec![
            rec(3, vec![versioned(&t, 1, "v1", 1)]),
            rec(4, vec![versioned(&t, 2, "b-v2", 2)]),
            rec(
                5,
                vec![RowOp::Delete {
                    table: t.clone(),
                    key: vec![("id".into(), Value::Int(1))],
                    version: Some(3),
                }],
            ),
        ],
    ))
    .await
    .expect("apply");
    let rows: Vec<(i64, String, i64)> = admin
        .query(
            &format!("SELECT id, name, version FROM {t} ORDER BY id"),
            &[],
        )
        .await
        .expect("read")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![(1, "v3".to_string(), 3), (2, "b-v2".to_string(), 2)],
        "older versions and a delete at an equal version changed nothing"
    );
    s.apply(&batch(
        1,
        "in",
        0,
        vec![rec(
            6,
            vec![RowOp::Delete {
                table: t.clone(),
                key: vec![("id".into(), Value::Int(1))],
                version: Some(4),
            }],
        )],
    ))
    .await
    .expect("apply");
    assert_eq!(count(&admin, &t).await, 1, "a newer delete removes the row");
}

#[tokio::test]
async fn the_same_message_id_at_two_offsets_applies_once() {
    let admin = admin().await;
    let name = unique("inbox");
    let t = format!("{name}_t");
    admin
        .batch_execute(&format!("CREATE TABLE {t} (id text NOT NULL)"))
        .await
        .expect("table");
    let s = store(&name).await;
    s.open("in", &[0, 1], 1).await.expect("open");
    let with_id = |offset: i64, id: &str| Record {
        offset,
        message_id: Some(id.into()),
        ops: vec![RowOp::Insert {
            table: t.clone(),
            columns: vec![("id".into(), Value::from(id))],
        }],
    };
    // Twice in one batch (a producer retry), then again in a later batch on another partition.
    let a = s
        .apply(&batch(
            1,
            "in",
            0,
            vec![with_id(0, "m1"), with_id(1, "m2"), with_id(2, "m1")],
        ))
        .await
        .expect("apply");
    assert_eq!((a.applied, a.duplicates), (2, 1), "{a:?}");
    let b = s
        .apply(&batch(1, "in", 1, vec![with_id(0, "m2"), with_id(1, "m3")]))
        .await
        .expect("apply");
    assert_eq!((b.applied, b.duplicates), (1, 1), "{b:?}");
    let ids: Vec<String> = admin
        .query(&format!("SELECT id FROM {t} ORDER BY id"), &[])
        .await
        .expect("read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, vec!["m1", "m2", "m3"]);
    // The positions moved past the duplicates.
    assert_eq!(
        s.positions("in", &[0]).await.expect("positions")[&0],
        Some(3)
    );
}

#[tokio::test]
async fn a_hostile_table_name_is_refused_never_executed() {
    let admin = admin().await;
    let name = unique("ident");
    let victim = format!("{name}_victim");
    admin
        .batch_execute(&format!("CREATE TABLE {victim} (id text)"))
        .await
        .expect("table");
    let s = store(&name).await;
    s.open("in", &[0], 1).await.expect("open");
    let hostile = format!("a\"; drop table {victim}; --");
    let applied = s
        .apply(&batch(
            1,
            "in",
            0,
            vec![
                rec(
                    0,
                    vec![RowOp::Insert {
                        table: hostile.clone(),
                        columns: vec![("id".into(), Value::from("x"))],
                    }],
                ),
                rec(
                    1,
                    vec![RowOp::Upsert {
                        table: victim.clone(),
                        key: vec![("id) do nothing; drop table x; --".into(), Value::from("x"))],
                        columns: vec![],
                        version: None,
                    }],
                ),
                rec(
                    2,
                    vec![RowOp::Insert {
                        table: victim.clone(),
                        columns: vec![("id".into(), Value::from("ok"))],
                    }],
                ),
            ],
        ))
        .await
        .expect("apply");
    let dead: Vec<(i64, &str)> = applied
        .dead_lettered
        .iter()
        .map(|d| (d.offset, d.sqlstate.as_str()))
        .collect();
    assert_eq!(dead, vec![(0, "42602"), (1, "42602")], "{applied:?}");
    assert!(
        applied.dead_lettered[0].message.contains("drop table"),
        "{applied:?}"
    );
    assert_eq!(applied.applied, 1);
    assert_eq!(count(&admin, &victim).await, 1, "the victim table survived");
}
