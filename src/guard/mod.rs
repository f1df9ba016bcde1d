//! The checks every visitor request passes before it may cost anything, in the order
//! of SPEC §5: origin, then visitor identity. (Rate limits, the daily budget and the
//! stream caps join this chain in the guards issue.)

use std::sync::Arc;

use axum::http::{HeaderMap, header};

use crate::app::{App, Site};
use crate::error::ApiError;
use crate::secret::verify_hmac_sha256;
use crate::visitor::token::{self, Claims};

/// A visitor whose token and origin were checked.
#[derive(Debug, Clone)]
pub struct Caller {
    pub site: Arc<Site>,
    pub visitor: String,
    pub user_id: Option<String>,
}

/// Runs the guards for a visitor call and returns who is calling.
pub fn admit(app: &App, headers: &HeaderMap) -> Result<Caller, ApiError> {
    // An Origin header is required before anything else is looked at.
    let origin_present = headers.contains_key(header::ORIGIN) || same_origin_fetch(headers);
    if !origin_present {
        return Err(ApiError::OriginNotAllowed);
    }
    let raw = bearer(headers).ok_or(ApiError::InvalidVisitorToken)?;
    // The site named by the token decides which origins are allowed; the token itself
    // is verified right after, before anything else is trusted.
    let unverified = token::peek(raw).ok_or(ApiError::InvalidVisitorToken)?;
    let site = app
        .site(&unverified.site)
        .ok_or(ApiError::InvalidVisitorToken)?
        .clone();
    check_origin(&site, headers)?;
    let claims: Claims =
        token::verify(&app.keys.visitor_tokens, raw).ok_or(ApiError::InvalidVisitorToken)?;
    if claims.site != site.config.id {
        return Err(ApiError::InvalidVisitorToken);
    }
    if site.config.require_verified_identity && claims.user_id.is_none() {
        return Err(ApiError::IdentityInvalid);
    }
    Ok(Caller {
        site,
        visitor: claims.visitor,
        user_id: claims.user_id,
    })
}

/// The `Origin` must be listed for the site, exactly (scheme, host and port).
pub fn check_origin(site: &Site, headers: &HeaderMap) -> Result<(), ApiError> {
    let origin = match headers.get(header::ORIGIN) {
        Some(value) => value
            .to_str()
            .map_err(|_| ApiError::OriginNotAllowed)?
            .to_string(),
        // Browsers omit Origin on same-origin GETs; they also set Sec-Fetch-Site,
        // which page scripts cannot forge. Then the page's origin is this server's.
        None if same_origin_fetch(headers) => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .ok_or(ApiError::OriginNotAllowed)?;
            let candidates = [format!("http://{host}"), format!("https://{host}")];
            return match site.config.origins.iter().any(|o| candidates.contains(o)) {
                true => Ok(()),
                false => Err(ApiError::OriginNotAllowed),
            };
        }
        None => return Err(ApiError::OriginNotAllowed),
    };
    if site.config.origins.iter().any(|o| *o == origin) {
        Ok(())
    } else {
        Err(ApiError::OriginNotAllowed)
    }
}

fn same_origin_fetch(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v == "same-origin")
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
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
