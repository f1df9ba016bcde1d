//! The approvals queue's operations (SPEC §20), documented from their wire types.
#![allow(dead_code)]

use super::*;

#[utoipa::path(get, path = "/v1/operator/approvals", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    responses((status = 200, description = "Tool calls waiting for a teammate's approval, the oldest first, each with the signature an answer sends back.", body = ApprovalsView),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody)))]
fn list() {}

#[utoipa::path(post, path = "/v1/operator/approvals/{call}", tag = "operator",
    security(("operator_token" = []), ("operator_session" = [])),
    params(("call" = String, Path, description = "A call id (call_…).")),
    request_body = ApprovalBody,
    responses((status = 200, description = "Decided: approved calls run now and the visitor is told the outcome on their live channel; declined ones do not run.", body = ApprovalResult),
              (status = 400, description = "invalid_request.", body = ErrorBody),
              (status = 401, description = "operator_unauthenticated.", body = ErrorBody),
              (status = 403, description = "forbidden (the role may not approve this tool), signature_invalid or csrf_invalid.", body = ErrorBody),
              (status = 404, description = "call_not_found.", body = ErrorBody),
              (status = 409, description = "call_not_pending: decided already, still with the visitor, or its tool changed.", body = ErrorBody),
              (status = 410, description = "confirmation_expired: the approval's time ran out.", body = ErrorBody)))]
fn decide() {}
