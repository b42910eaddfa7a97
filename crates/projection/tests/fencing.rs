//! Claims: a newer epoch fences the older one, an older claim is refused, positions survive a
//! restart.

mod common;

use common::*;
use eosflow_projection::{ProjectionError, RowOp, Value};

fn put(table: &str, k: i64) -> RowOp {
    RowOp::Insert {
        table: table.into(),
        columns: vec![("k".into(), Value::Int(k))],
    }
}

async fn table(admin: &tokio_postgres::Client, name: &str) -> String {
    let t = format!("{name}_t");
    admin
        .batch_execute(&format!("CREATE TABLE {t} (k bigint NOT NULL)"))
        .await
        .expect("table");
    t
}

#[tokio::test]
async fn a_zombie_whose_partitions_were_claimed_by_a_newer_epoch_commits_nothing() {
    let admin = admin().await;
    let name = unique("fence");
    let t = table(&admin, &name).await;
    let a = store(&name).await;
    let b = store(&name).await;
    assert_eq!(a.open("in", &[0, 1], 1).await.expect("A claims")[&0], None);
    let first = a
        .apply(&batch(1, "in", 0, vec![rec(0, vec![put(&t, 0)])]))
        .await
        .expect("A applies while it owns the partitions");
    assert_eq!(first.applied, 1);

    // B takes over (a rebalance while A was paused); A wakes up and tries to commit.
    let positions = b.open("in", &[0, 1], 2).await.expect("B claims");
    assert_eq!(positions[&0], Some(1));
    let err = a
        .apply(&batch(1, "in", 0, vec![rec(1, vec![put(&t, 1)])]))
        .await
        .expect_err("the zombie must be fenced");
    match &err {
        ProjectionError::Fenced {
            projection,
            topic,
            partition,
            ours,
            current,
        } => {
            assert_eq!(
                (
                    projection.as_str(),
                    topic.as_str(),
                    *partition,
                    *ours,
                    *current
                ),
                (name.as_str(), "in", 0, 1, 2)
            );
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(err.to_string().contains("epoch 2"), "{err}");
    assert_eq!(count(&admin, &t).await, 1, "the zombie wrote nothing");

    let applied = b
        .apply(&batch(2, "in", 0, vec![rec(1, vec![put(&t, 10)])]))
        .await
        .expect("B applies");
    assert_eq!(applied.applied, 1);
    assert_eq!(applied.positions, vec![("in".to_string(), 0, 2)]);
    assert_eq!(count(&admin, &t).await, 2);
    // A stays fenced on every partition, including one it never wrote to.
    let err = a
        .apply(&batch(1, "in", 1, vec![rec(0, vec![put(&t, 2)])]))
        .await
        .expect_err("still fenced");
    assert!(
        matches!(err, ProjectionError::Fenced { partition: 1, .. }),
        "{err:?}"
    );
    assert_eq!(count(&admin, &t).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_zombie_and_new_owner_never_both_commit_after_the_claim() {
    // A applies batches in a loop while B claims; after B's claim returns, none of A's
    // applies may succeed, and every row A did write has an offset below B's position.
    let admin = admin().await;
    let name = unique("race");
    let t = format!("{name}_t");
    admin
        .batch_execute(&format!("CREATE TABLE {t} (k bigint NOT NULL)"))
        .await
        .expect("table");
    let a = std::sync::Arc::new(store(&name).await);
    let b = store(&name).await;
    a.open("in", &[0], 1).await.expect("A claims");
    let claimed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let zombie = {
        let (a, t, claimed) = (a.clone(), t.clone(), claimed.clone());
        tokio::spawn(async move {
            let mut committed_after_claim = 0;
            for o in 0..400i64 {
                let was_claimed = claimed.load(std::sync::atomic::Ordering::SeqCst);
                match a
                    .apply(&batch(1, "in", 0, vec![rec(o, vec![put(&t, o)])]))
                    .await
                {
                    Ok(_) if was_claimed => committed_after_claim += 1,
                    Ok(_) => {}
                    Err(ProjectionError::Fenced { .. }) => return (o, committed_after_claim),
                    Err(e) => panic!("{e}"),
                }
            }
            (400, committed_after_claim)
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let positions = b.open("in", &[0], 2).await.expect("B claims");
    claimed.store(true, std::sync::atomic::Ordering::SeqCst);
    let (fenced_at, after) = zombie.await.expect("zombie task");
    assert!(fenced_at < 400, "the zombie was never fenced");
    assert_eq!(after, 0, "the zombie committed after the claim");
    let next = positions[&0].unwrap_or(0);
    assert_eq!(
        count(&admin, &t).await,
        next,
        "rows == B's starting position"
    );
}

#[tokio::test]
async fn a_claim_with_a_lower_epoch_is_refused_naming_both_epochs() {
    let name = unique("lower");
    let s = store(&name).await;
    s.open("in", &[3], 5).await.expect("epoch 5");
    s.open("in", &[3], 5)
        .await
        .expect("the same epoch again wins");
    let err = s.open("in", &[2, 3], 4).await.expect_err("epoch 4 < 5");
    match &err {
        ProjectionError::Fenced {
            partition,
            ours,
            current,
            ..
        } => assert_eq!((*partition, *ours, *current), (3, 4, 5)),
        other => panic!("expected Fenced, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("epoch 5") && msg.contains("ours is 4"),
        "{msg}"
    );
    // Nothing of the refused claim was recorded: partition 2 is still unclaimed.
    let err = s
        .apply(&batch(4, "in", 2, vec![rec(0, vec![])]))
        .await
        .expect_err("partition 2 was never claimed");
    assert!(
        matches!(err, ProjectionError::NotClaimed { partition: 2, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn open_returns_the_stored_positions_after_a_restart() {
    let admin = admin().await;
    let name = unique("restart");
    let t = table(&admin, &name).await;
    {
        let s = store(&name).await;
        let positions = s.open("in", &[0, 1, 2], 1).await.expect("open");
        assert_eq!(positions.len(), 3);
        assert!(positions.values().all(Option::is_none));
        let mut b = batch(
            1,
            "in",
            0,
            vec![rec(0, vec![put(&t, 0)]), rec(41, vec![put(&t, 1)])],
        );
        b.partitions.push(eosflow_projection::PartitionBatch {
            topic: "in".into(),
            partition: 2,
            records: vec![rec(7, vec![put(&t, 2)])],
        });
        s.apply(&b).await.expect("apply");
    }
    let s = store(&name).await;
    let positions = s.open("in", &[0, 1, 2], 2).await.expect("reopen");
    assert_eq!(positions[&0], Some(42));
    assert_eq!(positions[&1], None);
    assert_eq!(positions[&2], Some(8));
    assert_eq!(
        s.positions("in", &[0, 2]).await.expect("positions")[&2],
        Some(8)
    );
    // Another projection has its own positions.
    let other = store(&unique("other")).await;
    assert_eq!(other.open("in", &[0], 1).await.expect("other")[&0], None);
}

#[tokio::test]
async fn next_epoch_is_above_every_epoch_handed_out_or_claimed_and_fences_the_last_owner() {
    let name = unique("epochs");
    let a = store(&name).await;
    let b = store(&name).await;
    // An epoch claimed by hand (a generation) is below the next one handed out.
    a.open("in", &[0], 41).await.expect("epoch 41");
    let e1 = b.next_epoch().await.expect("next");
    assert_eq!(e1, 42, "above the claimed 41");
    // Concurrent takers never get the same epoch.
    let (x, y) = tokio::join!(a.next_epoch(), b.next_epoch());
    let (x, y) = (x.expect("x"), y.expect("y"));
    assert_ne!(x, y);
    assert!(x > e1 && y > e1, "{x} {y} after {e1}");
    // The owner that claims with the newest epoch fences the one before it.
    let newest = x.max(y);
    let older = x.min(y);
    a.open("in", &[0], older).await.expect("older claim");
    b.open("in", &[0], newest).await.expect("newest claim");
    let err = a
        .apply(&batch(older, "in", 0, vec![rec(0, vec![])]))
        .await
        .expect_err("fenced");
    assert!(matches!(err, ProjectionError::Fenced { .. }), "{err:?}");
}
