//! Bounded waits on librdkafka's blocking transactional calls.
//!
//! Some of these calls do not honour their own timeout: `send_offsets_to_transaction` waits for
//! the group coordinator with a deadline librdkafka never checks (librdkafka issues #5456 and
//! #5511), and after a broker restart it can block forever — the `broker-restart` fault scenario
//! hung that way. A blocked C call cannot be interrupted, so each call runs on a worker thread
//! and the caller waits for its answer with a deadline. A call that misses it leaves its
//! producer wedged (librdkafka refuses any other transactional call while one is in progress):
//! the caller recreates the producer under the same `transactional.id`, and the wedged one is
//! dropped by its worker whenever the stuck call returns — never on the processing thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// Worker threads whose last call missed its deadline and has not returned yet.
static STUCK_WORKERS: AtomicUsize = AtomicUsize::new(0);

/// A call that did not answer within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call} did not return within {waited:?}")]
pub struct Elapsed {
    /// The librdkafka call.
    pub call: &'static str,
    /// How long it was waited for.
    pub waited: Duration,
}

/// One worker thread running a producer's blocking calls in order (inline if the thread could
/// not be started: the calls still run, only without a bound).
pub(crate) struct CallThread {
    jobs: Option<mpsc::Sender<Job>>,
}

impl CallThread {
    /// Starts the worker.
    pub(crate) fn start(name: &str) -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
        match spawned {
            Ok(_) => Self { jobs: Some(tx) },
            Err(e) => {
                tracing::warn!(error = %e, "no worker thread for the producer's blocking calls: they run unbounded");
                Self { jobs: None }
            }
        }
    }

    /// Runs `job` on the worker and waits at most `limit` for its answer.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        call: &'static str,
        limit: Duration,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Elapsed> {
        self.run_noting_slow(call, limit, None, job)
    }

    /// [`CallThread::run`], calling `slow.1` once if the call has not answered after `slow.0`
    /// (still waiting for it): a call blocked on an absent broker says so while it blocks, not
    /// only when it fails many seconds later.
    pub(crate) fn run_noting_slow<T: Send + 'static>(
        &self,
        call: &'static str,
        limit: Duration,
        slow: Option<(Duration, &dyn Fn())>,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Elapsed> {
        let Some(jobs) = &self.jobs else {
            return Ok(job());
        };
        let (answer, answered) = mpsc::sync_channel(1);
        let sent = jobs.send(Box::new(move || {
            let out = job();
            if answer.send(out).is_err() {
                // The caller gave up on this call: it has returned now.
                STUCK_WORKERS.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(call, "a Kafka call given up on has returned at last");
            }
        }));
        let elapsed = Elapsed {
            call,
            waited: limit,
        };
        if sent.is_err() {
            return Err(elapsed);
        }
        let answer = match slow {
            Some((after, note)) if after < limit => match answered.recv_timeout(after) {
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    note();
                    answered.recv_timeout(limit - after)
                }
                other => other,
            },
            _ => answered.recv_timeout(limit),
        };
        match answer {
            Ok(out) => Ok(out),
            Err(_) => {
                let stuck = STUCK_WORKERS.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::error!(
                    call,
                    waited_ms = limit.as_millis() as u64,
                    stuck_calls = stuck,
                    "a Kafka call missed its deadline (librdkafka ignores its own timeout here): giving up on it and its producer"
                );
                crate::telemetry::kafka_call_stuck(call);
                Err(elapsed)
            }
        }
    }

    /// Queues `last` (dropping a producer) after any call still running and lets the worker
    /// end: the caller never waits for it.
    pub(crate) fn finish(self, last: impl FnOnce() + Send + 'static) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(mpsc::SendError(job)) = jobs.send(Box::new(last)) {
                    // The worker is gone (a call panicked): drop here.
                    job();
                }
            }
            None => last(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_answers_in_time_gives_its_answer() {
        let t = CallThread::start("test-call");
        assert_eq!(t.run("add", Duration::from_secs(5), || 2 + 2), Ok(4));
    }

    #[test]
    fn a_slow_call_is_noted_while_it_blocks_and_a_quick_one_is_not() {
        let t = CallThread::start("test-call");
        let noted = std::cell::Cell::new(0);
        let note = || noted.set(noted.get() + 1);
        let quick = t.run_noting_slow(
            "commit_transaction",
            Duration::from_secs(5),
            Some((Duration::from_secs(2), &note)),
            || 1,
        );
        assert_eq!((quick, noted.get()), (Ok(1), 0));
        let slow = t.run_noting_slow(
            "commit_transaction",
            Duration::from_secs(5),
            Some((Duration::from_millis(50), &note)),
            || std::thread::sleep(Duration::from_millis(300)),
        );
        assert_eq!((slow, noted.get()), (Ok(()), 1));
    }

    #[test]
    fn a_call_that_never_answers_is_given_up_on_at_its_deadline() {
        let t = CallThread::start("test-call");
        let (release, blocked) = mpsc::channel::<()>();
        let r = t.run(
            "send_offsets_to_transaction",
            Duration::from_millis(200),
            move || {
                // Blocks like librdkafka's call does, until released.
                let _ = blocked.recv();
            },
        );
        assert_eq!(
            r,
            Err(Elapsed {
                call: "send_offsets_to_transaction",
                waited: Duration::from_millis(200)
            })
        );
        // What was queued behind the stuck call still runs once it returns.
        let (done, finished) = mpsc::channel();
        t.finish(move || {
            let _ = done.send(());
        });
        drop(release);
        assert!(finished.recv_timeout(Duration::from_secs(30)).is_ok());
    }
}
