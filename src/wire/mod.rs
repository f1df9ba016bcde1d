//! Every type that crosses the public boundary: request bodies, stream events and the
//! history JSON of SPEC §4, §5 and §11, and the operator API's of §15
//! (`operator.rs`). A change here is a change of the public
//! contract, so these types live together and nowhere else.

mod card;
mod desk;
mod feedback;
mod operator;
mod strings;

pub use card::*;
pub use desk::*;
pub use feedback::*;
pub use operator::*;
pub use strings::*;

use serde::{Deserialize, Serialize};

use crate::states::{CallKind, CallStatus, MessageStatus, Role};

// ---- requests -------------------------------------------------------------------

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VisitorRequest {
    pub site: String,
    pub user_id: Option<String>,
    pub user_hash: Option<String>,
    /// An HS256 JWT from the operator's backend: `sub` = user id, `exp` ≤ 24 h ahead.
    pub identity_token: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VisitorResponse {
    pub visitor: String,
    pub token: String,
    /// Whether the site hands conversations to people (SPEC §19): the widget
    /// shows "Talk to a person" only then.
    pub handoff: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Confirm,
    Cancel,
}

/// The body of `POST /v1/ask` as sent; `AskRequest::from_body` decides which form it is.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AskBody {
    #[serde(default)]
    pub conversation: Option<String>,
    pub message: Option<String>,
    pub call: Option<String>,
    pub decision: Option<Decision>,
    pub signature: Option<String>,
    /// With `decision: "confirm"`: new values for the card's editable fields
    /// (SPEC §20). The server signs a new card for them instead of running.
    /// Kept as the visitor's own text, so a number an IEEE double cannot hold
    /// is refused rather than rounded (SPEC §7).
    #[schema(value_type = Option<Object>)]
    pub edits: Option<Box<serde_json::value::RawValue>>,
}

/// The two forms of an ask.
#[derive(Debug)]
pub enum AskRequest {
    Question {
        conversation: Option<String>,
        message: String,
    },
    Answer {
        conversation: String,
        call: String,
        decision: Decision,
        signature: String,
        edits: Option<Box<serde_json::value::RawValue>>,
    },
}

impl AskRequest {
    pub fn from_body(body: AskBody) -> Result<Self, String> {
        let answer_fields = body.call.is_some()
            || body.decision.is_some()
            || body.signature.is_some()
            || body.edits.is_some();
        match (body.message, answer_fields) {
            (Some(_), true) => Err("send either a message or an answer to a card, not both".into()),
            (Some(message), false) => {
                if message.trim().is_empty() {
                    return Err("message must not be empty".into());
                }
                // Text columns on PostgreSQL refuse NUL, and no visitor types one.
                if message.contains('\0') {
                    return Err("message must not contain NUL (\\u0000) characters".into());
                }
                Ok(Self::Question {
                    conversation: body.conversation,
                    message,
                })
            }
            (None, true) => {
                let (Some(conversation), Some(call), Some(decision), Some(signature)) =
                    (body.conversation, body.call, body.decision, body.signature)
                else {
                    return Err("an answer needs conversation, call, decision and signature".into());
                };
                if body.edits.is_some() && decision != Decision::Confirm {
                    return Err("edits go with decision \"confirm\"".into());
                }
                Ok(Self::Answer {
                    conversation,
                    call,
                    decision,
                    signature,
                    edits: body.edits,
                })
            }
            (None, false) => Err("message is required".into()),
        }
    }
}

// ---- stream events (§5) ---------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub const ZERO: Usage = Usage {
        input_tokens: 0,
        output_tokens: 0,
    };

    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArgLine {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Citation {
    pub n: u32,
    pub title: String,
    pub url: Option<String>,
    pub snippet: String,
    /// Which knowledge searches found the passage (SPEC §21): `"bm25"`,
    /// `"dense"` or both; absent for a tool's result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found_by: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Answered,
    AwaitingConfirmation,
    Failed,
}

impl From<TurnStatus> for MessageStatus {
    fn from(status: TurnStatus) -> MessageStatus {
        match status {
            TurnStatus::Answered => MessageStatus::Answered,
            TurnStatus::AwaitingConfirmation => MessageStatus::AwaitingConfirmation,
            TurnStatus::Failed => MessageStatus::Failed,
        }
    }
}

impl TurnStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Answered => "answered",
            TurnStatus::AwaitingConfirmation => "awaiting_confirmation",
            TurnStatus::Failed => "failed",
        }
    }
}

/// One server-sent event of the ask stream.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum StreamEvent {
    Decision {
        call: String,
        status: CallStatus,
    },
    Turn {
        conversation: String,
        turn: String,
        message: String,
    },
    Delta {
        text: String,
    },
    Step {
        call: String,
        tool: String,
        label: String,
        status: CallStatus,
    },
    Confirm {
        call: String,
        tool: String,
        label: String,
        arguments: Vec<ArgLine>,
        expires_at: String,
        signature: String,
        /// The lines the visitor may change (SPEC §20).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        editable: Vec<EditableField>,
        /// What is left of the tool's quota once this call runs (SPEC §20).
        #[serde(skip_serializing_if = "Option::is_none")]
        quota: Option<QuotaNote>,
    },
    Citations {
        items: Vec<Citation>,
    },
    Error {
        code: &'static str,
        message: String,
    },
    Done {
        status: TurnStatus,
        usage: Usage,
    },
    /// Nobody is there to take the conversation (SPEC §19): what the
    /// visitor is told; they may leave an email.
    Offline {
        offline: String,
    },
    /// A person took the conversation (SPEC §19): the assistant stops here.
    Holder {
        holder: HolderKind,
        name: Option<String>,
    },
}

impl StreamEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Decision { .. } => "decision",
            StreamEvent::Turn { .. } => "turn",
            StreamEvent::Delta { .. } => "delta",
            StreamEvent::Step { .. } => "step",
            StreamEvent::Confirm { .. } => "confirm",
            StreamEvent::Citations { .. } => "citations",
            StreamEvent::Error { .. } => "error",
            StreamEvent::Done { .. } => "done",
            StreamEvent::Holder { .. } => "holder",
            StreamEvent::Offline { .. } => "offline",
        }
    }
}

// ---- history (§11) --------------------------------------------------------------

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConversationView {
    pub id: String,
    pub messages: Vec<MessageView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageView {
    pub id: String,
    pub role: Role,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<MessageStatus>,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub citations: Option<Vec<Citation>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepView>>,
    /// An operator's display name on their replies (SPEC §19).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The visitor's rating of this answer, when they gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<FeedbackView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StepView {
    pub call: String,
    pub tool: String,
    pub label: String,
    pub kind: CallKind,
    pub status: CallStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Vec<ArgLine>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Only a pending card carries its signature (§11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Present on confirmation steps: `null` until decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Option<String>>,
    /// On a pending card: the lines the visitor may change (SPEC §20).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub editable: Vec<EditableField>,
    /// On a card of a tool with a quota: what was left once it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaNote>,
}

// ---- errors ---------------------------------------------------------------------

/// The §5 error codes, as `error.code` may carry them.
#[derive(utoipa::ToSchema)]
#[schema(as = ErrorCode)]
#[allow(dead_code)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ErrorCodeDoc {
    InvalidRequest,
    InvalidVisitorToken,
    OriginNotAllowed,
    IdentityInvalid,
    SiteNotFound,
    SignatureInvalid,
    ConversationNotFound,
    CallNotFound,
    CallNotPending,
    ConfirmationExpired,
    MessageTooLong,
    RateLimited,
    TooManyStreams,
    DailyBudgetExhausted,
    ProviderUnavailable,
    ServiceUnavailable,
    NotFound,
    MethodNotAllowed,
    OperatorUnauthenticated,
    LoginFailed,
    Forbidden,
    CsrfInvalid,
    ConversationHeld,
    NotHeld,
    HandoffDisabled,
    InvalidEdit,
    InternalError,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    #[schema(value_type = ErrorCodeDoc)]
    pub code: &'static str,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{AskBody, AskRequest};

    /// JSON values of any shape, biased towards the ask body's own keys.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "\\PC{0,12}".prop_map(Value::String),
            prop_oneof![Just("confirm"), Just("cancel"), Just("  ")].prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            let key = prop_oneof![
                Just("conversation".to_string()),
                Just("message".to_string()),
                Just("call".to_string()),
                Just("decision".to_string()),
                Just("signature".to_string()),
                "[a-z]{1,6}",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(key, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_json_body_parses_to_a_valid_form_or_a_clear_error(value in json_value()) {
            let text = value.to_string();
            if let Ok(body) = serde_json::from_str::<AskBody>(&text) {
                match AskRequest::from_body(body) {
                    Ok(AskRequest::Question { message, .. }) => prop_assert!(!message.trim().is_empty()),
                    Ok(AskRequest::Answer { conversation, call, .. }) => {
                        prop_assert!(value.get("conversation").is_some_and(Value::is_string));
                        prop_assert!(!conversation.is_empty() || value["conversation"] == json!(""));
                        prop_assert!(value.get("call").is_some_and(Value::is_string) && call == value["call"].as_str().unwrap_or_default());
                        prop_assert!(value.get("message").is_none_or(Value::is_null));
                    }
                    Err(reason) => prop_assert!(!reason.is_empty()),
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(body) = serde_json::from_slice::<AskBody>(&bytes) {
                let _ = AskRequest::from_body(body);
            }
        }
    }
}
