//! The human desk's operations in the OpenAPI document (SPEC §19).
#![allow(dead_code)]

use super::*;

#[utoipa::path(post, path = "/v1/conversations/{id}/handoff", tag = "visitor", security(("visitor" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…)."),
           ("Origin" = String, Header, description = "One of the site's origins.")),
    request_body(content = HandoffBody, description = "Optional: why the visitor wants a person."),
    responses((status = 200, description = "The conversation's holder after: `queue`, or the person who already holds it.", body = HolderView),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "invalid_visitor_token.", body = ErrorBody),
              (status = 403, description = "origin_not_allowed, identity_invalid, handoff_disabled.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 429, description = "rate_limited.", body = ErrorBody),
              (status = 503, description = "service_unavailable.", body = ErrorBody)))]
fn handoff() {}

#[utoipa::path(get, path = "/v1/conversations/{id}/events", tag = "visitor", security(("visitor" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…)."),
           ("Origin" = String, Header, description = "One of the site's origins."),
           ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (a number this stream sent).")),
    responses((status = 200, description = "Server-sent events, each with a numbered `id`: `message` (an operator's reply, `DeskMessageEvent`), `holder` (`HolderEvent`), `typing` (`TypingEvent`) and `card` (`{call, status}`: a card an operator cancelled).", content_type = "text/event-stream", body = String),
              (status = 400, description = "invalid_request: a malformed Last-Event-ID.", body = ErrorBody),
              (status = 401, description = "invalid_visitor_token.", body = ErrorBody),
              (status = 403, description = "origin_not_allowed.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 429, description = "rate_limited, too_many_streams.", body = ErrorBody),
              (status = 503, description = "service_unavailable.", body = ErrorBody)))]
fn events() {}

#[utoipa::path(post, path = "/v1/operator/conversations/{id}/takeover", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…).")),
    request_body(content = TakeoverBody, description = "`force`: an admin's takeover from another operator."),
    responses((status = 200, description = "Held by the caller.", body = HolderView),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "csrf_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 409, description = "conversation_held.", body = ErrorBody)))]
fn takeover() {}

#[utoipa::path(post, path = "/v1/operator/conversations/{id}/messages", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…).")),
    request_body = ReplyBody,
    responses((status = 200, description = "The reply as the visitor receives it.", body = DeskMessageEvent),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "csrf_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 409, description = "not_held.", body = ErrorBody),
              (status = 413, description = "message_too_long.", body = ErrorBody)))]
fn reply() {}

#[utoipa::path(post, path = "/v1/operator/conversations/{id}/release", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…).")),
    responses((status = 200, description = "Back with the assistant.", body = HolderView),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "csrf_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 409, description = "not_held.", body = ErrorBody)))]
fn release() {}

#[utoipa::path(post, path = "/v1/conversations/{id}/contact", tag = "visitor", security(("visitor" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…)."),
           ("Origin" = String, Header, description = "One of the site's origins.")),
    request_body = ContactBody,
    responses((status = 204, description = "Kept for the team; never shown to the model."),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "invalid_visitor_token.", body = ErrorBody),
              (status = 403, description = "origin_not_allowed, identity_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 429, description = "rate_limited.", body = ErrorBody),
              (status = 503, description = "service_unavailable.", body = ErrorBody)))]
fn contact() {}

#[utoipa::path(get, path = "/v1/operator/queue", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    responses((status = 200, description = "Conversations with a person or waiting for one, the longest waiting first.", body = QueueView),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
fn queue() {}

#[utoipa::path(get, path = "/v1/operator/presence", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    responses((status = 200, description = "Operators whose console was in use within two minutes.", body = PresenceView),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
fn presence() {}

#[utoipa::path(post, path = "/v1/operator/conversations/{id}/calls/{call}/cancel", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…)."),
           ("call" = String, Path, description = "A call id (call_…).")),
    responses((status = 204, description = "Cancelled, audited with the operator."),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "csrf_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found, call_not_found.", body = ErrorBody),
              (status = 409, description = "call_not_pending.", body = ErrorBody)))]
fn cancel_card() {}

#[utoipa::path(post, path = "/v1/operator/conversations/{id}/typing", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…).")),
    responses((status = 204, description = "The visitor's channel gets `typing` (`TypingEvent`)."),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "csrf_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found.", body = ErrorBody),
              (status = 409, description = "not_held.", body = ErrorBody)))]
fn typing() {}

#[utoipa::path(post, path = "/v1/conversations/{id}/messages/{message}/feedback", tag = "visitor", security(("visitor" = [])),
    params(("id" = String, Path, description = "A conversation id (c_…)."),
           ("message" = String, Path, description = "An answer's id (m_…), as history gives it."),
           ("Origin" = String, Header, description = "One of the site's origins.")),
    request_body = FeedbackRequest,
    responses((status = 200, description = "The rating as stored; rating the answer again replaces it.", body = FeedbackView),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "invalid_visitor_token.", body = ErrorBody),
              (status = 403, description = "origin_not_allowed, identity_invalid.", body = ErrorBody),
              (status = 404, description = "conversation_not_found (also another visitor's), not_found (no such answer in it).", body = ErrorBody),
              (status = 413, description = "message_too_long.", body = ErrorBody),
              (status = 429, description = "rate_limited.", body = ErrorBody),
              (status = 503, description = "service_unavailable.", body = ErrorBody)))]
fn feedback() {}

#[utoipa::path(get, path = "/v1/operator/feedback/export", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("format" = Option<String>, Query, description = "jsonl (default) or csv."), ("site" = Option<String>, Query)),
    responses((status = 200, description = "Every rating, oldest change first, as a download: JSON lines, or CSV with `format=csv`.", content((String = "application/x-ndjson"), (String = "text/csv"))),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
fn feedback_export() {}

#[utoipa::path(get, path = "/v1/sites/{site}/strings", tag = "visitor",
    params(("site" = String, Path, description = "A site id."),
           ("lang" = Option<String>, Query, description = "The browser's languages, comma-separated (`de-DE,de,en`); used when the site's locale is `auto`.")),
    responses((status = 200, description = "The widget's words in the chosen language, the site's overrides applied.", body = WidgetStrings),
              (status = 404, description = "site_not_found.", body = ErrorBody)))]
fn widget_strings() {}

#[utoipa::path(get, path = "/v1/operator/sites/{site}/strings", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("site" = String, Path, description = "A site id.")),
    responses((status = 200, description = "Every widget string with the catalog's English, the file's override and the console's.", body = SiteStringsView),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 404, description = "not_found (no such site).", body = ErrorBody)))]
fn site_strings() {}

#[utoipa::path(put, path = "/v1/operator/sites/{site}/strings/{key}", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("site" = String, Path, description = "A site id."), ("key" = String, Path, description = "A widget string's key.")),
    request_body = StringChange,
    responses((status = 204, description = "The console's words for this string and language; they win over the file's."),
              (status = 400, description = "invalid_request (a language with no catalog, a text that drops a placeholder, too long).", body = ErrorBody),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "forbidden (admins only), csrf_invalid.", body = ErrorBody),
              (status = 404, description = "not_found (no such site or string).", body = ErrorBody)))]
fn site_string_set() {}

#[utoipa::path(delete, path = "/v1/operator/sites/{site}/strings/{key}", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("site" = String, Path, description = "A site id."), ("key" = String, Path, description = "A widget string's key.")),
    responses((status = 204, description = "The console's words for this string are gone in every language."),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "forbidden (admins only), csrf_invalid.", body = ErrorBody),
              (status = 404, description = "not_found (no such site or string).", body = ErrorBody)))]
fn site_string_reset() {}
