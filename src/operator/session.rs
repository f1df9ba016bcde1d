//! Signing in and out (SPEC §15). A wrong email and a wrong password get the same
//! answer after the same Argon2 work; five failures for an email or from an
//! address within 15 minutes lock further tries out until the oldest ages out.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::accounts::{self, normalise_email, random_text, verify_decoy, verify_password};
use super::auth::{self, Operator};
use crate::app::App;
use crate::error::{ApiError, JsonBody};
use crate::guard::{self, Peer};
use crate::wire::{LoginRequest, OperatorView, SessionView};

/// Failures counted per email and per address within this window.
pub const FAILURE_WINDOW_MS: i64 = 15 * 60 * 1000;
/// Failures within the window after which sign-ins are refused.
pub const MAX_FAILURES: i64 = 5;

/// Password checks running at once.
static VERIFYING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

pub async fn login(
    State(app): State<App>,
    peer: Peer,
    headers: HeaderMap,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<Response, ApiError> {
    let email = normalise_email(&request.email);
    if email.is_empty() || email.len() > 320 {
        return Err(ApiError::InvalidRequest(
            "email: must be an email address".into(),
        ));
    }
    if request.password.is_empty() || request.password.len() > 1024 {
        return Err(ApiError::InvalidRequest(
            "password: must be 1 to 1024 bytes".into(),
        ));
    }
    let ip = guard::client_ip(peer, &headers, &app.trusted_proxies);
    let keys = [
        format!("email:{email}"),
        format!("ip:{}", guard::limit_key(ip)),
    ];
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let now = app.clock.now_ms();
    let since = now - FAILURE_WINDOW_MS;
    // The attempt is written down before the password is checked: sign-ins sent
    // at once see each other, and no more than the limit are ever checked.
    let attempt = crate::ids::new_id("login");
    let counts = app
        .store
        .operators()
        .begin_login_attempt(&attempt, &keys, now, since)
        .await?;
    if let Some((_, first)) = counts.iter().find(|(n, _)| *n > MAX_FAILURES) {
        app.store.operators().forget_login_attempt(&attempt).await?;
        let wait_ms = (first + FAILURE_WINDOW_MS - now).max(1_000);
        return Err(ApiError::RateLimited((wait_ms as u64).div_ceil(1000)));
    }
    let operator = app.store.operators().get(&email).await?;
    let password = request.password;
    let hash = operator.as_ref().map(|o| o.password_hash.clone());
    // Each check holds about 19 MiB for tens of milliseconds: a few at a time,
    // so a flood of sign-ins queues instead of exhausting memory.
    let _permit = VERIFYING
        .acquire()
        .await
        .map_err(|e| ApiError::Internal(e.into()))?;
    let verified = tokio::task::spawn_blocking(move || match hash {
        Some(hash) => verify_password(&password, &hash),
        None => {
            verify_decoy(&password);
            false
        }
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))?;
    let Some(operator) = operator.filter(|_| verified) else {
        tracing::info!("an operator sign-in failed");
        app.store.operators().purge_login_keys(now).await?;
        return Err(ApiError::LoginFailed);
    };
    app.store.operators().forget_login_attempt(&attempt).await?;
    app.store
        .operators()
        .purge_sessions(now - auth::IDLE_MS)
        .await?;
    let cookie = random_text(32).map_err(|e| ApiError::Internal(e.into()))?;
    let key = &app.keys.operator_sessions;
    app.store
        .operators()
        .add_session(&auth::session_id(key, &cookie), &operator.email, now)
        .await?;
    tracing::info!(operator = %operator.email, "an operator signed in");
    let body = SessionView {
        operator: OperatorView {
            email: operator.email,
            role: operator.role,
        },
        csrf: auth::csrf_token(key, &cookie),
    };
    with_cookie(Json(body), Some(&cookie), !app.plain_http)
}

pub async fn show(operator: Operator) -> Json<SessionView> {
    Json(SessionView {
        csrf: operator.csrf.unwrap_or_default(),
        operator: OperatorView {
            email: operator.email,
            role: operator.role,
        },
    })
}

pub async fn logout(State(app): State<App>, operator: Operator) -> Result<Response, ApiError> {
    if let Some(session) = &operator.session {
        app.store
            .operators()
            .revoke_session(session, app.clock.now_ms())
            .await?;
        tracing::info!(operator = %operator.email, "an operator signed out");
    }
    with_cookie(StatusCode::NO_CONTENT, None, !app.plain_http)
}

fn with_cookie(
    body: impl IntoResponse,
    cookie: Option<&str>,
    secure: bool,
) -> Result<Response, ApiError> {
    let mut response = body.into_response();
    let value = HeaderValue::from_str(&auth::set_cookie(cookie, secure))
        .map_err(|e| ApiError::Internal(e.into()))?;
    response.headers_mut().insert(header::SET_COOKIE, value);
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Makes the decoy hash before the first sign-in is timed.
pub fn warm_up() {
    accounts::warm_up();
}
