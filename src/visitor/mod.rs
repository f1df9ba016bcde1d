//! `POST /v1/visitors` (SPEC §4): anonymous and verified visitor identities.

pub mod token;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};

use crate::app::App;
use crate::config::IdentityForms;
use crate::error::{ApiError, JsonBody};
use crate::guard;
use crate::wire::{VisitorRequest, VisitorResponse};

pub fn router() -> Router<App> {
    Router::new().route("/v1/visitors", post(create))
}

async fn create(
    State(app): State<App>,
    peer: guard::Peer,
    headers: HeaderMap,
    JsonBody(body): JsonBody<VisitorRequest>,
) -> Result<Json<VisitorResponse>, ApiError> {
    let site = app.site(&body.site).ok_or(ApiError::SiteNotFound)?.clone();
    guard::check_origin(&site, &headers)?;
    let now = app.clock.now_ms();
    // Each new visitor is an insert and a fresh per-visitor bucket: minting is
    // limited per client address like asking, so it is no way around either.
    let ip = guard::client_ip(peer, &headers, &app.trusted_proxies);
    guard::take_per_ip(&app, &site, ip, now, guard::Door::Read).await?;
    let verified = match (body.user_id, body.user_hash, body.identity_token) {
        (None, None, None) => None,
        (Some(user_id), Some(hash), None) => {
            if user_id.is_empty() || user_id.len() > 256 {
                return Err(ApiError::InvalidRequest(
                    "user_id must be 1-256 characters".into(),
                ));
            }
            // A site that takes identity tokens only refuses the hash, which never
            // expires once leaked.
            if site.config.identity == IdentityForms::Jwt {
                return Err(ApiError::IdentityInvalid);
            }
            guard::verify_user_hash(&site, &user_id, &hash)?;
            Some(user_id)
        }
        (None, None, Some(token)) => Some(guard::verify_identity_token(&site, &token, now)?),
        _ => {
            return Err(ApiError::InvalidRequest(
                "send user_id with user_hash, or identity_token, or neither".into(),
            ));
        }
    };
    let (visitor, user_id) = match verified {
        None => (
            app.store.visitors().create(&site.config.id, now).await?,
            None,
        ),
        Some(user_id) => (
            app.store
                .visitors()
                .for_user(&site.config.id, &user_id, now)
                .await?,
            Some(user_id),
        ),
    };
    let claims = token::Claims {
        site: site.config.id.clone(),
        visitor: visitor.clone(),
        user_id,
        issued_at: now,
    };
    let token = token::issue(&app.keys.visitor_tokens, &claims);
    Ok(Json(VisitorResponse {
        visitor,
        token,
        handoff: site.config.handoff.enabled,
    }))
}
