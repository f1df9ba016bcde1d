//! The signature of a confirmation card (SPEC §8): an HMAC-SHA256, with the
//! confirmation key, over everything the visitor is asked to approve and everything
//! that decides what would run.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde_json::json;

use crate::secret::Key;
use crate::store::CallRow;

/// The signed message: a canonical JSON array of the call's fields, so no field can
/// bleed into another.
fn message(call: &CallRow) -> Vec<u8> {
    let fields = json!([
        "deskbell-confirmation-v1",
        call.site,
        call.visitor,
        call.conversation,
        call.id,
        call.tool,
        call.config_digest,
        call.arguments,
        call.lines,
        call.expires_at,
    ]);
    serde_json_canonicalizer::to_vec(&fields).unwrap_or_default()
}

pub fn sign(key: &Key, call: &CallRow) -> String {
    B64.encode(key.sign(&message(call)))
}

/// True when `signature` is the signature of this call as stored now (constant time).
pub fn verify(key: &Key, call: &CallRow, signature: &str) -> bool {
    match B64.decode(signature.trim()) {
        Ok(tag) => key.verify(&message(call), &tag),
        Err(_) => false,
    }
}
