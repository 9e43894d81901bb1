//! The authority and the member certificates, parsed back with x509-parser:
//! what each says, and that the chain verifies against the CA.

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{CertificateParams, KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use super::*;

const NOW: i64 = 1_800_000_000;

fn authority() -> Authority {
    make_authority("db", "c", NOW, crds::contract::tls::CA_LIFETIME_SECS).unwrap()
}

/// The PEM blocks of `text`, parsed.
fn blocks(text: &str) -> Vec<Pem> {
    Pem::iter_from_buffer(text.as_bytes())
        .map(|p| p.expect("a PEM block"))
        .collect()
}

/// A request as the sidecar makes it: its own key, asking for names of its
/// choosing (which the certificate must not take).
fn request(key: &KeyPair) -> String {
    let mut params = CertificateParams::new(vec![
        "evil.example.com".to_string(),
        "10.0.0.66".to_string(),
    ])
    .unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:masters");
    params.serialize_request(key).unwrap().pem().unwrap()
}

fn member(now: i64, lifetime: u64, asked: Option<i32>) -> MemberCertificate {
    MemberCertificate::new(
        "c-dc-r-0",
        crds::contract::tls::member_dns_names("c-dc-r-0", "db", "c-client", "cluster.local"),
        IpAddr::V4(Ipv4Addr::new(10, 96, 0, 17)),
        now,
        lifetime,
        asked,
    )
}

#[test]
fn the_authority_is_a_p256_ca_of_path_length_zero_naming_its_cluster() {
    let ca = authority();
    let pems = blocks(&ca.cert_pem);
    assert_eq!(pems.len(), 1);
    let cert = pems[0].parse_x509().unwrap();
    assert_eq!(
        cert.subject().to_string(),
        "O=cassandra.rook.io, CN=cassandra-operator CA of Cluster db/c"
    );
    assert_eq!(cert.subject(), cert.issuer(), "self-signed");
    cert.verify_signature(None)
        .expect("its own signature verifies");
    let constraints = cert.basic_constraints().unwrap().expect("basicConstraints");
    assert!(constraints.critical);
    assert!(constraints.value.ca);
    assert_eq!(constraints.value.path_len_constraint, Some(0));
    let usage = cert.key_usage().unwrap().expect("keyUsage").value;
    assert!(usage.key_cert_sign() && usage.crl_sign());
    assert!(!usage.digital_signature() && !usage.key_encipherment());
    assert_eq!(
        cert.validity().not_before.timestamp(),
        NOW - CLOCK_SKEW_SECS
    );
    assert_eq!(
        cert.validity().not_after.timestamp(),
        NOW + i64::try_from(crds::contract::tls::CA_LIFETIME_SECS).unwrap()
    );
    let spki = cert.public_key();
    assert_eq!(spki.algorithm.algorithm, OID_KEY_TYPE_EC_PUBLIC_KEY);
    assert_eq!(
        spki.algorithm
            .parameters
            .as_ref()
            .unwrap()
            .as_oid()
            .unwrap(),
        OID_EC_P256
    );
    // The key is PKCS#8 and is the certificate's.
    assert!(ca.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    ca.issuer().expect("key and certificate belong together");
    assert!(
        !format!("{ca:?}").contains("PRIVATE"),
        "Debug never shows the key"
    );
}

#[test]
fn two_authorities_have_their_own_keys_and_serials() {
    let (a, b) = (authority(), authority());
    assert_ne!(a.key_pem, b.key_pem);
    let serial = |ca: &Authority| {
        blocks(&ca.cert_pem)[0]
            .parse_x509()
            .unwrap()
            .raw_serial()
            .to_vec()
    };
    assert_ne!(serial(&a), serial(&b));
}

#[test]
fn an_authority_whose_key_is_not_its_certificates_is_unusable() {
    let (a, b) = (authority(), authority());
    let mixed = Authority {
        cert_pem: a.cert_pem.clone(),
        key_pem: b.key_pem.clone(),
    };
    assert!(matches!(mixed.issuer(), Err(CertificateError::KeyMismatch)));
    let garbled = Authority {
        cert_pem: "not a certificate".into(),
        key_pem: a.key_pem.clone(),
    };
    assert!(matches!(
        garbled.issuer(),
        Err(CertificateError::ReadCertificate(_))
    ));
    let no_key = Authority {
        cert_pem: a.cert_pem,
        key_pem: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".into(),
    };
    assert!(matches!(no_key.issuer(), Err(CertificateError::ReadKey(_))));
}

#[test]
fn a_request_is_read_for_its_key_and_its_self_signature() {
    for (alg, kind) in [
        (&PKCS_ECDSA_P256_SHA256, "ECDSA P-256"),
        (&PKCS_ECDSA_P384_SHA384, "ECDSA P-384"),
    ] {
        let key = KeyPair::generate_for(alg).unwrap();
        let read = read_request(request(&key).as_bytes()).unwrap();
        assert_eq!(read.kind, kind);
        assert_eq!(read.der_bytes(), key.public_key_raw());
    }
}

#[test]
fn a_request_whose_signature_does_not_verify_is_refused() {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let pem = request(&key);
    let block = &blocks(&pem)[0];
    // One bit of the signed part flipped (the subject's last byte, well
    // inside certificationRequestInfo): still PKCS#10, no longer signed.
    let mut der = block.contents.clone();
    let at = der
        .windows(b"system:masters".len())
        .position(|w| w == b"system:masters")
        .unwrap();
    der[at] ^= 0x01;
    let tampered = pem::encode(&pem::Pem::new("CERTIFICATE REQUEST", der));
    assert!(
        matches!(
            read_request(tampered.as_bytes()),
            Err(RequestRefused::BadSignature(_))
        ),
        "{:?}",
        read_request(tampered.as_bytes())
    );
}

#[test]
fn a_request_of_another_key_type_or_no_request_is_refused() {
    let ed = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let refused = read_request(request(&ed).as_bytes());
    assert!(
        matches!(&refused, Err(RequestRefused::KeyRefused(what)) if what.contains("1.3.101.112")),
        "{refused:?}"
    );
    assert!(matches!(
        read_request(b"hello"),
        Err(RequestRefused::NotPem(_))
    ));
    let ca = authority();
    assert!(
        matches!(
            read_request(ca.cert_pem.as_bytes()),
            Err(RequestRefused::NotPem(why)) if why.contains("CERTIFICATE")
        ),
        "a certificate is no request"
    );
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let two = format!("{}{}", request(&key), request(&key));
    assert!(matches!(
        read_request(two.as_bytes()),
        Err(RequestRefused::NotPem(_))
    ));
    let not_pkcs10 = pem::encode(&pem::Pem::new(
        "CERTIFICATE REQUEST",
        vec![0x30, 0x03, 1, 2, 3],
    ));
    assert!(matches!(
        read_request(not_pkcs10.as_bytes()),
        Err(RequestRefused::NotPkcs10(_))
    ));
}

/// The DNS names and IP addresses of a certificate's SAN extension.
fn names(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<String>) {
    let mut dns = Vec::new();
    let mut ips = Vec::new();
    for name in &cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
    {
        match name {
            GeneralName::DNSName(n) => dns.push(n.to_string()),
            GeneralName::IPAddress(ip) => ips.push(format!("{ip:?}")),
            other => panic!("an unexpected name {other:?}"),
        }
    }
    (dns, ips)
}

#[test]
fn a_member_certificate_names_the_member_as_the_controller_knows_it() {
    let ca = authority();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let read = read_request(request(&key).as_bytes()).unwrap();
    let chain = issue(&ca, &read, &member(NOW, 3600, None)).unwrap();
    let pems = blocks(&chain);
    assert_eq!(pems.len(), 2, "the member's certificate, then the CA's");
    assert_eq!(pems[1].contents, blocks(&ca.cert_pem)[0].contents);
    let leaf = pems[0].parse_x509().unwrap();
    let root = pems[1].parse_x509().unwrap();

    // Signed by the CA, for the member's own key.
    leaf.verify_signature(Some(root.public_key()))
        .expect("the chain verifies against the CA");
    assert_eq!(leaf.issuer(), root.subject());
    assert_eq!(
        leaf.public_key().subject_public_key.data.as_ref(),
        key.public_key_raw()
    );
    assert_eq!(
        leaf.public_key()
            .algorithm
            .parameters
            .as_ref()
            .unwrap()
            .as_oid()
            .unwrap(),
        OID_EC_P256
    );
    // The controller's names, none of the request's.
    assert_eq!(leaf.subject().to_string(), "CN=c-dc-r-0");
    let (dns, ips) = names(&leaf);
    assert_eq!(
        dns,
        [
            "c-dc-r-0",
            "c-dc-r-0.db",
            "c-dc-r-0.db.svc",
            "c-dc-r-0.db.svc.cluster.local",
            "c-dc-r-0.c-client.db.svc.cluster.local",
        ]
    );
    assert_eq!(ips, ["[10, 96, 0, 17]"]);
    // A server and a client of TLS, no CA.
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    assert!(!eku.any && !eku.code_signing && eku.other.is_empty());
    let usage = leaf.key_usage().unwrap().unwrap().value;
    assert!(usage.digital_signature() && usage.key_encipherment());
    assert!(!usage.key_cert_sign());
    assert!(!leaf.basic_constraints().unwrap().unwrap().value.ca);
    let aki = leaf
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => Some(a),
            _ => None,
        })
        .expect("an authority key identifier");
    assert!(aki.key_identifier.is_some());
    // Valid from a minute back (clock skew) for the lifetime.
    assert_eq!(leaf.validity().not_before.timestamp(), NOW - 60);
    assert_eq!(leaf.validity().not_after.timestamp(), NOW + 3600);
    assert!(
        leaf.validity()
            .is_valid_at(x509_parser::time::ASN1Time::from_timestamp(NOW - 30).unwrap())
    );
}

#[test]
fn a_member_certificate_lives_the_shorter_of_the_lifetime_and_what_the_request_asks() {
    assert_eq!(member(NOW, 3600, None).not_after, NOW + 3600);
    assert_eq!(member(NOW, 3600, Some(600)).not_after, NOW + 600);
    assert_eq!(
        member(NOW, 3600, Some(86_400)).not_after,
        NOW + 3600,
        "never longer than the controller's lifetime"
    );
    assert_eq!(member(NOW, 3600, Some(0)).not_after, NOW + 3600);
    assert_eq!(member(NOW, 3600, None).not_before, NOW - CLOCK_SKEW_SECS);
}

#[test]
fn each_certificate_has_its_own_serial_even_for_one_key() {
    let ca = authority();
    let key = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
    let read = read_request(request(&key).as_bytes()).unwrap();
    let serial = |chain: &str| blocks(chain)[0].parse_x509().unwrap().raw_serial().to_vec();
    let a = issue(&ca, &read, &member(NOW, 600, None)).unwrap();
    let b = issue(&ca, &read, &member(NOW, 600, None)).unwrap();
    assert_ne!(serial(&a), serial(&b));
    let pems = blocks(&a);
    let p384 = pems[0].parse_x509().unwrap();
    assert_eq!(
        p384.public_key()
            .algorithm
            .parameters
            .as_ref()
            .unwrap()
            .as_oid()
            .unwrap(),
        OID_NIST_EC_P384,
        "a P-384 key stays on its curve"
    );
}
