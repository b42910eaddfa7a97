//! The log setup `eosflow` uses, offered to applications as an opt-in: [`super::run`] never
//! installs a subscriber itself, so an application keeps its own if it has one.

/// Logs to stderr, filtered by `RUST_LOG` (default `info,rdkafka=warn`), as JSON lines when
/// `RUST_LOG_FORMAT=json`. Does nothing if a global subscriber is already installed.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rdkafka=warn"));
    let json = std::env::var("RUST_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // try_init: a second call (or an application's own subscriber) is not an error.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
