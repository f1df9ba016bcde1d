//! The checks every visitor request passes before it may cost anything, in the order
//! of SPEC §5: origin, visitor identity, rate limits (per visitor and per client IP),
//! then — for asks, which spend tokens — the site's daily budget and the caps on
//! answers streaming at once. A question and an answer to a card pass the same ones.

mod admission;
pub mod counters;
mod peer;
pub mod rate;
pub mod redis;
pub mod streams;

pub use admission::{
    Admission, admit_event_stream, admit_question, admit_turn, budget_open_with_tool_version,
};
use counters::Refusal;
pub use peer::{Peer, client_ip, limit_key, owned_headers};

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, header};

use crate::app::{App, Site};
use crate::clock::Millis;
use crate::error::ApiError;
use crate::secret::verify_hmac_sha256;
use crate::visitor::token::{self, Claims};

/// A visitor whose token and origin were checked.
#[derive(Debug, Clone)]
pub struct Caller {
    pub site: Arc<Site>,
    pub visitor: String,
    pub user_id: Option<String>,
    /// The visitor's language (SPEC §22): the site's, or with `locale =
    /// "auto"` the first of the request's `Accept-Language` that has a catalog.
    pub language: &'static str,
}

/// Which visitor call the guards are for. Asks need the shared counters; when
/// they cannot be reached, reading history and minting a visitor fall back to
/// this process's own (SPEC §16: history keeps working without Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Ask,
    Read,
}

/// Runs the guards for a visitor call and returns who is calling; a refusal is
/// counted by its code (SPEC §18).
pub async fn admit(
    app: &App,
    headers: &HeaderMap,
    peer: Peer,
    door: Door,
) -> Result<Caller, ApiError> {
    checked(app, headers, peer, door)
        .await
        .inspect_err(|e| crate::ops::metrics::guard_refused(e.code()))
}

async fn checked(
    app: &App,
    headers: &HeaderMap,
    peer: Peer,
    door: Door,
) -> Result<Caller, ApiError> {
    // The origin comes first: it decides which sites the request may speak for.
    let origins = request_origins(headers)?;
    let listed = |site: &Site| site.config.origins.iter().any(|o| origins.contains(o));
    if !app.sites.values().any(|s| listed(s)) {
        return Err(ApiError::OriginNotAllowed);
    }
    let raw = bearer(headers).ok_or(ApiError::InvalidVisitorToken)?;
    let claims: Claims =
        token::verify(&app.keys.visitor_tokens, raw).ok_or(ApiError::InvalidVisitorToken)?;
    // A valid token of a site that this origin does not serve is another site's.
    let site = app
        .site(&claims.site)
        .filter(|s| listed(s))
        .ok_or(ApiError::InvalidVisitorToken)?
        .clone();
    if site.config.require_verified_identity && claims.user_id.is_none() {
        return Err(ApiError::IdentityInvalid);
    }
    let limits = &site.config.limits;
    let now = app.clock.now_ms();
    let ip = peer::client_ip(peer, headers, &app.trusted_proxies);
    let site_id = &site.config.id;
    // The client address first: a request it refuses creates no visitor bucket,
    // so minting tokens cannot grow the per-visitor map.
    take_per_ip(app, &site, ip, now, door).await?;
    let key = format!("v|{site_id}|{}", claims.visitor);
    take(app, &key, limits.requests_per_minute, now, door).await?;
    let accepted = headers
        .get(axum::http::header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(Caller {
        language: crate::locale::resolve(&site.config.locale, accepted),
        site,
        visitor: claims.visitor,
        user_id: claims.user_id,
    })
}

/// One request from `ip` against its site's per-address limit (SPEC §4, §5): for
/// asks and history, and for minting visitor tokens.
pub async fn take_per_ip(
    app: &App,
    site: &Site,
    ip: IpAddr,
    now: Millis,
    door: Door,
) -> Result<(), ApiError> {
    let key = format!("ip|{}|{}", site.config.id, peer::limit_key(ip));
    take(
        app,
        &key,
        site.config.limits.requests_per_minute_per_ip,
        now,
        door,
    )
    .await
}

/// One request from a bucket of the shared counters; see `Door` for what
/// happens when they cannot be reached.
async fn take(
    app: &App,
    key: &str,
    per_minute: u32,
    now: Millis,
    door: Door,
) -> Result<(), ApiError> {
    let taken = match app.counters.take(key, per_minute, now).await {
        Err(Refusal::Unavailable) if door == Door::Read => {
            app.fallback_counters.take_now(key, per_minute, now)
        }
        other => other,
    };
    taken.map_err(|refusal| refused(refusal_error(refusal, ApiError::RateLimited)))
}

/// The error for a counter's refusal: `over` for a limit, 503 when the shared
/// counters cannot be reached.
pub(super) fn refusal_error(refusal: Refusal, over: fn(u64) -> ApiError) -> ApiError {
    match refusal {
        Refusal::Wait(seconds) => over(seconds),
        Refusal::Unavailable => ApiError::ServiceUnavailable(COUNTERS_RETRY_AFTER_S),
    }
}

/// Seconds a client is asked to wait when the shared counters are unreachable.
const COUNTERS_RETRY_AFTER_S: u64 = 5;

/// The `Origin` must be listed for the site, exactly (scheme, host and port).
pub fn check_origin(site: &Site, headers: &HeaderMap) -> Result<(), ApiError> {
    let origins = request_origins(headers)?;
    match site.config.origins.iter().any(|o| origins.contains(o)) {
        true => Ok(()),
        false => Err(ApiError::OriginNotAllowed),
    }
}

/// The origin the request came from. Browsers omit `Origin` on same-origin GETs but
/// then send `Sec-Fetch-Site: same-origin`, which page scripts cannot forge; the
/// page's origin is then this server's own, over http or https.
fn request_origins(headers: &HeaderMap) -> Result<Vec<String>, ApiError> {
    if let Some(value) = headers.get(header::ORIGIN) {
        let origin = value.to_str().map_err(|_| ApiError::OriginNotAllowed)?;
        return Ok(vec![origin.to_string()]);
    }
    if same_origin_fetch(headers)
        && let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok())
    {
        return Ok(vec![format!("http://{host}"), format!("https://{host}")]);
    }
    Err(ApiError::OriginNotAllowed)
}

/// Refusals are logged at a limited rate: at most one line a second at info level
/// (with how many were refused since), the rest at debug, so a flood of bad
/// requests cannot flood the logs too.
fn refused(e: ApiError) -> ApiError {
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
    static LAST_MS: AtomicI64 = AtomicI64::new(0);
    static SINCE: AtomicU64 = AtomicU64::new(0);
    let now = chrono::Utc::now().timestamp_millis();
    let last = LAST_MS.load(Ordering::Relaxed);
    let count = SINCE.fetch_add(1, Ordering::Relaxed) + 1;
    if now - last >= 1000
        && LAST_MS
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        SINCE.store(0, Ordering::Relaxed);
        tracing::info!(
            code = e.code(),
            refused_in_last_second = count,
            "requests refused by the guards"
        );
    } else {
        tracing::debug!(code = e.code(), "request refused");
    }
    e
}

/// Used by the per-IP key when no peer address is known (a router served without
/// connection info, as in some embedding).
const UNKNOWN_PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

fn same_origin_fetch(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v == "same-origin")
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?;
    Some(token.trim())
}

/// `user_hash = hex(HMAC-SHA256(site identity secret, user_id))`, checked in
/// constant time.
pub fn verify_user_hash(site: &Site, user_id: &str, user_hash: &str) -> Result<(), ApiError> {
    let secret = site
        .config
        .identity_secret
        .as_ref()
        .ok_or(ApiError::IdentityInvalid)?;
    let tag = hex::decode(user_hash.trim()).map_err(|_| ApiError::IdentityInvalid)?;
    if verify_hmac_sha256(secret.expose(), user_id.as_bytes(), &tag) {
        Ok(())
    } else {
        Err(ApiError::IdentityInvalid)
    }
}

/// An identity token's claims; `exp` is required, `nbf`, `name` and `email` are not.
#[derive(serde::Deserialize)]
struct IdentityClaims {
    sub: String,
    exp: i64,
    nbf: Option<i64>,
}

/// The longest an identity token may live: its `exp` at most this far ahead.
const IDENTITY_TOKEN_MAX_S: i64 = 24 * 3600;
/// Clock skew allowed between the operator's backend and this server.
const IDENTITY_LEEWAY_S: i64 = 60;

/// The user id of a valid identity token (SPEC §4): an HS256 JWT signed with the
/// site's identity secret, with `sub`, and `exp` in the future but no more than 24 h
/// ahead; `nbf`, if present, passed. Anything else — expired, not yet valid, badly
/// signed, another algorithm (`none` included) — is `identity_invalid`. Times are
/// the injected clock's.
pub fn verify_identity_token(site: &Site, token: &str, now: Millis) -> Result<String, ApiError> {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode};
    let secret = site
        .config
        .identity_secret
        .as_ref()
        .ok_or(ApiError::IdentityInvalid)?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    // Many JWT libraries add an audience by default; Deskbell names none.
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let key = DecodingKey::from_secret(secret.expose()).map_err(|_| ApiError::IdentityInvalid)?;
    let claims = decode::<IdentityClaims>(token.trim(), &key, &validation)
        .map_err(|_| ApiError::IdentityInvalid)?
        .claims;
    let now_s = now.div_euclid(1000);
    let live = claims.exp > now_s - IDENTITY_LEEWAY_S
        && claims.exp <= now_s + IDENTITY_TOKEN_MAX_S + IDENTITY_LEEWAY_S
        && claims
            .nbf
            .is_none_or(|nbf| nbf <= now_s + IDENTITY_LEEWAY_S);
    let sub_ok = !claims.sub.is_empty() && claims.sub.len() <= 256;
    match live && sub_ok {
        true => Ok(claims.sub),
        false => Err(ApiError::IdentityInvalid),
    }
}

/// Whether `conversation` is one of the caller's: its site's and its visitor's. A
/// malformed, unknown or another visitor's conversation are all "no", and every
/// caller answers all three with the same 404, so a probe learns nothing.
pub async fn owns(
    app: &App,
    caller: &Caller,
    conversation: &crate::ids::ConversationId,
) -> Result<bool, ApiError> {
    Ok(held_by(app, caller, conversation).await?.is_some())
}

/// Who holds `conversation` if it is one of the caller's, `None` if not (as
/// `owns`): a question learns both in the one read it makes anyway.
pub async fn held_by(
    app: &App,
    caller: &Caller,
    conversation: &crate::ids::ConversationId,
) -> Result<Option<crate::store::desk::Holder>, ApiError> {
    let owner = app
        .store
        .conversations()
        .owner(conversation.as_str())
        .await?;
    Ok(owner
        .filter(|(site, visitor, _)| *site == caller.site.config.id && *visitor == caller.visitor)
        .map(|(_, _, holder)| crate::store::desk::Holder::parse(&holder)))
}
