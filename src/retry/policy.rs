//! How long each retry level waits, and what a dead-lettered head does to its key.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// What happens to later records of a key whose head record was dead-lettered
/// (`retry.on_dead_letter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadLetter {
    /// The next record of the key becomes its head and is processed.
    #[default]
    Continue,
    /// The key stays parked: its later records go to the DLT behind the head until a redrive
    /// of the key brings them back in order.
    Park,
}

/// The ladder of one input topic.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Delay before each level (level n waits `delays[n-1]`); its length is the number of levels.
    pub delays: Vec<Duration>,
    /// ± this fraction of random jitter, so a burst of failures does not retry in lockstep.
    pub jitter: f64,
    /// No delay exceeds this.
    pub max_delay: Duration,
    /// Followers of a dead-lettered head.
    pub on_dead_letter: OnDeadLetter,
    /// Most followers waiting behind one parked key; a record arriving beyond it is
    /// dead-lettered with class `parked-overflow`.
    pub max_parked_followers: u64,
}

impl OnDeadLetter {
    /// The name the configuration uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Park => "park",
        }
    }
}

crate::config::choice::choice_strings!(OnDeadLetter);

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            delays: vec![
                Duration::from_secs(1),
                Duration::from_secs(10),
                Duration::from_secs(60),
            ],
            jitter: 0.2,
            max_delay: Duration::from_secs(3600),
            on_dead_letter: OnDeadLetter::Continue,
            max_parked_followers: super::parked::DEFAULT_MAX_FOLLOWERS,
        }
    }
}

impl RetryPolicy {
    /// Number of retry levels.
    pub fn levels(&self) -> u32 {
        self.delays.len() as u32
    }

    /// The delay before `level` (1-based), jittered and capped; `None` past the last level.
    pub fn delay(&self, level: u32) -> Option<Duration> {
        let base = *self.delays.get(level.checked_sub(1)? as usize)?;
        let factor = if self.jitter > 0.0 {
            rand::thread_rng().gen_range((1.0 - self.jitter)..=(1.0 + self.jitter))
        } else {
            1.0
        };
        Some(base.mul_f64(factor.max(0.0)).min(self.max_delay))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_jittered_within_bounds_and_capped() {
        let p = RetryPolicy {
            delays: vec![Duration::from_secs(10), Duration::from_secs(100)],
            jitter: 0.2,
            max_delay: Duration::from_secs(50),
            on_dead_letter: OnDeadLetter::Continue,
            max_parked_followers: 1,
        };
        for _ in 0..100 {
            let d = p.delay(1).expect("level 1");
            assert!(
                d >= Duration::from_secs(8) && d <= Duration::from_secs(12),
                "{d:?}"
            );
            assert_eq!(p.delay(2), Some(Duration::from_secs(50)));
        }
        assert_eq!(p.delay(0), None);
        assert_eq!(p.delay(3), None);
    }
}
