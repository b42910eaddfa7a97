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
