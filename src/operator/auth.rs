//! Who is calling the operator API (SPEC §15): a server-side session named by a
//! cookie, or an API token. Sessions are stored under a keyed hash of the cookie
//! (the "operator sessions" key), expire after 12 hours idle and are revoked on
//! sign-out; a cookie alone never changes anything without the CSRF header. A
//! visitor token is never an operator credential.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};

use super::accounts::{TOKEN_PREFIX, token_hash};
use crate::app::App;
use crate::clock::Millis;
use crate::error::ApiError;
use crate::secret::{Key, constant_time_eq};
use crate::states::OperatorRole;

/// The session cookie's name.
pub const COOKIE: &str = "deskbell_operator";
/// The header that state-changing calls with a cookie must carry.
pub const CSRF_HEADER: &str = "x-deskbell-csrf";
/// A session unused for this long is over.
pub const IDLE_MS: Millis = 12 * 3600 * 1000;
/// A session's last use is written at most this often.
const TOUCH_EVERY_MS: Millis = 60_000;

/// An authenticated operator.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The account's email, or `token:<name>` for an API token.
    pub email: String,
    pub role: OperatorRole,
    /// The session's stored id when signed in with a cookie.
    pub session: Option<String>,
    /// The CSRF token of that session.
    pub csrf: Option<String>,
    /// The stored hash of the API token, when signed in with one.
    pub token: Option<String>,
}

impl Operator {
    /// Refuses a call that needs the admin role; nothing has changed yet.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.role {
            OperatorRole::Admin => Ok(()),
            OperatorRole::Agent => Err(ApiError::Forbidden),
        }
    }

    /// Marks a signed-in operator as at the desk now (`desk::availability`):
    /// an open console calls this while its live stream runs. API tokens are
    /// scripts, not people, and are never present.
    pub async fn present(&self, app: &App) {
        if let Some(id) = &self.session
            && let Err(e) = app
                .store
                .operators()
                .touch_session(id, app.clock.now_ms())
                .await
        {
            tracing::warn!(error = %e, "an operator's presence could not be saved");
        }
    }

    /// Whether the credential still holds: a long-lived stream checks again, so
    /// signing out or revoking a token ends it.
    pub async fn still_valid(&self, app: &App) -> bool {
        let now = app.clock.now_ms();
        let held = match (&self.session, &self.token) {
            (Some(id), _) => app
                .store
                .operators()
                .session(id)
                .await
                .map(|s| s.is_some_and(|s| now - s.last_seen_at < IDLE_MS)),
            (None, Some(hash)) => app
                .store
                .operators()
                .token_by_hash(hash)
                .await
                .map(|t| t.is_some()),
            (None, None) => Ok(false),
        };
        held.unwrap_or(false)
    }
}

/// The stored id of the session a cookie names.
pub fn session_id(key: &Key, cookie: &str) -> String {
    hex::encode(key.sign(format!("session:{cookie}").as_bytes()))
}

/// The CSRF token that goes with a cookie; derived, so nothing more is stored.
pub fn csrf_token(key: &Key, cookie: &str) -> String {
    hex::encode(key.sign(format!("csrf:{cookie}").as_bytes()))
}

impl FromRequestParts<App> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        if let Some(bearer) = crate::guard::bearer(&parts.headers) {
            return by_token(app, bearer).await;
        }
        let cookie = cookie(&parts.headers).ok_or(ApiError::OperatorUnauthenticated)?;
        let operator = by_cookie(app, cookie).await?;
        if changes_state(&parts.method) {
            let sent = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let expected = operator.csrf.as_deref().unwrap_or_default();
            if !constant_time_eq(sent.as_bytes(), expected.as_bytes()) {
                return Err(ApiError::CsrfInvalid);
            }
        }
        Ok(operator)
    }
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

async fn by_token(app: &App, bearer: &str) -> Result<Operator, ApiError> {
    // A visitor token (or anything else) is not looked up at all.
    if !bearer.starts_with(TOKEN_PREFIX) {
        return Err(ApiError::OperatorUnauthenticated);
    }
    let hash = token_hash(bearer);
    let token = app
        .store
        .operators()
        .token_by_hash(&hash)
        .await?
        .ok_or(ApiError::OperatorUnauthenticated)?;
    Ok(Operator {
        email: format!("token:{}", token.name),
        role: token.role,
        session: None,
        csrf: None,
        token: Some(hash),
    })
}

async fn by_cookie(app: &App, cookie: &str) -> Result<Operator, ApiError> {
    let key = &app.keys.operator_sessions;
    let id = session_id(key, cookie);
    let session = app
        .store
        .operators()
        .session(&id)
        .await?
        .ok_or(ApiError::OperatorUnauthenticated)?;
    let now = app.clock.now_ms();
    if now - session.last_seen_at >= IDLE_MS {
        app.store.operators().revoke_session(&id, now).await?;
        return Err(ApiError::OperatorUnauthenticated);
    }
    if now - session.last_seen_at >= TOUCH_EVERY_MS {
        app.store.operators().touch_session(&id, now).await?;
    }
    Ok(Operator {
        email: session.email,
        role: session.role,
        session: Some(id),
        csrf: Some(csrf_token(key, cookie)),
        token: None,
    })
}

/// The session cookie's value, if the request carries one.
pub fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

/// `Set-Cookie` for a new session (or, with `None`, one that clears it). The
/// cookie goes only to the operator API, never to visitor routes; `Secure`
/// unless the server is on loopback, where browsers accept plain HTTP.
pub fn set_cookie(value: Option<&str>, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match value {
        Some(v) => format!("{COOKIE}={v}; Path=/v1/operator; HttpOnly; SameSite=Strict{secure}"),
        None => {
            format!("{COOKIE}=; Path=/v1/operator; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
        }
    }
}
