//! Every `Value` variant lands in its Postgres column type, and a deferred constraint that
//! fails at COMMIT still dead-letters only its record.

mod common;

use common::*;
use eosflow_projection::{RowOp, Value};

#[tokio::test]
async fn every_value_variant_binds_to_its_column_types() {
    let admin = admin().await;
    let name = unique("values");
    let t = format!("{name}_t");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {t} (id int PRIMARY KEY, small smallint, b boolean, f float8, r real,
                big bigint, s text, v varchar(10), raw bytea, j jsonb, js json,
                ts timestamptz, lts timestamp, n text, num numeric, fnum numeric, tnum numeric,
                znum numeric, u uuid)"
        ))
        .await
        .expect("table");
    let s = store(&name).await;
    s.open("in", &[0], 1).await.expect("open");
    let applied = s
        .apply(&batch(
            1,
            "in",
            0,
            vec![rec(
                0,
                vec![RowOp::Upsert {
                    table: t.clone(),
                    key: vec![("id".into(), Value::Int(7))],
                    columns: vec![
                        ("small".into(), Value::Int(-3)),
                        ("b".into(), Value::Bool(true)),
                        ("f".into(), Value::Float(1.5)),
                        ("r".into(), Value::Int(2)),
                        ("big".into(), Value::Int(i64::MAX)),
                        ("s".into(), Value::from("héllo")),
                        ("v".into(), Value::Int(42)),
                        ("raw".into(), Value::Bytes(vec![0, 255, 1])),
                        ("j".into(), Value::Json(serde_json::json!({"a": [1, 2]}))),
                        ("js".into(), Value::from("{\"b\": true}")),
                        ("ts".into(), Value::TimestampMillis(1_700_000_000_123)),
                        ("lts".into(), Value::TimestampMillis(-1_000)),
                        ("n".into(), Value::Null),
                        ("num".into(), Value::Int(-12_345_678_901)),
                        ("fnum".into(), Value::Float(0.000_125)),
                        ("tnum".into(), Value::from("10000.0500")),
                        ("znum".into(), Value::from("-0.00")),
                        (
                            "u".into(),
                            Value::from("6f1c2a3b-0d4e-4f50-8a61-72839405a6b7"),
                        ),
                    ],
                    version: None,
                }],
            )],
        ))
        .await
        .expect("apply");
    assert!(applied.dead_lettered.is_empty(), "{applied:?}");
    let row = admin
        .query_one(
            &format!(
                "SELECT small::text, b::text, f::text, r::text, big::text, s, v, encode(raw, 'hex'),
                    j::text, js::text, (extract(epoch from ts) * 1000)::bigint::text,
                    lts::text, n IS NULL, num::text, fnum::text, tnum::text, znum::text, u::text
                 FROM {t} WHERE id = 7"
            ),
            &[],
        )
        .await
        .expect("read");
    let texts: Vec<String> = (0..12).map(|i| row.get::<_, String>(i)).collect();
    assert_eq!(
        texts,
        vec![
            "-3",
            "true",
            "1.5",
            "2",
            &i64::MAX.to_string(),
            "héllo",
            "42",
            "00ff01",
            "{\"a\": [1, 2]}",
            "{\"b\":true}",
            "1700000000123",
            "1969-12-31 23:59:59",
        ]
    );
    assert!(row.get::<_, bool>(12));
    let numerics: Vec<String> = (13..18).map(|i| row.get::<_, String>(i)).collect();
    assert_eq!(
        numerics,
        vec![
            "-12345678901",
            "0.000125",
            "10000.0500",
            "0.00",
            "6f1c2a3b-0d4e-4f50-8a61-72839405a6b7"
        ]
    );

    // Out of range for smallint, and a float into a boolean: dead-lettered, not stalled.
    let applied = s
        .apply(&batch(
            1,
            "in",
            0,
            vec![
                rec(
                    1,
                    vec![RowOp::Insert {
                        table: t.clone(),
                        columns: vec![
                            ("id".into(), Value::Int(8)),
                            ("small".into(), Value::Int(70_000)),
                        ],
                    }],
                ),
                rec(
                    2,
                    vec![RowOp::Insert {
                        table: t.clone(),
                        columns: vec![
                            ("id".into(), Value::Int(9)),
                            ("b".into(), Value::Float(1.0)),
                        ],
                    }],
                ),
            ],
        ))
        .await
        .expect("apply");
    let states: Vec<&str> = applied
        .dead_lettered
        .iter()
        .map(|d| d.sqlstate.as_str())
        .collect();
    assert_eq!(states, vec!["42804", "42804"], "{applied:?}");
}

#[tokio::test]
async fn a_deferred_constraint_failing_at_commit_dead_letters_only_its_record() {
    let admin = admin().await;
    let name = unique("deferred");
    let parent = format!("{name}_parent");
    let child = format!("{name}_child");
    admin
        .batch_execute(&format!(
            "CREATE TABLE {parent} (id bigint PRIMARY KEY);
             CREATE TABLE {child} (id bigint PRIMARY KEY,
                 parent bigint REFERENCES {parent} (id) DEFERRABLE INITIALLY DEFERRED);
             INSERT INTO {parent} VALUES (1);"
        ))
        .await
        .expect("tables");
    let s = store(&name).await;
    s.open("in", &[0], 1).await.expect("open");
    let child_row = |id: i64, p: i64| RowOp::Insert {
        table: child.clone(),
        columns: vec![
            ("id".into(), Value::Int(id)),
            ("parent".into(), Value::Int(p)),
        ],
    };
    let applied = s
        .apply(&batch(
            1,
            "in",
            0,
            vec![
                rec(0, vec![child_row(1, 1)]),
                rec(1, vec![child_row(2, 99)]),
                rec(2, vec![child_row(3, 1)]),
            ],
        ))
        .await
        .expect("apply");
    let dead: Vec<(i64, &str)> = applied
        .dead_lettered
        .iter()
        .map(|d| (d.offset, d.sqlstate.as_str()))
        .collect();
    assert_eq!(dead, vec![(1, "23503")], "{applied:?}");
    assert_eq!(count(&admin, &child).await, 2);
}
