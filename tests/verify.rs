//! The exactly-once claim, small enough for every `make test`: separate processor processes,
//! random kill -9s mid-stream, and a verdict from the committed output and changelog.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn verify_with_kill_9_reports_nothing_lost_or_duplicated() {
    let work = std::env::temp_dir().join(support::unique("eosflow-verify"));
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args([
            "verify",
            "--records",
            "30000",
            "--keys",
            "500",
            "--partitions",
            "8",
            "--instances",
            "2",
            "--kills",
            "4",
            "--duration-secs",
            "20",
            "--duplicate-every",
            "40",
            "--drain-timeout-secs",
            "150",
            "--work-dir",
        ])
        .arg(&work)
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .output()
        .expect("run eosflow verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(started.elapsed() < Duration::from_secs(400));
    assert!(
        out.status.success(),
        "verify failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    let line = stdout.lines().last().unwrap_or_default();
    for expected in [
        "records=30000",
        "lost=0",
        "duplicated=0",
        "state_mismatches=0",
        "kills=4",
    ] {
        assert!(
            line.contains(expected),
            "closing line {line:?} lacks {expected}"
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}

/// Issue #38: a record the verifier's own producer failed to write is the harness's failure, not
/// the processor's. Every 100th record is sent to a partition that does not exist (all its sends
/// fail, retries included): the closing line must count those 40 as `not_produced` and judge the
/// rest, with nothing lost, nothing duplicated and the state exact for what the input holds.
#[test]
fn verify_reports_sends_that_failed_as_not_produced_never_as_lost() {
    let work = std::env::temp_dir().join(support::unique("eosflow-verify-unsendable"));
    let out = Command::new(env!("CARGO_BIN_EXE_eosflow"))
        .args([
            "verify",
            "--records",
            "4000",
            "--keys",
            "200",
            "--partitions",
            "4",
            "--instances",
            "1",
            "--kills",
            "0",
            "--duration-secs",
            "3",
            "--duplicate-every",
            "40",
            "--unsendable-every",
            "100",
            "--drain-timeout-secs",
            "120",
            "--work-dir",
        ])
        .arg(&work)
        .env("EOSFLOW_KAFKA_BOOTSTRAP", support::bootstrap())
        .output()
        .expect("run eosflow verify");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "verify failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    let line = stdout.lines().last().unwrap_or_default();
    for expected in [
        "records=4000 ",
        " not_produced=40 ",
        " lost=0 ",
        " duplicated=0 ",
        " state_mismatches=0 ",
        " sequence_breaks=0 ",
    ] {
        assert!(
            line.contains(expected),
            "closing line {line:?} lacks {expected:?}"
        );
    }
    // Each unsendable record was tried again in every retry round (3), beside its first send.
    assert!(line.contains(" retried_sends=120 "), "{line}");
    let _ = std::fs::remove_dir_all(&work);
}
