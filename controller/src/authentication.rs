//! A cluster's superuser and the replication of its `system_auth`
//! (clusters with `spec.security.authentication.enabled`; the flow is in
//! [`crds::contract::auth`]). Each step is judged from what the database
//! and the API server say now, so a controller that died between two of
//! them does the rest; the only record of its own is the Cluster's
//! annotation [`auth::SYSTEM_AUTH_REPLICATION`].
//!
//! What holds the cluster: a superuser Secret that cannot be read or made
//! (a refusal, as any object the controller cannot make), and a
//! decommission while `system_auth` cannot be lowered to the members that
//! will remain (a wait: Cassandra would refuse it). The rest never holds a
//! topology change: members join and leave whether or not the superuser
//! exists yet, and what failed is logged, said in a Warning Event once,
//! and tried again at the next reconcile.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crds::contract::{auth, tls};
use crds::v1alpha1::{ClientEncryption, Cluster};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use crate::apply::FIELD_MANAGER;
use crate::authority::lasting;
use crate::context::Context;
use crate::cql::{self, CqlError, Credentials, Session};
use crate::decide::{Action, Observed, Refusal, WaitReason};
use crate::error::Error;
use crate::report::publish;
use crate::resources::ValidCluster;

/// How long a login or a statement may take before the step gives up for
/// this reconcile.
const CQL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the controller learnt of each cluster's authentication (by UID),
/// so that a settled cluster costs no CQL connection per reconcile. Lost
/// with the process: the next controller learns it again from the
/// database.
#[derive(Debug, Default)]
pub struct Memory {
    clusters: Mutex<HashMap<String, Learnt>>,
}

#[derive(Debug, Default, Clone)]
struct Learnt {
    /// The Secret's superuser logs in, and the default one does not.
    superuser_settled: bool,
    /// Since when a step has failed without a success since.
    failing_since: Option<Instant>,
    /// The last Warning said (said once until it changes).
    warned: Option<String>,
}

/// How long a step may fail before a Warning says so: a new ring's first
/// member creates the default superuser about 10 s after it starts, and
/// the first logins of a bring-up fail until then.
const WARN_AFTER: Duration = Duration::from_secs(60);

/// How soon a cluster whose authentication is not settled is reconciled
/// again when nothing else brings a change.
pub(crate) const RETRY: Duration = Duration::from_secs(10);

impl Memory {
    fn get(&self, uid: &str) -> Learnt {
        self.clusters
            .lock()
            .map(|m| m.get(uid).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Whether the cluster's superuser or system_auth still needs a step
    /// that failed or has not run (clusters with authentication only).
    pub(crate) fn pending(&self, uid: &str) -> bool {
        let learnt = self.get(uid);
        !learnt.superuser_settled || learnt.failing_since.is_some()
    }

    fn succeeded(&self, uid: &str) {
        self.update(uid, |l| {
            l.failing_since = None;
            l.warned = None;
        });
    }

    fn update(&self, uid: &str, f: impl FnOnce(&mut Learnt)) {
        if let Ok(mut m) = self.clusters.lock() {
            f(m.entry(uid.to_string()).or_default());
        }
    }

    /// Records a failure of a step at `now` and says whether it is time
    /// for a Warning: the steps have failed for [`WARN_AFTER`] without a
    /// success, and this message was not the last one said.
    fn failed(&self, uid: &str, message: &str, now: Instant) -> bool {
        let mut warn = false;
        self.update(uid, |l| {
            let since = *l.failing_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= WARN_AFTER
                && l.warned.as_deref() != Some(message)
            {
                warn = true;
                l.warned = Some(message.to_string());
            }
        });
        warn
    }

    /// Forgets the clusters whose UID is not in `live` (deleted ones; the
    /// sweep calls it with the UIDs of the Clusters the cache holds).
    pub(crate) fn retain(&self, live: &std::collections::BTreeSet<String>) {
        if let Ok(mut m) = self.clusters.lock() {
            m.retain(|uid, _| live.contains(uid));
        }
    }
}

/// What the next step of a cluster with authentication is, given the step
/// decide chose: `None` to go on with it, or the action that replaces it
/// (a refusal, or a wait before a decommission).
pub(crate) async fn ensure_authentication(
    cluster: &ValidCluster<'_>,
    namespace: &str,
    observed: &Observed,
    action: &Action,
    ctx: &Context,
) -> Result<Option<Action>, Error> {
    let Some(security) = cluster.spec.security.as_ref() else {
        return Ok(None);
    };
    if !security.authentication_enabled() {
        return Ok(None);
    }
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let leaving = match action {
        Action::RequestDecommission { rack, member, .. } => Some((rack.clone(), *member)),
        _ => None,
    };
    let settled = ctx.authentication.get(&uid).superuser_settled;
    let members: i32 = cluster
        .spec
        .datacenter
        .racks
        .iter()
        .map(|r| r.members)
        .sum();
    let wanted = auth::system_auth_replicas(members);
    let recorded = cluster
        .annotations()
        .get(auth::SYSTEM_AUTH_REPLICATION)
        .and_then(|v| v.parse::<i32>().ok());
    // Once settled, only a decommission, or a settled ring whose system
    // keyspaces are not recorded at its replicas, needs the database.
    let converged = matches!(action, Action::Converged) && recorded != Some(wanted);
    // (A settled superuser logged in with the Secret: no need to read it
    // again on every reconcile.)
    if settled && !converged && leaving.is_none() {
        return Ok(None);
    }
    let named = security
        .authentication
        .as_ref()
        .and_then(|a| a.superuser_secret_name.as_deref());
    let credentials = match superuser_secret(cluster, namespace, named, ctx).await? {
        Ok(credentials) => credentials,
        Err(detail) => {
            return Ok(Some(Action::Refuse(Refusal::SuperuserSecretUnusable {
                detail,
            })));
        }
    };
    let contact = contact_points(observed);
    if contact.is_empty() {
        // No member answers CQL yet: the first one creates the default
        // superuser when it starts.
        return Ok(None);
    }
    let ca = client_ca(cluster, ctx);
    let session = match superuser_session(cluster, &credentials, &contact, ca.as_deref(), ctx).await
    {
        Ok(session) => session,
        Err(why) => {
            warn_once(cluster, ctx, &uid, "SuperuserUnavailable", why.clone()).await;
            return Ok(leaving.map(|(rack, member)| {
                Action::Wait(WaitReason::AuthReplicationBeforeDecommission {
                    rack,
                    member,
                    detail: why,
                })
            }));
        }
    };
    let datacenter = &cluster.spec.datacenter.name;
    if let Some((rack, member)) = leaving {
        // The members that remain: the StatefulSets' replicas, less the
        // one that leaves.
        let remaining: i32 = observed
            .racks
            .values()
            .map(|r| r.replicas.unwrap_or(0))
            .sum::<i32>()
            - 1;
        let wanted = auth::system_auth_replicas(remaining);
        return Ok(
            match lower_replication(&session, datacenter, wanted).await {
                Ok(lowered) if lowered.is_empty() => None,
                Ok(lowered) => {
                    let from: Vec<String> = lowered
                        .iter()
                        .map(|(keyspace, now)| format!("{keyspace} (was {now})"))
                        .collect();
                    let from = from.join(", ");
                    info!(cluster = %cluster.name_any(), lowered = %from, to = wanted, "system keyspaces lowered before a decommission");
                    publish(
                        ctx,
                        cluster,
                        EventType::Normal,
                        "SystemAuthReplicationLowered",
                        "Decommission",
                        format!("{from} lowered to {wanted} replicas in datacenter {datacenter} before member {member} of rack {rack} leaves: Cassandra refuses a decommission that leaves a keyspace as many replicas as nodes"),
                        None,
                    )
                    .await;
                    None
                }
                Err(e) => Some(Action::Wait(
                    WaitReason::AuthReplicationBeforeDecommission {
                        rack,
                        member,
                        detail: e.to_string(),
                    },
                )),
            },
        );
    }
    if !converged {
        ctx.authentication.succeeded(&uid);
    } else if let Err(e) = raise_replication(cluster, &session, wanted, ctx).await {
        warn_once(
            cluster,
            ctx,
            &uid,
            "SystemAuthReplicationFailed",
            format!(
                "keeping system_auth at {wanted} replicas in datacenter {datacenter} failed: {e}"
            ),
        )
        .await;
    } else {
        ctx.authentication.succeeded(&uid);
    }
    Ok(None)
}

/// The Pod IPs of the ready members, at the CQL port.
fn contact_points(observed: &Observed) -> Vec<SocketAddr> {
    observed
        .racks
        .values()
        .flat_map(|r| r.members.values())
        .filter(|m| m.pod_ready)
        .filter_map(|m| m.pod_ip.as_deref()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, crds::contract::CQL_PORT))
        .collect()
}

/// The CA members' client certificates chain to, when clients speak TLS.
fn client_ca(cluster: &Cluster, ctx: &Context) -> Option<Vec<u8>> {
    let security = cluster.spec.security.as_ref()?;
    if security.tls.client == ClientEncryption::None {
        return None;
    }
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let secret = ctx
        .secrets
        .get(&ObjectRef::new(&tls::ca_secret_name(&uid)).within(&ctx.tls.operator_namespace))?;
    crate::authority::authority_of(&secret)
        .ok()
        .map(|a| a.cert_pem.into_bytes())
}

/// The superuser's credentials from its Secret, made with a random
/// password when it does not exist (never overwritten). `Err`: why they
/// cannot be had, lasting (RBAC, a Secret without its keys).
async fn superuser_secret(
    cluster: &Cluster,
    namespace: &str,
    named: Option<&str>,
    ctx: &Context,
) -> Result<Result<Credentials, String>, Error> {
    let name = auth::superuser_secret_name(&cluster.name_any(), named);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let got = match api.get_opt(&name).await {
        Ok(got) => got,
        Err(e) if lasting(&e) => {
            return Ok(Err(format!(
                "reading Secret {namespace}/{name} failed: {e}"
            )));
        }
        Err(source) => {
            return Err(Error::GetObject {
                kind: "Secret",
                name,
                source,
            });
        }
    };
    let secret = match got {
        Some(secret) => secret,
        None => {
            let made = new_superuser_secret(cluster, &name);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PostParams::default()
            };
            match api.create(&params, &made).await {
                Ok(created) => {
                    info!(cluster = %cluster.name_any(), secret = %name, "superuser Secret made");
                    publish(
                        ctx,
                        cluster,
                        EventType::Normal,
                        "SuperuserSecretCreated",
                        "Authentication",
                        format!("Secret {name} holds the superuser the operator creates, with a random password"),
                        None,
                    )
                    .await;
                    created
                }
                // Made meanwhile (by the user, or a controller before a
                // crash): read it next time.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    return Ok(Err(format!(
                        "Secret {namespace}/{name} appeared while it was made; read again at the next reconcile"
                    )));
                }
                Err(e) if lasting(&e) => {
                    return Ok(Err(format!(
                        "creating Secret {namespace}/{name} failed: {e}"
                    )));
                }
                Err(source) => {
                    return Err(Error::CreateObject {
                        kind: "Secret",
                        name,
                        source,
                    });
                }
            }
        }
    };
    Ok(credentials_of(&secret).map_err(|why| {
        format!(
            "Secret {namespace}/{name} {why}: it needs the keys {} and {} (type {})",
            auth::USERNAME_KEY,
            auth::PASSWORD_KEY,
            auth::SECRET_TYPE
        )
    }))
}

/// The credentials a Secret holds, or what it lacks.
fn credentials_of(secret: &Secret) -> Result<Credentials, String> {
    let field = |key: &str| -> Result<String, String> {
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8(b.0.clone()))
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|s| Ok(s.clone()))
            })
            .ok_or_else(|| format!("has no {key}"))?
            .map_err(|_| format!("has a {key} that is not UTF-8"))?;
        if value.is_empty() {
            return Err(format!("has an empty {key}"));
        }
        Ok(value)
    };
    Ok(Credentials {
        username: field(auth::USERNAME_KEY)?,
        password: field(auth::PASSWORD_KEY)?,
    })
}

/// The Secret the controller makes: a role named after the cluster, a
/// random password, the cluster's labels and no owner: it outlives the
/// Cluster, as its data volumes may, so that a Cluster made again over them
/// logs in with the role those volumes hold (and the operator needs no
/// `delete` on Secrets, which an owner reference would take where
/// OwnerReferencesPermissionEnforcement is on).
fn new_superuser_secret(cluster: &Cluster, name: &str) -> Secret {
    let mut data = BTreeMap::new();
    data.insert(
        auth::USERNAME_KEY.to_string(),
        ByteString(auth::superuser_role(&cluster.name_any()).into_bytes()),
    );
    data.insert(
        auth::PASSWORD_KEY.to_string(),
        ByteString(random_password().into_bytes()),
    );
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: cluster.namespace(),
            labels: Some(crate::resources::outside_labels(cluster)),
            ..Default::default()
        },
        type_: Some(auth::SECRET_TYPE.to_string()),
        data: Some(data),
        ..Default::default()
    }
}

/// [`auth::PASSWORD_LENGTH`] letters and digits from the system's random
/// source (ring's, the one the binary's TLS uses).
fn random_password() -> String {
    use ring::rand::{SecureRandom, SystemRandom};
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let rng = SystemRandom::new();
    let mut out = String::with_capacity(auth::PASSWORD_LENGTH);
    while out.len() < auth::PASSWORD_LENGTH {
        let mut byte = [0u8; 1];
        if rng.fill(&mut byte).is_err() {
            continue;
        }
        // 248 = 4 × 62: no bias towards the first letters.
        if byte[0] < 248 {
            out.push(ALPHABET[usize::from(byte[0]) % ALPHABET.len()] as char);
        }
    }
    out
}

/// A session as the Secret's superuser: its role made first through the
/// default superuser when the database does not know it yet, the default
/// superuser disabled once it does. `Err`: what stood in the way, for the
/// log and a Warning.
async fn superuser_session(
    cluster: &Cluster,
    credentials: &Credentials,
    contact: &[SocketAddr],
    ca: Option<&[u8]>,
    ctx: &Context,
) -> Result<Session, String> {
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let session = match cql::connect(contact, credentials, ca, CQL_TIMEOUT).await {
        Ok(session) => session,
        Err(CqlError::BadCredentials(refused)) => {
            create_superuser(cluster, credentials, contact, ca, ctx, &refused).await?;
            cql::connect(contact, credentials, ca, CQL_TIMEOUT)
                .await
                .map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    if !ctx.authentication.get(&uid).superuser_settled {
        if credentials.username != auth::DEFAULT_ROLE {
            disable_default_superuser(cluster, &session, ctx).await?;
        }
        ctx.authentication
            .update(&uid, |l| l.superuser_settled = true);
    }
    Ok(session)
}

/// Creates the Secret's role as the default superuser (only a new ring
/// still has it).
async fn create_superuser(
    cluster: &Cluster,
    credentials: &Credentials,
    contact: &[SocketAddr],
    ca: Option<&[u8]>,
    ctx: &Context,
    refused: &str,
) -> Result<(), String> {
    let default = Credentials {
        username: auth::DEFAULT_ROLE.to_string(),
        password: auth::DEFAULT_PASSWORD.to_string(),
    };
    let session = match cql::connect(contact, &default, ca, CQL_TIMEOUT).await {
        Ok(session) => session,
        Err(CqlError::BadCredentials(_)) => {
            return Err(format!(
                "the superuser {:?} of the Secret cannot log in ({refused}), and the default superuser cannot either, to create it: a new ring creates the default superuser about 10 s after its first member starts; otherwise the Secret's password is not the role's (set it back, or ALTER ROLE to it)",
                credentials.username
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    session
        .create_superuser(&credentials.username, &credentials.password)
        .await
        .map_err(|e| e.to_string())?;
    info!(cluster = %cluster.name_any(), role = %credentials.username, "superuser created");
    publish(
        ctx,
        cluster,
        EventType::Normal,
        "SuperuserCreated",
        "Authentication",
        format!(
            "created the superuser {:?} of the Secret, as the default superuser",
            credentials.username
        ),
        None,
    )
    .await;
    Ok(())
}

/// Takes superuser and login away from the default superuser (the
/// session's is another role).
async fn disable_default_superuser(
    cluster: &Cluster,
    session: &Session,
    ctx: &Context,
) -> Result<(), String> {
    let role = session
        .role(auth::DEFAULT_ROLE)
        .await
        .map_err(|e| e.to_string())?;
    let Some(role) = role else { return Ok(()) };
    if !role.can_login && !role.is_superuser {
        return Ok(());
    }
    session
        .disable_role(auth::DEFAULT_ROLE)
        .await
        .map_err(|e| e.to_string())?;
    info!(cluster = %cluster.name_any(), "default superuser disabled");
    publish(
        ctx,
        cluster,
        EventType::Normal,
        "DefaultSuperuserDisabled",
        "Authentication",
        format!(
            "the default superuser {:?} can no longer log in nor act as superuser",
            auth::DEFAULT_ROLE
        ),
        None,
    )
    .await;
    Ok(())
}

/// What `keyspace`'s replication says of `datacenter` now.
async fn replicas_in(
    session: &Session,
    keyspace: &str,
    datacenter: &str,
) -> Result<Replicas, CqlError> {
    let replication = session.replication(keyspace).await?;
    if replication.is_empty() {
        return Ok(Replicas::NoKeyspace);
    }
    let nts = replication
        .get("class")
        .is_some_and(|c| c.ends_with("NetworkTopologyStrategy"));
    Ok(
        match replication.get(datacenter).and_then(|v| v.parse().ok()) {
            Some(n) if nts => Replicas::InDatacenter(n),
            _ => Replicas::NotPerDatacenter,
        },
    )
}

/// What a keyspace's replication says of the cluster's datacenter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replicas {
    /// The keyspace does not exist (ScyllaDB may lack one).
    NoKeyspace,
    /// Not NetworkTopologyStrategy with a factor for the datacenter.
    NotPerDatacenter,
    InDatacenter(i32),
}

impl std::fmt::Display for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replicas::NoKeyspace => f.write_str("no keyspace"),
            Replicas::NotPerDatacenter => f.write_str("not set per datacenter"),
            Replicas::InDatacenter(n) => write!(f, "{n}"),
        }
    }
}

/// Lowers each keyspace of [`auth::REPLICATED_SYSTEM_KEYSPACES`] to
/// `wanted` replicas in the datacenter where it has more (or is not set
/// per datacenter): what was lowered, from what.
async fn lower_replication(
    session: &Session,
    datacenter: &str,
    wanted: i32,
) -> Result<Vec<(&'static str, Replicas)>, CqlError> {
    let mut lowered = Vec::new();
    for keyspace in auth::REPLICATED_SYSTEM_KEYSPACES {
        match replicas_in(session, keyspace, datacenter).await? {
            Replicas::NoKeyspace => {}
            Replicas::InDatacenter(now) if now <= wanted => {}
            now => {
                session
                    .set_datacenter_replicas(keyspace, datacenter, wanted)
                    .await?;
                lowered.push((keyspace, now));
            }
        }
    }
    Ok(lowered)
}

/// Sets each keyspace of [`auth::REPLICATED_SYSTEM_KEYSPACES`] to `wanted`
/// replicas in the datacenter, then reads every row of `system_auth` at
/// consistency ALL (a blocking read repair puts each row on the replicas
/// that lack it: a role missing from a replica would fail its logins),
/// then records `wanted` on the Cluster. Nothing to do when the record
/// says `wanted` already (the caller's test).
async fn raise_replication(
    cluster: &Cluster,
    session: &Session,
    wanted: i32,
    ctx: &Context,
) -> Result<(), String> {
    let datacenter = &cluster.spec.datacenter.name;
    let mut changed = Vec::new();
    for keyspace in auth::REPLICATED_SYSTEM_KEYSPACES {
        let now = replicas_in(session, keyspace, datacenter)
            .await
            .map_err(|e| e.to_string())?;
        let differs = match now {
            Replicas::NoKeyspace => false,
            Replicas::NotPerDatacenter => true,
            Replicas::InDatacenter(n) => n != wanted,
        };
        if differs {
            session
                .set_datacenter_replicas(keyspace, datacenter, wanted)
                .await
                .map_err(|e| e.to_string())?;
            changed.push(format!("{keyspace} (was {now})"));
        }
    }
    let rows = session
        .read_all_at_consistency_all(auth::SYSTEM_AUTH)
        .await
        .map_err(|e| e.to_string())?;
    let api: Api<Cluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"annotations": {
        auth::SYSTEM_AUTH_REPLICATION: wanted.to_string(),
    }}});
    api.patch(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| format!("recording it on the Cluster failed: {e}"))?;
    info!(cluster = %cluster.name_any(), replicas = wanted, rows, changed = ?changed, "system keyspaces replicated, system_auth read at ALL");
    if changed.is_empty() {
        debug!(cluster = %cluster.name_any(), rows, "system_auth rows read at ALL again");
    } else {
        publish(
            ctx,
            cluster,
            EventType::Normal,
            "SystemAuthReplicationChanged",
            "Authentication",
            format!(
                "{} now have {wanted} replicas in datacenter {datacenter}; the {rows} rows of system_auth were read at consistency ALL, which copied them to every replica",
                changed.join(", ")
            ),
            None,
        )
        .await;
    }
    Ok(())
}

/// A Warning Event once a step has failed for [`WARN_AFTER`], once per
/// distinct message per cluster (the log has every occurrence).
async fn warn_once(cluster: &Cluster, ctx: &Context, uid: &str, reason: &str, message: String) {
    warn!(cluster = %cluster.name_any(), reason, "{message}");
    if ctx.authentication.failed(uid, &message, Instant::now()) {
        publish(
            ctx,
            cluster,
            EventType::Warning,
            reason,
            "Authentication",
            message,
            None,
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_comes_after_a_minute_of_failures_once_per_message() {
        let memory = Memory::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(memory.get("u").failing_since.is_none());
        // A new ring's first logins fail for about 10 s: no Warning.
        assert!(!memory.failed("u", "refused", at(0)));
        assert!(!memory.failed("u", "refused", at(59)));
        assert!(memory.pending("u"));
        // A minute of failures: one Warning, not repeated.
        assert!(memory.failed("u", "refused", at(60)));
        assert!(!memory.failed("u", "refused", at(90)));
        // Another reason: said too.
        assert!(memory.failed("u", "timed out", at(91)));
        // Another cluster has its own clock.
        assert!(!memory.failed("v", "refused", at(91)));
        // A success starts over: the same message waits a minute again.
        memory.succeeded("u");
        assert!(!memory.failed("u", "refused", at(100)));
        assert!(!memory.failed("u", "refused", at(159)));
        assert!(memory.failed("u", "refused", at(160)));
    }

    #[test]
    fn deleted_clusters_are_forgotten() {
        let memory = Memory::default();
        memory.update("kept", |l| l.superuser_settled = true);
        memory.update("gone", |l| l.superuser_settled = true);
        memory.retain(&["kept".to_string()].into());
        assert!(memory.get("kept").superuser_settled);
        assert!(!memory.get("gone").superuser_settled);
        assert_eq!(memory.clusters.lock().unwrap().len(), 1);
    }

    fn secret(data: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_secret_gives_its_credentials_or_says_what_it_lacks() {
        let c = credentials_of(&secret(&[("username", "app"), ("password", "pw")])).unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("app", "pw"));
        assert_eq!(
            credentials_of(&secret(&[("username", "app")])).unwrap_err(),
            "has no password"
        );
        assert_eq!(
            credentials_of(&secret(&[("username", ""), ("password", "pw")])).unwrap_err(),
            "has an empty username"
        );
    }

    #[test]
    fn passwords_are_long_random_and_alphanumeric() {
        let (a, b) = (random_password(), random_password());
        assert_eq!(a.len(), auth::PASSWORD_LENGTH);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
    }
}
