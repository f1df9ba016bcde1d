//! The one error type at the HTTP edge. Each variant has a stable machine `code` and
//! status (SPEC §5); internal causes are logged here and never shown to the caller.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::wire::{ErrorBody, ErrorDetail};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("the visitor token is missing or invalid")]
    InvalidVisitorToken,
    #[error("this origin may not use this site")]
    OriginNotAllowed,
    #[error("the visitor identity could not be verified")]
    IdentityInvalid,
    #[error("unknown site")]
    SiteNotFound,
    #[error("the confirmation signature does not match")]
    SignatureInvalid,
    #[error("conversation not found")]
    ConversationNotFound,
    #[error("call not found")]
    CallNotFound,
    #[error("this call is no longer waiting for an answer")]
    CallNotPending,
    #[error("this confirmation has expired")]
    ConfirmationExpired,
    #[error("the message is longer than {0} characters")]
    MessageTooLong(usize),
    #[error("the request body is too large")]
    BodyTooLarge,
    #[error("too many requests; try again in {0} seconds")]
    RateLimited(u64),
    #[error("too many answers are streaming at once; try again in {0} seconds")]
    TooManyStreams(u64),
    #[error("the daily budget of this site is spent; try again in {0} seconds")]
    DailyBudgetExhausted(u64),
    #[error("the assistant's model could not be reached")]
    ProviderUnavailable,
    #[error("the service is briefly unavailable; try again in {0} seconds")]
    ServiceUnavailable(u64),
    #[error("no such endpoint")]
    NotFound,
    #[error("this endpoint does not take that method")]
    MethodNotAllowed,
    #[error("sign in as an operator first")]
    OperatorUnauthenticated,
    #[error("the email or the password is wrong")]
    LoginFailed,
    #[error("this needs the admin role")]
    Forbidden,
    #[error("the X-Deskbell-CSRF header is missing or wrong")]
    CsrfInvalid,
    #[error("{0} not found")]
    Missing(&'static str),
    #[error("another operator holds this conversation")]
    ConversationHeld,
    #[error("you do not hold this conversation")]
    NotHeld,
    #[error("this site does not hand conversations to people")]
    HandoffDisabled,
    /// A visitor's edits to a card break its tool's schema or editable list
    /// (SPEC §20); the message says what is wrong.
    #[error("{0}")]
    InvalidEdit(String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            InvalidRequest(_) => StatusCode::BAD_REQUEST,
            InvalidVisitorToken | OperatorUnauthenticated | LoginFailed => StatusCode::UNAUTHORIZED,
            OriginNotAllowed | IdentityInvalid | SignatureInvalid | Forbidden | CsrfInvalid
            | HandoffDisabled => StatusCode::FORBIDDEN,
            SiteNotFound | ConversationNotFound | CallNotFound | NotFound | Missing(_) => {
                StatusCode::NOT_FOUND
            }
            CallNotPending | ConversationHeld | NotHeld => StatusCode::CONFLICT,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ConfirmationExpired => StatusCode::GONE,
            MessageTooLong(_) | BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            InvalidEdit(_) => StatusCode::UNPROCESSABLE_ENTITY,
            RateLimited(_) | TooManyStreams(_) | DailyBudgetExhausted(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ProviderUnavailable | ServiceUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            InvalidRequest(_) => "invalid_request",
            InvalidVisitorToken => "invalid_visitor_token",
            OriginNotAllowed => "origin_not_allowed",
            IdentityInvalid => "identity_invalid",
            SiteNotFound => "site_not_found",
            SignatureInvalid => "signature_invalid",
            ConversationNotFound => "conversation_not_found",
            CallNotFound => "call_not_found",
            CallNotPending => "call_not_pending",
            ConfirmationExpired => "confirmation_expired",
            MessageTooLong(_) | BodyTooLarge => "message_too_long",
            RateLimited(_) => "rate_limited",
            TooManyStreams(_) => "too_many_streams",
            DailyBudgetExhausted(_) => "daily_budget_exhausted",
            ProviderUnavailable => "provider_unavailable",
            ServiceUnavailable(_) => "service_unavailable",
            NotFound | Missing(_) => "not_found",
            MethodNotAllowed => "method_not_allowed",
            OperatorUnauthenticated => "operator_unauthenticated",
            LoginFailed => "login_failed",
            Forbidden => "forbidden",
            CsrfInvalid => "csrf_invalid",
            ConversationHeld => "conversation_held",
            NotHeld => "not_held",
            HandoffDisabled => "handoff_disabled",
            InvalidEdit(_) => "invalid_edit",
            Internal(_) => "internal_error",
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::RateLimited(s)
            | ApiError::TooManyStreams(s)
            | ApiError::DailyBudgetExhausted(s)
            | ApiError::ServiceUnavailable(s) => Some((*s).max(1)),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        crate::store::StoreError::from(e).into()
    }
}

/// Seconds a client is asked to wait when the database cannot be reached.
const DATABASE_RETRY_AFTER_S: u64 = 5;

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::from(anyhow::Error::from(e))
    }
}

/// A database restarting or out of reach is worth a retry, not a 500, however
/// deep in an error's chain it is; the cause is logged, never shown. Anything
/// else is a 500 with its whole chain logged.
impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        match e.downcast_ref::<crate::store::StoreError>() {
            Some(crate::store::StoreError::Unavailable(_)) => {
                tracing::warn!(error = format!("{e:#}"), "the database cannot be reached");
                ApiError::ServiceUnavailable(DATABASE_RETRY_AFTER_S)
            }
            // This process's lease lapsed before the turn could start: another
            // replica (or this one, under its new lease) can take the retry.
            Some(crate::store::StoreError::TakenOver) => {
                tracing::warn!("a turn's start was taken over by another process");
                ApiError::ServiceUnavailable(1)
            }
            _ => ApiError::Internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(cause) = &self {
            tracing::error!(error = format!("{cause:#}"), "internal error");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.to_string(),
            },
        };
        let mut response = (self.status(), axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A JSON body extractor whose every rejection is an `invalid_request` (or a
/// `message_too_long` for an oversized body) in the §5 envelope.
pub struct JsonBody<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::BodyTooLarge)
            }
            Err(rejection) => Err(ApiError::InvalidRequest(rejection.body_text())),
        }
    }
}

/// Reads a JSON body already taken as bytes; the error names the field at fault
/// (`policy: unknown variant …`).
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match path.as_str() {
            "." | "" => ApiError::InvalidRequest(inner.to_string()),
            _ => ApiError::InvalidRequest(format!("{path}: {inner}")),
        }
    })
}

/// The raw request body, bounded by the body limit; an oversized body is a
/// `message_too_long` in the §5 envelope.
pub struct RawBody(pub axum::body::Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::body::Bytes::from_request(req, state).await {
            // A copy: the bytes hyper read share the connection's read buffer,
            // and while any slice of it lives, hyper's next read of that
            // connection (watching for its end while a stream is written)
            // allocates another 8 KiB buffer, kept as long as the stream.
            Ok(bytes) => Ok(RawBody(axum::body::Bytes::copy_from_slice(&bytes))),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::BodyTooLarge)
            }
            Err(rejection) => Err(ApiError::InvalidRequest(rejection.body_text())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    #[test]
    fn a_database_out_of_reach_is_a_503_even_behind_context_and_other_failures_a_500() {
        let unreachable = || StoreError::Unavailable("connection refused".into());
        assert!(matches!(
            ApiError::from(unreachable()),
            ApiError::ServiceUnavailable(DATABASE_RETRY_AFTER_S)
        ));
        let deep = anyhow::Error::from(unreachable()).context("the turn's start");
        assert!(matches!(
            ApiError::from(deep),
            ApiError::ServiceUnavailable(_)
        ));
        assert!(matches!(
            ApiError::from(StoreError::Corrupt("bad row".into())),
            ApiError::Internal(_)
        ));
        assert!(matches!(
            ApiError::from(anyhow::anyhow!("a bug")),
            ApiError::Internal(_)
        ));
    }
}
