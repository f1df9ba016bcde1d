//! Operator API tokens in the console (admin): listed without their text, which
//! only `deskbell operator token` ever shows, and revoked.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::auth::Operator;
use crate::app::App;
use crate::clock::rfc3339;
use crate::error::ApiError;
use crate::wire::{Items, TokenView};

pub async fn list(
    State(app): State<App>,
    operator: Operator,
) -> Result<Json<Items<TokenView>>, ApiError> {
    operator.require_admin()?;
    let items = app
        .store
        .operators()
        .tokens()
        .await?
        .into_iter()
        .map(|t| TokenView {
            id: t.id,
            name: t.name,
            role: t.role,
            created_at: rfc3339(t.created_at),
            revoked_at: t.revoked_at.map(rfc3339),
        })
        .collect();
    Ok(Json(Items { items }))
}

pub async fn revoke(
    State(app): State<App>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    operator.require_admin()?;
    match app
        .store
        .operators()
        .revoke_token(&id, app.clock.now_ms())
        .await?
    {
        true => {
            tracing::info!(operator = %operator.email, token = %id, "an API token was revoked");
            Ok(StatusCode::NO_CONTENT)
        }
        false => Err(ApiError::Missing("token")),
    }
}
