//! Which instance holds a partition, and at what address: the group's current assignment
//! (DescribeGroups, both protocols) says which member owns a partition number — members are
//! named by `client.id = eosflow-<instance id>` — and the compacted `<app.id>-endpoints` topic
//! maps each instance to the `processor.application_server` it advertised when it started.
//!
//! Both are cached for a second: a query for a key owned elsewhere costs a lookup at most once
//! a second, and an answer never relies on an assignment older than that. While the group
//! rebalances (not `Stable`) no member's assignment is trusted: the owner is unknown.

use std::collections::BTreeMap;
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
    assignment: Mutex<Option<(Instant, Result<Assignment, String>)>>,
    endpoints: Mutex<Option<(Instant, BTreeMap<String, String>)>>,
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
            assignment: Mutex::new(None),
            endpoints: Mutex::new(None),
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

    fn assignment(&self, input: &str) -> Result<Assignment, String> {
        let mut cached = self
            .assignment
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, a)) = &*cached {
            if at.elapsed() < FRESH {
                return a.clone();
            }
        }
        let fresh = match describe_group(&self.clients, &self.group, LOOKUP_TIMEOUT) {
            Ok(g) => match g.owners(input) {
                Some(owners) => Ok(owners
                    .into_iter()
                    .flat_map(|(m, ps)| ps.into_iter().map(move |p| (p, m.clone())))
                    .collect()),
                None => Err(format!("the group is rebalancing (state {})", g.state)),
            },
            Err(e) => Err(format!("describing the group: {e}")),
        };
        *cached = Some((Instant::now(), fresh.clone()));
        fresh
    }

    fn endpoint_of(&self, member: &str) -> Option<String> {
        let mut cached = self
            .endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, map)) = &*cached {
            if map.contains_key(member) || at.elapsed() < FRESH {
                return map.get(member).cloned();
            }
        }
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
        *cached = Some((Instant::now(), map));
        found
    }
}
