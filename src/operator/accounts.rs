//! Operator accounts and API tokens (SPEC §13, §15): Argon2id password hashes,
//! and tokens that are shown once and kept only as their SHA-256.

use std::sync::LazyLock;

use argon2::Argon2;
use argon2::password_hash::phc::PasswordHash;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::clock::Millis;
use crate::states::OperatorRole;
use crate::store::{OperatorRow, Store, TokenRow};

/// Operator API tokens start with this, so a leaked one is recognisable (and
/// secret scanners can be taught it).
pub const TOKEN_PREFIX: &str = "dbo_";

/// The shortest password an operator may choose.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// Hashes a password with Argon2id and a fresh salt (a PHC string). Slow on
/// purpose: call it off the async threads.
pub fn hash_password(password: &str) -> anyhow::Result<String> {
    let hash = Argon2::default()
        .hash_password(password.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot hash the password: {e}"))?;
    Ok(hash.to_string())
}

/// Checks a password against a PHC string in constant time. A hash that does not
/// parse verifies nothing.
pub fn verify_password(password: &str, hash: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A hash of a password nobody has, so that an unknown email costs the same
/// Argon2 work as a wrong password (SPEC §15: comparable response times).
static DECOY: LazyLock<String> = LazyLock::new(|| {
    let decoy = random_text(24).unwrap_or_else(|_| "deskbell-decoy-password".into());
    hash_password(&decoy).unwrap_or_default()
});

pub fn verify_decoy(password: &str) {
    let _ = verify_password(password, &DECOY);
}

/// Prepares the decoy hash ahead of the first sign-in, whose timing would
/// otherwise include making it.
pub fn warm_up() {
    LazyLock::force(&DECOY);
}

/// `bytes` random bytes as URL-safe base64 text.
pub fn random_text(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(std::io::Error::other)?;
    Ok(URL_SAFE_NO_PAD.encode(buf))
}

/// Emails are compared without case and surrounding spaces.
pub fn normalise_email(email: &str) -> String {
    email.trim().to_lowercase()
}

pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The longest display name, in characters.
pub const MAX_DISPLAY_NAME_CHARS: usize = 60;

/// A display name is what visitors read beside an operator's replies: one
/// short line of visible text.
pub fn check_display_name(name: &str) -> Result<(), String> {
    let count = name.chars().count();
    if count == 0 || count > MAX_DISPLAY_NAME_CHARS {
        return Err(format!(
            "must have 1 to {MAX_DISPLAY_NAME_CHARS} characters"
        ));
    }
    if name
        .chars()
        .any(|c| c.is_control() || crate::tools::render::hidden(c))
    {
        return Err("must not contain control or invisible characters".into());
    }
    Ok(())
}

/// Creates an operator; an email that exists already is an error.
pub async fn add_operator(
    store: &Store,
    email: &str,
    role: OperatorRole,
    password: &str,
    now: Millis,
) -> anyhow::Result<()> {
    let email = normalise_email(email);
    if !email.contains('@') || email.len() > 320 {
        anyhow::bail!("{email:?} is not an email address");
    }
    if password.chars().count() < MIN_PASSWORD_CHARS {
        anyhow::bail!("the password must have at least {MIN_PASSWORD_CHARS} characters");
    }
    let password = password.to_string();
    let password_hash = tokio::task::spawn_blocking(move || hash_password(&password)).await??;
    let row = OperatorRow {
        email: email.clone(),
        role,
        password_hash,
    };
    if !store.operators().add(&row, now).await? {
        anyhow::bail!("an operator with the email {email} exists already");
    }
    Ok(())
}

/// Creates an API token and returns its text, which is not kept anywhere.
pub async fn new_token(
    store: &Store,
    name: &str,
    role: OperatorRole,
    now: Millis,
) -> anyhow::Result<(TokenRow, String)> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        anyhow::bail!("a token needs a name of 1 to 100 characters");
    }
    let text = format!("{TOKEN_PREFIX}{}", random_text(32)?);
    let row = TokenRow {
        id: crate::ids::new_id("tok"),
        name: name.to_string(),
        role,
        created_at: now,
        revoked_at: None,
    };
    store
        .operators()
        .add_token(&row, &token_hash(&text))
        .await?;
    Ok((row, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_hash_only() {
        let hash = hash_password("correct horse battery").unwrap();
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse battery", &hash));
        assert!(!verify_password("correct horse battery!", &hash));
        assert!(!verify_password("anything", "not a phc string"));
    }
}
