//! Watches over HTTP: the event lines, the shapes a watch is served in
//! (full objects, partial metadata, Tables), the selectors and
//! resourceVersions a watch filters by, and the streaming loop. I/O.

use super::*;

pub(super) fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// How watch events carry their objects, as the request's `Accept` asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// The object.
    Full,
    /// `PartialObjectMetadata`
    Meta,
    /// A one-row `Table` (`kubectl get -w`), with this `includeObject`.
    Table(String),
}

pub(super) fn present_at(
    rt: &crate::kubesim::discovery::ResourceType,
    version: &str,
    obj: &Value,
    shape: &Shape,
) -> Value {
    match shape {
        Shape::Full => crate::kubesim::store::present(rt, version, obj),
        Shape::Meta => partial(obj),
        Shape::Table(include) => {
            let shown = crate::kubesim::store::present(rt, version, obj);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            crate::kubesim::table::to_table(rt, version, &shown, include, now)
        }
    }
}

/// A store event as watchers of a kind see it (converted when the kind is
/// stored as another), so that selectors apply to the served shape.
pub(super) fn view(
    rt: &crate::kubesim::discovery::ResourceType,
    version: &str,
    ev: &Arc<Event>,
) -> Arc<Event> {
    if rt.stored_as.is_none() {
        return ev.clone();
    }
    let shown = |o: &Value| Arc::new(crate::kubesim::store::present(rt, version, o));
    Arc::new(Event {
        object: shown(&ev.object),
        prev: ev.prev.as_deref().map(shown),
        ..(**ev).clone()
    })
}

/// The `PartialObjectMetadata` of an object (what metadata watchers ask
/// for with `Accept: ...;as=PartialObjectMetadata`).
pub(super) fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

/// A list as a `PartialObjectMetadataList`.
pub(super) fn partial_list(list: &Value) -> Value {
    let items: Vec<Value> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(partial)
        .collect();
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": list["metadata"], "items": items})
}

/// How one store event looks to a watcher with these filters: the event
/// type it becomes (a MODIFIED that leaves the selection is a DELETED, one
/// that enters it an ADDED, as the watch cache does) or nothing.
pub fn filter_event(
    ev: &Event,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Option<&'static str> {
    if ns.is_some_and(|n| n != ev.namespace()) {
        return None;
    }
    let matches = |o: &Value| labels.matches_object(o) && fields.matches_object(o);
    let now = matches(&ev.object);
    match ev.kind {
        EventType::Added => now.then_some("ADDED"),
        EventType::Deleted => now.then_some("DELETED"),
        EventType::Modified => {
            let before = ev.prev.as_deref().is_some_and(matches);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

pub(super) async fn start_watch(
    shared: &Arc<Shared>,
    target: &Target,
    q: &HashMap<String, String>,
    shape: Shape,
) -> Response<Body> {
    let opts = match list_options(q) {
        Ok(o) => o,
        Err(e) => return error_response(&e),
    };
    let store = &shared.store;
    let Some(rt) = store.resolve(&target.group, &target.version, &target.plural) else {
        return error_response(&ApiError::no_route());
    };
    for term in &opts.field_selector.0 {
        if !rt.supports_field(&term.field) {
            return error_response(&ApiError::bad_request(format!(
                "field label not supported: {}",
                term.field
            )));
        }
    }
    let initial_events = truthy(q, "sendInitialEvents");
    let rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(r) => match r.parse::<u64>() {
            Ok(n) if !initial_events => Some(n),
            Ok(_) => None,
            Err(_) => {
                return error_response(&ApiError::bad_request(format!(
                    "invalid resource version: {r:?}"
                )));
            }
        },
    };
    let bookmarks = truthy(q, "allowWatchBookmarks");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let drop_after = shared.faults.drop_watch_after(&rt.plural);
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let tx = match shared.faults.late_watch(&rt.plural) {
        Some(delay) => delayed(tx, delay),
        None => tx,
    };
    let mut resp = Response::new(Body::Stream(rx));
    resp.headers_mut().insert(
        "content-type",
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        "cache-control",
        hyper::header::HeaderValue::from_static("no-cache, private"),
    );
    let (rt, replay, start_rv, events) = match store.watch_from(target, rv) {
        Ok(x) => x,
        Err(e) => {
            // The watch cache answers a too old version inside the stream.
            let _ = tx.try_send(event_line("ERROR", &e.status()));
            return resp;
        }
    };
    let version = target.version.clone();
    let ns = target.namespace.clone().filter(|_| rt.namespaced);
    let interval = shared.bookmark_interval;
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let dropped = drop_after.map(|d| tokio::time::Instant::now() + d);
        let mut last_rv = start_rv;
        let bookmark = |rv: u64, initial_end: bool| {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            event_line(
                "BOOKMARK",
                &json!({"kind": rt.kind, "apiVersion": rt.api_version(&version), "metadata": meta}),
            )
        };
        for ev in &replay {
            let ev = &view(&rt, &version, ev);
            if let Some(kind) = filter_event(
                ev,
                ns.as_deref(),
                &opts.label_selector,
                &opts.field_selector,
            ) && tx
                .send(event_line(
                    kind,
                    &present_at(&rt, &version, &ev.object, &shape),
                ))
                .await
                .is_err()
            {
                return;
            }
        }
        if initial_events && bookmarks && tx.send(bookmark(start_rv, true)).await.is_err() {
            return;
        }
        watch_loop(
            events,
            &tx,
            &rt,
            &version,
            ns.as_deref(),
            &opts,
            bookmarks,
            interval,
            deadline,
            dropped,
            &mut last_rv,
            &bookmark,
            &shape,
        )
        .await;
    });
    resp
}

/// A sender whose chunks reach `tx` `delay` after they were sent, in
/// order: a watch that is late (a stale watch cache).
fn delayed(tx: mpsc::Sender<Bytes>, delay: Duration) -> mpsc::Sender<Bytes> {
    let (in_tx, mut in_rx) = mpsc::channel::<Bytes>(1024);
    let (mid_tx, mut mid_rx) = mpsc::unbounded_channel::<(tokio::time::Instant, Bytes)>();
    tokio::spawn(async move {
        while let Some(b) = in_rx.recv().await {
            if mid_tx.send((tokio::time::Instant::now(), b)).is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        while let Some((at, b)) = mid_rx.recv().await {
            tokio::time::sleep_until(at + delay).await;
            if tx.send(b).await.is_err() {
                return;
            }
        }
    });
    in_tx
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn watch_loop(
    mut events: broadcast::Receiver<Arc<Event>>,
    tx: &mpsc::Sender<Bytes>,
    rt: &crate::kubesim::discovery::ResourceType,
    version: &str,
    ns: Option<&str>,
    opts: &ListOptions,
    bookmarks: bool,
    interval: Duration,
    deadline: tokio::time::Instant,
    dropped: Option<tokio::time::Instant>,
    last_rv: &mut u64,
    bookmark: &impl Fn(u64, bool) -> Bytes,
    shape: &Shape,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let drop_at = dropped.unwrap_or(deadline);
    loop {
        tokio::select! {
            r = events.recv() => match r {
                Ok(ev) => {
                    if ev.rv <= *last_rv {
                        continue;
                    }
                    *last_rv = ev.rv;
                    let (group, plural) = crate::kubesim::store::storage_key(rt);
                    if ev.group != group || ev.plural != plural {
                        continue;
                    }
                    let ev = view(rt, version, &ev);
                    if let Some(kind) = filter_event(&ev, ns, &opts.label_selector, &opts.field_selector)
                        && tx.send(event_line(kind, &present_at(rt, version, &ev.object, shape))).await.is_err()
                    {
                        return;
                    }
                }
                // Fell behind: end the watch; the client resumes from its last version.
                Err(_) => return,
            },
            _ = tick.tick(), if bookmarks => {
                if tx.send(bookmark(*last_rv, false)).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tokio::time::sleep_until(drop_at), if dropped.is_some() => return,
            _ = tx.closed() => return,
        }
    }
}
