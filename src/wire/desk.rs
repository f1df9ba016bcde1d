//! The human desk's wire shapes (SPEC §19): the visitor's handoff request and
//! live channel events, and the operator's takeover, reply and release bodies.

use serde::{Deserialize, Serialize};

/// `POST /v1/conversations/{id}/handoff`: the visitor asks for a person.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffBody {
    /// Why, in the visitor's words (optional; shown to operators).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/operator/conversations/{id}/takeover`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TakeoverBody {
    /// An admin's takeover of a conversation another operator holds.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/operator/conversations/{id}/messages`: an operator's reply.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    pub text: String,
}

/// Who holds a conversation, as a visitor and the console see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HolderKind {
    Assistant,
    Queue,
    Operator,
}

/// `event: holder` on the visitor's streams.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HolderEvent {
    pub holder: HolderKind,
    /// The operator's display name; never their email.
    pub name: Option<String>,
}

/// `event: message` on the visitor's live channel: an operator's reply.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeskMessageEvent {
    pub id: String,
    /// `operator`.
    pub role: crate::states::Role,
    pub name: String,
    pub text: String,
    pub created_at: String,
}

/// `event: typing` on the visitor's live channel: an operator is writing.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TypingEvent {
    pub name: String,
    /// When; a widget replaying old events ignores an old one.
    pub at: String,
}

/// `202` to an ask while a person holds the conversation: stored, not answered
/// by the assistant.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueuedAck {
    pub queued: bool,
    pub conversation: String,
    pub message: String,
    /// Set while the conversation waits in the queue and nobody is there
    /// (outside the hours, or no operator present): what the visitor is told,
    /// so the wait promises nothing nobody will keep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline: Option<String>,
}

/// A change of holder, as the console's calls answer it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HolderView {
    pub conversation: String,
    pub holder: HolderKind,
    pub name: Option<String>,
    /// Set when nobody is there to take it: what the visitor is told. The
    /// conversation stays with the assistant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline: Option<String>,
}

/// `POST /v1/conversations/{id}/contact`: an email left for the team.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContactBody {
    pub email: String,
}

/// One conversation of the console's queue (SPEC §19).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueItem {
    pub conversation: String,
    pub site: String,
    /// `queue` (waiting) or `operator`.
    pub holder: HolderKind,
    /// The operator holding it, by display name.
    pub name: Option<String>,
    /// Whether the operator asking holds it.
    pub mine: bool,
    /// Since when it has waited or been held.
    pub since: String,
    pub waiting_s: i64,
    /// The visitor's messages since the last reply.
    pub unread: i64,
}

/// `GET /v1/operator/queue`: the longest waiting first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    pub items: Vec<QueueItem>,
    /// How many wait for a person (holder `queue`).
    pub waiting: usize,
}

/// `GET /v1/operator/presence`: who is at the desk.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PresenceView {
    pub online: usize,
    /// Their display names (a neutral name for one who set none).
    pub names: Vec<String>,
}
