//! The lifecycle's safety rules, checked at every change the API server
//! commits (kubesim's store, in commit order, as etcd's revisions), not by
//! polling, which could miss a breach that lasts a moment:
//!
//! - a member's claim starts being deleted only while its member Service
//!   records the replace intent or a confirmed decommission;
//! - a member Service is deleted only once it records a confirmed
//!   decommission;
//! - a StatefulSet shrinks past a member only once that member's Service
//!   records a confirmed decommission;
//! - never two members being replaced at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crds::contract;
use serde_json::Value;
use testworld::kubesim::KubeSim;
use testworld::kubesim::store::{Event, EventType};
use tokio::sync::broadcast::error::RecvError;

/// Watches a namespace's claims, Services and StatefulSets from now on and
/// records every breach of the rules above.
pub(crate) struct SafetyWatch {
    breaches: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the watch knows: each member Service's labels as last committed.
#[derive(Default)]
struct Known {
    labels: BTreeMap<String, BTreeMap<String, String>>,
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn name(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn deleting(object: Option<&Value>) -> bool {
    object.is_some_and(|o| o.pointer("/metadata/deletionTimestamp").is_some())
}

/// A member Service's name ends in its ordinal (the client Service's does
/// not).
fn is_member(service: &str) -> bool {
    service
        .rsplit_once('-')
        .is_some_and(|(_, ordinal)| ordinal.parse::<u32>().is_ok())
}

fn replicas(object: Option<&Value>) -> Option<i64> {
    object?.pointer("/spec/replicas")?.as_i64()
}

impl Known {
    fn confirmed(&self, member: &str) -> bool {
        self.labels
            .get(member)
            .and_then(|l| l.get(contract::DECOMMISSIONED))
            .is_some_and(|v| v == contract::DECOMMISSION_DONE)
    }

    fn replacing(&self, member: &str) -> bool {
        self.labels
            .get(member)
            .is_some_and(|l| l.contains_key(contract::REPLACE))
    }

    /// The breach this change makes, if any.
    fn apply(&mut self, event: &Event) -> Option<String> {
        let object = event.object.as_ref();
        let prev = event.prev.as_deref();
        let rv = event.rv;
        match event.plural.as_str() {
            "services" => {
                let service = name(object).to_string();
                let began_deleting = event.kind == EventType::Deleted && !deleting(prev)
                    || deleting(Some(object)) && !deleting(prev);
                // Its last state before this change.
                let confirmed = self.confirmed(&service);
                if event.kind == EventType::Deleted {
                    self.labels.remove(&service);
                } else {
                    self.labels.insert(service.clone(), labels(object));
                }
                if began_deleting && is_member(&service) && !confirmed {
                    return Some(format!(
                        "rv {rv}: member Service {service} deleted without a confirmed decommission"
                    ));
                }
                let replacing: Vec<&String> = self
                    .labels
                    .iter()
                    .filter(|(_, l)| l.contains_key(contract::REPLACE))
                    .map(|(n, _)| n)
                    .collect();
                (replacing.len() > 1)
                    .then(|| format!("rv {rv}: two members being replaced at once: {replacing:?}"))
            }
            "persistentvolumeclaims" => {
                let claim = name(object);
                let member = claim.strip_prefix("data-")?;
                let began_deleting = event.kind == EventType::Deleted && !deleting(prev)
                    || deleting(Some(object)) && !deleting(prev);
                (began_deleting && !self.replacing(member) && !self.confirmed(member)).then(|| {
                    format!(
                        "rv {rv}: claim {claim} deleted while its member Service records neither the replace intent nor a confirmed decommission (labels: {:?})",
                        self.labels.get(member)
                    )
                })
            }
            "statefulsets" => {
                let (before, after) = (replicas(prev)?, replicas(Some(object))?);
                let sts = name(object);
                (after..before)
                    .map(|ordinal| format!("{sts}-{ordinal}"))
                    .find(|member| !self.confirmed(member))
                    .map(|member| {
                        format!(
                            "rv {rv}: StatefulSet {sts} shrunk from {before} to {after} while member {member} has no confirmed decommission"
                        )
                    })
            }
            _ => None,
        }
    }
}

impl SafetyWatch {
    /// Starts watching `namespace`, knowing its Services as they are now.
    pub(crate) fn start(sim: &KubeSim, namespace: &str) -> SafetyWatch {
        let mut events = sim.store().subscribe();
        let mut known = Known::default();
        let services =
            testworld::kubesim::store::Target::new("", "v1", "services", Some(namespace));
        if let Ok(list) = sim.store().list(&services, &Default::default()) {
            for s in list["items"].as_array().into_iter().flatten() {
                known.labels.insert(name(s).to_string(), labels(s));
            }
        }
        let breaches = Arc::new(Mutex::new(Vec::new()));
        let found = breaches.clone();
        let namespace = namespace.to_string();
        let task = tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => {
                        if event.namespace() != namespace {
                            continue;
                        }
                        if let Some(breach) = known.apply(&event) {
                            found.lock().unwrap().push(breach);
                        }
                    }
                    Err(RecvError::Lagged(n)) => found.lock().unwrap().push(format!(
                        "the safety watch missed {n} changes: it cannot vouch for them"
                    )),
                    Err(RecvError::Closed) => return,
                }
            }
        });
        SafetyWatch { breaches, task }
    }

    /// Panics with the breaches seen so far, if any.
    pub(crate) fn assert_safe(&self, context: &str) {
        let breaches = self.breaches.lock().unwrap();
        assert!(
            breaches.is_empty(),
            "{context}: the lifecycle's safety rules were broken:\n{}",
            breaches.join("\n")
        );
    }
}

impl Drop for SafetyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: EventType, plural: &str, object: Value, prev: Option<Value>) -> Event {
        Event {
            rv: 1,
            kind,
            group: String::new(),
            plural: plural.into(),
            object: Arc::new(object),
            prev: prev.map(Arc::new),
            at_us: 0,
        }
    }

    fn service(name: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn a_claim_deleted_without_a_record_of_intent_is_a_breach() {
        let mut known = Known::default();
        known.apply(&event(
            EventType::Added,
            "services",
            service("s-0", json!({})),
            None,
        ));
        let claim =
            json!({"metadata": {"name": "data-s-0", "namespace": "ns", "deletionTimestamp": "x"}});
        let plain = json!({"metadata": {"name": "data-s-0", "namespace": "ns"}});
        let modified = event(
            EventType::Modified,
            "persistentvolumeclaims",
            claim.clone(),
            Some(plain.clone()),
        );
        assert!(known.apply(&modified).is_some());
        known.apply(&event(
            EventType::Modified,
            "services",
            service("s-0", json!({contract::REPLACE: "10.0.0.1"})),
            None,
        ));
        assert_eq!(known.apply(&modified), None);
        // Finishing a deletion already begun is no new deletion.
        assert_eq!(
            known.apply(&event(
                EventType::Deleted,
                "persistentvolumeclaims",
                claim.clone(),
                Some(claim)
            )),
            None
        );
    }

    #[test]
    fn a_shrink_and_a_service_deletion_need_a_confirmed_decommission() {
        let mut known = Known::default();
        let sts =
            |n: i64| json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {"replicas": n}});
        known.apply(&event(
            EventType::Added,
            "services",
            service("s-2", json!({contract::DECOMMISSIONED: "false"})),
            None,
        ));
        let shrink = event(EventType::Modified, "statefulsets", sts(2), Some(sts(3)));
        assert!(known.apply(&shrink).is_some());
        let gone = event(
            EventType::Deleted,
            "services",
            service("s-2", json!({contract::DECOMMISSIONED: "false"})),
            None,
        );
        assert!(known.apply(&gone).is_some());
        known.apply(&event(
            EventType::Added,
            "services",
            service("s-2", json!({contract::DECOMMISSIONED: "true"})),
            None,
        ));
        assert_eq!(known.apply(&shrink), None);
        assert_eq!(known.apply(&gone), None);
        // The client Service is no member's.
        assert_eq!(
            known.apply(&event(
                EventType::Deleted,
                "services",
                service("s-client", json!({})),
                None
            )),
            None
        );
    }

    #[test]
    fn two_members_being_replaced_is_a_breach() {
        let mut known = Known::default();
        let replacing = |n: &str| {
            event(
                EventType::Modified,
                "services",
                service(n, json!({contract::REPLACE: "10.0.0.1"})),
                None,
            )
        };
        assert_eq!(known.apply(&replacing("s-0")), None);
        assert!(known.apply(&replacing("s-1")).is_some());
    }
}
