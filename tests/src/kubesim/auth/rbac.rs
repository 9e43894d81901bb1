//! RBAC as the API server's authorizer evaluates it
//! (plugin/pkg/auth/authorizer/rbac): ClusterRoleBindings grant their
//! ClusterRole everywhere, RoleBindings grant their Role or ClusterRole in
//! their namespace; a rule matches by verb, API group, resource (with
//! `resource/subresource` and `*/subresource`), resource names and, for
//! ClusterRoles bound cluster-wide, non-resource URLs (`/apis/*`).
//! ClusterRoles with an `aggregationRule` take the rules of the
//! ClusterRoles their selectors match. Nothing is denied explicitly:
//! what no rule allows is forbidden, with the API server's message.
//! Pure (the policy is read from the store by [`Policy::from_store`]).

use super::authn::UserInfo;
use crate::kubesim::store::{ApiError, Store, Target};
use serde_json::{Value, json};

/// What a request asks to do (the API server's authorizer.Attributes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    pub verb: String,
    /// Resource requests: the object's namespace ("" cluster-wide).
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Non-resource requests: the URL path.
    pub path: String,
    pub resource_request: bool,
}

impl Attributes {
    /// A resource request.
    pub fn resource(verb: &str, group: &str, resource: &str, namespace: &str) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            verb: verb.into(),
            namespace: namespace.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            resource_request: true,
            ..Default::default()
        }
    }

    /// The same request on one object.
    pub fn named(mut self, name: &str) -> Attributes {
        self.name = name.into();
        self
    }

    /// A non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    /// `resource/subresource`, as rules name it.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The RBAC objects in force.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub cluster_roles: Vec<std::sync::Arc<Value>>,
    pub cluster_role_bindings: Vec<std::sync::Arc<Value>>,
    /// Roles and RoleBindings of every namespace.
    pub roles: Vec<std::sync::Arc<Value>>,
    pub role_bindings: Vec<std::sync::Arc<Value>>,
    /// The bindings by the subjects they name, built on first use: every
    /// request asks for its user's bindings, and a thousand clusters hold a
    /// thousand RoleBindings in one namespace.
    subjects: std::sync::OnceLock<Subjects>,
}

/// Bindings by subject: (whether a RoleBinding, index in its list), in
/// list order, ClusterRoleBindings first (the authorizer's order).
#[derive(Debug, Clone, Default)]
struct Subjects {
    /// By user name (Users, and ServiceAccounts as their user names).
    users: std::collections::HashMap<String, Vec<(bool, usize)>>,
    groups: std::collections::HashMap<String, Vec<(bool, usize)>>,
}

impl Subjects {
    fn of(policy: &Policy) -> Subjects {
        let mut out = Subjects::default();
        let bindings = (policy.cluster_role_bindings.iter().enumerate())
            .map(|(i, b)| ((false, i), b, ""))
            .chain(
                policy
                    .role_bindings
                    .iter()
                    .enumerate()
                    .map(|(i, b)| ((true, i), b, meta(b, "namespace"))),
            );
        for (at, binding, namespace) in bindings {
            for s in binding["subjects"].as_array().into_iter().flatten() {
                let name = s["name"].as_str().unwrap_or_default();
                let (map, key) = match s["kind"].as_str() {
                    Some("User") => (&mut out.users, name.to_string()),
                    Some("Group") => (&mut out.groups, name.to_string()),
                    // A ServiceAccount subject without a namespace is
                    // the binding's.
                    Some("ServiceAccount") => {
                        let ns = s["namespace"]
                            .as_str()
                            .filter(|n| !n.is_empty())
                            .unwrap_or(namespace);
                        (&mut out.users, format!("system:serviceaccount:{ns}:{name}"))
                    }
                    _ => continue,
                };
                map.entry(key).or_default().push(at);
            }
        }
        out
    }

    /// The bindings naming the user or one of its groups, in order.
    fn of_user(&self, user: &UserInfo) -> Vec<(bool, usize)> {
        let mut hits: Vec<(bool, usize)> = (self.users.get(&user.name).into_iter().flatten())
            .chain(
                user.groups
                    .iter()
                    .filter_map(|g| self.groups.get(g))
                    .flatten(),
            )
            .copied()
            .collect();
        hits.sort_unstable();
        hits.dedup();
        hits
    }
}

/// The policy, read again from the store only after an RBAC object
/// changed: the authorizer asks on every request, and reading every role
/// and binding each time was most of kubesim's CPU under a thousand
/// clusters.
#[derive(Debug, Default)]
pub struct PolicyCache(std::sync::Mutex<Option<(u64, std::sync::Arc<Policy>)>>);

impl PolicyCache {
    /// The policy stored now.
    pub fn current(&self, store: &Store) -> std::sync::Arc<Policy> {
        // Read before the policy: a change in between makes the next call
        // read it again, never keeps a stale one.
        let rev = store.group_revision("rbac.authorization.k8s.io");
        let mut cached = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, policy)) = cached.as_ref()
            && *at == rev
        {
            return policy.clone();
        }
        let policy = std::sync::Arc::new(Policy::from_store(store));
        *cached = Some((rev, policy.clone()));
        policy
    }
}

/// The stored objects of a kind, shared with the store (not copied).
fn items(store: &Store, plural: &str) -> Vec<std::sync::Arc<Value>> {
    let t = Target::new("rbac.authorization.k8s.io", "v1", plural, None);
    store.objects(&t).unwrap_or_default()
}

fn strs(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn meta<'a>(o: &'a Value, field: &str) -> &'a str {
    o["metadata"][field].as_str().unwrap_or_default()
}

impl Policy {
    /// The policy stored now.
    pub fn from_store(store: &Store) -> Policy {
        Policy {
            cluster_roles: items(store, "clusterroles"),
            cluster_role_bindings: items(store, "clusterrolebindings"),
            roles: items(store, "roles"),
            role_bindings: items(store, "rolebindings"),
            subjects: Default::default(),
        }
    }

    fn cluster_role(&self, name: &str) -> Option<&Value> {
        self.cluster_roles
            .iter()
            .find(|r| meta(r, "name") == name)
            .map(|r| &**r)
    }

    /// A ClusterRole's rules, with those of the ClusterRoles its
    /// aggregation rule selects.
    fn cluster_role_rules(&self, role: &Value) -> Vec<Value> {
        let mut rules: Vec<Value> = role["rules"].as_array().cloned().unwrap_or_default();
        for sel in role["aggregationRule"]["clusterRoleSelectors"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let Some(want) = sel["matchLabels"].as_object() else {
                continue;
            };
            for other in &self.cluster_roles {
                let labels = &other["metadata"]["labels"];
                if meta(other, "name") != meta(role, "name")
                    && want.iter().all(|(k, v)| &labels[k] == v)
                {
                    rules.extend(other["rules"].as_array().cloned().unwrap_or_default());
                }
            }
        }
        rules
    }

    fn role_ref_rules(&self, binding: &Value) -> Vec<Value> {
        let r = &binding["roleRef"];
        let name = r["name"].as_str().unwrap_or_default();
        match r["kind"].as_str() {
            Some("ClusterRole") => self
                .cluster_role(name)
                .map(|c| self.cluster_role_rules(c))
                .unwrap_or_default(),
            Some("Role") => self
                .roles
                .iter()
                .find(|x| {
                    meta(x, "name") == name && meta(x, "namespace") == meta(binding, "namespace")
                })
                .and_then(|x| x["rules"].as_array().cloned())
                .unwrap_or_default(),
            _ => vec![],
        }
    }

    /// The rules that apply to `user` in `namespace` ("": cluster-wide
    /// only), in the order the authorizer visits them.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let subjects = self.subjects.get_or_init(|| Subjects::of(self));
        for (role_binding, i) in subjects.of_user(user) {
            if !role_binding {
                out.extend(self.role_ref_rules(&self.cluster_role_bindings[i]));
                continue;
            }
            let b = &self.role_bindings[i];
            if !namespace.is_empty() && meta(b, "namespace") == namespace {
                // Non-resource rules mean nothing in a namespace.
                out.extend(
                    self.role_ref_rules(b)
                        .into_iter()
                        .filter(|r| r["nonResourceURLs"].as_array().is_none_or(Vec::is_empty)),
                );
            }
        }
        out
    }

    /// Whether some rule allows the request.
    pub fn allows(&self, user: &UserInfo, a: &Attributes) -> bool {
        let ns = if a.resource_request { &a.namespace } else { "" };
        self.rules_for(user, ns).iter().any(|r| rule_allows(r, a))
    }
}

/// Whether one PolicyRule allows the request.
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strs(&rule["verbs"]).any(|v| v == "*" || v == a.verb);
    if !verbs {
        return false;
    }
    if !a.resource_request {
        return strs(&rule["nonResourceURLs"]).any(|u| {
            u == "*" || u == a.path || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
        });
    }
    let groups = strs(&rule["apiGroups"]).any(|g| g == "*" || g == a.api_group);
    let combined = a.combined_resource();
    let resources = strs(&rule["resources"]).any(|r| {
        r == "*"
            || r == combined
            || (!a.subresource.is_empty() && r.strip_prefix("*/") == Some(a.subresource.as_str()))
    });
    let names = rule["resourceNames"].as_array().is_none_or(Vec::is_empty)
        || strs(&rule["resourceNames"]).any(|n| n == a.name);
    groups && resources && names
}

/// The permissions of `rules` that `holds` does not allow, as the API
/// server's escalation check lists them (each rule's group, resource,
/// verb and resource name in turn, in `namespace`).
pub fn not_held(
    rules: &[Value],
    namespace: &str,
    holds: impl Fn(&Attributes) -> bool,
) -> Vec<String> {
    let mut missing = Vec::new();
    for rule in rules {
        let names: Vec<&str> = strs(&rule["resourceNames"]).collect();
        let names = if names.is_empty() { vec![""] } else { names };
        if let Some(urls) = rule["nonResourceURLs"].as_array().filter(|u| !u.is_empty()) {
            for u in urls.iter().filter_map(Value::as_str) {
                for v in strs(&rule["verbs"]) {
                    if !holds(&Attributes::non_resource(v, u)) {
                        missing.push(format!("{{NonResourceURLs:[{u:?}], Verbs:[{v:?}]}}"));
                    }
                }
            }
            continue;
        }
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                for v in strs(&rule["verbs"]) {
                    for n in &names {
                        if !holds(&Attributes::resource(v, g, r, namespace).named(n)) {
                            let name = if n.is_empty() {
                                String::new()
                            } else {
                                format!(", ResourceNames:[{n:?}]")
                            };
                            missing.push(format!(
                                "{{APIGroups:[{g:?}], Resources:[{r:?}]{name}, Verbs:[{v:?}]}}"
                            ));
                        }
                    }
                }
            }
        }
    }
    missing
}

/// The API server's 403 for a Role (or binding) that would grant what its
/// writer does not hold.
pub fn escalation(user: &UserInfo, resource: &str, name: &str, missing: &[String]) -> ApiError {
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!(
            "{resource}.rbac.authorization.k8s.io {name:?} is forbidden: user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            groups.join(" "),
            missing.join("\n")
        ),
        details: Some(
            json!({"name": name, "group": "rbac.authorization.k8s.io", "kind": resource}),
        ),
    }
}

/// The API server's 403 for a request no rule allows.
pub fn forbidden(user: &UserInfo, a: &Attributes) -> ApiError {
    let why = if !a.resource_request {
        format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path)
    } else if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            user.name,
            a.verb,
            a.combined_resource(),
            a.api_group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            user.name,
            a.verb,
            a.combined_resource(),
            a.api_group,
            a.namespace
        )
    };
    let qualified = match (a.resource.as_str(), a.api_group.as_str()) {
        ("", _) => String::new(),
        (r, "") => r.to_string(),
        (r, g) => format!("{r}.{g}"),
    };
    let message = if qualified.is_empty() {
        format!("forbidden: {why}")
    } else if a.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", a.name)
    };
    let mut details = json!({"kind": a.resource});
    if !a.name.is_empty() {
        details["name"] = json!(a.name);
    }
    if !a.api_group.is_empty() {
        details["group"] = json!(a.api_group);
    }
    ApiError {
        code: 403,
        reason: "Forbidden",
        message,
        details: Some(details),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(ns: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("system:serviceaccount:{ns}:{name}"),
            groups: super::super::authn::service_account_groups(ns),
            ..Default::default()
        }
    }

    fn shared(objects: Vec<Value>) -> Vec<std::sync::Arc<Value>> {
        objects.into_iter().map(std::sync::Arc::new).collect()
    }

    fn policy() -> Policy {
        Policy {
            cluster_roles: shared(vec![
                json!({"metadata": {"name": "reader"}, "rules": [
                    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
                    {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["patch"]},
                ]}),
                json!({"metadata": {"name": "disco"}, "rules": [
                    {"nonResourceURLs": ["/api", "/apis/*"], "verbs": ["get"]},
                ]}),
                json!({"metadata": {"name": "agg"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}),
                json!({"metadata": {"name": "part", "labels": {"x": "y"}}, "rules": [
                    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]},
                ]}),
            ]),
            cluster_role_bindings: shared(vec![json!({"metadata": {"name": "d"},
                "roleRef": {"kind": "ClusterRole", "name": "disco"},
                "subjects": [{"kind": "Group", "name": "system:authenticated"}]})]),
            roles: shared(vec![
                json!({"metadata": {"name": "m", "namespace": "ns"}, "rules": [
                    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "patch"], "resourceNames": ["c-0"]},
                ]}),
            ]),
            role_bindings: shared(vec![
                json!({"metadata": {"name": "m", "namespace": "ns"},
                    "roleRef": {"kind": "Role", "name": "m"},
                    "subjects": [{"kind": "ServiceAccount", "name": "member"}]}),
                json!({"metadata": {"name": "r", "namespace": "ns"},
                    "roleRef": {"kind": "ClusterRole", "name": "reader"},
                    "subjects": [{"kind": "ServiceAccount", "name": "member", "namespace": "ns"}]}),
                json!({"metadata": {"name": "a", "namespace": "other"},
                    "roleRef": {"kind": "ClusterRole", "name": "agg"},
                    "subjects": [{"kind": "User", "name": "alice"}]}),
            ]),
            subjects: Default::default(),
        }
    }

    #[test]
    fn bindings_grant_their_rules_where_they_apply() {
        let p = policy();
        let m = sa("ns", "member");
        let r = |verb, res, ns| Attributes::resource(verb, "", res, ns);
        assert!(p.allows(&m, &r("get", "pods", "ns")));
        assert!(p.allows(&m, &r("list", "pods", "ns")));
        assert!(p.allows(&m, &r("get", "pods/log", "ns")));
        assert!(!p.allows(&m, &r("watch", "pods", "ns")), "verbs are exact");
        assert!(
            !p.allows(&m, &r("get", "pods/exec", "ns")),
            "subresources are named"
        );
        assert!(
            !p.allows(&m, &r("get", "pods", "other")),
            "RoleBindings are namespaced"
        );
        assert!(!p.allows(&m, &r("get", "pods", "")), "not cluster-wide");
        // resourceNames: only that object, and never a list or create.
        assert!(p.allows(&m, &r("patch", "services", "ns").named("c-0")));
        assert!(!p.allows(&m, &r("patch", "services", "ns").named("c-1")));
        assert!(!p.allows(&m, &r("patch", "services", "ns")));
        // */subresource
        let scale = Attributes::resource("patch", "apps", "statefulsets/scale", "ns").named("s");
        assert!(p.allows(&m, &scale));
        let main = Attributes::resource("patch", "apps", "statefulsets", "ns").named("s");
        assert!(!p.allows(&m, &main));
        // Another namespace's ServiceAccount of the same name is someone else.
        assert!(!p.allows(&sa("other", "member"), &r("get", "pods", "ns")));
        // Non-resource URLs, with a trailing wildcard.
        assert!(p.allows(&m, &Attributes::non_resource("get", "/api")));
        assert!(p.allows(&m, &Attributes::non_resource("get", "/apis/apps/v1")));
        assert!(!p.allows(&m, &Attributes::non_resource("get", "/metrics")));
        assert!(!p.allows(&m, &Attributes::non_resource("post", "/api")));
        // Aggregated ClusterRoles.
        let alice = UserInfo {
            name: "alice".into(),
            ..Default::default()
        };
        let job = Attributes::resource("delete", "batch", "jobs", "other").named("j");
        assert!(p.allows(&alice, &job));
    }

    #[test]
    fn forbidden_messages_are_the_api_servers() {
        let m = sa("ns", "member");
        let e = forbidden(
            &m,
            &Attributes::resource("patch", "", "services", "ns").named("c-1"),
        );
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            r#"services "c-1" is forbidden: User "system:serviceaccount:ns:member" cannot patch resource "services" in API group "" in the namespace "ns""#
        );
        let e = forbidden(
            &m,
            &Attributes::resource("list", "apps", "statefulsets/scale", ""),
        );
        assert_eq!(
            e.message,
            r#"statefulsets.apps is forbidden: User "system:serviceaccount:ns:member" cannot list resource "statefulsets/scale" in API group "apps" at the cluster scope"#
        );
        let e = forbidden(&m, &Attributes::non_resource("get", "/metrics"));
        assert_eq!(
            e.message,
            r#"forbidden: User "system:serviceaccount:ns:member" cannot get path "/metrics""#
        );
    }

    #[test]
    fn the_cached_policy_follows_every_rbac_change_and_only_those() {
        use crate::kubesim::store::{DeleteOptions, StoreOptions, WriteOptions};
        let store = Store::new(StoreOptions::default());
        let cache = PolicyCache::default();
        let m = sa("default", "member");
        let get = Attributes::resource("get", "", "pods", "default").named("p");
        assert!(!cache.current(&store).allows(&m, &get));
        let rbac = |plural, ns| Target::new("rbac.authorization.k8s.io", "v1", plural, ns);
        let w = WriteOptions::default();
        store
            .create(
                &rbac("roles", Some("default")),
                json!({"metadata": {"name": "m", "namespace": "default"}, "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
                &w,
            )
            .unwrap();
        assert!(!cache.current(&store).allows(&m, &get), "no binding yet");
        store
            .create(
                &rbac("rolebindings", Some("default")),
                json!({"metadata": {"name": "m", "namespace": "default"},
                    "roleRef": {"kind": "Role", "name": "m"},
                    "subjects": [{"kind": "ServiceAccount", "name": "member"}]}),
                &w,
            )
            .unwrap();
        let bound = cache.current(&store);
        assert!(bound.allows(&m, &get));
        // Other groups' writes keep the policy read.
        store
            .create(
                &Target::new("", "v1", "configmaps", Some("default")),
                json!({"metadata": {"name": "c"}}),
                &w,
            )
            .unwrap();
        assert!(std::sync::Arc::ptr_eq(&bound, &cache.current(&store)));
        store
            .delete(
                &rbac("rolebindings", Some("default")),
                "m",
                &DeleteOptions::default(),
            )
            .unwrap();
        assert!(
            !cache.current(&store).allows(&m, &get),
            "the binding is gone"
        );
    }
}
