//! The rebalance storm (`eosflow verify --scenario rebalance-storm`): instances of the counting
//! topology join and leave the group every few seconds under load — graceful stops (SIGTERM,
//! the slot restarted by a later event), starts of stopped slots, and `kill -9` with an
//! immediate restart — chosen from a seeded RNG so a run's event sequence can be replayed. At
//! least one slot is always running. The verdict is the counting run's: every input reflected
//! exactly once in the read_committed output and the final state.
//!
//! The churn is one kind of [`Fault`](crate::Fault) the verifier's control loop delivers; this
//! module holds its plan, its state (which slot runs, which is stopping or stopped) and its
//! tally.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::faults::Monitor;
use super::{Instance, VerifyReport};

/// How long a SIGTERM'ed instance may take to exit before it counts as a failed graceful stop
/// and is killed: the runtime's own `processor.shutdown_timeout_ms` (30 s) plus a margin.
pub const STOP_DEADLINE: Duration = Duration::from_secs(40);

/// What a storm does: its RNG seed and the gap between two events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StormPlan {
    /// Seed of the RNG that picks each event, its slot, the gap to the next one and a killed
    /// slot's restart delay: the same seed gives the same choices (the states they are made from
    /// depend on when graceful stops finish, so a replay is the same up to timing).
    pub seed: u64,
    /// Shortest gap between two events.
    pub min_gap: Duration,
    /// Longest gap between two events.
    pub max_gap: Duration,
}

impl StormPlan {
    /// An event every 2–4 s, picked by an RNG seeded with `seed`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use eosflow_verify::storm::StormPlan;
    ///
    /// let plan = StormPlan::new(42);
    /// // A two-minute storm is about 40 events.
    /// assert_eq!(plan.mean_gap(), Duration::from_secs(3));
    /// let fault = eosflow_verify::Fault::Storm(plan);
    /// assert!(matches!(fault, eosflow_verify::Fault::Storm(p) if p.seed == 42));
    /// ```
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            min_gap: Duration::from_secs(2),
            max_gap: Duration::from_secs(4),
        }
    }

    /// The mean gap between events, for sizing a run's event budget.
    pub fn mean_gap(&self) -> Duration {
        (self.min_gap + self.max_gap) / 2
    }
}

/// What a storm did, and what the instances did by themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// The RNG seed (to replay the run).
    pub seed: u64,
    /// Graceful stops: SIGTERM to a running instance, which must exit by itself.
    pub stops: u32,
    /// Starts of a stopped slot.
    pub starts: u32,
    /// `kill -9` of a running instance, restarted 0.1–1 s later.
    pub kills: u32,
    /// Graceful stops that did not end in a successful exit within [`STOP_DEADLINE`] (killed
    /// then): the runtime's shutdown failed under churn.
    pub unclean_stops: u32,
    /// Instances that exited by themselves, not after a SIGTERM, and whose log does not say
    /// fenced: a crash or an error exit. Restarted at once, reported, and failing the run.
    pub crashes: u32,
}

/// The storm's figures in a scenario's closing line: its seed, the events delivered by kind,
/// how many recoveries the monitor timed, how often an instance recreated its producer in place
/// (from the logs), and what the instances did by themselves.
pub(crate) fn figures(t: &Tally, r: &VerifyReport) -> Vec<(String, String)> {
    [
        ("seed", t.seed.to_string()),
        ("events", (t.stops + t.starts + t.kills).to_string()),
        ("graceful_stops", t.stops.to_string()),
        ("starts", t.starts.to_string()),
        ("kill9s", t.kills.to_string()),
        ("recoveries", r.recoveries.len().to_string()),
        ("in_place_recoveries", r.in_place_recoveries.to_string()),
        ("fenced_exits", r.fenced_exits.to_string()),
        ("crashes", t.crashes.to_string()),
        ("unclean_stops", t.unclean_stops.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A slot's state as the storm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Running,
    /// SIGTERM sent at this instant; waiting for the process to exit.
    Stopping(Instant),
    Stopped,
}

/// One storm event and the slot it is done to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// SIGTERM; the slot stays down until a later start.
    Stop(usize),
    /// Start of a stopped slot.
    Start(usize),
    /// `kill -9`, restarted 0.1–1 s later.
    Kill(usize),
}

/// The storm's state over a run: one slot per instance.
pub(crate) struct Churn {
    plan: StormPlan,
    rng: StdRng,
    slots: Vec<Slot>,
    pub(crate) tally: Tally,
}

impl Churn {
    /// A storm over `instances` slots, all running.
    pub(crate) fn new(plan: StormPlan, instances: usize) -> Self {
        Self {
            plan,
            rng: StdRng::seed_from_u64(plan.seed),
            slots: vec![Slot::Running; instances],
            tally: Tally {
                seed: plan.seed,
                ..Tally::default()
            },
        }
    }

    /// The wait before the next event.
    pub(crate) fn gap(&mut self) -> Duration {
        let (lo, hi) = (
            self.plan.min_gap.as_secs_f64(),
            self.plan.max_gap.as_secs_f64(),
        );
        if hi <= lo {
            return self.plan.min_gap;
        }
        Duration::from_secs_f64(self.rng.gen_range(lo..hi))
    }

    fn running(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|i| self.slots[*i] == Slot::Running)
            .collect()
    }

    /// Whether slot `i` is being stopped or stopped on purpose (its process is not supervised).
    pub(crate) fn is_down(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| *s != Slot::Running)
    }

    /// Collects the instances that were SIGTERM'ed: an exit makes the slot stopped (a failed
    /// exit status is an unclean stop); one still running past [`STOP_DEADLINE`] is killed and
    /// counted as unclean.
    pub(crate) fn reap(&mut self, instances: &mut [Instance]) {
        for (i, inst) in instances.iter_mut().enumerate() {
            let Some(Slot::Stopping(since)) = self.slots.get(i).copied() else {
                continue;
            };
            if let Some(status) = inst.exited() {
                inst.forget();
                if !status.success() {
                    self.tally.unclean_stops += 1;
                    tracing::warn!(instance = %inst.name, %status, log = %inst.log.display(),
                        "a graceful stop ended in a failed exit");
                } else {
                    tracing::info!(instance = %inst.name, secs = since.elapsed().as_secs_f64(),
                        "stopped gracefully");
                }
                self.slots[i] = Slot::Stopped;
            } else if since.elapsed() > STOP_DEADLINE {
                inst.kill9();
                self.tally.unclean_stops += 1;
                tracing::warn!(instance = %inst.name, log = %inst.log.display(),
                    "no exit {} s after SIGTERM; killed", STOP_DEADLINE.as_secs());
                self.slots[i] = Slot::Stopped;
            }
        }
    }

    /// Picks the next event and its slot among those possible now: a graceful stop or a
    /// `kill -9` of a running slot only while another one runs, or the start of a stopped slot.
    /// `None` when none is possible (a single slot, or one running and the rest still stopping).
    fn pick(&mut self) -> Option<Event> {
        let running = self.running();
        let stopped: Vec<usize> = (0..self.slots.len())
            .filter(|i| self.slots[*i] == Slot::Stopped)
            .collect();
        #[derive(Clone, Copy)]
        enum Kind {
            Stop,
            Start,
            Kill,
        }
        // Weights: kill 2, stop 2, start 2 (start 3 while two or more slots are down, so the
        // group does not shrink to one instance for long).
        let mut choices: Vec<(Kind, u32)> = Vec::new();
        if running.len() >= 2 {
            choices.push((Kind::Kill, 2));
            choices.push((Kind::Stop, 2));
        }
        if !stopped.is_empty() {
            choices.push((Kind::Start, if stopped.len() >= 2 { 3 } else { 2 }));
        }
        let total: u32 = choices.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return None;
        }
        let mut pick = self.rng.gen_range(0..total);
        let (kind, _) = choices.into_iter().find(|(_, w)| {
            if pick < *w {
                true
            } else {
                pick -= w;
                false
            }
        })?;
        Some(match kind {
            Kind::Kill => Event::Kill(running[self.rng.gen_range(0..running.len())]),
            Kind::Stop => Event::Stop(running[self.rng.gen_range(0..running.len())]),
            Kind::Start => Event::Start(stopped[self.rng.gen_range(0..stopped.len())]),
        })
    }

    /// Delivers one event ([`Churn::pick`]); when one slot runs and the others are still
    /// stopping, first waits (bounded by [`STOP_DEADLINE`]) for a stop to finish so that a start
    /// is possible.
    pub(crate) fn deliver(
        &mut self,
        instances: &mut [Instance],
        monitor: &mut Monitor,
        exe: &std::path::PathBuf,
        output: &str,
    ) -> Result<(), String> {
        self.reap(instances);
        while self.running().len() < 2
            && !self.slots.contains(&Slot::Stopped)
            && self.slots.iter().any(|s| matches!(s, Slot::Stopping(_)))
        {
            std::thread::sleep(Duration::from_millis(100));
            self.reap(instances);
        }
        let event = self
            .pick()
            .ok_or("the storm has no event to deliver (a single slot?)")?;
        monitor.fault_now();
        match event {
            Event::Kill(i) => {
                let inst = &mut instances[i];
                inst.kill9();
                self.tally.kills += 1;
                tracing::info!(instance = %inst.name, "storm: kill -9");
                std::thread::sleep(Duration::from_millis(self.rng.gen_range(100..1000)));
                inst.spawn(exe, output)
            }
            Event::Stop(i) => {
                instances[i].signal("TERM")?;
                self.slots[i] = Slot::Stopping(Instant::now());
                self.tally.stops += 1;
                tracing::info!(instance = %instances[i].name, "storm: SIGTERM (graceful stop)");
                Ok(())
            }
            Event::Start(i) => {
                instances[i].spawn(exe, output)?;
                self.slots[i] = Slot::Running;
                self.tally.starts += 1;
                tracing::info!(instance = %instances[i].name, "storm: start");
                Ok(())
            }
        }
    }

    /// Waits (bounded by [`STOP_DEADLINE`]) for every stop in flight to finish, so that an
    /// unclean one is counted before the verdict.
    pub(crate) fn settle(&mut self, instances: &mut [Instance]) {
        while self.slots.iter().any(|s| matches!(s, Slot::Stopping(_))) {
            self.reap(instances);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_stay_within_the_plan_and_one_seed_gives_one_sequence() {
        let plan = StormPlan::new(7);
        let mut a = Churn::new(plan, 3);
        let mut b = Churn::new(plan, 3);
        for _ in 0..100 {
            let (ga, gb) = (a.gap(), b.gap());
            assert_eq!(ga, gb);
            assert!(ga >= plan.min_gap && ga < plan.max_gap, "{ga:?}");
        }
        assert_eq!(plan.mean_gap(), Duration::from_secs(3));
    }

    /// Plays `steps` events on `slots` slots, a stop finishing before the next event (only
    /// before every second one when `slow_stops`); returns the events by kind (stops, starts,
    /// kills), checking after each that an instance runs.
    fn play(seed: u64, slots: usize, steps: usize, slow_stops: bool) -> (u32, u32, u32) {
        fn finish_stops(c: &mut Churn) {
            for s in c.slots.iter_mut() {
                if matches!(s, Slot::Stopping(_)) {
                    *s = Slot::Stopped;
                }
            }
        }
        let mut c = Churn::new(StormPlan::new(seed), slots);
        let (mut stops, mut starts, mut kills) = (0, 0, 0);
        for step in 0..steps {
            if !slow_stops || step % 2 == 0 {
                finish_stops(&mut c);
            }
            let Some(event) = c.pick() else {
                // Only possible with one slot running and the rest still stopping.
                assert_eq!(c.running().len(), 1, "{:?}", c.slots);
                assert!(!c.slots.contains(&Slot::Stopped), "{:?}", c.slots);
                finish_stops(&mut c);
                continue;
            };
            match event {
                Event::Stop(i) => {
                    assert_eq!(c.slots[i], Slot::Running);
                    c.slots[i] = Slot::Stopping(Instant::now());
                    stops += 1;
                }
                Event::Kill(i) => {
                    assert_eq!(c.slots[i], Slot::Running);
                    // Down until its restart: another one must be running.
                    assert!(c.running().len() >= 2, "{event:?}: {:?}", c.slots);
                    kills += 1;
                }
                Event::Start(i) => {
                    assert_eq!(c.slots[i], Slot::Stopped);
                    c.slots[i] = Slot::Running;
                    starts += 1;
                }
            }
            assert!(
                !c.running().is_empty(),
                "no instance running after {event:?}: {:?}",
                c.slots
            );
        }
        (stops, starts, kills)
    }

    #[test]
    fn one_instance_always_runs_and_every_kind_of_event_happens() {
        for seed in 0..50 {
            for slots in [2, 3, 4] {
                for slow in [false, true] {
                    let (stops, starts, kills) = play(seed, slots, 200, slow);
                    assert!(
                        stops > 20 && starts > 20 && kills > 20,
                        "seed {seed}, {slots} slots: {stops} stops, {starts} starts, {kills} kills"
                    );
                    // At most every slot but one down at once.
                    assert!(starts <= stops && stops - starts < slots as u32);
                }
            }
        }
        // A single slot can only be left alone.
        assert_eq!(Churn::new(StormPlan::new(1), 1).pick(), None);
    }

    #[test]
    fn one_seed_picks_one_sequence_of_events() {
        let run = |seed| {
            let mut c = Churn::new(StormPlan::new(seed), 3);
            (0..30)
                .map(|_| {
                    let e = c.pick();
                    match e {
                        Some(Event::Stop(i)) => c.slots[i] = Slot::Stopped,
                        Some(Event::Start(i)) => c.slots[i] = Slot::Running,
                        _ => {}
                    }
                    e
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }
}
