//! Reading the application's committed outputs back (`read_committed`) and judging them:
//! every placed order reached a final state exactly once, every saga ended exactly once and
//! agrees with its order, the read model agrees with both, and the dead letters carry reasons.
//! Timed-out sagas are judged by their steps: a step that timed out before the pivot ends in a
//! cancellation, one after it ends shipped with one alert per timeout in the replies' DLT.
//! Only the topics are read — never a processor's own counters.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::message::{Headers, Message};

use super::catalog::{CustomerProfile, Product};
use super::messages::{SagaEnded, SagaOutcome, StatusChanged};
use super::model::OrderStatus;
use super::projection::CustomerView;
use super::{Topics, Topology};
use eosflow::kafka::{read_all, KafkaClients, ReadError};

/// What the output topics hold.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// Final statuses (shipped, cancelled) seen per order, in order.
    pub finals: HashMap<String, Vec<OrderStatus>>,
    /// Status changes in all.
    pub transitions: usize,
    /// Saga outcomes per order.
    pub sagas: HashMap<String, Vec<SagaOutcome>>,
    /// The steps of each order's (last) saga-ended event.
    pub saga_steps: HashMap<String, Vec<String>>,
    /// The read model: the last view per customer.
    pub views: HashMap<String, CustomerView>,
    /// Dead letters per input topic, by the reason's code (`invalid-order`, …).
    pub dead_letters: BTreeMap<String, BTreeMap<String, u64>>,
    /// One example reason per code.
    pub examples: BTreeMap<String, String>,
    /// Records on the orders topic (what the outbox router published).
    pub published: usize,
    /// Views on the customers topic in all (every update, not only the last per customer).
    pub view_records: usize,
    /// Of those, views written while the customer's profile was not in the read model's table.
    pub views_without_profile: usize,
}

fn header(m: &rdkafka::message::BorrowedMessage<'_>, name: &str) -> Option<String> {
    m.headers().and_then(|h| {
        h.iter()
            .find(|x| x.key == name)
            .and_then(|x| x.value.map(|v| String::from_utf8_lossy(v).to_string()))
    })
}

/// Reads every output of `topics` to its end.
pub fn read(clients: &KafkaClients, topics: &Topics, timeout: Duration) -> Result<Outputs, String> {
    let mut out = Outputs::default();
    fn e(t: &str) -> impl FnOnce(ReadError) -> String + '_ {
        move |err| format!("reading {t}: {err}")
    }
    read_all(clients, &topics.orders, timeout, |_| {
        out.published += 1;
        Ok(())
    })
    .map_err(e(&topics.orders))?;
    read_all(clients, &topics.status, timeout, |m| {
        let s: StatusChanged = serde_json::from_slice(m.payload().unwrap_or_default())
            .map_err(|err| format!("a status change that is not one: {err}"))?;
        out.transitions += 1;
        if s.to_status.is_final() {
            out.finals.entry(s.order_id).or_default().push(s.to_status);
        }
        Ok(())
    })
    .map_err(e(&topics.status))?;
    read_all(clients, &topics.saga_events, timeout, |m| {
        let s: SagaEnded = serde_json::from_slice(m.payload().unwrap_or_default())
            .map_err(|err| format!("a saga-ended event that is not one: {err}"))?;
        out.sagas
            .entry(s.order_id.clone())
            .or_default()
            .push(s.outcome);
        out.saga_steps.insert(s.order_id, s.steps);
        Ok(())
    })
    .map_err(e(&topics.saga_events))?;
    read_all(clients, &topics.customers, timeout, |m| {
        let v: CustomerView = serde_json::from_slice(m.payload().unwrap_or_default())
            .map_err(|err| format!("a customer view that is not one: {err}"))?;
        out.view_records += 1;
        if v.name.is_none() {
            out.views_without_profile += 1;
        }
        out.views.insert(v.customer_id.clone(), v);
        Ok(())
    })
    .map_err(e(&topics.customers))?;
    for input in Topology::ALL.iter().flat_map(|t| topics.inputs(*t)) {
        let dlt = eosflow::kafka::topics::dlt_topic(&input);
        let mut codes: BTreeMap<String, u64> = BTreeMap::new();
        read_all(clients, &dlt, timeout, |m| {
            let msg =
                header(m, "eosflow.dlt.error.message").unwrap_or_else(|| "(no reason)".into());
            let code = msg.split(':').next().unwrap_or("").trim().to_string();
            *codes.entry(code.clone()).or_default() += 1;
            out.examples.entry(code).or_insert(msg);
            Ok(())
        })
        .map_err(e(&dlt))?;
        if !codes.is_empty() {
            out.dead_letters.insert(dlt, codes);
        }
    }
    Ok(out)
}

/// The judgement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Orders placed (the ground truth).
    pub orders: usize,
    /// Orders with exactly one final status.
    pub final_once: usize,
    /// Orders with no final status.
    pub no_final: usize,
    /// Orders with more than one.
    pub final_twice: usize,
    /// Final statuses of orders never placed (poison that got through).
    pub unexpected_finals: usize,
    /// Sagas per outcome (orders with exactly one).
    pub sagas: BTreeMap<SagaOutcome, usize>,
    /// Orders whose saga did not end.
    pub saga_missing: usize,
    /// Orders whose saga ended more than once.
    pub saga_twice: usize,
    /// Completed sagas of cancelled orders or compensated sagas of shipped ones.
    pub disagreements: usize,
    /// Orders whose read-model status is not their final status.
    pub view_mismatches: usize,
    /// Shipped, cancelled.
    pub shipped: usize,
    /// Cancelled.
    pub cancelled: usize,
    /// Saga steps that timed out, by step (`reserve`, `charge`, `ship`, `release`).
    pub timeouts: BTreeMap<String, usize>,
    /// Sagas with a timeout that did not end as it must: cancelled after a timeout before the
    /// pivot (reserve, charge), shipped after one past it (ship).
    pub timeout_inconsistent: usize,
    /// Shipment timeouts in the steps minus `ship-timeout` alerts in the replies' DLT: 0 when
    /// each timeout alerted exactly once.
    pub timeout_alerts_missing: i64,
}

impl Verdict {
    /// Every check holds.
    pub fn ok(&self) -> bool {
        self.orders > 0
            && self.final_once == self.orders
            && self.no_final == 0
            && self.final_twice == 0
            && self.unexpected_finals == 0
            && self.saga_missing == 0
            && self.saga_twice == 0
            && self.disagreements == 0
            && self.view_mismatches == 0
            && self.timeout_inconsistent == 0
            && self.timeout_alerts_missing == 0
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} orders={} final_once={} no_final={} final_twice={} unexpected={} saga_missing={} saga_twice={} disagreements={} view_mismatches={} timeouts={:?} timeout_inconsistent={} timeout_alerts_missing={}",
            if self.ok() { "PASS" } else { "FAIL" },
            self.orders,
            self.final_once,
            self.no_final,
            self.final_twice,
            self.unexpected_finals,
            self.saga_missing,
            self.saga_twice,
            self.disagreements,
            self.view_mismatches,
            self.timeouts,
            self.timeout_inconsistent,
            self.timeout_alerts_missing
        )
    }
}

/// Judges `out` against the placed orders (`order id → customer id`).
pub fn judge(placed: &BTreeMap<String, String>, out: &Outputs) -> Verdict {
    let mut v = Verdict {
        orders: placed.len(),
        ..Verdict::default()
    };
    for (order, customer) in placed {
        let finals = out.finals.get(order).map(Vec::as_slice).unwrap_or_default();
        let last = finals.last().copied();
        match finals.len() {
            0 => v.no_final += 1,
            1 => v.final_once += 1,
            _ => v.final_twice += 1,
        }
        match last {
            Some(OrderStatus::Shipped) => v.shipped += 1,
            Some(OrderStatus::Cancelled) => v.cancelled += 1,
            _ => {}
        }
        let sagas = out.sagas.get(order).map(Vec::as_slice).unwrap_or_default();
        match sagas {
            [] => v.saga_missing += 1,
            [one] => {
                *v.sagas.entry(*one).or_default() += 1;
                let agrees = matches!(
                    (one, last),
                    (SagaOutcome::Completed, Some(OrderStatus::Shipped))
                        | (
                            SagaOutcome::Compensated | SagaOutcome::CompensationFailed,
                            Some(OrderStatus::Cancelled)
                        )
                );
                if !agrees {
                    v.disagreements += 1;
                }
            }
            _ => v.saga_twice += 1,
        }
        let timed_out: Vec<&str> = out
            .saga_steps
            .get(order)
            .into_iter()
            .flatten()
            .filter_map(|s| s.strip_prefix("timeout:"))
            .map(|s| s.split('#').next().unwrap_or(s))
            .collect();
        for step in &timed_out {
            *v.timeouts.entry(step.to_string()).or_default() += 1;
        }
        let before_pivot = timed_out.iter().any(|s| matches!(*s, "reserve" | "charge"));
        let after_pivot = timed_out.contains(&"ship");
        let outcome = sagas.first().copied();
        if (before_pivot
            && (last != Some(OrderStatus::Cancelled) || outcome == Some(SagaOutcome::Completed)))
            || (after_pivot
                && (last != Some(OrderStatus::Shipped) || outcome != Some(SagaOutcome::Completed)))
        {
            v.timeout_inconsistent += 1;
        }
        let seen = out
            .views
            .get(customer)
            .and_then(|c| c.orders.get(order))
            .map(|e| e.status);
        if seen != last || last.is_none() {
            v.view_mismatches += 1;
        }
    }
    let ship_alerts: u64 = out
        .dead_letters
        .iter()
        .filter(|(t, _)| t.ends_with(".saga-replies.DLT"))
        .filter_map(|(_, codes)| codes.get("ship-timeout"))
        .sum();
    let ship_timeouts = v.timeouts.get("ship").copied().unwrap_or(0);
    v.timeout_alerts_missing = ship_timeouts as i64 - ship_alerts as i64;
    v.unexpected_finals = out
        .finals
        .keys()
        .filter(|o| !placed.contains_key(*o))
        .count();
    v
}

/// How the read model's enrichment compares with what the order service and the catalog
/// service wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enrichment {
    /// Customers with a view.
    pub customers: usize,
    /// Orders in the views whose customer's view carries a tier.
    pub orders_with_tier: usize,
    /// Views (last per customer) without the customer's profile, or with a name that is not
    /// theirs, or a tier they never had.
    pub profile_mismatches: usize,
    /// Order lines in the views.
    pub lines: usize,
    /// Of those, lines stamped with the catalog's product name.
    pub named_lines: usize,
    /// Lines whose name or category is not the catalog's (or missing for a sku it has, or
    /// present for one it lacks), plus orders in a view without any line.
    pub product_mismatches: usize,
    /// View updates written before the customer's profile was in the read model's table.
    pub updates_without_profile: usize,
}

impl Enrichment {
    /// Every view carries its customer's profile and every line its catalog product.
    pub fn ok(&self) -> bool {
        self.customers > 0
            && self.lines > 0
            && self.profile_mismatches == 0
            && self.product_mismatches == 0
    }
}

/// Judges the views' enrichment: each customer's last view carries their name and one of the
/// tiers they had (`tiers`: every tier of each customer, oldest first; a tier change reaches
/// the view only with the customer's next update), and each order's lines carry the
/// `catalog`'s name and category for their sku.
pub fn enrichment(
    profiles: &BTreeMap<String, CustomerProfile>,
    tiers: &BTreeMap<String, Vec<String>>,
    catalog: &[Product],
    out: &Outputs,
) -> Enrichment {
    let products: HashMap<&str, &Product> = catalog.iter().map(|p| (p.sku.as_str(), p)).collect();
    let mut e = Enrichment {
        customers: out.views.len(),
        updates_without_profile: out.views_without_profile,
        ..Enrichment::default()
    };
    for (customer, view) in &out.views {
        let right_profile = match (profiles.get(customer), &view.name, &view.tier) {
            (Some(p), Some(name), Some(tier)) => {
                *name == p.name
                    && tiers
                        .get(customer)
                        .is_some_and(|had| had.iter().any(|t| t == tier))
            }
            _ => false,
        };
        if !right_profile {
            e.profile_mismatches += 1;
        }
        if view.tier.is_some() {
            e.orders_with_tier += view.orders.len();
        }
        for entry in view.orders.values() {
            if entry.products.is_empty() {
                e.product_mismatches += 1;
            }
            for line in &entry.products {
                e.lines += 1;
                let want = products.get(line.sku.as_str());
                if line.name.is_some() {
                    e.named_lines += 1;
                }
                let right = match want {
                    Some(p) => {
                        line.name.as_deref() == Some(p.name.as_str())
                            && line.category.as_deref() == Some(p.category.as_str())
                    }
                    None => line.name.is_none() && line.category.is_none(),
                };
                if !right {
                    e.product_mismatches += 1;
                }
            }
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projection::OrderEntry;

    #[test]
    fn a_second_final_status_or_a_missing_saga_fails_the_verdict() {
        let placed = BTreeMap::from([
            ("o-1".to_string(), "c-1".to_string()),
            ("o-2".into(), "c-1".into()),
        ]);
        let mut out = Outputs::default();
        out.finals.insert("o-1".into(), vec![OrderStatus::Shipped]);
        out.finals
            .insert("o-2".into(), vec![OrderStatus::Cancelled]);
        out.sagas.insert("o-1".into(), vec![SagaOutcome::Completed]);
        out.sagas
            .insert("o-2".into(), vec![SagaOutcome::Compensated]);
        let mut view = CustomerView {
            customer_id: "c-1".into(),
            ..CustomerView::default()
        };
        view.orders.insert(
            "o-1".into(),
            OrderEntry {
                status: OrderStatus::Shipped,
                version: 3,
                total_minor: 1,
                products: vec![],
            },
        );
        view.orders.insert(
            "o-2".into(),
            OrderEntry {
                status: OrderStatus::Cancelled,
                version: 2,
                total_minor: 1,
                products: vec![],
            },
        );
        out.views.insert("c-1".into(), view);
        let v = judge(&placed, &out);
        assert!(v.ok(), "{v}");
        out.finals
            .get_mut("o-1")
            .expect("o-1")
            .push(OrderStatus::Shipped);
        assert_eq!(judge(&placed, &out).final_twice, 1);
        out.finals.insert("o-1".into(), vec![OrderStatus::Shipped]);
        out.sagas.remove("o-2");
        assert_eq!(judge(&placed, &out).saga_missing, 1);
        assert!(!judge(&placed, &out).ok());
        out.sagas
            .insert("o-2".into(), vec![SagaOutcome::Compensated]);

        // Timeouts: before the pivot the order must be cancelled; after it, shipped and alerted.
        let steps = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        out.saga_steps.insert(
            "o-2".into(),
            steps(&["reserve", "timeout:reserve#1", "release"]),
        );
        out.saga_steps.insert(
            "o-1".into(),
            steps(&["reserve", "charge", "ship", "timeout:ship#1", "ship#2"]),
        );
        let v = judge(&placed, &out);
        assert_eq!(
            v.timeout_alerts_missing, 1,
            "the shipment's alert is missing"
        );
        assert!(!v.ok());
        out.dead_letters.insert(
            "x.saga-replies.DLT".into(),
            BTreeMap::from([("ship-timeout".to_string(), 1)]),
        );
        let v = judge(&placed, &out);
        assert!(v.ok(), "{v}");
        assert_eq!(
            v.timeouts,
            BTreeMap::from([("reserve".to_string(), 1), ("ship".to_string(), 1)])
        );
        out.saga_steps.insert(
            "o-1".into(),
            steps(&["reserve", "charge", "timeout:charge#1", "ship"]),
        );
        assert_eq!(
            judge(&placed, &out).timeout_inconsistent,
            1,
            "a charge that timed out must not end shipped"
        );
    }

    #[test]
    fn enrichment_holds_only_for_the_written_profile_and_the_catalogs_products() {
        use crate::catalog::{demo_catalog, CustomerProfile};
        use crate::messages::OrderedProduct;
        let catalog = demo_catalog(2);
        let profile = CustomerProfile {
            customer_id: "c-1".into(),
            name: "Ada C-1".into(),
            tier: "gold".into(),
        };
        let profiles = BTreeMap::from([("c-1".to_string(), profile)]);
        let tiers = BTreeMap::from([(
            "c-1".to_string(),
            vec!["silver".to_string(), "gold".to_string()],
        )]);
        let line = |sku: &str, name: Option<&str>, category: Option<&str>| OrderedProduct {
            sku: sku.into(),
            quantity: 1,
            name: name.map(String::from),
            category: category.map(String::from),
        };
        let mut view = CustomerView {
            customer_id: "c-1".into(),
            name: Some("Ada C-1".into()),
            tier: Some("silver".into()), // an earlier tier: the change has not reached the view
            ..CustomerView::default()
        };
        let p0 = &catalog[0];
        view.orders.insert(
            "o-1".into(),
            OrderEntry {
                status: OrderStatus::Shipped,
                version: 3,
                total_minor: 1,
                products: vec![
                    line(&p0.sku, Some(&p0.name), Some(&p0.category)),
                    line("sku-049", None, None), // not in the catalog
                ],
            },
        );
        let mut out = Outputs::default();
        out.views.insert("c-1".into(), view.clone());
        let e = enrichment(&profiles, &tiers, &catalog, &out);
        assert!(e.ok(), "{e:?}");
        assert_eq!((e.lines, e.named_lines, e.orders_with_tier), (2, 1, 1));

        let mut wrong = view.clone();
        wrong.tier = Some("bronze".into()); // never theirs
        out.views.insert("c-1".into(), wrong);
        assert_eq!(
            enrichment(&profiles, &tiers, &catalog, &out).profile_mismatches,
            1
        );

        let mut unnamed = view.clone();
        unnamed.name = None;
        out.views.insert("c-1".into(), unnamed);
        assert!(!enrichment(&profiles, &tiers, &catalog, &out).ok());

        let mut misnamed = view;
        if let Some(o) = misnamed.orders.get_mut("o-1") {
            o.products[0].name = Some("kite".into());
        }
        out.views.insert("c-1".into(), misnamed);
        assert_eq!(
            enrichment(&profiles, &tiers, &catalog, &out).product_mismatches,
            1
        );
    }
}
