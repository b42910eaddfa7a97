//! Which instance holds a partition, and at what address: the group's current assignment
//! (DescribeGroups, both protocols) says which member owns a partition number — members are
//! named by `client.id = eosflow-<instance id>` — and the compacted `<app.id>-endpoints` topic
//! maps each instance to the `processor.application_server` it advertised when it started.
//!
//! The assignment is cached for a second: a query for a key owned elsewhere costs a lookup at
//! most once a second, and an answer never relies on an assignment older than that. While the
//! group rebalances (not `Stable`) no member's assignment is trusted: the owner is unknown.
//! An endpoint is kept until its member **rejoins** — it leaves the group's member list and
//! comes back (a restarted instance may advertise another address) — or a request forwarded
//! to it fails to get an answer: the endpoint topic is then read again (at most once a second).
//! The lookups (DescribeGroups, reading the topic, up to 5 s each) run outside the caches'
//! locks: a slow broker delays the requests that need the lookup, never the others.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::kafka::describe::describe_group;
use crate::kafka::topics::{self, TopicSpec};
use crate::kafka::{ClientRole, KafkaClients};

/// How long an assignment or the endpoint map is trusted.
const FRESH: Duration = Duration::from_secs(1);
/// How long one lookup may wait for the broker.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Who owns a partition number, as far as the group says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This instance (assigned here, maybe not open yet).
    Me,
    /// Another instance, reachable at this `host:port`.
    Other {
        /// Its `processor.application_server`.
        endpoint: String,
        /// Its client id.
        member: String,
    },
    /// Not known now, and why (a rebalance, an owner without an advertised endpoint, the
    /// broker not answering).
    Unknown(String),
}

/// The endpoint topic of application `app_id`.
pub(crate) fn endpoints_topic(app_id: &str) -> String {
    format!("{app_id}-endpoints")
}

type Assignment = BTreeMap<i32, String>;

/// Finds partition owners and their endpoints for one instance.
pub(crate) struct Router {
    clients: KafkaClients,
    group: String,
    topic: String,
    /// This instance's client id.
    me: String,
    /// This instance's advertised endpoint.
    endpoint: Option<String>,
    assignment: Mutex<AssignmentCache>,
    endpoints: Mutex<EndpointCache>,
}

/// The last assignment read, and whether a thread is reading a newer one.
#[derive(Default)]
struct AssignmentCache {
    last: Option<(Instant, Result<Assignment, String>)>,
    reading: bool,
}

/// The endpoint map as last read, and when each member was last seen (re)joining: a member's
/// endpoint is trusted only from a read that came after its latest join.
#[derive(Debug, Default)]
struct EndpointCache {
    map: BTreeMap<String, String>,
    read_at: Option<Instant>,
    members: BTreeSet<String>,
    joined: BTreeMap<String, Instant>,
}

impl EndpointCache {
    /// The group's members now: a member not among the previous ones (re)joined.
    fn members_now(&mut self, members: BTreeSet<String>, now: Instant) {
        if !self.members.is_empty() || self.read_at.is_some() {
            for m in members.difference(&self.members) {
                self.joined.insert(m.clone(), now);
            }
        }
        self.members = members;
    }

    /// A request forwarded to `member` got no answer: its endpoint is read again.
    fn forget(&mut self, member: &str, now: Instant) {
        self.joined.insert(member.to_string(), now);
    }

    /// `member`'s endpoint if the last read can be trusted for it; `Err(())` when the topic
    /// must be read again first.
    fn lookup(&self, member: &str, now: Instant) -> Result<Option<String>, ()> {
        let Some(read_at) = self.read_at else {
            return Err(());
        };
        let stale = self.joined.get(member).is_some_and(|j| *j >= read_at);
        match self.map.get(member) {
            Some(e) if !stale => Ok(Some(e.clone())),
            // Unknown (or stale) and read less than a second ago: not advertised (yet).
            _ if now.duration_since(read_at) < FRESH => {
                Ok(self.map.get(member).cloned().filter(|_| !stale))
            }
            _ => Err(()),
        }
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("group", &self.group)
            .field("me", &self.me)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl Router {
    /// The router of instance `instance_id` of application `app_id`.
    pub(crate) fn new(
        clients: KafkaClients,
        app_id: &str,
        instance_id: &str,
        endpoint: Option<String>,
    ) -> Self {
        Self {
            clients,
            group: app_id.to_string(),
            topic: endpoints_topic(app_id),
            me: crate::processor::standby::client_id(instance_id),
            endpoint,
            assignment: Mutex::new(AssignmentCache::default()),
            endpoints: Mutex::new(EndpointCache::default()),
        }
    }

    /// This instance's advertised endpoint, if any.
    pub(crate) fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// Creates the endpoint topic if it is missing (compacted, one partition) and writes this
    /// instance's endpoint to it.
    pub(crate) fn advertise(&self) -> Result<(), String> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(());
        };
        let spec = TopicSpec {
            name: self.topic.clone(),
            partitions: 1,
            replication: None,
            cleanup_policy: "compact".into(),
            retention_ms: None,
            config: BTreeMap::new(),
        };
        topics::apply_blocking(&self.clients, &[spec], LOOKUP_TIMEOUT)
            .map_err(|e| format!("creating {}: {e}", self.topic))?;
        let producer: BaseProducer = self
            .clients
            .config(ClientRole::Idempotent)
            .create()
            .map_err(|e| format!("producer for {}: {e}", self.topic))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut record = BaseRecord::to(&self.topic)
            .key(self.me.as_str())
            .payload(endpoint.as_str());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r)) if Instant::now() < deadline => {
                    tracing::debug!(error = %e, "endpoint record not queued yet");
                    producer.poll(Duration::from_millis(100));
                    record = r;
                }
                Err((e, _)) => return Err(format!("writing to {}: {e}", self.topic)),
            }
        }
        producer
            .flush(Duration::from_secs(30))
            .map_err(|e| format!("writing to {}: {e}", self.topic))?;
        tracing::info!(topic = %self.topic, endpoint = %endpoint, member = %self.me, "advertised the interactive query endpoint");
        Ok(())
    }

    /// The owner of partition number `p` of `input` now.
    pub(crate) fn owner(&self, input: &str, p: i32) -> Owner {
        let member = match self.assignment(input) {
            Ok(a) => match a.get(&p) {
                Some(m) => m.clone(),
                None => return Owner::Unknown(format!("no member holds partition {p} now")),
            },
            Err(why) => return Owner::Unknown(why),
        };
        if member == self.me {
            return Owner::Me;
        }
        match self.endpoint_of(&member) {
            Some(endpoint) => Owner::Other { endpoint, member },
            None => Owner::Unknown(format!(
                "{member} owns partition {p} but has not advertised an endpoint (processor.application_server)"
            )),
        }
    }

    /// A request forwarded to `member` got no answer: read its endpoint again next time (it
    /// may have restarted elsewhere).
    pub(crate) fn forget_endpoint(&self, member: &str) {
        lock(&self.endpoints).forget(member, Instant::now());
    }

    fn assignment(&self, input: &str) -> Result<Assignment, String> {
        {
            let mut cached = lock(&self.assignment);
            match &cached.last {
                Some((at, a)) if at.elapsed() < FRESH => return a.clone(),
                // Another thread is reading a newer one: this answer may use the last one.
                Some((_, a)) if cached.reading => return a.clone(),
                _ => cached.reading = true,
            }
        }
        // The lookup, outside the lock (DescribeGroups: up to LOOKUP_TIMEOUT).
        let described = describe_group(&self.clients, &self.group, LOOKUP_TIMEOUT);
        let fresh = match &described {
            Ok(g) => match g.owners(input) {
                Some(owners) => Ok(owners
                    .into_iter()
                    .flat_map(|(m, ps)| ps.into_iter().map(move |p| (p, m.clone())))
                    .collect()),
                None => Err(format!("the group is rebalancing (state {})", g.state)),
            },
            Err(e) => Err(format!("describing the group: {e}")),
        };
        if let Ok(g) = &described {
            let members = g.members.iter().map(|m| m.client_id.clone()).collect();
            lock(&self.endpoints).members_now(members, Instant::now());
        }
        let mut cached = lock(&self.assignment);
        cached.last = Some((Instant::now(), fresh.clone()));
        cached.reading = false;
        fresh
    }

    fn endpoint_of(&self, member: &str) -> Option<String> {
        if let Ok(found) = lock(&self.endpoints).lookup(member, Instant::now()) {
            return found;
        }
        // Read the topic outside the lock (up to LOOKUP_TIMEOUT).
        let started = Instant::now();
        let mut map = BTreeMap::new();
        let read =
            crate::kafka::reader::read_all(&self.clients, &self.topic, LOOKUP_TIMEOUT, |m| {
                use rdkafka::Message;
                let Some(key) = m.key().map(|k| String::from_utf8_lossy(k).into_owned()) else {
                    return Ok(());
                };
                match m.payload() {
                    Some(v) => map.insert(key, String::from_utf8_lossy(v).into_owned()),
                    None => map.remove(&key),
                };
                Ok(())
            });
        if let Err(e) = read {
            tracing::warn!(topic = %self.topic, error = %e, "reading the interactive query endpoints");
        }
        let found = map.get(member).cloned();
        let mut cached = lock(&self.endpoints);
        cached.map = map;
        // The read reflects what was advertised when it started.
        cached.read_at = Some(started);
        found
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ms: &[&str]) -> BTreeSet<String> {
        ms.iter().map(|m| m.to_string()).collect()
    }

    #[test]
    fn an_endpoint_is_read_again_after_its_member_rejoins_or_fails_to_answer() {
        let t0 = Instant::now();
        let mut c = EndpointCache::default();
        assert_eq!(c.lookup("eosflow-b", t0), Err(()), "never read");
        c.members_now(set(&["eosflow-a", "eosflow-b"]), t0);
        c.map.insert("eosflow-b".into(), "10.0.0.2:9465".into());
        c.read_at = Some(t0);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(
            c.lookup("eosflow-b", later),
            Ok(Some("10.0.0.2:9465".into()))
        );
        // b leaves the group and comes back: its endpoint is read again.
        c.members_now(set(&["eosflow-a"]), later);
        assert_eq!(
            c.lookup("eosflow-b", later),
            Ok(Some("10.0.0.2:9465".into()))
        );
        c.members_now(set(&["eosflow-a", "eosflow-b"]), later);
        assert_eq!(c.lookup("eosflow-b", later), Err(()));
        c.map.insert("eosflow-b".into(), "10.0.0.9:9465".into());
        c.read_at = Some(later + Duration::from_millis(1));
        let after = later + Duration::from_secs(5);
        assert_eq!(
            c.lookup("eosflow-b", after),
            Ok(Some("10.0.0.9:9465".into()))
        );
        // A forwarded request b did not answer: read again.
        c.forget("eosflow-b", after);
        assert_eq!(c.lookup("eosflow-b", after), Err(()));
        // A member the last read (under a second ago) did not know: not advertised yet.
        assert_eq!(
            c.lookup("eosflow-c", later + Duration::from_millis(500)),
            Ok(None)
        );
    }
}
