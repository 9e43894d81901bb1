//! The PEM and X.509 checks the API server makes on a
//! CertificateSigningRequest (pkg/apis/certificates/validation): its
//! `spec.request` must be a `CERTIFICATE REQUEST` PEM block holding a
//! PKCS#10 request whose own signature verifies (`certificates.ParseCSR`,
//! then `CertificateRequest.CheckSignature`), its `status.certificate` PEM
//! `CERTIFICATE` blocks without headers, each holding DER certificates
//! (`validateCertificate`).
//!
//! PEM is decoded as Go's `encoding/pem` decodes it, base64 as Go's
//! `StdEncoding` (what `encoding/json` uses for `[]byte`). DER is read by a
//! small reader of this module: this crate depends on no X.509 parser
//! (rcgen only writes). A request is parsed down to its subject, public key
//! and signature, and the signature is verified with ring (ECDSA P-256 and
//! P-384 with SHA-256 or SHA-384, RSA PKCS#1 v1.5 with SHA-1/256/384/512
//! and a 2048-bit key or more, Ed25519); Go also verifies RSA-PSS, P-521,
//! ECDSA with SHA-512 and RSA keys of 1024 bits, which this answers as an
//! unimplemented algorithm. A certificate is parsed down to the fields of
//! its TBSCertificate (Go also parses the names, times, public key and
//! extensions). Go's parse errors are worded after the part that is
//! malformed; the PEM and signature errors are Go's own words. Pure.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use ring::signature::{self, VerificationAlgorithm};

/// Go's `base64.StdEncoding`: padded, trailing bits tolerated, line
/// breaks ignored (the caller removes them).
const GO_STD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Decodes base64 as Go's `StdEncoding.Decode` does (`\r` and `\n`
/// ignored); the error is the offset of the first bad byte, as Go's
/// `CorruptInputError` gives it.
pub fn go_base64_decode(text: &[u8]) -> Result<Vec<u8>, usize> {
    let clean: Vec<u8> = text
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    GO_STD.decode(&clean).map_err(|e| match e {
        base64::DecodeError::InvalidByte(at, _) | base64::DecodeError::InvalidLastSymbol(at, _) => {
            at
        }
        base64::DecodeError::InvalidLength(len) => len,
        base64::DecodeError::InvalidPadding => clean.len(),
    })
}

/// Go's `base64.StdEncoding.EncodeToString`.
pub fn go_base64_encode(data: &[u8]) -> String {
    GO_STD.encode(data)
}

/// One PEM block as Go's `pem.Decode` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemBlock {
    /// The label of the BEGIN line (`CERTIFICATE REQUEST`).
    pub label: String,
    /// `Key: value` lines before the base64.
    pub headers: Vec<(String, String)>,
    /// The decoded contents.
    pub der: Vec<u8>,
}

const PEM_START: &[u8] = b"\n-----BEGIN ";
const PEM_END: &[u8] = b"\n-----END ";
const PEM_END_OF_LINE: &[u8] = b"-----";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn trim_right<'a>(mut s: &'a [u8], set: &[u8]) -> &'a [u8] {
    while let Some((last, rest)) = s.split_last() {
        if !set.contains(last) {
            break;
        }
        s = rest;
    }
    s
}

fn trim(s: &[u8]) -> String {
    let s = trim_right(s, b" \t\r\n");
    let start = s
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .unwrap_or(s.len());
    String::from_utf8_lossy(&s[start..]).into_owned()
}

/// Go's `getLine`: the line without its `\r\n` and trailing blanks, and
/// what follows it.
fn get_line(data: &[u8]) -> (&[u8], &[u8]) {
    let (mut end, next) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (i, i + 1),
        None => (data.len(), data.len()),
    };
    if next > end && end > 0 && data[end - 1] == b'\r' {
        end -= 1;
    }
    (trim_right(&data[..end], b" \t"), &data[next..])
}

/// Go's `pem.Decode`: the first well-formed block and what follows it
/// (malformed blocks before it are skipped), or None.
pub fn pem_decode(data: &[u8]) -> Option<(PemBlock, &[u8])> {
    let mut rest = data;
    loop {
        if rest.starts_with(&PEM_START[1..]) {
            rest = &rest[PEM_START.len() - 1..];
        } else if let Some(i) = find(rest, PEM_START) {
            rest = &rest[i + PEM_START.len()..];
        } else {
            return None;
        }
        let (type_line, after) = get_line(rest);
        rest = after;
        let Some(label) = type_line.strip_suffix(PEM_END_OF_LINE) else {
            continue;
        };
        let mut headers = Vec::new();
        loop {
            if rest.is_empty() {
                return None;
            }
            let (line, next) = get_line(rest);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                break;
            };
            headers.push((trim(&line[..colon]), trim(&line[colon + 1..])));
            rest = next;
        }
        let (end_index, trailer_index) = if headers.is_empty() && rest.starts_with(&PEM_END[1..]) {
            (0, PEM_END.len() - 1)
        } else {
            match find(rest, PEM_END) {
                Some(i) => (i, i + PEM_END.len()),
                None => continue,
            }
        };
        let trailer = &rest[trailer_index..];
        let trailer_len = label.len() + PEM_END_OF_LINE.len();
        if trailer.len() < trailer_len {
            continue;
        }
        let (trailer, rest_of_end_line) = trailer.split_at(trailer_len);
        if !trailer.starts_with(label)
            || !trailer.ends_with(PEM_END_OF_LINE)
            || !get_line(rest_of_end_line).0.is_empty()
        {
            continue;
        }
        let body: Vec<u8> = rest[..end_index]
            .iter()
            .copied()
            .filter(|b| !matches!(b, b' ' | b'\t'))
            .collect();
        let Ok(der) = go_base64_decode(&body) else {
            continue;
        };
        let (_, after) = get_line(&rest[end_index + PEM_END.len() - 1..]);
        return Some((
            PemBlock {
                label: String::from_utf8_lossy(label).into_owned(),
                headers,
                der,
            },
            after,
        ));
    }
}

/// A reader of DER: tag, definite length, contents.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    /// The next element: its tag, its contents and its whole encoding.
    fn next(&mut self) -> Option<(u8, &'a [u8], &'a [u8])> {
        let d = self.0;
        let tag = *d.first()?;
        if tag & 0x1f == 0x1f {
            // High tag numbers appear in none of these structures.
            return None;
        }
        let first = *d.get(1)?;
        let (len, header) = if first < 0x80 {
            (usize::from(first), 2)
        } else {
            let n = usize::from(first & 0x7f);
            // 0x80 is BER's indefinite length; DER's lengths are minimal.
            if n == 0 || n > 4 {
                return None;
            }
            let bytes = d.get(2..2 + n)?;
            if bytes[0] == 0 {
                return None;
            }
            let len = bytes
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
            if len < 0x80 {
                return None;
            }
            (len, 2 + n)
        };
        let whole = d.get(..header.checked_add(len)?)?;
        self.0 = &d[whole.len()..];
        Some((tag, &whole[header..], whole))
    }

    /// The next element if it has this tag: its contents and whole
    /// encoding.
    fn expect(&mut self, tag: u8) -> Option<(&'a [u8], &'a [u8])> {
        if self.0.first() != Some(&tag) {
            return None;
        }
        self.next().map(|(_, contents, whole)| (contents, whole))
    }

    /// Skips the next element if it has this tag.
    fn skip_if(&mut self, tag: u8) -> Option<()> {
        if self.0.first() == Some(&tag) {
            self.next()?;
        }
        Some(())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The bytes of a BIT STRING without unused bits.
fn bit_string(contents: &[u8]) -> Option<&[u8]> {
    match contents.split_first() {
        Some((0, bits)) => Some(bits),
        _ => None,
    }
}

/// An AlgorithmIdentifier's OID and parameters (the parameters' tag and
/// contents, if any).
struct Algorithm<'a> {
    oid: &'a [u8],
    params: Option<(u8, &'a [u8])>,
}

/// An AlgorithmIdentifier from its contents.
fn algorithm(contents: &[u8]) -> Option<Algorithm<'_>> {
    let mut d = Der(contents);
    let (oid, _) = d.expect(OID)?;
    let params = d.next().map(|(tag, c, _)| (tag, c));
    d.is_empty().then_some(Algorithm { oid, params })
}

// OIDs, as their DER contents.
const RSA_ENCRYPTION: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
const P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const P224: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x21];
const P521: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x23];
const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const ECDSA_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
const SHA1_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
const SHA256_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
const SHA384_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
const SHA512_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
const ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// What the API server and its admission plugins read of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CertificateRequest {
    /// The subject's CommonName.
    pub common_name: Option<String>,
    /// The subject's Organizations (the groups of a client certificate).
    pub organizations: Vec<String>,
}

/// The public key of a request, as far as signatures go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Rsa,
    Ecdsa(Curve),
    Ed25519,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    P256,
    P384,
    /// Known to Go, not to ring.
    Other,
}

fn malformed(what: &str) -> String {
    format!("asn1: structure error: malformed {what}")
}

/// A DirectoryString (UTF8String, PrintableString, IA5String, T61String).
fn directory_string(tag: u8, contents: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => std::str::from_utf8(contents).ok().map(str::to_string),
        0x14 => Some(contents.iter().map(|&b| char::from(b)).collect()),
        _ => None,
    }
}

/// The CommonName and Organizations of a Name.
fn subject(contents: &[u8]) -> Option<(Option<String>, Vec<String>)> {
    let mut cn = None;
    let mut orgs = Vec::new();
    let mut rdns = Der(contents);
    while !rdns.is_empty() {
        let (rdn, _) = rdns.expect(SET)?;
        let mut atvs = Der(rdn);
        while !atvs.is_empty() {
            let (atv, _) = atvs.expect(SEQUENCE)?;
            let mut d = Der(atv);
            let (oid, _) = d.expect(OID)?;
            let (tag, value, _) = d.next()?;
            let value = directory_string(tag, value);
            if oid == ORGANIZATION {
                orgs.extend(value);
            } else if oid == COMMON_NAME {
                cn = value;
            }
        }
    }
    Some((cn, orgs))
}

/// `x509.ParseCertificateRequest` and `CheckSignature` on DER.
fn parse_request(der: &[u8]) -> Result<CertificateRequest, String> {
    let mut outer = Der(der);
    let (request, _) = outer
        .expect(SEQUENCE)
        .ok_or_else(|| malformed("certificate request"))?;
    if !outer.is_empty() {
        return Err("asn1: syntax error: trailing data".into());
    }
    let mut request = Der(request);
    let (info, signed) = request
        .expect(SEQUENCE)
        .ok_or_else(|| malformed("certification request info"))?;
    let (sig_alg, _) = request
        .expect(SEQUENCE)
        .ok_or_else(|| malformed("signature algorithm"))?;
    let (sig, _) = request
        .expect(BIT_STRING)
        .ok_or_else(|| malformed("signature"))?;
    if !request.is_empty() {
        return Err(malformed("certificate request"));
    }
    let mut info = Der(info);
    info.expect(INTEGER).ok_or_else(|| malformed("version"))?;
    let (name, _) = info.expect(SEQUENCE).ok_or_else(|| malformed("subject"))?;
    let (spki, _) = info
        .expect(SEQUENCE)
        .ok_or_else(|| malformed("subject public key info"))?;
    info.expect(0xa0).ok_or_else(|| malformed("attributes"))?;
    if !info.is_empty() {
        return Err(malformed("certification request info"));
    }
    let (common_name, organizations) = subject(name).ok_or_else(|| malformed("subject"))?;
    let mut spki = Der(spki);
    let (key_alg, _) = spki
        .expect(SEQUENCE)
        .ok_or_else(|| malformed("public key algorithm"))?;
    let (key_bits, _) = spki
        .expect(BIT_STRING)
        .ok_or_else(|| malformed("public key"))?;
    let key_bits = bit_string(key_bits).ok_or_else(|| malformed("public key"))?;
    let Algorithm {
        oid: key_oid,
        params: key_params,
    } = algorithm(key_alg).ok_or_else(|| malformed("public key algorithm"))?;
    let key = if key_oid == RSA_ENCRYPTION {
        Key::Rsa
    } else if key_oid == EC_PUBLIC_KEY {
        Key::Ecdsa(match key_params {
            Some((OID, c)) if c == P256 => Curve::P256,
            Some((OID, c)) if c == P384 => Curve::P384,
            Some((OID, c)) if c == P224 || c == P521 => Curve::Other,
            _ => return Err("x509: unsupported elliptic curve".into()),
        })
    } else if key_oid == ED25519 {
        Key::Ed25519
    } else {
        Key::Unknown
    };
    let sig_oid = algorithm(sig_alg)
        .ok_or_else(|| malformed("signature algorithm"))?
        .oid;
    let sig = bit_string(sig).ok_or_else(|| malformed("signature"))?;
    check_signature(key, key_bits, sig_oid, signed, sig)?;
    Ok(CertificateRequest {
        common_name,
        organizations,
    })
}

/// Go's `checkSignature` for a request (SHA-1 allowed, as it is for
/// requests): the algorithm the signature names must fit the key.
fn check_signature(
    key: Key,
    key_bits: &[u8],
    sig_oid: &[u8],
    signed: &[u8],
    sig: &[u8],
) -> Result<(), String> {
    const UNIMPLEMENTED: &str = "x509: cannot verify signature: algorithm unimplemented";
    let (family, wanted) = if [ECDSA_SHA256, ECDSA_SHA384].contains(&sig_oid) {
        ("ECDSA", matches!(key, Key::Ecdsa(_)))
    } else if [SHA1_RSA, SHA256_RSA, SHA384_RSA, SHA512_RSA].contains(&sig_oid) {
        ("RSA", key == Key::Rsa)
    } else if sig_oid == ED25519 {
        ("Ed25519", key == Key::Ed25519)
    } else {
        return Err(UNIMPLEMENTED.into());
    };
    if key == Key::Unknown {
        return Err(UNIMPLEMENTED.into());
    }
    if !wanted {
        let have = match key {
            Key::Rsa => "*rsa.PublicKey",
            Key::Ecdsa(_) => "*ecdsa.PublicKey",
            Key::Ed25519 => "ed25519.PublicKey",
            Key::Unknown => "<nil>",
        };
        return Err(format!(
            "x509: signature algorithm specifies an {family} public key, but have public key of type {have}"
        ));
    }
    let alg: &'static dyn VerificationAlgorithm = match (key, sig_oid) {
        (Key::Ecdsa(Curve::P256), o) if o == ECDSA_SHA256 => &signature::ECDSA_P256_SHA256_ASN1,
        (Key::Ecdsa(Curve::P256), _) => &signature::ECDSA_P256_SHA384_ASN1,
        (Key::Ecdsa(Curve::P384), o) if o == ECDSA_SHA256 => &signature::ECDSA_P384_SHA256_ASN1,
        (Key::Ecdsa(Curve::P384), _) => &signature::ECDSA_P384_SHA384_ASN1,
        (Key::Rsa, o) if o == SHA1_RSA => &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        (Key::Rsa, o) if o == SHA256_RSA => &signature::RSA_PKCS1_2048_8192_SHA256,
        (Key::Rsa, o) if o == SHA384_RSA => &signature::RSA_PKCS1_2048_8192_SHA384,
        (Key::Rsa, _) => &signature::RSA_PKCS1_2048_8192_SHA512,
        (Key::Ed25519, _) => &signature::ED25519,
        _ => return Err(UNIMPLEMENTED.into()),
    };
    signature::UnparsedPublicKey::new(alg, key_bits)
        .verify(signed, sig)
        .map_err(|_| {
            match key {
                Key::Rsa => "crypto/rsa: verification error",
                Key::Ed25519 => "x509: Ed25519 verification failure",
                _ => "x509: ECDSA verification failure",
            }
            .to_string()
        })
}

/// `certificates.ParseCSR` and `CheckSignature`: the first PEM block must
/// be a `CERTIFICATE REQUEST` holding a request signed by its own key. The
/// error is the text of the API server's Invalid message.
pub fn parse_csr(pem: &[u8]) -> Result<CertificateRequest, String> {
    match pem_decode(pem) {
        Some((block, _)) if block.label == "CERTIFICATE REQUEST" => parse_request(&block.der),
        _ => Err("PEM block type must be CERTIFICATE REQUEST".into()),
    }
}

/// Go's `parseCertificate`, as far as the structure goes: the length of
/// the certificate at the start of `der`.
fn parse_certificate(der: &[u8]) -> Result<usize, String> {
    let mut input = Der(der);
    let (cert, whole) = input
        .expect(SEQUENCE)
        .ok_or("x509: malformed certificate")?;
    let mut cert = Der(cert);
    let (tbs, _) = cert
        .expect(SEQUENCE)
        .ok_or("x509: malformed tbs certificate")?;
    let mut tbs = Der(tbs);
    if let Some((version, _)) = tbs.expect(0xa0) {
        let mut v = Der(version);
        let (n, _) = v.expect(INTEGER).ok_or("x509: malformed version")?;
        if !v.is_empty() || n.len() != 1 || n[0] > 2 {
            return Err("x509: invalid version".into());
        }
    }
    tbs.expect(INTEGER).ok_or("x509: malformed serial number")?;
    tbs.expect(SEQUENCE)
        .ok_or("x509: malformed signature algorithm identifier")?;
    tbs.expect(SEQUENCE).ok_or("x509: malformed issuer")?;
    let (validity, _) = tbs.expect(SEQUENCE).ok_or("x509: malformed validity")?;
    let mut validity = Der(validity);
    for _ in 0..2 {
        match validity.next() {
            Some((UTC_TIME | GENERALIZED_TIME, _, _)) => {}
            _ => return Err("x509: malformed validity".into()),
        }
    }
    tbs.expect(SEQUENCE).ok_or("x509: malformed subject")?;
    let (spki, _) = tbs.expect(SEQUENCE).ok_or("x509: malformed spki")?;
    let mut spki = Der(spki);
    spki.expect(SEQUENCE)
        .ok_or("x509: malformed public key algorithm identifier")?;
    spki.expect(BIT_STRING)
        .ok_or("x509: malformed subjectPublicKey")?;
    tbs.skip_if(0x81).ok_or("x509: malformed issuerUniqueID")?;
    tbs.skip_if(0x82).ok_or("x509: malformed subjectUniqueID")?;
    tbs.skip_if(0xa3).ok_or("x509: malformed extensions")?;
    cert.expect(SEQUENCE)
        .ok_or("x509: malformed algorithm identifier")?;
    cert.expect(BIT_STRING).ok_or("x509: malformed signature")?;
    Ok(whole.len())
}

/// `validateCertificate` of `status.certificate` (not empty): PEM blocks,
/// each `CERTIFICATE` without headers and holding one or more DER
/// certificates; text around the blocks is allowed. The error is the
/// text of the API server's Invalid message.
pub fn check_certificates(pem: &[u8]) -> Result<(), String> {
    let mut rest = pem;
    let mut blocks = 0;
    while let Some((block, next)) = pem_decode(rest) {
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                block.label
            ));
        }
        if !block.headers.is_empty() {
            return Err("no PEM block headers are permitted".into());
        }
        blocks += 1;
        let mut der = block.der.as_slice();
        if der.is_empty() {
            return Err("found CERTIFICATE PEM block containing 0 certificates".into());
        }
        while !der.is_empty() {
            let len = parse_certificate(der)?;
            der = &der[len..];
        }
        rest = next;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair};

    fn request(key: &KeyPair, org: &str) -> String {
        let mut params = CertificateParams::new(vec!["c-0.example".into()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "c-0");
        params
            .distinguished_name
            .push(DnType::OrganizationName, org);
        params.serialize_request(key).unwrap().pem().unwrap()
    }

    #[test]
    fn a_signed_request_parses_with_its_subject() {
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
            &rcgen::PKCS_ED25519,
        ] {
            let key = KeyPair::generate_for(alg).unwrap();
            let csr = parse_csr(request(&key, "members").as_bytes()).unwrap();
            assert_eq!(csr.common_name.as_deref(), Some("c-0"));
            assert_eq!(csr.organizations, vec!["members".to_string()]);
        }
    }

    #[test]
    fn a_request_signed_by_another_key_or_altered_is_refused() {
        let key = KeyPair::generate().unwrap();
        let pem = request(&key, "members");
        let (block, _) = pem_decode(pem.as_bytes()).unwrap();
        // The subject's last byte changed: the signature no longer holds.
        let mut der = block.der.clone();
        let at = find(&der, b"members").unwrap() + 6;
        der[at] = b'Z';
        assert_eq!(
            parse_request(&der).unwrap_err(),
            "x509: ECDSA verification failure"
        );
        let mut trailing = block.der.clone();
        trailing.push(0);
        assert_eq!(
            parse_request(&trailing).unwrap_err(),
            "asn1: syntax error: trailing data"
        );
        assert_eq!(
            parse_request(&block.der[..block.der.len() - 1]).unwrap_err(),
            "asn1: structure error: malformed certificate request"
        );
    }

    #[test]
    fn only_a_certificate_request_block_is_a_request() {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["a".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        for pem in [cert.pem(), String::new(), "not pem".into()] {
            assert_eq!(
                parse_csr(pem.as_bytes()).unwrap_err(),
                "PEM block type must be CERTIFICATE REQUEST"
            );
        }
    }

    #[test]
    fn certificates_are_pem_certificate_blocks_of_der() {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["a".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .pem();
        let chain = format!("issued:\n{cert}{cert}trailing text\n");
        assert_eq!(check_certificates(chain.as_bytes()), Ok(()));
        assert_eq!(
            check_certificates(b"hello"),
            Err("must contain at least one CERTIFICATE PEM block".into())
        );
        let csr = request(&key, "o");
        assert_eq!(
            check_certificates(format!("{cert}{csr}").as_bytes()),
            Err("only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\"".into())
        );
        let headers = cert.replacen(
            "-----BEGIN CERTIFICATE-----\n",
            "-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n",
            1,
        );
        assert_eq!(
            check_certificates(headers.as_bytes()),
            Err("no PEM block headers are permitted".into())
        );
        let junk = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            go_base64_encode(b"\x30\x03\x02\x01\x01")
        );
        assert_eq!(
            check_certificates(junk.as_bytes()),
            Err("x509: malformed tbs certificate".into())
        );
    }

    #[test]
    fn pem_decoding_follows_go() {
        let (b, rest) =
            pem_decode(b"junk\n-----BEGIN X-----\r\nAQID\r\n-----END X-----  \nafter").unwrap();
        assert_eq!(
            (b.label.as_str(), b.der.as_slice()),
            ("X", &[1u8, 2, 3][..])
        );
        assert_eq!(rest, b"after");
        // A block whose END names another label is skipped.
        let (b, _) = pem_decode(
            b"-----BEGIN A-----\nAQID\n-----END B-----\n-----BEGIN C-----\nBA==\n-----END C-----\n",
        )
        .unwrap();
        assert_eq!((b.label.as_str(), b.der.as_slice()), ("C", &[4u8][..]));
        assert_eq!(go_base64_decode(b"AQ=="), Ok(vec![1]));
        assert_eq!(go_base64_decode(b"AQ"), Err(2));
        assert_eq!(go_base64_decode(b"A*=="), Err(1));
    }
}
