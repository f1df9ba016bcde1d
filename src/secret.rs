//! Secrets and the keys derived from them. A `Secret` never prints its value, so it
//! can sit in structs that are logged with `{:?}`.

use hkdf::Hkdf;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The minimum length of `BETTER_AUTH_SECRET`, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: &str) -> Self {
        Self(value.to_string())
    }

    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A 32-byte key for one purpose.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(***)")
    }
}

impl Key {
    pub fn sign(&self, message: &[u8]) -> [u8; 32] {
        hmac_sha256(&self.0, message)
    }

    /// Checks a tag in constant time (the comparison inside `verify_slice` is).
    pub fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        verify_hmac_sha256(&self.0, message, tag)
    }
}

/// One key per purpose, each derived from the master secret with HKDF-SHA256 and its
/// own `info` label, so that a token of one kind can never pass as another.
#[derive(Debug, Clone)]
pub struct Keys {
    pub visitor_tokens: Key,
    pub confirmations: Key,
    /// Signs what a teammate approves (SPEC §20): a visitor's card signature
    /// can never pass for an approval, nor the other way round.
    pub approvals: Key,
    pub operator_sessions: Key,
}

impl Keys {
    pub fn derive(master: &Secret) -> Self {
        let hk = Hkdf::<Sha256>::new(Some(b"deskbell"), master.expose());
        let derive = |info: &[u8]| {
            let mut okm = [0u8; 32];
            // 32 bytes is far below HKDF-SHA256's limit of 8160, so this cannot fail.
            let _ = hk.expand(info, &mut okm);
            Key(okm)
        };
        Self {
            visitor_tokens: derive(b"deskbell/v1/visitor-token"),
            confirmations: derive(b"deskbell/v1/confirmation-signature"),
            operator_sessions: derive(b"deskbell/v1/operator-session"),
            approvals: derive(b"deskbell/v1/approval-signature"),
        }
    }
}

pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(message);
    mac.finalize().into_bytes().into()
}

pub fn verify_hmac_sha256(key: &[u8], message: &[u8], tag: &[u8]) -> bool {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(message);
    mac.verify_slice(tag).is_ok()
}

/// 32 random bytes as 64 hex characters, for generated secrets.
pub fn random_hex_secret() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(hex::encode(bytes))
}
/// A URL as it may appear in logs and reports: without credentials, query string
/// or fragment, where operators put API keys (`?key=…`) and passwords. Anything
/// that is not a URL is returned as it is (a file path, say).
/// `message` (an error's text, say) with whatever of `url` could carry a
/// secret taken out: its query and its password, wherever they appear (an HTTP
/// client's error quotes the URL it was sending to, `?token=…` and all).
pub fn without_url_secrets(message: &str, url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return message.to_string();
    };
    let mut out = message.to_string();
    let secrets = [parsed.query(), parsed.password(), parsed.fragment()];
    for secret in secrets.into_iter().flatten().filter(|s| !s.is_empty()) {
        out = out.replace(secret, "…");
    }
    out
}

pub fn loggable_url(text: &str) -> String {
    let Ok(mut url) = reqwest::Url::parse(text) else {
        return text.to_string();
    };
    if !matches!(url.scheme(), "http" | "https") {
        return text.to_string();
    }
    let hidden = url.query().is_some() || url.fragment().is_some();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    match hidden {
        true => format!("{url}?…"),
        false => url.to_string(),
    }
}

/// Whether two secrets (signatures, CSRF tokens) are equal, in time that does
/// not depend on where they differ. The one comparison of secrets in the crate.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_quoting_a_url_loses_its_token_and_password() {
        let url = "https://user:hunter2@mcp.example/mcp?token=s3cr3t-value&x=1";
        let error = format!("error sending request for url ({url}): connection refused");
        let shown = without_url_secrets(&error, url);
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("mcp.example/mcp"), "{shown}");
        assert_eq!(without_url_secrets("plain", "not a url"), "plain");
    }
}
