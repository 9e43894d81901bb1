//! The controller's CQL client ([`controller::cql`]) against one real
//! Cassandra 4.1 node set up as a Cluster with password authentication
//! and client TLS required renders it: the authentication settings of
//! [`crds::contract::auth::SETTINGS`], the sidecar's encryption settings
//! (PEM keystore and truststore), and a member certificate from a test CA
//! that names a member Service (a DNS name and a ClusterIP), not the
//! loopback address the client dials.
//!
//! The flow of `crds::contract::auth` on it: the default superuser's
//! login (once the node has made the role), the operator's superuser
//! created through it, its login, the default superuser disabled and then
//! refused, and `system_auth`'s replication set per datacenter and read
//! at consistency ALL. A clear-text client and a client trusting another
//! CA are refused.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` once per machine (scripts/test
//! runs it); without it the test fails and names that command.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use controller::cql::{self, CqlError, Credentials, Role, Session};
use crds::contract::auth;
use crds::contract::tls::{CA_FILE, KEYSTORE_FILE};
use crds::v1alpha1::{ClientEncryption, InternodeEncryption};
use serde_norway::Value;
use sidecar::render::tls::{TlsSettings, cassandra_options};
use testworld::harness::require_root;
use testworld::real_cassandra::{Node, NodeOptions, Ports, VERSION_4_1, laid_out};

/// Start to NORMAL took 5.5-8 s here (2 cores) with a one-second ring
/// delay; the margin is for a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one login or statement may take.
const CQL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the node may take to serve CQL and make the default
/// superuser once it is NORMAL.
const DEFAULT_ROLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a node may still let a disabled role log in: its caches of
/// roles and credentials hold an entry 2 s (`roles_validity`,
/// `credentials_validity`).
const AUTH_CACHE_TIMEOUT: Duration = Duration::from_secs(15);

/// The operator's superuser, with a password a statement must quote.
const ROLE: &str = "orders-superuser";
const PASSWORD: &str = "it's \"quoted\"; -- '' \\";

/// A test CA and a member certificate naming a member Service, in PEM.
struct Pki {
    ca_pem: String,
    /// The member's PKCS#8 key and its certificate, one file, as the
    /// sidecar writes [`KEYSTORE_FILE`].
    keystore_pem: String,
}

fn authority(name: &str) -> (rcgen::Issuer<'static, rcgen::KeyPair>, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let pem = params.self_signed(&key).unwrap().pem();
    (rcgen::Issuer::new(params, key), pem)
}

fn pki() -> Pki {
    let (issuer, ca_pem) = authority("orders CA");
    let key = rcgen::KeyPair::generate().unwrap();
    // What the controller's certificates name: the member Service, never
    // the Pod IP (here the loopback) a client dials.
    let mut params = rcgen::CertificateParams::new(vec![
        "orders-dc1-rack1-0.shop.svc.cluster.local".to_string(),
        "10.96.0.10".to_string(),
    ])
    .unwrap();
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem,
        keystore_pem: format!("{}{}", key.serialize_pem(), cert.pem()),
    }
}

/// The image's cassandra.yaml with the settings a Cluster with
/// authentication and required client TLS renders (the node's addresses
/// are set when it starts).
fn configure(conf: &Path, tls_dir: &Path) {
    let path = conf.join("cassandra.yaml");
    let mut yaml: Value = serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let top = yaml.as_mapping_mut().unwrap();
    for (key, value) in auth::SETTINGS {
        top.insert(key.into(), value.into());
    }
    let tls = TlsSettings {
        internode: InternodeEncryption::None,
        internode_optional: false,
        client: ClientEncryption::Required,
        dir: tls_dir.to_path_buf(),
    };
    top.extend(cassandra_options(&tls));
    std::fs::write(&path, serde_norway::to_string(&yaml).unwrap()).unwrap();
}

fn write_readable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    // The node runs as the image's cassandra user.
    std::fs::set_permissions(path, PermissionsExt::from_mode(0o644)).unwrap();
}

fn credentials(username: &str, password: &str) -> Credentials {
    Credentials {
        username: username.into(),
        password: password.into(),
    }
}

/// The default superuser's session, once the node serves CQL and has made
/// the role (until then a login is refused or not answered); and how long
/// that took.
async fn default_superuser(contact: SocketAddr, ca: &[u8]) -> (Session, Duration, Vec<String>) {
    let default = credentials(auth::DEFAULT_ROLE, auth::DEFAULT_PASSWORD);
    let began = Instant::now();
    let mut refusals = Vec::new();
    loop {
        match cql::connect(&[contact], &default, Some(ca), CQL_TIMEOUT).await {
            Ok(session) => return (session, began.elapsed(), refusals),
            Err(e @ (CqlError::Unreachable(_) | CqlError::BadCredentials(_))) => {
                if refusals.last() != Some(&e.to_string()) {
                    refusals.push(e.to_string());
                }
            }
            Err(e) => panic!("{e}"),
        }
        assert!(
            began.elapsed() < DEFAULT_ROLE_TIMEOUT,
            "no default superuser after {DEFAULT_ROLE_TIMEOUT:?}: {refusals:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_cql_client_makes_the_superuser_and_sets_system_auth_on_a_real_node() {
    let began = Instant::now();
    require_root().expect("the image's directories belong to uid 999");
    let (root, release, image) = laid_out(VERSION_4_1).unwrap_or_else(|e| panic!("{e}"));
    let pki = pki();
    let tls_dir = root.path().join("tls");
    std::fs::create_dir(&tls_dir).unwrap();
    std::fs::set_permissions(&tls_dir, PermissionsExt::from_mode(0o755)).unwrap();
    write_readable(&tls_dir.join(CA_FILE), &pki.ca_pem);
    write_readable(&tls_dir.join(KEYSTORE_FILE), &pki.keystore_pem);
    configure(&image.conf(), &tls_dir);

    let mut options = NodeOptions::single(Ports::free().unwrap_or_else(|e| panic!("{e}")));
    // The default superuser is made 10 s after the start unless told.
    options
        .extra_jvm_opts
        .push("-Dcassandra.superuser_setup_delay_ms=0".into());
    let mut node = Node::start(&image, &release, &options).unwrap_or_else(|e| panic!("{e}"));
    let to_normal = node
        .wait_for_mode("NORMAL", START_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let contact = SocketAddr::from((Ipv4Addr::LOCALHOST, options.ports.native));
    let ca = pki.ca_pem.as_bytes();
    let at = format!("{contact}");

    // The default superuser, over TLS to an address its certificate does
    // not name.
    let (default, to_default_role, refusals) = default_superuser(contact, ca).await;
    assert_eq!(default.member(), contact);
    assert_eq!(
        default.role(auth::DEFAULT_ROLE).await.unwrap(),
        Some(Role {
            is_superuser: true,
            can_login: true
        })
    );
    assert_eq!(default.role(ROLE).await.unwrap(), None);

    // The operator's superuser, made through it (twice: IF NOT EXISTS).
    default.create_superuser(ROLE, PASSWORD).await.unwrap();
    default.create_superuser(ROLE, "another").await.unwrap();
    let operator = cql::connect(
        &[contact],
        &credentials(ROLE, PASSWORD),
        Some(ca),
        CQL_TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        operator.role(ROLE).await.unwrap(),
        Some(Role {
            is_superuser: true,
            can_login: true
        })
    );
    let wrong = cql::connect(
        &[contact],
        &credentials(ROLE, "another"),
        Some(ca),
        CQL_TIMEOUT,
    )
    .await
    .err();
    assert!(
        matches!(&wrong, Some(CqlError::BadCredentials(m)) if m == &format!(
            "logging in to {at} as {ROLE}: Provided username {ROLE} and/or password are incorrect"
        )),
        "{wrong:?}"
    );

    // The default superuser disabled, by the operator's.
    operator.disable_role(auth::DEFAULT_ROLE).await.unwrap();
    assert_eq!(
        operator.role(auth::DEFAULT_ROLE).await.unwrap(),
        Some(Role {
            is_superuser: false,
            can_login: false
        })
    );
    // Refused once the node's caches of roles and credentials
    // (`roles_validity`, `credentials_validity`: 2 s) let the change show.
    let disabled = Instant::now();
    let refused = loop {
        let login = cql::connect(
            &[contact],
            &credentials(auth::DEFAULT_ROLE, auth::DEFAULT_PASSWORD),
            Some(ca),
            CQL_TIMEOUT,
        )
        .await;
        match login {
            Err(CqlError::BadCredentials(refused)) => break refused,
            Ok(_) if disabled.elapsed() < AUTH_CACHE_TIMEOUT => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("the disabled default superuser: {other:?}"),
        }
    };
    let to_refusal = disabled.elapsed();
    // Not "incorrect": the password is right, the role may not log in.
    assert_eq!(
        refused,
        format!("logging in to {at} as cassandra: cassandra is not permitted to log in")
    );

    // Clear text to the TLS port, and trust in another CA: refused.
    let plain_began = Instant::now();
    let plain = cql::connect(&[contact], &credentials(ROLE, PASSWORD), None, CQL_TIMEOUT)
        .await
        .err();
    let plain_took = plain_began.elapsed();
    assert!(
        matches!(&plain, Some(CqlError::Unreachable(m)) if m.starts_with(&format!("logging in to {at} as {ROLE}: "))),
        "{plain:?}"
    );
    let trusting = |ca: String| async move {
        cql::connect(
            &[contact],
            &credentials(ROLE, PASSWORD),
            Some(ca.as_bytes()),
            CQL_TIMEOUT,
        )
        .await
        .err()
    };
    let stranger = trusting(authority("another CA").1).await;
    assert!(
        matches!(&stranger, Some(CqlError::Tls(m)) if m.contains("UnknownIssuer")),
        "{stranger:?}"
    );
    // A CA of the same name but another key: the signature is checked.
    let impostor = trusting(authority("orders CA").1).await;
    assert!(
        matches!(&impostor, Some(CqlError::Tls(m)) if m.contains("BadSignature")),
        "{impostor:?}"
    );
    // Of several contacts, the one that takes the login; a closed port
    // first is passed over.
    let closed = SocketAddr::from((Ipv4Addr::LOCALHOST, Ports::free().unwrap().native));
    let second = cql::connect(
        &[closed, contact],
        &credentials(ROLE, PASSWORD),
        Some(ca),
        CQL_TIMEOUT,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(second.member(), contact);

    // system_auth: a new ring's SimpleStrategy, set per datacenter.
    let before = operator.replication(auth::SYSTEM_AUTH).await.unwrap();
    assert_eq!(
        before.get("class").map(String::as_str),
        Some("org.apache.cassandra.locator.SimpleStrategy"),
        "{before:?}"
    );
    operator
        .set_datacenter_replicas(auth::SYSTEM_AUTH, "datacenter1", 1)
        .await
        .unwrap();
    let after = operator.replication(auth::SYSTEM_AUTH).await.unwrap();
    assert_eq!(
        after,
        BTreeMap::from([
            (
                "class".to_string(),
                "org.apache.cassandra.locator.NetworkTopologyStrategy".to_string()
            ),
            ("datacenter1".to_string(), "1".to_string()),
        ])
    );
    // Again: nothing to change.
    operator
        .set_datacenter_replicas(auth::SYSTEM_AUTH, "datacenter1", 1)
        .await
        .unwrap();
    assert_eq!(
        operator.replication("no_such_keyspace").await.unwrap(),
        BTreeMap::new()
    );
    let rows = operator
        .read_all_at_consistency_all(auth::SYSTEM_AUTH)
        .await
        .unwrap();
    assert!(rows >= 2, "the two roles at least: {rows}");
    // A statement the server refuses names what and where.
    let missing = operator
        .set_datacenter_replicas("no_such_keyspace", "datacenter1", 1)
        .await
        .err();
    assert!(
        matches!(&missing, Some(CqlError::Query(m)) if m.starts_with(&format!("setting the replication of keyspace no_such_keyspace to 1 in datacenter datacenter1 through {at} as {ROLE}: "))),
        "{missing:?}"
    );

    drop((default, operator, second));
    let (status, _) = node.stop(STOP_TIMEOUT).await.unwrap();
    eprintln!(
        "real cassandra {VERSION_4_1} with authentication and client TLS: NORMAL after {:.1} s, \
         the default superuser's login after {:.1} s more; before it: {refusals:#?}\n\
         the disabled default superuser, refused after {:.1} s: {refused}\n\
         a missing keyspace: {missing:?}\n\
         clear text to the TLS port ({:.1} s): {plain:?}\n\
         another CA: {stranger:?}\n\
         a CA of the same name: {impostor:?}\n\
         system_auth {before:?} -> {after:?}, {rows} rows read at ALL\n\
         node stopped: {status}; the test took {:.1} s",
        to_normal.as_secs_f64(),
        to_default_role.as_secs_f64(),
        to_refusal.as_secs_f64(),
        plain_took.as_secs_f64(),
        began.elapsed().as_secs_f64(),
    );
}
