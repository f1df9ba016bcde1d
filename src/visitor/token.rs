//! Visitor tokens: `dbv1.<payload>.<tag>`, where the payload (base64url JSON) names
//! the site, the visitor and, when verified, the user, and the tag is an HMAC with
//! the visitor-token key. Nothing else is needed to check one: no session table.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::{Deserialize, Serialize};

use crate::secret::Key;

const PREFIX: &str = "dbv1";
/// Tokens are short; anything longer is refused before any work is done.
const MAX_TOKEN_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    #[serde(rename = "s")]
    pub site: String,
    #[serde(rename = "v")]
    pub visitor: String,
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    #[serde(rename = "iat")]
    pub issued_at: i64,
}

pub fn issue(key: &Key, claims: &Claims) -> String {
    let payload = B64.encode(serde_json::to_vec(claims).unwrap_or_default());
    let signed = format!("{PREFIX}.{payload}");
    let tag = B64.encode(key.sign(signed.as_bytes()));
    format!("{signed}.{tag}")
}

pub fn verify(key: &Key, token: &str) -> Option<Claims> {
    let (prefix, payload, tag) = split(token)?;
    let tag = B64.decode(tag).ok()?;
    let signed = &token[..prefix.len() + 1 + payload.len()];
    if !key.verify(signed.as_bytes(), &tag) {
        return None;
    }
    serde_json::from_slice(&B64.decode(payload).ok()?).ok()
}

fn split(token: &str) -> Option<(&str, &str, &str)> {
    if token.len() > MAX_TOKEN_LEN {
        return None;
    }
    let mut parts = token.split('.');
    let (prefix, payload, tag) = (parts.next()?, parts.next()?, parts.next()?);
    (prefix == PREFIX && parts.next().is_none()).then_some((prefix, payload, tag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::{Keys, Secret};

    fn keys(secret: &str) -> Keys {
        Keys::derive(&Secret::new(secret))
    }

    fn claims() -> Claims {
        Claims {
            site: "acme".into(),
            visitor: "v_1".into(),
            user_id: None,
            issued_at: 1,
        }
    }

    #[test]
    fn a_token_verifies_with_its_own_key_only() {
        let k = keys("a-secret-of-at-least-thirty-two-bytes!!");
        let token = issue(&k.visitor_tokens, &claims());
        assert_eq!(verify(&k.visitor_tokens, &token), Some(claims()));
        assert_eq!(verify(&k.confirmations, &token), None);
        let other = keys("another-secret-of-at-least-thirty-two-bytes");
        assert_eq!(verify(&other.visitor_tokens, &token), None);
    }

    #[test]
    fn a_tampered_payload_is_refused() {
        let k = keys("a-secret-of-at-least-thirty-two-bytes!!");
        let token = issue(&k.visitor_tokens, &claims());
        let mut forged = claims();
        forged.site = "other".into();
        let forged_payload = B64.encode(serde_json::to_vec(&forged).unwrap());
        let parts: Vec<&str> = token.split('.').collect();
        let tampered = format!("{}.{}.{}", parts[0], forged_payload, parts[2]);
        assert_eq!(verify(&k.visitor_tokens, &tampered), None);
    }
}
