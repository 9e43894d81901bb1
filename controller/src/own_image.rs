//! The image the members' init container runs: the operator's own (I/O,
//! once at start).
//!
//! The members must run the build the controller is: an init container
//! of another build installs a sidecar whose flags and paths the
//! controller did not write its Pod template for. A user who builds their
//! own image and changes the Deployment's (`kustomize edit set image`, a
//! Helm value) changes only the controller's Pod, so the controller takes
//! the image from that Pod, in this order:
//!
//! 1. `--operator-image` or `OPERATOR_IMAGE` (the flag wins, as clap reads
//!    them): what the user said;
//! 2. its own Pod's container, read once through the API (`POD_NAME`, and
//!    `POD_NAMESPACE` or the client's namespace, from the downward API):
//!    `spec.containers[].image`, what the user wrote, a tag or a digest
//!    (`repo@sha256:...`) alike, never `status.containerStatuses[].imageID`
//!    (the runtime's resolved digest, in a runtime's own notation, and
//!    absent until the container ran). A moving tag (`:latest`) may then
//!    pull a newer build for the members than the controller runs: pin a
//!    digest for the same bytes;
//! 3. with no `POD_NAME` (the controller outside a Pod: a developer's
//!    machine, the tests' host process) the default image, with a WARN
//!    line saying why.
//!
//! With `POD_NAME` set, a Pod that cannot be read (RBAC, gone, the API
//! unreachable) or without the operator's container stops the controller
//! at start with the reason: falling back to the default would be the very
//! mismatch this exists to prevent, silent until a member fails to start;
//! a crash-looping controller with the reason in its log is found at once.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use thiserror::Error;
use tracing::{info, warn};

use crate::resources::DEFAULT_OPERATOR_IMAGE;

/// The name of the operator's container in the Deployment
/// (manifests/operator/deployment.yaml).
pub const CONTAINER: &str = "operator";

/// Where the operator image comes from, before any I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `--operator-image` or `OPERATOR_IMAGE`.
    Configured(String),
    /// The controller's own Pod: (namespace, or None for the client's; name).
    OwnPod {
        namespace: Option<String>,
        name: String,
    },
    /// Neither: the default image, with why.
    Default(&'static str),
}

/// Chooses the source: configured > own Pod > default. Empty values count
/// as unset (a `value: ""` in a manifest).
pub fn source(
    configured: Option<String>,
    pod_name: Option<String>,
    pod_namespace: Option<String>,
) -> Source {
    let set = |v: Option<String>| v.filter(|s| !s.is_empty());
    if let Some(image) = set(configured) {
        return Source::Configured(image);
    }
    match set(pod_name) {
        Some(name) => Source::OwnPod {
            namespace: set(pod_namespace),
            name,
        },
        None => Source::Default(
            "neither --operator-image, OPERATOR_IMAGE nor POD_NAME is set (not running in a Pod?)",
        ),
    }
}

/// Why the controller could not take its own Pod's image.
#[derive(Debug, Error)]
pub enum OwnImageError {
    #[error(
        "reading the controller's own Pod {namespace}/{name} for the members' image \
         (set --operator-image or OPERATOR_IMAGE, or grant `get` on this Pod): {source}"
    )]
    Read {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error(
        "the controller's own Pod {namespace}/{name} has no container named {CONTAINER:?} \
         (it has {containers:?}) to take the members' image from; set --operator-image \
         or OPERATOR_IMAGE"
    )]
    NoContainer {
        namespace: String,
        name: String,
        containers: Vec<String>,
    },
}

/// The image of the operator's container in `pod`: the one named
/// [`CONTAINER`], or the only container of a Pod that has one (a chart
/// that names it differently). Its `image` as written, digest included.
pub fn image_of(pod: &Pod) -> Option<String> {
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let container = match containers.iter().find(|c| c.name == CONTAINER) {
        Some(c) => c,
        None if containers.len() == 1 => &containers[0],
        None => return None,
    };
    container.image.clone().filter(|i| !i.is_empty())
}

/// The operator image for the members (see the module's documentation),
/// logged with where it came from.
pub async fn resolve(client: &Client, source: Source) -> Result<String, OwnImageError> {
    match source {
        Source::Configured(image) => {
            info!(%image, "members' image: as configured (--operator-image / OPERATOR_IMAGE)");
            Ok(image)
        }
        Source::Default(why) => {
            warn!(
                image = DEFAULT_OPERATOR_IMAGE,
                reason = why,
                "members' image: the default, which may not be the image this controller runs"
            );
            Ok(DEFAULT_OPERATOR_IMAGE.to_string())
        }
        Source::OwnPod { namespace, name } => {
            let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let pod = pods
                .get(&name)
                .await
                .map_err(|source| OwnImageError::Read {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    source,
                })?;
            match image_of(&pod) {
                Some(image) => {
                    info!(%image, pod = %format!("{namespace}/{name}"),
                        "members' image: this controller's own");
                    Ok(image)
                }
                None => Err(OwnImageError::NoContainer {
                    namespace,
                    name,
                    containers: pod
                        .spec
                        .map(|s| s.containers.into_iter().map(|c| c.name).collect())
                        .unwrap_or_default(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    /// The order: configured > own Pod > default; an empty value is unset.
    #[test]
    fn configured_wins_then_the_own_pod_then_the_default() {
        assert_eq!(
            source(s("me/op:1"), s("op-0"), s("ns")),
            Source::Configured("me/op:1".into())
        );
        assert_eq!(
            source(None, s("op-0"), s("ns")),
            Source::OwnPod {
                namespace: s("ns"),
                name: "op-0".into()
            }
        );
        assert_eq!(
            source(s(""), s("op-0"), None),
            Source::OwnPod {
                namespace: None,
                name: "op-0".into()
            }
        );
        assert!(matches!(source(None, None, s("ns")), Source::Default(_)));
        assert!(matches!(source(None, s(""), None), Source::Default(_)));
    }

    /// The flag is optional now: absent, nothing is configured (the own
    /// Pod is asked); given, it is the configured image. (clap gives the
    /// flag precedence over OPERATOR_IMAGE; the environment is not set
    /// here: `unsafe_code` is denied, and tests share the process's.)
    #[test]
    fn the_flag_is_optional() {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: crate::ControllerArgs,
        }
        let given = Cli::try_parse_from([
            "c",
            "--operator-namespace",
            "ops",
            "--operator-image",
            "me/op@sha256:ab",
        ])
        .unwrap();
        assert_eq!(
            given.args.operator_image.as_deref(),
            Some("me/op@sha256:ab")
        );
        if std::env::var_os("OPERATOR_IMAGE").is_none() {
            let absent = Cli::try_parse_from(["c", "--operator-namespace", "ops"]).unwrap();
            assert_eq!(absent.args.operator_image, None);
        }
    }

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "op-0"}, "spec": {"containers": containers}}),
        )
        .unwrap()
    }

    /// The operator's container by name, its image as written (a digest
    /// kept), the only container whatever its name, and none when ambiguous.
    #[test]
    fn the_image_of_the_operators_container() {
        assert_eq!(
            image_of(&pod(json!([
                {"name": "proxy", "image": "envoy:1"},
                {"name": "operator", "image": "registry.example/me/op@sha256:0123"}
            ]))),
            s("registry.example/me/op@sha256:0123")
        );
        assert_eq!(
            image_of(&pod(json!([{"name": "manager", "image": "me/op:dev"}]))),
            s("me/op:dev")
        );
        assert_eq!(
            image_of(&pod(json!([
                {"name": "proxy", "image": "envoy:1"},
                {"name": "manager", "image": "me/op:dev"}
            ]))),
            None
        );
        assert_eq!(image_of(&pod(json!([]))), None);
    }

    /// The own Pod read through the API: its operator container's image;
    /// and a Pod the controller may not read (RBAC) or that has no such
    /// container is an error naming the Pod, never the default image.
    #[tokio::test]
    async fn the_own_pod_is_read_and_an_unreadable_one_is_an_error() {
        use crate::context::Context;
        use crate::fixtures::{ApiServer, Expect, Reply};
        const PATH: &str = "/api/v1/namespaces/cassandra-operator/pods/op-0";
        let own = || Source::OwnPod {
            namespace: s("cassandra-operator"),
            name: "op-0".into(),
        };

        let (client, api) = ApiServer::pair();
        let api = api.expect([Expect::get(PATH).reply(Reply::ok(&pod(json!([
            {"name": "operator", "image": "registry.example/me/op:dev"}
        ]))))]);
        assert_eq!(
            resolve(&client, own()).await.unwrap(),
            "registry.example/me/op:dev"
        );
        api.done(Context::test(client)).await;

        let (client, api) = ApiServer::pair();
        let api = api.expect([Expect::get(PATH).reply(Reply::Status(403, "Forbidden"))]);
        let e = resolve(&client, own()).await.unwrap_err();
        assert!(matches!(e, OwnImageError::Read { .. }), "{e}");
        assert!(e.to_string().contains("cassandra-operator/op-0"), "{e}");
        api.done(Context::test(client)).await;

        let (client, api) = ApiServer::pair();
        let api = api.expect([Expect::get(PATH).reply(Reply::ok(&pod(json!([
            {"name": "proxy", "image": "envoy:1"},
            {"name": "manager", "image": "me/op:dev"}
        ]))))]);
        let e = resolve(&client, own()).await.unwrap_err();
        assert!(matches!(e, OwnImageError::NoContainer { .. }), "{e}");
        api.done(Context::test(client)).await;

        // Outside a Pod: the default, no request (the script is empty).
        let (client, api) = ApiServer::pair();
        let api = api.expect([]);
        assert_eq!(
            resolve(&client, source(None, None, None)).await.unwrap(),
            DEFAULT_OPERATOR_IMAGE
        );
        api.done(Context::test(client)).await;
    }
}
