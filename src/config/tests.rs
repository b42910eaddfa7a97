//! The loader's unit tests: sources, env overlay, validation messages, secrets.
use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn env_overrides_file_and_file_overrides_defaults() {
    let c = Config::from_sources(
        Some("[processor]\ncommit_interval_ms = 250\ninput_topics = [\"a\"]\n"),
        Some("f.toml"),
        &env(&[
            ("EOSFLOW_KAFKA_BOOTSTRAP", "broker:9092"),
            ("EOSFLOW_PROCESSOR_INPUT_TOPICS", "x, y"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.processor.commit_interval_ms, 250);
    assert_eq!(c.kafka.bootstrap, "broker:9092");
    assert_eq!(c.processor.input_topics, vec!["x", "y"]);
    assert_eq!(c.processor.max_batch_records, 10_000);
}

#[test]
fn unknown_key_in_file_is_named() {
    let err = Config::from_sources(
        Some("[processor]\ncommit_intervall_ms = 5\n"),
        Some("f.toml"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("commit_intervall_ms"), "{err}");
    assert!(err.contains("f.toml"), "{err}");
}

#[test]
fn a_renamed_key_fails_naming_the_old_and_the_new_name_in_a_file_or_the_environment() {
    let err = Config::from_sources(
        Some("[state]\nblock_cache_bytes = 1048576\n"),
        Some("f.toml"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("f.toml"), "{err}");
    assert!(
        err.contains("`state.block_cache_bytes` was renamed: set `state.memory_bytes` (env EOSFLOW_STATE_MEMORY_BYTES)"),
        "{err}"
    );
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_STATE_BLOCK_CACHE_BYTES", "1048576")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("env EOSFLOW_STATE_BLOCK_CACHE_BYTES"), "{err}");
    assert!(err.contains("set `state.memory_bytes`"), "{err}");
}

#[test]
fn bad_env_value_names_key_and_variable() {
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS", "fast")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("processor.commit_interval_ms"), "{err}");
    assert!(
        err.contains("EOSFLOW_PROCESSOR_COMMIT_INTERVAL_MS"),
        "{err}"
    );
}

#[test]
fn out_of_range_value_names_key() {
    let err = Config::from_sources(Some("[processor]\ncommit_interval_ms = 0\n"), None, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`processor.commit_interval_ms`"), "{err}");
    let err = Config::from_sources(None, None, &env(&[("EOSFLOW_KAFKA_BOOTSTRAP", "nohost")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kafka.bootstrap") && err.contains("nohost"),
        "{err}"
    );
}

#[test]
fn misspelt_env_variable_is_rejected() {
    let err = Config::from_sources(None, None, &env(&[("EOSFLOW_KAFKA_BOOTSTRAPS", "a:1")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("EOSFLOW_KAFKA_BOOTSTRAPS"), "{err}");
    assert!(err.contains("EOSFLOW_KAFKA_BOOTSTRAP,"), "{err}");
}

#[test]
fn per_topic_ladders_override_the_default() {
    let c = Config::from_sources(
        Some("[retry]\ndelays_ms = [100]\n[retry.per_topic]\n\"slow\" = [1000, 2000, 3000]\n"),
        None,
        &[],
    )
    .expect("valid");
    assert_eq!(c.retry.policy_for("slow").levels(), 3);
    assert_eq!(c.retry.policy_for("other").levels(), 1);
}

#[test]
fn integer_lists_from_env() {
    let c = Config::from_sources(None, None, &env(&[("EOSFLOW_RETRY_DELAYS_MS", "5, 50")]))
        .expect("valid");
    assert_eq!(c.retry.delays_ms, vec![5, 50]);
    let err = Config::from_sources(None, None, &env(&[("EOSFLOW_RETRY_DELAYS_MS", "5,soon")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("retry.delays_ms") && err.contains("soon"),
        "{err}"
    );
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_RETRY_ON_DEAD_LETTER", "drop")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("retry.on_dead_letter"), "{err}");
}

#[test]
fn guarantee_is_exactly_once_by_default_and_validated() {
    let c = Config::from_sources(None, None, &[]).expect("defaults");
    assert_eq!(c.processor.guarantee, Guarantee::ExactlyOnce);
    let c = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_PROCESSOR_GUARANTEE", "at_least_once")]),
    )
    .expect("at_least_once is valid");
    assert_eq!(c.processor.guarantee, Guarantee::AtLeastOnce);
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_PROCESSOR_GUARANTEE", "exactly-once")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("processor.guarantee") && err.contains("at_least_once"),
        "{err}"
    );
}

#[test]
fn outbox_keys_validate_and_come_from_env() {
    let c = Config::from_sources(
        None,
        None,
        &env(&[
            ("EOSFLOW_OUTBOX_MODE", "poll"),
            ("EOSFLOW_OUTBOX_COLUMN_AGGREGATE_ID", "agg"),
        ]),
    )
    .expect("valid");
    assert_eq!(c.outbox.mode, OutboxMode::Poll);
    assert_eq!(c.outbox.column_aggregate_id, "agg");
    let err = Config::from_sources(None, None, &env(&[("EOSFLOW_OUTBOX_SLOT", "Bad-Slot")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("outbox.slot") && err.contains("EOSFLOW_OUTBOX_SLOT"),
        "{err}"
    );
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_OUTBOX_REPLICATION_BUFFER_EVENTS", "0")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("outbox.replication_buffer_events") && err.contains("1..=65536"),
        "{err}"
    );
    let err = Config::from_sources(Some("[outbox]\ntopic_template = \"x\"\n"), None, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("outbox.topic_template"), "{err}");
}

#[test]
fn outbox_tables_inherit_the_outbox_keys_and_bad_entries_are_named() {
    let c = Config::from_sources(
        Some(
            "[outbox]\ncolumn_id = \"event_id\"\n[[outbox.tables]]\ntable = \"s.events\"\n\
             column_payload = \"body\"\nroute_by = \"kind\"\n",
        ),
        None,
        &[],
    )
    .expect("valid");
    let served = c.outbox.served();
    assert_eq!(served.len(), 2);
    assert_eq!(
        (served[1].table.as_str(), served[1].column_id.as_str()),
        ("s.events", "event_id")
    );
    assert_eq!(
        (
            served[1].column_payload.as_str(),
            served[1].route_by.as_str()
        ),
        ("body", "kind")
    );
    assert_eq!(served[0].column_payload, "payload");
    assert!(served.iter().all(|t| t.tables.is_empty()));
    let bad = |toml: &str| {
        Config::from_sources(Some(toml), None, &[])
            .unwrap_err()
            .to_string()
    };
    let err = bad("[[outbox.tables]]\ntable = \"s.events\"\ncolumn_id = \"Bad\"\n");
    assert!(
        err.contains("outbox.tables") && err.contains("s.events") && err.contains("column_id"),
        "{err}"
    );
    let err = bad("[[outbox.tables]]\ntable = \"outbox\"\n");
    assert!(err.contains("twice"), "{err}");
    let err = bad("[outbox]\nmode = \"poll\"\n[[outbox.tables]]\ntable = \"b\"\n");
    assert!(err.contains("CDC mode only"), "{err}");
}

#[test]
fn kafka_property_from_env() {
    let c = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_KAFKA_PROPERTY_SASL_PASSWORD", "s3cret")]),
    )
    .expect("valid");
    assert_eq!(
        c.kafka.properties.get("sasl.password").map(String::as_str),
        Some("s3cret")
    );
}

fn sasl_env(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut e = env(&[
        ("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext"),
        ("EOSFLOW_KAFKA_SECURITY_SASL_MECHANISM", "SCRAM-SHA-512"),
        ("EOSFLOW_KAFKA_SECURITY_USERNAME", "alice"),
    ]);
    e.extend(env(extra));
    e
}

#[test]
fn security_keys_come_from_env_and_secrets_are_redacted() {
    let c = Config::from_sources(
        None,
        None,
        &sasl_env(&[("EOSFLOW_KAFKA_SECURITY_PASSWORD", "hunter2-unit")]),
    )
    .expect("valid");
    let s = &c.kafka.security;
    assert_eq!(s.protocol, SecurityProtocol::SaslPlaintext);
    assert_eq!(s.sasl_mechanism, Some(SaslMechanism::ScramSha512));
    assert_eq!(s.password.expose(), "hunter2-unit");
    assert!(!format!("{c:?}").contains("hunter2-unit"));
    let shown = toml::to_string(&c).expect("serializes");
    assert!(!shown.contains("hunter2-unit"), "{shown}");
    let props = s.librdkafka_properties();
    assert!(props.contains(&("sasl.password", "hunter2-unit".into())));
    assert!(props.contains(&("sasl.mechanisms", "SCRAM-SHA-512".into())));
}

#[test]
fn security_from_file_section() {
    let c = Config::from_sources(
        Some("[kafka.security]\nprotocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"p\"\nssl_ca_location = \"/ca.pem\"\n"),
        Some("f.toml"),
        &[],
    )
    .expect("valid");
    let props = c.kafka.security.librdkafka_properties();
    assert!(props.contains(&("ssl.ca.location", "/ca.pem".into())));
    assert!(props.contains(&("security.protocol", "sasl_ssl".into())));
}

#[test]
fn security_password_file_is_read_and_a_missing_one_is_named() {
    let dir = std::env::temp_dir().join(format!("eosflow-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("password");
    std::fs::write(&file, "from-file-secret\n").expect("write");
    let c = Config::from_sources(
        None,
        None,
        &sasl_env(&[(
            "EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE",
            file.to_str().expect("utf-8 path"),
        )]),
    )
    .expect("valid");
    assert_eq!(c.kafka.security.password.expose(), "from-file-secret");
    let err = Config::from_sources(
        None,
        None,
        &sasl_env(&[("EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE", "/nonexistent/pw")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("kafka.security.password_file")
            && err.contains("EOSFLOW_KAFKA_SECURITY_PASSWORD_FILE")
            && err.contains("/nonexistent/pw"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn security_sasl_needs_mechanism_user_and_password() {
    let err = Config::from_sources(None, None, &sasl_env(&[]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("kafka.security.password"), "{err}");
    let err = Config::from_sources(
        None,
        None,
        &env(&[
            ("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "sasl_ssl"),
            ("EOSFLOW_KAFKA_SECURITY_SASL_MECHANISM", "GSSAPI"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("kafka.security.sasl_mechanism") && err.contains("GSSAPI"),
        "{err}"
    );
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "tls")]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("kafka.security.protocol"), "{err}");
    let err = Config::from_sources(
        None,
        None,
        &sasl_env(&[
            ("EOSFLOW_KAFKA_SECURITY_PASSWORD", "x"),
            ("EOSFLOW_KAFKA_PROPERTY_SASL_USERNAME", "bob"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("sasl.username"), "{err}");
}

#[test]
fn a_bad_choice_names_the_key_and_the_accepted_values() {
    let err = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_OUTBOX_PAYLOAD_FORMAT", "protobuf")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("env EOSFLOW_OUTBOX_PAYLOAD_FORMAT")
            && err.contains("`outbox.payload_format`")
            && err.contains("protobuf")
            && err.contains("`json`")
            && err.contains("`avro`"),
        "{err}"
    );
    let err = Config::from_sources(
        Some("[retry]\ndelays_ms = [5]\non_dead_letter = \"drop\"\n"),
        Some("f.toml"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("f.toml")
            && err.contains("`retry.on_dead_letter`")
            && err.contains("`continue`")
            && err.contains("`park`"),
        "{err}"
    );
    let err = Config::from_sources(
        Some("[kafka.security]\nprotocol = \"SASL_SSL\"\n"),
        None,
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`kafka.security.protocol`") && err.contains("`sasl_ssl`"),
        "{err}"
    );
    for (var, value, want) in [
        ("EOSFLOW_OUTBOX_MODE", "poll", "poll"),
        ("EOSFLOW_OUTBOX_SNAPSHOT", "never", "never"),
        ("EOSFLOW_RETRY_ON_DEAD_LETTER", "park", "park"),
    ] {
        let c = Config::from_sources(None, None, &env(&[(var, value)])).expect("valid");
        let shown = toml::to_string(&c).expect("serializes");
        assert!(shown.contains(&format!("\"{want}\"")), "{var}: {shown}");
    }
}

#[test]
fn the_postgres_url_is_a_secret_never_shown() {
    let c = Config::from_sources(None, None, &[]).expect("defaults");
    assert_eq!(
        c.postgres.url.expose(),
        "postgres://eosflow:eosflow@127.0.0.1:15432/eosflow",
        "the default survives the defaults' (redacted) serialization"
    );
    let url = "postgres://app:pg-hunter2@db.internal:5432/app?sslmode=require";
    let c =
        Config::from_sources(None, None, &env(&[("EOSFLOW_POSTGRES_URL", url)])).expect("valid");
    assert_eq!(c.postgres.url.expose(), url);
    let debug = format!("{c:?}");
    let shown = toml::to_string_pretty(&c).expect("serializes");
    for out in [&debug, &shown] {
        assert!(!out.contains("pg-hunter2"), "{out}");
        assert!(!out.contains("db.internal"), "{out}");
    }
    assert!(shown.contains("url = \"***\""), "{shown}");
    let c = Config::from_sources(Some(&format!("[postgres]\nurl = \"{url}\"\n")), None, &[])
        .expect("valid");
    assert_eq!(c.postgres.url.expose(), url);
}

#[test]
fn paths_are_paths_and_empty_means_unset() {
    let c = Config::from_sources(
        None,
        None,
        &env(&[
            ("EOSFLOW_KAFKA_SECURITY_PROTOCOL", "ssl"),
            ("EOSFLOW_KAFKA_SECURITY_SSL_CA_LOCATION", "/etc/ca.pem"),
        ]),
    )
    .expect("valid");
    assert_eq!(
        c.kafka.security.ssl_ca_location,
        PathBuf::from("/etc/ca.pem")
    );
    assert!(c.kafka.security.ssl_key_location.as_os_str().is_empty());
    assert!(c
        .kafka
        .security
        .librdkafka_properties()
        .contains(&("ssl.ca.location", "/etc/ca.pem".into())));
}

#[test]
fn standby_replicas_default_to_none_and_a_bad_value_names_the_key() {
    let c = Config::from_sources(None, None, &[]).expect("valid");
    assert_eq!(c.processor.standby_replicas, 0);
    let c = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_PROCESSOR_STANDBY_REPLICAS", "2")]),
    )
    .expect("valid");
    assert_eq!(c.processor.standby_replicas, 2);
    for bad in ["9", "-1", "many"] {
        let err = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_PROCESSOR_STANDBY_REPLICAS", bad)]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("processor.standby_replicas"), "{bad}: {err}");
    }
}

#[test]
fn threads_default_to_one_and_a_bad_value_names_the_key() {
    let c = Config::from_sources(None, None, &[]).expect("valid");
    assert_eq!(c.processor.threads, 1);
    let c = Config::from_sources(None, None, &env(&[("EOSFLOW_PROCESSOR_THREADS", "4")]))
        .expect("valid");
    assert_eq!(c.processor.threads, 4);
    for bad in ["0", "65", "-1", "some"] {
        let err = Config::from_sources(None, None, &env(&[("EOSFLOW_PROCESSOR_THREADS", bad)]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("processor.threads"), "{bad}: {err}");
    }
}

#[test]
fn restore_threads_default_to_eight_and_a_bad_value_names_the_key() {
    let c = Config::from_sources(None, None, &[]).expect("valid");
    assert_eq!(c.processor.restore_threads, 8);
    let c = Config::from_sources(
        None,
        None,
        &env(&[("EOSFLOW_PROCESSOR_RESTORE_THREADS", "1")]),
    )
    .expect("valid");
    assert_eq!(c.processor.restore_threads, 1);
    for bad in ["0", "65", "-1", "some"] {
        let err = Config::from_sources(
            None,
            None,
            &env(&[("EOSFLOW_PROCESSOR_RESTORE_THREADS", bad)]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("processor.restore_threads"), "{bad}: {err}");
    }
}

/// The query listener is refused at start, naming the key, unless it authenticates and
/// encrypts or the configuration says otherwise in so many words.
#[test]
fn a_query_listener_without_authentication_or_tls_is_refused_naming_the_key() {
    let fails = |toml: &str, vars: &[(&str, &str)], key: &str| {
        let err = Config::from_sources(Some(toml), Some("f.toml"), &env(vars))
            .expect_err(toml)
            .to_string();
        assert!(err.contains(&format!("`{key}`")), "{toml}: {err}");
    };
    let listen = "[queries]\nlisten = \"127.0.0.1:9465\"\n";
    fails(
        listen,
        &[("EOSFLOW_QUERIES_ALLOW_PLAINTEXT", "true")],
        "queries.token",
    );
    fails(
        listen,
        &[("EOSFLOW_QUERIES_TOKEN", "t")],
        "queries.ssl_certificate_location",
    );
    fails(
        &format!("{listen}ssl_certificate_location = \"/c.pem\"\n"),
        &[("EOSFLOW_QUERIES_TOKEN", "t")],
        "queries.ssl_key_location",
    );
    fails(
        &format!("{listen}ssl_certificate_location = \"/c.pem\"\nssl_key_location = \"/k.pem\"\n"),
        &[("EOSFLOW_QUERIES_TOKEN", "t")],
        "queries.ssl_ca_location",
    );
    fails(
        &format!("{listen}ssl_client_auth = true\nallow_plaintext = true\n"),
        &[],
        "queries.ssl_client_auth",
    );
    fails("[queries]\nmax_limit = 10001\n", &[], "queries.max_limit");
    fails(
        "[queries]\nmax_concurrent = 0\n",
        &[],
        "queries.max_concurrent",
    );
    fails("[queries]\nlisten = \"nowhere\"\n", &[], "queries.listen");
    fails(
        &format!("{listen}token_file = \"/nonexistent/eosflow-token\"\n"),
        &[],
        "queries.token_file",
    );
    let err = Config::from_sources(Some("[queries]\npartitioner = \"java\"\n"), None, &[])
        .expect_err("unknown partitioner")
        .to_string();
    assert!(err.contains("consistent_random"), "{err}");

    // Explicit opt-outs, a token from the environment, librdkafka's partitioner by its name.
    let c = Config::from_sources(
        Some(&format!(
            "{listen}allow_plaintext = true\npartitioner = \"consistent\"\n"
        )),
        None,
        &env(&[("EOSFLOW_QUERIES_TOKEN", "s3cret")]),
    )
    .expect("valid");
    assert_eq!(c.queries.token.expose(), "s3cret");
    assert_eq!(
        c.queries.partitioner,
        crate::query::Partitioner::ConsistentRandom
    );
    assert!(!format!("{c:?}").contains("s3cret"));
    Config::from_sources(
        Some(&format!(
            "{listen}allow_plaintext = true\nallow_anonymous = true\n"
        )),
        None,
        &[],
    )
    .expect("anonymous and plaintext, said explicitly");
}
