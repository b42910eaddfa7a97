//! SASL/SCRAM against the local stack's SCRAM listener (`dev/stack`: SASL_PLAINTEXT on
//! `EOSFLOW_STACK_KAFKA_SASL`, default 127.0.0.1:19094), and that no password reaches any
//! output: `eosflow config`, error messages, or the logs of an authenticated run.
//!
//! Every test name starts with `security` so `cargo test --all-targets -- security` runs them.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use eosflow::config::{Config, Secret};
use eosflow::internals::kafka::client::ConnectError;
use eosflow::kafka::{ClientRole, KafkaClients};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

/// The SCRAM listener of the local stack.
fn sasl_bootstrap() -> String {
    let addr =
        std::env::var("EOSFLOW_STACK_KAFKA_SASL").unwrap_or_else(|_| "127.0.0.1:19094".into());
    let sock = addr.parse().expect("EOSFLOW_STACK_KAFKA_SASL is ip:port");
    assert!(
        std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(2)).is_ok(),
        "no SASL listener at {addr}: run `dev/stack up` (restart an older broker: dev/stack down kafka && dev/stack up kafka)"
    );
    addr
}

fn sasl_user() -> String {
    std::env::var("EOSFLOW_STACK_KAFKA_SASL_USER").unwrap_or_else(|_| "eosflow".into())
}

/// The stack's development password (dev/stack never prints it).
fn sasl_password() -> String {
    std::env::var("EOSFLOW_STACK_KAFKA_SASL_PASSWORD").unwrap_or_else(|_| "eosflow-secret".into())
}

fn sasl_config(mechanism: &str, password: &str) -> Config {
    let mut c = support::config();
    c.kafka.bootstrap = sasl_bootstrap();
    let s = &mut c.kafka.security;
    s.protocol = eosflow::config::SecurityProtocol::SaslPlaintext;
    s.sasl_mechanism = Some(mechanism.parse().expect("a SASL mechanism"));
    s.username = sasl_user();
    s.password = Secret::new(password);
    c.validate().expect("valid SASL config");
    c
}

/// `EOSFLOW_*` variables for a SASL run of the binary (the password given as `password_env`).
fn sasl_env(mechanism: &str) -> Vec<(String, String)> {
    vec![
        ("EOSFLOW_KAFKA_BOOTSTRAP".into(), sasl_bootstrap()),
        (
            "EOSFLOW_KAFKA_SECURITY_PROTOCOL".into(),
            "sasl_plaintext".into(),
        ),
        (
            "EOSFLOW_KAFKA_SECURITY_SASL_MECHANISM".into(),
            mechanism.into(),
        ),
        ("EOSFLOW_KAFKA_SECURITY_USERNAME".into(), sasl_user()),
    ]
}

fn eosflow(args: &[&str], env: &[(String, String)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eosflow"));
    cmd.args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("EOSFLOW_") && !k.starts_with("EOSFLOW_STACK_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running eosflow")
}

fn assert_no_secret(what: &str, text: &str, secret: &str) {
    assert!(
        !text.contains(secret),
        "{what} contains the password:\n{text}"
    );
}

#[test]
fn security_scram_sha_256_and_512_produce_and_consume() {
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let topic = support::unique(&format!("sec-{}", mechanism.to_lowercase()));
        support::create_topics(&[&topic], 1);
        let clients = KafkaClients::new(sasl_config(mechanism, &sasl_password()).kafka);
        clients
            .check_connection(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{mechanism}: {e}"));
        support::round_trip(&clients, &topic, "over SCRAM");
    }
}

#[test]
fn security_wrong_password_fails_fast_with_a_clear_error() {
    let wrong = format!("wrong-{}", uuid::Uuid::new_v4().simple());
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let clients = KafkaClients::new(sasl_config(mechanism, &wrong).kafka);
        let started = Instant::now();
        let err = clients
            .check_connection(Duration::from_secs(20))
            .expect_err("a wrong password must not connect");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "took {:?}: the authentication failure should be seen at once, not at the deadline",
            started.elapsed()
        );
        assert!(
            matches!(err, ConnectError::Authentication { .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("authentication failed"), "{msg}");
        assert!(
            msg.contains(mechanism) && msg.contains(&sasl_user()),
            "{msg}"
        );
        assert_no_secret("the error", &msg, &wrong);
        assert_no_secret("the error (Debug)", &format!("{err:?}"), &wrong);
    }
    // The CLI stops at start with that error, within the same kind of deadline (no hang).
    let mut env = sasl_env("SCRAM-SHA-512");
    env.push(("EOSFLOW_KAFKA_SECURITY_PASSWORD".into(), wrong.clone()));
    let dir = std::env::temp_dir().join(support::unique("sec-topics"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let started = Instant::now();
    let out = eosflow(
        &["topics", "apply", "--dir", dir.to_str().expect("utf-8")],
        &env,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(25), "{stderr}");
    assert!(stderr.contains("authentication failed"), "{stderr}");
    assert_no_secret("stderr", &stderr, &wrong);
    assert_no_secret("stdout", &String::from_utf8_lossy(&out.stdout), &wrong);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `eosflow config` succeeds, shows the password as `***`, and prints the secret nowhere.
fn config_shows_no_secret(source: &str, env: &[(String, String)], secret: &str) {
    let out = eosflow(&["config"], env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("password = \"***\""), "{stdout}");
    assert_no_secret(&format!("stdout ({source})"), &stdout, secret);
    assert_no_secret(&format!("stderr ({source})"), &stderr, secret);
}

#[test]
fn security_config_command_never_prints_the_password() {
    let secret = format!("cfg-secret-{}", uuid::Uuid::new_v4().simple());
    // From the environment.
    let mut env = sasl_env("SCRAM-SHA-256");
    env.push(("EOSFLOW_KAFKA_SECURITY_PASSWORD".into(), secret.clone()));
    env.push((
        "EOSFLOW_KAFKA_SECURITY_SSL_KEY_PASSWORD".into(),
        secret.clone(),
    ));
    env[1].1 = "sasl_ssl".into();
    config_shows_no_secret("env", &env, &secret);
    // From a file.
    let dir = std::env::temp_dir().join(support::unique("sec-pw"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("password");
    std::fs::write(&file, format!("{secret}\n")).expect("write password file");
    let mut env = sasl_env("SCRAM-SHA-256");
    env.push((
        "EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE".into(),
        file.display().to_string(),
    ));
    config_shows_no_secret("file", &env, &secret);
    // A config error (both the password and its file) names keys, never the value.
    env.push(("EOSFLOW_KAFKA_SECURITY_PASSWORD".into(), secret.clone()));
    let out = eosflow(&["config"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("kafka.security.password_file"), "{stderr}");
    assert_no_secret("stderr (error)", &stderr, &secret);
    // A missing file fails at start, naming the key and the path.
    let env = [
        sasl_env("SCRAM-SHA-256"),
        vec![(
            "EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE".into(),
            dir.join("absent").display().to_string(),
        )],
    ]
    .concat();
    let out = eosflow(&["config"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("kafka.security.password_file") && stderr.contains("absent"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn security_authenticated_run_logs_no_password() {
    let password = sasl_password();
    let p = support::pipeline::Pipeline::new("sec-run", 1);
    // A few inputs through the SASL listener, so the run has work to do.
    let clients = KafkaClients::new(sasl_config("SCRAM-SHA-512", &password).kafka);
    support::round_trip(&clients, &p.input, "1");
    let dir = std::env::temp_dir().join(support::unique("sec-run-logs"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pw_file = dir.join("password");
    std::fs::write(&pw_file, &password).expect("write password file");
    let log = dir.join("run.log");
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eosflow"));
    cmd.args(["run", "--topology", "count", "--output", &p.output])
        // librdkafka's own debug log of the SASL exchange goes through the log too.
        .env("RUST_LOG", "debug")
        .env("EOSFLOW_KAFKA_PROPERTY_DEBUG", "security,broker")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    for (k, _) in std::env::vars() {
        if k.starts_with("EOSFLOW_") && !k.starts_with("EOSFLOW_STACK_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in sasl_env("SCRAM-SHA-512") {
        cmd.env(k, v);
    }
    cmd.env("EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE", &pw_file)
        .env("EOSFLOW_APP_ID", &p.app)
        .env("EOSFLOW_APP_INSTANCE_ID", "i0")
        .env("EOSFLOW_PROCESSOR_INPUT_TOPICS", &p.input)
        .env("EOSFLOW_PROCESSOR_SESSION_TIMEOUT_MS", "6000")
        .env("EOSFLOW_STATE_DIR", &p.state_root);
    let mut child = cmd.spawn().expect("spawn eosflow run");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    support::wait_for("partitions assigned", Duration::from_secs(60), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("eosflow run exited early ({status}):\n{}", read(&log));
        }
        read(&log).contains("partitions assigned").then_some(())
    });
    // Let it process and commit at least one transaction through SCRAM.
    let reader = KafkaClients::new(sasl_config("SCRAM-SHA-512", &password).kafka);
    let consumer: BaseConsumer = reader
        .config(ClientRole::Reader)
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&p.output, 0, Offset::Beginning)
        .expect("partition");
    consumer.assign(&tpl).expect("assign");
    support::wait_for(
        "an output committed over SCRAM",
        Duration::from_secs(60),
        || matches!(consumer.poll(Duration::from_millis(200)), Some(Ok(_))).then_some(()),
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    support::wait_for("eosflow run to stop", Duration::from_secs(40), || {
        child.try_wait().ok().flatten()
    });
    let text = read(&log);
    assert!(
        text.contains("DEBUG"),
        "expected a debug-level log:\n{text}"
    );
    assert_no_secret("the run's log", &text, &password);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&p.state_root);
}
