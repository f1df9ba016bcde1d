//! The operator API (SPEC §15, `docs/operator-api.md`): sign in, read
//! conversations, the audit, usage and knowledge, and steer tools. The console
//! (`console/`) is its browser client. Every route takes an `auth::Operator`,
//! so nothing here answers without a session or an API token, and changes check
//! the admin role before they touch anything.

pub mod accounts;
mod audit;
pub mod auth;
pub mod commands;
mod conversations;
mod feedback;
mod ingest;
mod knowledge;
mod session;
mod strings;
mod tokens;
mod tools;
mod usage;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::routing::{delete, get, patch, post, put};
use axum::{Json, Router};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::app::App;
use crate::clock::Millis;
use crate::error::ApiError;
use crate::wire::{Items, SiteView};
use auth::Operator;

pub use session::warm_up;

pub fn router() -> Router<App> {
    Router::new()
        .route(
            "/v1/operator/session",
            post(session::login)
                .get(session::show)
                .delete(session::logout),
        )
        .route("/v1/operator/sites", get(sites))
        .route("/v1/operator/conversations", get(conversations::list))
        .route("/v1/operator/conversations/{id}", get(conversations::show))
        .route("/v1/operator/events", get(conversations::events))
        .route("/v1/operator/audit", get(audit::list))
        .route("/v1/operator/audit/export", get(audit::export))
        .route("/v1/operator/feedback/export", get(feedback::export))
        .route("/v1/operator/sites/{site}/strings", get(strings::list))
        .route(
            "/v1/operator/sites/{site}/strings/{key}",
            put(strings::set).delete(strings::reset),
        )
        .route("/v1/operator/tools", get(tools::list))
        .route("/v1/operator/tools/{site}/{name}", patch(tools::change))
        .route(
            "/v1/operator/tools/{site}/{name}/preview",
            post(tools::preview),
        )
        .route("/v1/operator/usage", get(usage::show))
        .route("/v1/operator/knowledge", get(knowledge::list))
        .route("/v1/operator/knowledge/{site}/ingest", post(ingest::start))
        .route(
            "/v1/operator/knowledge/{site}/ingest/{job}",
            get(ingest::show),
        )
        .route(
            "/v1/operator/knowledge/{site}/search",
            get(knowledge::search),
        )
        .route("/v1/operator/tokens", get(tokens::list))
        .route("/v1/operator/tokens/{id}", delete(tokens::revoke))
}

async fn sites(State(app): State<App>, _: Operator) -> Json<Items<SiteView>> {
    Json(Items {
        items: app
            .config
            .sites
            .iter()
            .map(|s| SiteView {
                id: s.id.clone(),
                name: s.name.clone(),
            })
            .collect(),
    })
}

/// Query parameters whose every rejection (an unknown name, a wrong type) is an
/// `invalid_request` naming the problem.
pub struct Params<T>(pub T);

impl<S, T> FromRequestParts<S> for Params<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Params(value)),
            Err(rejection) => Err(ApiError::InvalidRequest(rejection.body_text())),
        }
    }
}

/// A page's position as an opaque cursor: the last row's time and id.
pub fn cursor(at: Millis, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{at}:{id}"))
}

pub fn parse_cursor(text: &str) -> Result<(Millis, String), ApiError> {
    let bad = || ApiError::InvalidRequest("cursor: not a cursor this server gave".into());
    let decoded = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (at, id) = decoded.split_once(':').ok_or_else(bad)?;
    Ok((at.parse().map_err(|_| bad())?, id.to_string()))
}

/// A page size from 1 to 100.
pub fn page_limit(limit: Option<i64>, default: i64) -> Result<i64, ApiError> {
    match limit.unwrap_or(default) {
        n @ 1..=100 => Ok(n),
        _ => Err(ApiError::InvalidRequest(
            "limit: must be from 1 to 100".into(),
        )),
    }
}

/// An RFC 3339 time from a query, as milliseconds.
pub fn parse_time(field: &str, text: &str) -> Result<Millis, ApiError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|_| ApiError::InvalidRequest(format!("{field}: must be an RFC 3339 time")))
}

/// One page of `rows` fetched with one row more than `limit`: the extra row says
/// a next page exists, and the last row kept names where it starts.
pub fn page<T>(
    mut rows: Vec<T>,
    limit: i64,
    key: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    if rows.len() as i64 <= limit {
        return (rows, None);
    }
    rows.truncate(limit as usize);
    let next = rows.last().map(key);
    (rows, next)
}

/// The sites a query names: the one given (which must exist), else every site.
pub fn chosen_sites(
    app: &App,
    site: Option<&str>,
) -> Result<Vec<std::sync::Arc<crate::app::Site>>, ApiError> {
    match site {
        Some(id) => {
            query_site(app, id)?;
            Ok(vec![std::sync::Arc::clone(known_site(app, id)?)])
        }
        None => Ok(app
            .config
            .sites
            .iter()
            .filter_map(|s| app.site(&s.id).cloned())
            .collect()),
    }
}

/// A site named in a query, which must exist: an unknown one is bad input.
pub fn query_site(app: &App, site: &str) -> Result<(), ApiError> {
    match app.site(site) {
        Some(_) => Ok(()),
        None => Err(ApiError::InvalidRequest(format!(
            "site: there is no site {site:?}"
        ))),
    }
}

/// The site named in a path, which must exist.
pub fn known_site<'a>(
    app: &'a App,
    site: &str,
) -> Result<&'a std::sync::Arc<crate::app::Site>, ApiError> {
    app.site(site).ok_or(ApiError::Missing("site"))
}
