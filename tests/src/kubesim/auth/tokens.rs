//! ServiceAccount tokens as the API server issues them: ES256-signed JWTs
//! with the issuer, audience, expiry and the `kubernetes.io` claims that
//! bind a token to its ServiceAccount and, when the kubelet asks for one,
//! to a Pod (and its Node). Pure but for key generation.

use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The issuer and default audience of the tokens (the API server's
/// `--service-account-issuer` on most clusters).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Why a token is refused (the API server answers all of these with the
/// same 401: the reason is only logged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not a JWT")]
    Malformed,
    #[error("invalid signature")]
    Signature,
    #[error("token has expired")]
    Expired,
    #[error("token used before it is valid")]
    NotYetValid,
    #[error("token issued by another issuer or for another audience")]
    Audience,
}

/// What a token says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub namespace: String,
    pub service_account: String,
    pub service_account_uid: String,
    /// The Pod the token is bound to (name, uid).
    pub pod: Option<(String, String)>,
    /// The Node of that Pod (name, uid).
    pub node: Option<(String, String)>,
    pub audiences: Vec<String>,
    /// Seconds since the epoch.
    pub issued_at: u64,
    pub expires_at: u64,
    /// `jti`: the credential id the API server records in the user's extra.
    pub id: String,
}

impl Claims {
    /// `system:serviceaccount:<ns>:<name>`
    pub fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }
}

/// Signs and checks tokens with one P-256 key.
pub struct Signer {
    key: EcdsaKeyPair,
    public: Vec<u8>,
    kid: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("kid", &self.kid).finish()
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(s: &str) -> Result<Vec<u8>, TokenError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| TokenError::Malformed)
}

impl Signer {
    /// A signer with a fresh key.
    pub fn new() -> Result<Signer, String> {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).map_err(|e| e.to_string())?;
        let key = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).map_err(|e| e.to_string())?;
        let public = key.public_key().as_ref().to_vec();
        let kid = b64(&ring::digest::digest(&ring::digest::SHA256, &public).as_ref()[..16]);
        Ok(Signer { key, public, kid })
    }

    /// The signed token for `claims`.
    pub fn issue(&self, claims: &Claims) -> Result<String, String> {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let mut k8s = json!({
            "namespace": claims.namespace,
            "serviceaccount": {"name": claims.service_account, "uid": claims.service_account_uid},
        });
        if let Some((name, uid)) = &claims.pod {
            k8s["pod"] = json!({"name": name, "uid": uid});
        }
        if let Some((name, uid)) = &claims.node {
            k8s["node"] = json!({"name": name, "uid": uid});
        }
        let payload = json!({
            "aud": claims.audiences,
            "exp": claims.expires_at,
            "iat": claims.issued_at,
            "nbf": claims.issued_at,
            "iss": ISSUER,
            "jti": claims.id,
            "kubernetes.io": k8s,
            "sub": claims.username(),
        });
        let signing_input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(payload.to_string().as_bytes())
        );
        let sig = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|e| e.to_string())?;
        Ok(format!("{signing_input}.{}", b64(sig.as_ref())))
    }

    /// The claims of a token this signer issued, if it is valid at `now`
    /// (seconds since the epoch) for the API server's audience.
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let header: Value =
            serde_json::from_slice(&unb64(h)?).map_err(|_| TokenError::Malformed)?;
        if header["alg"] != "ES256" {
            return Err(TokenError::Signature);
        }
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &self.public)
            .verify(format!("{h}.{p}").as_bytes(), &unb64(s)?)
            .map_err(|_| TokenError::Signature)?;
        let c: Value = serde_json::from_slice(&unb64(p)?).map_err(|_| TokenError::Malformed)?;
        let num = |k: &str| c[k].as_u64().ok_or(TokenError::Malformed);
        let (exp, nbf, iat) = (num("exp")?, num("nbf")?, num("iat")?);
        // The API server allows a minute of clock skew on both ends.
        if now > exp + 60 {
            return Err(TokenError::Expired);
        }
        if now + 60 < nbf {
            return Err(TokenError::NotYetValid);
        }
        let audiences: Vec<String> = match &c["aud"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => vec![],
        };
        if c["iss"] != ISSUER || !audiences.iter().any(|a| a == ISSUER) {
            return Err(TokenError::Audience);
        }
        let k = &c["kubernetes.io"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let pair = |v: &Value| v.is_object().then(|| (text(&v["name"]), text(&v["uid"])));
        Ok(Claims {
            namespace: text(&k["namespace"]),
            service_account: text(&k["serviceaccount"]["name"]),
            service_account_uid: text(&k["serviceaccount"]["uid"]),
            pod: pair(&k["pod"]),
            node: pair(&k["node"]),
            audiences,
            issued_at: iat,
            expires_at: exp,
            id: text(&c["jti"]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(now: u64) -> Claims {
        Claims {
            namespace: "ns".into(),
            service_account: "sa".into(),
            service_account_uid: "u1".into(),
            pod: Some(("p-0".into(), "u2".into())),
            node: None,
            audiences: vec![ISSUER.into()],
            issued_at: now,
            expires_at: now + 3600,
            id: "j".into(),
        }
    }

    #[test]
    fn tokens_round_trip_and_expire() {
        let s = Signer::new().unwrap();
        let t = s.issue(&claims(1000)).unwrap();
        assert_eq!(s.verify(&t, 1000).unwrap(), claims(1000));
        assert_eq!(s.verify(&t, 1000 + 3600 + 61), Err(TokenError::Expired));
        assert_eq!(s.verify(&t, 900), Err(TokenError::NotYetValid));
        // Another server's key, or a changed payload, does not verify.
        let other = Signer::new().unwrap();
        assert_eq!(other.verify(&t, 1000), Err(TokenError::Signature));
        let mut parts: Vec<&str> = t.split('.').collect();
        let forged = b64(br#"{"sub":"system:serviceaccount:kube-system:admin"}"#);
        parts[1] = &forged;
        assert_eq!(s.verify(&parts.join("."), 1000), Err(TokenError::Signature));
        assert_eq!(s.verify("kubesim", 1000), Err(TokenError::Malformed));
    }
}
