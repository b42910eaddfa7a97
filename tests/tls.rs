//! TLS against the local stack's TLS endpoints (`dev/stack`: Kafka's SSL listener on
//! `EOSFLOW_STACK_KAFKA_SSL`, the registry's HTTPS port `EOSFLOW_STACK_REGISTRY_HTTPS_URL`, all
//! signed by the development CA `EOSFLOW_STACK_TLS_CA`). Each test also proves verification is
//! real: a CA that signed nothing (`EOSFLOW_STACK_TLS_OTHER_CA`) is refused, quickly and clearly.
//! Postgres over TLS is tested with the outbox router in `tests/outbox.rs`.
//!
//! Every test name starts with `security_tls` (`cargo test --all-targets -- security`).

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use eosflow::internals::kafka::client::ConnectError;
use eosflow::kafka::KafkaClients;

fn stack_var(name: &str, default: String) -> String {
    std::env::var(name).unwrap_or(default)
}

fn ssl_bootstrap() -> String {
    let addr = stack_var("EOSFLOW_STACK_KAFKA_SSL", "127.0.0.1:19095".into());
    let sock = addr.parse().expect("EOSFLOW_STACK_KAFKA_SSL is ip:port");
    assert!(
        std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(2)).is_ok(),
        "no SSL listener at {addr}: run `dev/stack up` (restart an older broker: dev/stack down kafka && dev/stack up kafka)"
    );
    addr
}

fn tls_clients(ca: &str) -> KafkaClients {
    let mut c = support::config();
    c.kafka.bootstrap = ssl_bootstrap();
    c.kafka.security.protocol = eosflow::config::SecurityProtocol::Ssl;
    c.kafka.security.ssl_ca_location = ca.into();
    c.validate().expect("valid TLS config");
    KafkaClients::new(c.kafka)
}

#[test]
fn security_tls_kafka_produces_and_consumes_over_a_verified_listener_and_refuses_a_foreign_ca() {
    let (ca, other) = support::stack_cas();
    let topic = support::unique("sec-tls");
    support::create_topics(&[&topic], 1);
    let clients = tls_clients(&ca);
    clients
        .check_connection(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("TLS with the stack's CA: {e}"));
    support::round_trip(&clients, &topic, "over TLS");

    // A CA that did not sign the broker's certificate: refused at once, naming the key to fix.
    let started = Instant::now();
    let err = tls_clients(&other)
        .check_connection(Duration::from_secs(20))
        .expect_err("a foreign CA must not verify the broker");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}: a failed handshake should be reported at once, not at the deadline",
        started.elapsed()
    );
    assert!(matches!(err, ConnectError::Tls { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("kafka.security.ssl_ca_location") && msg.contains("certificate"),
        "{msg}"
    );
}

fn eosflow(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eosflow"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("running eosflow")
}

#[test]
fn security_tls_registry_over_https_with_a_ca_file_and_a_foreign_ca_is_refused() {
    let (ca, other) = support::stack_cas();
    let url = stack_var(
        "EOSFLOW_STACK_REGISTRY_HTTPS_URL",
        "https://127.0.0.1:18082/apis/ccompat/v7".into(),
    );
    let schemas = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas");
    let topic = support::unique("sec-tls-registry");
    let register = |ca_file: &str| {
        eosflow(
            &["schemas", "register", "--topic", &topic, "--dir", schemas],
            &[
                ("EOSFLOW_SCHEMA_REGISTRY_URL", &url),
                ("EOSFLOW_SCHEMA_REGISTRY_CA_FILE", ca_file),
            ],
        )
    };
    let ok = register(&ca);
    let out =
        String::from_utf8_lossy(&ok.stdout).to_string() + &String::from_utf8_lossy(&ok.stderr);
    assert!(ok.status.success(), "{out}");
    assert!(
        out.contains(&format!("subject {topic}-orders.v1.OrderPlaced")),
        "{out}"
    );

    let refused = register(&other);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a foreign CA must not verify the registry"
    );
    assert!(
        err.contains(&url) && err.to_lowercase().contains("certificate"),
        "the error names the registry and the certificate problem: {err}"
    );

    let missing = register("/nonexistent/ca.pem");
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(err.contains("schema_registry.ca_file"), "{err}");
}
