//! A private copy of the local stack (`dev/stack` with its own run dir and ports) for the
//! scenarios that stop and restart a broker or Postgres: the shared stack other tests run on is
//! never touched. The guard stops what it started when dropped, also on failure, and deletes
//! its data.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where a private stack lives and listens.
#[derive(Debug, Clone)]
pub struct PrivateStack {
    /// The `dev/stack` script.
    pub script: PathBuf,
    /// Its `EOSFLOW_RUN_DIR` (data dirs, logs, pid files).
    pub run_dir: PathBuf,
    /// Kafka's PLAINTEXT port (the controller takes +1, the SASL listener +2).
    pub kafka_port: u16,
    /// Postgres' port.
    pub pg_port: u16,
    /// The PLAINTEXT port the broker advertises, when not its own (a proxy in front of it).
    pub kafka_advertised_port: Option<u16>,
}

impl PrivateStack {
    /// A stack on `kafka_port`/`pg_port` in `run_dir`; nothing is started yet.
    pub fn new(script: PathBuf, run_dir: PathBuf, kafka_port: u16, pg_port: u16) -> Self {
        Self {
            script,
            run_dir,
            kafka_port,
            pg_port,
            kafka_advertised_port: None,
        }
    }

    /// The same stack with a broker that tells clients to connect to `port` instead of its own
    /// (where a test runs a proxy that forwards to [`PrivateStack::kafka_port`]).
    pub fn advertising(mut self, port: u16) -> Self {
        self.kafka_advertised_port = Some(port);
        self
    }

    /// Kafka's bootstrap address.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.kafka_port)
    }

    /// Postgres' URL (the stack's `eosflow` role and database).
    pub fn postgres_url(&self) -> String {
        format!(
            "postgres://eosflow:eosflow@127.0.0.1:{}/eosflow",
            self.pg_port
        )
    }

    /// Runs `dev/stack <verb> <component>` against this stack only.
    fn stack(&self, verb: &str, component: &str) -> Result<(), String> {
        let log = self.run_dir.join("stack-commands.log");
        std::fs::create_dir_all(&self.run_dir)
            .map_err(|e| format!("{}: {e}", self.run_dir.display()))?;
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let status = Command::new(&self.script)
            .args([verb, component])
            .env("EOSFLOW_RUN_DIR", &self.run_dir)
            .env("EOSFLOW_STACK_KAFKA_PORT", self.kafka_port.to_string())
            .env(
                "EOSFLOW_STACK_KAFKA_SASL_PORT",
                (self.kafka_port + 2).to_string(),
            )
            .env("EOSFLOW_STACK_PG_PORT", self.pg_port.to_string())
            .env(
                "EOSFLOW_STACK_KAFKA_ADVERTISED_PORT",
                self.kafka_advertised_port
                    .unwrap_or(self.kafka_port)
                    .to_string(),
            )
            // The script must not mistake the caller's (shared) broker for this one.
            .env_remove("EOSFLOW_KAFKA_BOOTSTRAP")
            .env_remove("EOSFLOW_POSTGRES_URL")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .map_err(|e| format!("running {}: {e}", self.script.display()))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {verb} {component} failed ({status}); see {}",
                self.script.display(),
                log.display()
            ))
        }
    }

    /// Starts `component` (`kafka`, `postgres`) and returns a guard that stops it.
    pub fn up(&self, component: &str) -> Result<StackGuard, String> {
        self.stack("up", component)?;
        Ok(StackGuard {
            stack: self.clone(),
            component: component.to_string(),
        })
    }

    /// Sends `signal` (`STOP`, `CONT`) to the running broker process: a pause that keeps its
    /// sockets open and its clients waiting, as a long GC pause or a frozen VM does.
    pub fn signal_kafka(&self, signal: &str) -> Result<(), String> {
        let pid_file = self.run_dir.join("kafka.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("{}: {e}", pid_file.display()))?;
        super::send_signal(pid.trim(), signal)
    }

    /// What a failed run needs to know about the private broker, for the error it returns:
    /// whether its process is still alive and the last lines of its logs. The run dir is under
    /// the temporary directory, which a CI deletes on exit; without this a broker that died
    /// mid-run (clean-clone CI of `dd8168d`: `broker-restart`, "connection refused" 40 s after
    /// the restart) leaves nothing to read.
    pub fn kafka_post_mortem(&self) -> String {
        let pid_file = self.run_dir.join("kafka.pid");
        let process = match std::fs::read_to_string(&pid_file) {
            Ok(pid) => {
                let pid = pid.trim().to_string();
                let alive = std::path::Path::new("/proc").join(&pid).exists();
                format!("pid {pid} {}", if alive { "alive" } else { "gone" })
            }
            Err(_) => "no pid file (stopped, or never started)".to_string(),
        };
        let mut out = format!(
            "private broker 127.0.0.1:{} ({}): {process}",
            self.kafka_port,
            self.run_dir.display()
        );
        for (name, lines) in [
            ("stack-commands.log", 10),
            ("kafka/stdout.log", 10),
            ("kafka/server.log", 25),
        ] {
            let tail = tail_lines(&self.run_dir.join(name), lines);
            out.push_str(&format!("\n--- last {lines} lines of {name} ---\n{tail}"));
        }
        out
    }

    /// Stops `component` and starts it again; returns how long it was away.
    pub fn restart(&self, component: &str) -> Result<Duration, String> {
        let t = Instant::now();
        self.stack("down", component)?;
        self.stack("up", component)?;
        Ok(t.elapsed())
    }
}

/// Stops a private stack component when dropped.
#[derive(Debug)]
pub struct StackGuard {
    stack: PrivateStack,
    component: String,
}

impl Drop for StackGuard {
    fn drop(&mut self) {
        if let Err(e) = self.stack.stack("down", &self.component) {
            tracing::warn!(error = %e, "stopping the private stack");
            return;
        }
        // The data goes (a long run leaves gigabytes); the logs stay for a post-mortem.
        let data = match self.component.as_str() {
            "kafka" => self.stack.run_dir.join("kafka").join("data"),
            "postgres" => self.stack.run_dir.join("pg").join("data"),
            _ => return,
        };
        let _ = std::fs::remove_dir_all(data);
    }
}

/// The last `n` lines of the file at `path`, or why there are none.
fn tail_lines(path: &std::path::Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("({e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_mortem_says_the_broker_is_gone_and_shows_the_end_of_its_log() {
        let dir = std::env::temp_dir().join(format!("eosflow-post-mortem-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("kafka")).expect("run dir");
        // A pid no process has: above the kernel's pid_max.
        std::fs::write(dir.join("kafka.pid"), "99999999\n").expect("pid file");
        let log: String = (1..=40).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.join("kafka").join("server.log"), log).expect("server.log");
        let stack = PrivateStack::new(PathBuf::from("dev/stack"), dir.clone(), 21092, 21102);

        let text = stack.kafka_post_mortem();
        std::fs::remove_dir_all(&dir).expect("clean up");

        assert!(text.contains("127.0.0.1:21092"), "{text}");
        assert!(text.contains("pid 99999999 gone"), "{text}");
        assert!(
            text.contains("line 40") && text.contains("line 16"),
            "{text}"
        );
        assert!(
            !text.contains("line 15\n"),
            "only the last 25 lines: {text}"
        );
        assert!(
            text.contains("stdout.log ---\n("),
            "a missing log says why: {text}"
        );
    }
}
