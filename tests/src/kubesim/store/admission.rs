//! The state behind the store: each kind's table and watch history, and
//! what the API server does around a write (namespaces, admission of
//! custom resources against their CRD, defaults and validation of
//! built-in kinds, and the special handling of CRDs, Pods, Services and
//! Namespaces after a write or a delete). No I/O.

use super::*;

impl Table {
    /// The objects as they were at resourceVersion `rv`, if the history
    /// reaches back that far.
    pub(super) fn snapshot(&self, rv: u64) -> Option<BTreeMap<ObjKey, Arc<Value>>> {
        if rv < self.window_start {
            return None;
        }
        let mut objects = self.objects.clone();
        for e in self.history.iter().rev().take_while(|e| e.rv > rv) {
            let k = (e.namespace().to_string(), name_of(&e.object).to_string());
            match (e.kind, &e.prev) {
                (EventType::Added, _) => {
                    objects.remove(&k);
                }
                (EventType::Modified, Some(prev)) => {
                    objects.insert(k, prev.clone());
                }
                (EventType::Deleted, _) => {
                    objects.insert(k, e.object.clone());
                }
                (EventType::Modified, None) => {}
            }
        }
        Some(objects)
    }
}

impl State {
    pub(in crate::kubesim) fn register(&mut self, rt: ResourceType) {
        if rt.stored_as.is_some() {
            self.aliases.push(Arc::new(rt));
            return;
        }
        let k = key(&rt);
        let rv = self.rv;
        match self.tables.get_mut(&k) {
            Some(t) => t.rt = Arc::new(rt),
            None => {
                self.tables.insert(
                    k,
                    Table {
                        rt: Arc::new(rt),
                        objects: BTreeMap::new(),
                        history: VecDeque::new(),
                        window_start: rv,
                        last_change: 0,
                    },
                );
            }
        }
    }

    pub(in crate::kubesim) fn resolve(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<Arc<ResourceType>, ApiError> {
        let served = |rt: &ResourceType| rt.versions.iter().any(|v| v == version);
        self.tables
            .get(&(group.to_string(), plural.to_string()))
            .filter(|t| served(&t.rt))
            .map(|t| t.rt.clone())
            .or_else(|| {
                self.aliases
                    .iter()
                    .find(|a| a.group == group && a.plural == plural && served(a))
                    .cloned()
            })
            .ok_or_else(ApiError::no_route)
    }

    pub(super) fn namespace_of(&self, rt: &ResourceType, t: &Target) -> Result<String, ApiError> {
        if !rt.namespaced {
            return Ok(String::new());
        }
        t.namespace.clone().ok_or_else(|| {
            ApiError::bad_request(
                "the server could not find the requested resource: a namespace is required",
            )
        })
    }

    /// Commits a change: bumps the resourceVersion, stores it, records it in
    /// the kind's history (evicting past the window) and notifies.
    pub(in crate::kubesim) fn commit(
        &mut self,
        rt: &ResourceType,
        kind: EventType,
        mut obj: Value,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let k = (
            meta_str(&obj, "namespace").unwrap_or_default().to_string(),
            name_of(&obj).to_string(),
        );
        let obj = Arc::new(obj);
        let window = self.window;
        let table = self
            .tables
            .get_mut(&key(rt))
            .expect("committing to a registered kind");
        let prev = match kind {
            EventType::Deleted => table.objects.remove(&k),
            _ => table.objects.insert(k, obj.clone()),
        };
        let (group, plural) = key(rt);
        let ev = Arc::new(Event {
            rv,
            kind,
            group,
            plural,
            object: obj.clone(),
            prev,
            at_us: crate::kubesim::now_us(),
        });
        table.last_change = rv;
        table.history.push_back(ev.clone());
        while table.history.len() > window {
            if let Some(old) = table.history.pop_front() {
                table.window_start = old.rv;
            }
        }
        // Nobody listening is fine.
        let _ = self.events.send(ev);
        obj
    }

    pub(super) fn check_namespace(
        &self,
        rt: &ResourceType,
        ns: &str,
        creating: bool,
    ) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        let nsrt = self.resolve("", "v1", "namespaces")?;
        match self.tables[&key(&nsrt)]
            .objects
            .get(&(String::new(), ns.to_string()))
        {
            None => Err(ApiError::not_found(&nsrt, ns)),
            Some(n) if creating && meta(n).get("deletionTimestamp").is_some() => Err(ApiError {
                details: Some(json!({"name": ns, "kind": "namespaces"})),
                ..ApiError::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    rt.qualified(),
                    "",
                ))
            }),
            Some(_) => Ok(()),
        }
    }

    /// Pod Security Admission: the level the Pod's namespace enforces.
    fn admit_pod_security(&self, ns: &str, pod: &Value) -> Result<(), ApiError> {
        let nsrt = self.resolve("", "v1", "namespaces")?;
        let Some(namespace) = self.tables[&key(&nsrt)]
            .objects
            .get(&(String::new(), ns.to_string()))
        else {
            return Ok(());
        };
        match super::pod_security::refusal(namespace, pod) {
            None => Ok(()),
            Some(message) => Err(ApiError {
                details: Some(json!({"name": name_of(pod), "kind": "pods"})),
                ..ApiError::forbidden(message)
            }),
        }
    }

    /// Checks a custom resource against its schema (pruning unknown fields
    /// and defaulting as the API server does).
    pub(super) fn admit_custom(
        &self,
        rt: &ResourceType,
        version: &str,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOptions,
    ) -> Result<(), ApiError> {
        let Some(schema) = rt.schemas.get(version) else {
            return Ok(());
        };
        let Some(o) = obj.as_object_mut() else {
            return Err(ApiError::bad_request("the body is not an object"));
        };
        let keep: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
            .iter()
            .filter_map(|k| o.remove(*k).map(|v| (k.to_string(), v)))
            .collect();
        let (pruned, errors) = crate::schema::admit(schema, obj);
        if let Some(o) = obj.as_object_mut() {
            for (k, v) in keep {
                o.insert(k, v);
            }
        }
        if opts.field_validation.as_deref() == Some("Strict") && !pruned.is_empty() {
            let unknown: Vec<String> = pruned
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "{} in version \"{version}\" cannot be handled as a {}: strict decoding error: {}",
                rt.kind,
                rt.kind,
                unknown.join(", ")
            )));
        }
        let mut causes: Vec<(String, &str, String)> = errors
            .iter()
            .map(|e| (e.field.clone(), e.reason.as_str(), e.message.clone()))
            .collect();
        if causes.is_empty() {
            // CEL rules run on a structurally valid object, as in the API server.
            let failed = match rt.compiled.get(version) {
                Some(compiled) => crate::cel::check_compiled(compiled, obj, old),
                None => crate::cel::check(schema, obj, old),
            };
            for e in failed {
                let field = e
                    .split_once(": ")
                    .map(|(f, _)| f.to_string())
                    .unwrap_or_default();
                causes.push((field, "FieldValueInvalid", e));
            }
        }
        if causes.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid(rt, name_of(obj), &causes))
    }

    /// The fields every write fixes: apiVersion, kind, namespace; strips
    /// what a Go round trip would.
    pub(super) fn prepare(
        &self,
        rt: &ResourceType,
        t: &Target,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        let want_av = rt.api_version(&t.version);
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
            && av != want_av
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            )));
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && k != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
        obj["apiVersion"] = json!(want_av);
        obj["kind"] = json!(rt.kind);
        if !rt.custom {
            // A ControllerRevision's data is a RawExtension: the API server
            // keeps its bytes as sent (nulls and all).
            let raw = (rt.plural == "controllerrevisions")
                .then(|| obj.as_object_mut().and_then(|o| o.remove("data")))
                .flatten();
            normalize_builtin(obj);
            if let Some(raw) = raw {
                obj["data"] = raw;
            }
            let (group, plural) = key(rt);
            defaults::apply(&group, &plural, obj);
        }
        let url_ns = self.namespace_of(rt, t)?;
        let m = meta_mut(obj);
        if rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), json!(url_ns));
                }
            }
        } else {
            m.remove("namespace");
        }
        strip_empty_meta(obj);
        if rt.stored_as.is_some() {
            *obj = convert::event_to_core(obj);
        }
        Ok(())
    }

    pub(in crate::kubesim) fn create(
        &mut self,
        rt: &ResourceType,
        t: &Target,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.prepare(rt, t, &mut obj)?;
        let csr = certificates::is_csr(rt);
        if csr {
            certificates::check_encoding(&obj)?;
        }
        let ns = self.namespace_of(rt, t)?;
        let m = meta_mut(&mut obj);
        let mut name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            match m.get("generateName").and_then(Value::as_str) {
                Some(g) if !g.is_empty() => {
                    name = format!("{g}{}", random_suffix());
                    m.insert("name".into(), json!(name));
                }
                _ => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        &[(
                            "metadata.name".into(),
                            "FieldValueRequired",
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        )],
                    ));
                }
            }
        }
        let name_ok = if rt.plural == "namespaces" || rt.plural == "services" {
            dns_label(&name)
        } else if rt.plural.ends_with("roles") || rt.plural.ends_with("rolebindings") || csr {
            // Any name that is a path segment (a CSR's validation accepts
            // every name: kubelets' requests have upper case in theirs).
            !name.is_empty() && !name.contains('/') && name != "." && name != ".."
        } else {
            dns_subdomain(&name)
        };
        if !name_ok {
            let rule = if rt.plural == "namespaces" || rt.plural == "services" {
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            } else {
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            };
            return Err(ApiError::invalid(
                rt,
                &name,
                &[(
                    "metadata.name".into(),
                    "FieldValueInvalid",
                    format!("metadata.name: Invalid value: \"{name}\": {rule}"),
                )],
            ));
        }
        self.check_namespace(rt, &ns, true)?;
        if rt.group.is_empty() && rt.plural == "pods" {
            self.admit_pod_security(&ns, &obj)?;
        }
        if self.tables[&key(rt)]
            .objects
            .contains_key(&(ns.clone(), name.clone()))
        {
            return Err(ApiError::already_exists(rt, &name));
        }
        let m = meta_mut(&mut obj);
        m.insert("uid".into(), json!(new_uid()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("resourceVersion");
        if rt.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        match &rt.initial_status {
            Some(Value::Null) => {
                if let Some(o) = obj.as_object_mut() {
                    o.remove("status");
                }
            }
            Some(s) => obj["status"] = s.clone(),
            None => {}
        }
        if rt.custom {
            self.admit_custom(rt, &t.version, &mut obj, None, opts)?;
        }
        if csr {
            certificates::prepare_for_create(&mut obj, opts.admission.as_ref().map(|a| &a.user));
        }
        self.on_create_special(rt, &mut obj)?;
        if !rt.custom {
            let causes = if csr {
                certificates::validate_create(&obj)
            } else {
                validation::on_create(&rt.group, &rt.plural, &obj)
            };
            if !causes.is_empty() {
                return Err(ApiError::invalid(rt, &name, &causes));
            }
        }
        if rt.group.is_empty() && rt.plural == "services" {
            let used: Vec<String> = self.tables[&key(rt)]
                .objects
                .values()
                .filter_map(|s| s.pointer("/spec/clusterIP").and_then(Value::as_str))
                .map(str::to_string)
                .collect();
            defaults::allocate_cluster_ip(&mut obj, &used).map_err(|e| {
                let field = e.split(':').next().unwrap_or("spec.clusterIPs").to_string();
                ApiError::invalid(rt, name_of(&obj), &[(field, "FieldValueInvalid", e)])
            })?;
        }
        self.admit(
            rt,
            &Write {
                operation: "CREATE",
                version: &t.version,
                subresource: Subresource::Main,
                name: &name,
                namespace: &ns,
                object: Some(&present(rt, &t.version, &obj)),
                old: None,
                dry_run: opts.dry_run,
            },
            opts.admission.as_ref(),
        )?;
        if opts.dry_run {
            return Ok(present(rt, &t.version, &obj));
        }
        if let Some(m) = opts.update_manager.as_deref().filter(|m| !m.is_empty()) {
            record_update(
                &mut obj,
                None,
                m,
                &rt.api_version(&t.version),
                !rt.custom,
                None,
            );
        }
        let stored = self.commit(rt, EventType::Added, obj);
        self.after_write_special(rt, &stored);
        Ok(present(rt, &t.version, &stored))
    }

    /// What creating some kinds entails (namespaces' and CRDs' finalizers
    /// and status, CRD names).
    pub(super) fn on_create_special(
        &mut self,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        match (rt.group.as_str(), rt.plural.as_str()) {
            ("", "pods") => {
                let ns = meta(obj)
                    .get("namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string();
                let account = obj
                    .pointer("/spec/serviceAccountName")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .unwrap_or("default")
                    .to_string();
                let sa = self
                    .tables
                    .get(&(String::new(), "serviceaccounts".to_string()))
                    .and_then(|t| t.objects.get(&(ns, account)))
                    .map(|o| (**o).clone());
                crate::kubesim::auth::service_accounts::admit_pod(
                    obj,
                    sa.as_ref(),
                    &random_suffix(),
                )
                .map_err(|why| ApiError {
                    details: Some(json!({"name": name_of(obj), "kind": "pods"})),
                    ..ApiError::forbidden(format!("pods \"{}\" is forbidden: {why}", name_of(obj)))
                })?;
            }
            ("", "namespaces") => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                let name = name_of(obj).to_string();
                let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
                labels["kubernetes.io/metadata.name"] = json!(name);
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let ct = discovery::crd_type(obj).map_err(|e| {
                    ApiError::invalid(
                        rt,
                        name_of(obj),
                        &[(
                            "spec".into(),
                            "FieldValueInvalid",
                            format!("spec: Invalid value: {e}"),
                        )],
                    )
                })?;
                let want = format!("{}.{}", ct.plural, ct.group);
                if name_of(obj) != want {
                    return Err(ApiError::invalid(
                        rt,
                        name_of(obj),
                        &[(
                            "metadata.name".into(),
                            "FieldValueInvalid",
                            format!(
                                "metadata.name: Invalid value: \"{}\": must be spec.names.plural+\".\"+spec.group",
                                name_of(obj)
                            ),
                        )],
                    ));
                }
                if let Some(existing) = self.tables.get(&key(&ct))
                    && !existing.rt.custom
                {
                    return Err(ApiError::invalid(
                        rt,
                        name_of(obj),
                        &[(
                            "spec.group".into(),
                            "FieldValueInvalid",
                            "spec.group: Invalid value: the group and plural of a built-in kind"
                                .into(),
                        )],
                    ));
                }
                let m = meta_mut(obj);
                m.insert(
                    "finalizers".into(),
                    json!(["customresourcecleanup.apiextensions.k8s.io"]),
                );
                obj["status"] = crd_status(obj, &ct);
            }
            _ => {}
        }
        Ok(())
    }

    /// Serves or updates the kind of a CRD after it was written.
    pub(super) fn after_write_special(&mut self, rt: &ResourceType, obj: &Value) {
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && meta(obj).get("deletionTimestamp").is_none()
            && let Ok(ct) = discovery::crd_type(obj)
        {
            self.register(ct);
        }
    }

    pub(in crate::kubesim) fn update(
        &mut self,
        rt: &ResourceType,
        t: &Target,
        name: &str,
        mut obj: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<Value, ApiError> {
        self.prepare(rt, t, &mut obj)?;
        let csr = certificates::is_csr(rt);
        if csr {
            certificates::check_encoding(&obj)?;
        }
        let ns = self.namespace_of(rt, t)?;
        match meta_str(&obj, "name") {
            Some(n) if n == name => {}
            Some("") | None => {
                meta_mut(&mut obj).insert("name".into(), json!(name));
            }
            Some(_) => {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
        }
        let Some(old) = self.tables[&key(rt)]
            .objects
            .get(&(ns.clone(), name.to_string()))
            .cloned()
        else {
            return Err(ApiError::not_found(rt, name));
        };
        if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|r| !r.is_empty()) {
            if rv != current_rv(&old) {
                return Err(ApiError::stale(rt, name));
            }
        } else if rt.custom {
            // Custom resources do not allow unconditional updates.
            return Err(ApiError::invalid(
                rt,
                name,
                &[(
                    "metadata.resourceVersion".into(),
                    "FieldValueInvalid",
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                        .into(),
                )],
            ));
        }
        if sub == Subresource::Main
            && rt.group == "apps"
            && rt.plural == "statefulsets"
            && immutable_statefulset_spec(&old) != immutable_statefulset_spec(&obj)
        {
            return Err(ApiError::invalid(
                rt,
                name,
                &[(
                    "spec".into(),
                    "FieldValueForbidden",
                    "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into(),
                )],
            ));
        }
        if let Some(uid) = meta_str(&obj, "uid").filter(|u| !u.is_empty())
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        let mut next = if csr {
            certificates::prepare_for_update(sub, &mut obj, &old, &now_rfc3339());
            obj
        } else if sub == Subresource::Status {
            // A status write changes the status only.
            let mut n = (*old).clone();
            match obj.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = meta(&obj).get("managedFields") {
                meta_mut(&mut n).insert("managedFields".into(), mf.clone());
            }
            n
        } else {
            if rt.status_subresource {
                match old.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Some(o) = obj.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            obj
        };
        // What clients cannot change.
        {
            let om = meta(&old).clone();
            let m = meta_mut(&mut next);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match om.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.insert("resourceVersion".into(), json!(current_rv(&old)));
        }
        strip_empty_meta(&mut next);
        if rt.plural == "namespaces" && rt.group.is_empty() {
            next["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
        }
        if rt.plural == "services" && rt.group.is_empty() && sub == Subresource::Main {
            // Allocated values an update leaves out are kept (the API
            // server's patchAllocatedValues).
            let unset = next
                .pointer("/spec/clusterIP")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if unset && next.get("spec").is_some_and(Value::is_object) {
                for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                    if let Some(v) = old.get("spec").and_then(|s| s.get(f)) {
                        next["spec"][f] = v.clone();
                    }
                }
            }
        }
        if meta(&old).get("deletionTimestamp").is_some() {
            let before = finalizers(&old);
            if let Some(f) = finalizers(&next).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    &[(
                        "metadata.finalizers".into(),
                        "FieldValueForbidden",
                        format!(
                            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{f}\"}}"
                        ),
                    )],
                ));
            }
        }
        if rt.custom {
            self.admit_custom(rt, &t.version, &mut next, Some(&old), opts)?;
        } else if csr {
            let causes = certificates::validate_update(sub, &old, &next);
            if !causes.is_empty() {
                return Err(ApiError::invalid(rt, name, &causes));
            }
        } else if sub == Subresource::Main {
            let causes = validation::on_update(&rt.group, &rt.plural, &old, &next);
            if !causes.is_empty() {
                return Err(ApiError::invalid(rt, name, &causes));
            }
        }
        if rt.generation && spec_part(rt, &next) != spec_part(rt, &old) {
            let g = meta(&old)
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut next).insert("generation".into(), json!(g + 1));
        }
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && sub == Subresource::Main
        {
            let ct = discovery::crd_type(&next).map_err(|e| {
                ApiError::invalid(
                    rt,
                    name,
                    &[(
                        "spec".into(),
                        "FieldValueInvalid",
                        format!("spec: Invalid value: {e}"),
                    )],
                )
            })?;
            next["status"] = crd_status(&next, &ct);
        }
        if let Some(m) = opts.update_manager.as_deref().filter(|m| !m.is_empty()) {
            let subname = sub.name();
            record_update(
                &mut next,
                Some(&old),
                m,
                &rt.api_version(&t.version),
                !rt.custom,
                subname,
            );
        }
        self.admit(
            rt,
            &Write {
                operation: "UPDATE",
                version: &t.version,
                subresource: sub,
                name,
                namespace: &ns,
                object: Some(&present(rt, &t.version, &next)),
                old: Some(&present(rt, &t.version, &old)),
                dry_run: opts.dry_run,
            },
            opts.admission.as_ref(),
        )?;
        let mut same = next.clone();
        let mut was = (*old).clone();
        for o in [&mut same, &mut was] {
            // A new owner of fields is a change; a new timestamp alone is not.
            if let Some(Value::Array(entries)) = o.pointer_mut("/metadata/managedFields") {
                for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
            if let Some(o) = o.as_object_mut() {
                o.remove("apiVersion");
            }
        }
        if same == was {
            // No change: the API server writes nothing and keeps the version.
            return Ok(present(rt, &t.version, &old));
        }
        if opts.dry_run {
            return Ok(present(rt, &t.version, &next));
        }
        let done = meta(&next).get("deletionTimestamp").is_some()
            && finalizers(&next).is_empty()
            && !graceful_pod(rt, &next);
        let stored = self.commit(
            rt,
            if done {
                EventType::Deleted
            } else {
                EventType::Modified
            },
            next,
        );
        self.after_write_special(rt, &stored);
        if done {
            self.after_delete_special(rt, &stored);
        }
        Ok(present(rt, &t.version, &stored))
    }

    pub(in crate::kubesim) fn delete(
        &mut self,
        rt: &ResourceType,
        t: &Target,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let ns = self.namespace_of(rt, t)?;
        let Some(old) = self.tables[&key(rt)]
            .objects
            .get(&(ns, name.to_string()))
            .cloned()
        else {
            return Err(ApiError::not_found(rt, name));
        };
        if let Some(uid) = &opts.uid
            && Some(uid.as_str()) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && *rv != current_rv(&old)
        {
            return Err(ApiError::conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current_rv(&old)
                ),
            ));
        }
        self.admit(
            rt,
            &Write {
                operation: "DELETE",
                version: &t.version,
                subresource: Subresource::Main,
                name,
                namespace: meta_str(&old, "namespace").unwrap_or_default(),
                object: None,
                old: Some(&present(rt, &t.version, &old)),
                dry_run: opts.dry_run,
            },
            opts.admission.as_ref(),
        )?;
        let mut next = (*old).clone();
        if rt.group.is_empty() && rt.plural == "pods" && self.graceful_pods {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            match pod_grace(&old, opts.grace_period, now) {
                PodGrace::Pending => return Ok(present(rt, &t.version, &old)),
                PodGrace::Mark(at, grace) => {
                    let m = meta_mut(&mut next);
                    m.insert(
                        "deletionTimestamp".into(),
                        json!(crate::kubesim::rfc3339(at)),
                    );
                    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                    if grace > 0 {
                        if opts.dry_run {
                            return Ok(present(rt, &t.version, &next));
                        }
                        let stored = self.commit(rt, EventType::Modified, next);
                        return Ok(present(rt, &t.version, &stored));
                    }
                }
                PodGrace::Now => {
                    let m = meta_mut(&mut next);
                    if m.contains_key("deletionTimestamp") {
                        m.insert("deletionGracePeriodSeconds".into(), json!(0));
                    }
                }
            }
        }
        let mut fins = finalizers(&old);
        match opts.propagation {
            Some(Propagation::Foreground) if !fins.iter().any(|f| f == "foregroundDeletion") => {
                fins.retain(|f| f != "orphan");
                fins.push("foregroundDeletion".into());
            }
            Some(Propagation::Orphan) if !fins.iter().any(|f| f == "orphan") => {
                fins.retain(|f| f != "foregroundDeletion");
                fins.push("orphan".into());
            }
            _ => {}
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            next["status"] = json!({"phase": "Terminating"});
        }
        let has_spec_finalizers = rt.group.is_empty()
            && rt.plural == "namespaces"
            && next
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty());
        if fins.is_empty() && !has_spec_finalizers {
            if opts.dry_run {
                return Ok(present(rt, &t.version, &old));
            }
            let stored = self.commit(rt, EventType::Deleted, next);
            self.after_delete_special(rt, &stored);
            if rt.return_deleted_object {
                return Ok(present(rt, &t.version, &stored));
            }
            let mut d = details(rt, name);
            d["uid"] = json!(meta_str(&stored, "uid"));
            return Ok(
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d}),
            );
        }
        {
            let m = meta_mut(&mut next);
            if !m.contains_key("deletionTimestamp") {
                m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            m.insert("finalizers".into(), json!(fins));
        }
        if next == *old {
            return Ok(present(rt, &t.version, &old));
        }
        if opts.dry_run {
            return Ok(present(rt, &t.version, &next));
        }
        let stored = self.commit(rt, EventType::Modified, next);
        Ok(present(rt, &t.version, &stored))
    }

    /// Stops serving the kind of a CRD that is gone.
    pub(super) fn after_delete_special(&mut self, rt: &ResourceType, obj: &Value) {
        if rt.group == "apiextensions.k8s.io"
            && rt.plural == "customresourcedefinitions"
            && let Ok(ct) = discovery::crd_type(obj)
        {
            let k = key(&ct);
            if self.tables.get(&k).is_some_and(|t| t.rt.custom) {
                self.tables.remove(&k);
            }
        }
    }
}

/// The part of a StatefulSet's spec the API server never lets change
/// (volumeClaimTemplates, selector, serviceName, podManagementPolicy, ...).
fn immutable_statefulset_spec(sts: &Value) -> Value {
    let mut spec = sts.get("spec").cloned().unwrap_or(json!({}));
    if let Some(m) = spec.as_object_mut() {
        for k in [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "revisionHistoryLimit",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ] {
            m.remove(k);
        }
    }
    spec
}

pub(super) fn crd_status(crd: &Value, ct: &ResourceType) -> Value {
    let now = now_rfc3339();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(ct.singular);
    }
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{}List", ct.kind));
    }
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": accepted,
        "storedVersions": [ct.storage_version()],
    })
}

/// The name OwnerReferencesPermissionEnforcement's checks go by.
const OWNER_REFERENCES: &str = "OwnerReferencesPermissionEnforcement";

/// The admission plugins kubesim runs on a write by a client: OpenShift's
/// OwnerReferencesPermissionEnforcement, the certificates plugins
/// ([`super::certificates`]), then ValidatingAdmissionPolicy.
pub(super) struct Write<'a> {
    pub operation: &'static str,
    pub version: &'a str,
    pub subresource: Subresource,
    pub name: &'a str,
    pub namespace: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    pub dry_run: bool,
}

impl crate::kubesim::admission_policy::Lookup for State {
    fn namespace(&self, name: &str) -> Option<Value> {
        self.tables
            .get(&(String::new(), "namespaces".to_string()))
            .and_then(|t| t.objects.get(&(String::new(), name.to_string())))
            .map(|o| (**o).clone())
    }

    fn params(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        selector: &LabelSelector,
    ) -> Result<Vec<Value>, String> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let table = self
            .tables
            .values()
            .find(|t| t.rt.group == group && t.rt.kind == kind && t.rt.versions.iter().any(|v| v == version))
            .ok_or_else(|| format!("failed to find resource referenced by paramKind: '{group}/{version}, Kind={kind}'"))?;
        let ns = if table.rt.namespaced { namespace } else { None };
        Ok(table
            .objects
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .filter(|((_, oname), _)| name.is_none_or(|n| n == oname))
            .filter(|(_, o)| selector.matches_object(o))
            .map(|(_, o)| present(&table.rt, version, o))
            .collect())
    }
}

impl State {
    fn objects_of(&self, group: &str, plural: &str) -> Vec<Arc<Value>> {
        self.tables
            .get(&(group.to_string(), plural.to_string()))
            .map(|t| t.objects.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Runs the admission plugins on a client's write; Ok when admitted.
    pub(super) fn admit(
        &self,
        rt: &ResourceType,
        w: &Write,
        admission: Option<&Arc<Admission>>,
    ) -> Result<(), ApiError> {
        let Some(adm) = admission else {
            return Ok(());
        };
        let sub = w.subresource.name().unwrap_or_default();
        if w.operation != "DELETE"
            && !(rt.group.is_empty() && rt.plural == "pods" && sub == "status")
        {
            self.owner_references_permission(rt, w, sub, adm)?;
        }
        if certificates::is_csr(rt) {
            certificates::admit(w, sub, adm)?;
        }
        let req = crate::kubesim::admission_policy::Request {
            operation: w.operation,
            group: &rt.group,
            version: w.version,
            resource: &rt.plural,
            subresource: sub,
            kind: &rt.kind,
            name: w.name,
            namespace: w.namespace,
            user: &adm.user,
            dry_run: w.dry_run,
            object: w.object,
            old_object: w.old,
        };
        let policies = self.objects_of(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
        );
        if policies.is_empty() {
            return Ok(());
        }
        let bindings = self.objects_of(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
        );
        let verdict = crate::kubesim::admission_policy::evaluate(&policies, &bindings, &req, self);
        for warning in verdict.warnings {
            adm.warn(warning);
        }
        match verdict.denied {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// OwnerReferencesPermissionEnforcement (on in OpenShift): changing an
    /// object's ownerReferences needs `delete` on the object, and a new
    /// `blockOwnerDeletion: true` needs `update` on the owner's
    /// `finalizers` subresource.
    fn owner_references_permission(
        &self,
        rt: &ResourceType,
        w: &Write,
        sub: &str,
        adm: &Admission,
    ) -> Result<(), ApiError> {
        let refs = |o: Option<&Value>| -> Vec<Value> {
            o.and_then(|o| o.pointer("/metadata/ownerReferences"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (new, old) = (refs(w.object), refs(w.old));
        let changing = match w.old {
            None => !new.is_empty(),
            Some(_) => new != old,
        };
        if !changing {
            return Ok(());
        }
        let forbidden = |why: String| {
            let qualified = if rt.group.is_empty() {
                rt.plural.clone()
            } else {
                format!("{}.{}", rt.plural, rt.group)
            };
            let mut d = json!({"name": w.name, "kind": rt.plural});
            if !rt.group.is_empty() {
                d["group"] = json!(rt.group);
            }
            ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!("{qualified} \"{}\" is forbidden: {why}", w.name),
                details: Some(d),
            }
        };
        let mut delete = crate::kubesim::auth::rbac::Attributes::resource(
            "delete",
            &rt.group,
            &rt.plural,
            w.namespace,
        )
        .named(w.name);
        delete.subresource = sub.to_string();
        delete.api_version = w.version.to_string();
        if !adm.check(OWNER_REFERENCES, delete) {
            return Err(forbidden(
                "cannot set an ownerRef on a resource you can't delete: , <nil>".into(),
            ));
        }
        let blocking = |r: &Value| r["blockOwnerDeletion"] == json!(true);
        for r in new.iter().filter(|r| blocking(r)) {
            let was_blocking = old
                .iter()
                .find(|o| o["uid"] == r["uid"])
                .is_some_and(blocking);
            if was_blocking {
                continue;
            }
            let api_version = r["apiVersion"].as_str().unwrap_or_default();
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let kind = r["kind"].as_str().unwrap_or_default();
            let Some(owner) = self
                .tables
                .values()
                .map(|t| &t.rt)
                .find(|t| t.group == group && t.kind == kind)
            else {
                return Err(forbidden(format!(
                    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: , no matches for kind \"{kind}\" in version \"{api_version}\""
                )));
            };
            let mut update = crate::kubesim::auth::rbac::Attributes::resource(
                "update",
                group,
                &owner.plural,
                w.namespace,
            )
            .named(r["name"].as_str().unwrap_or_default());
            update.subresource = "finalizers".into();
            update.api_version = version.to_string();
            if !adm.check(OWNER_REFERENCES, update) {
                return Err(forbidden(
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>".into(),
                ));
            }
        }
        Ok(())
    }
}
