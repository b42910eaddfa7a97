//! Waiting for SIGTERM/SIGINT while a worker thread runs: the one place a process started by
//! [`super::run`] (or the outbox router) learns it should stop.

use std::thread::JoinHandle;
use std::time::Duration;

use super::RunError;

/// The stop signal that arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Ctrl-C.
    Interrupt,
    /// `kill`, Kubernetes' pod termination.
    Terminate,
}

impl Signal {
    /// The conventional name (`SIGINT`, `SIGTERM`), for logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }
}

/// Blocks until SIGTERM/SIGINT (returned) or until `worker` ends by itself (`None`).
pub fn wait_for_signal_or<T>(worker: &JoinHandle<T>) -> Result<Option<Signal>, RunError> {
    wait_for_signal_or_until(|| worker.is_finished())
}

/// Blocks until SIGTERM/SIGINT (returned) or until `done` holds (`None`; asked every 200 ms):
/// for work whose end is not a thread's (a projector's handle).
pub fn wait_for_signal_or_until(done: impl Fn() -> bool) -> Result<Option<Signal>, RunError> {
    let io = |what| move |source| RunError::Io { what, source };
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("building the signal runtime"))?;
    signals
        .block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => return Ok(Some(Signal::Interrupt)),
                    _ = term.recv() => return Ok(Some(Signal::Terminate)),
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {
                        if done() { return Ok(None); }
                    }
                }
            }
        })
        .map_err(io("installing the signal handlers"))
}
