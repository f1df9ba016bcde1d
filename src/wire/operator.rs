//! The operator API's bodies and answers (SPEC §15, `docs/operator-api.md`).

use serde::{Deserialize, Serialize};

use super::{ArgLine, HolderKind, MessageView, Usage};
use crate::states::{CallKind, CallStatus, MessageStatus, OperatorRole, Policy, Reason, Role};

// ---- requests -------------------------------------------------------------------

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    pub email: String,
    pub password: String,
}

/// A sign-in prints without its password.
impl std::fmt::Debug for LoginRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginRequest")
            .field("email", &self.email)
            .field("password", &"***")
            .finish()
    }
}

/// A change of a tool: the fields given replace the current ones; `reset`
/// returns the tool to the file's values and must come alone.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolChange {
    pub label: Option<String>,
    pub description: Option<String>,
    pub policy: Option<Policy>,
    /// A CEL rule on `args` (SPEC §20); `""` turns the rule off.
    pub confirm_when: Option<String>,
    #[serde(default)]
    pub reset: bool,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewRequest {
    pub arguments: serde_json::Value,
}

// ---- answers --------------------------------------------------------------------

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OperatorView {
    pub email: String,
    pub role: OperatorRole,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionView {
    pub operator: OperatorView,
    pub csrf: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Items<T> {
    pub items: Vec<T>,
}

/// One page of a list, newest first; `next_cursor` fetches the next.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SiteView {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConversationSummary {
    pub id: String,
    pub site: String,
    pub visitor: String,
    pub user_id: Option<String>,
    pub started_at: String,
    pub last_message: Option<LastMessage>,
    pub status: Option<MessageStatus>,
    pub pending_card: Option<PendingCard>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LastMessage {
    pub role: Role,
    pub text: String,
    pub at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PendingCard {
    pub call: String,
    pub tool: String,
    pub label: String,
    pub expires_at: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConversationDetail {
    pub id: String,
    pub site: String,
    pub visitor: String,
    pub user_id: Option<String>,
    pub started_at: String,
    pub messages: Vec<OperatorMessage>,
    pub calls: Vec<CallView>,
    pub usage: Usage,
    /// Who holds the conversation (SPEC §19), and an operator holder's name.
    pub holder: HolderKind,
    pub holder_name: Option<String>,
    /// Whether the operator asking holds it.
    pub held_by_you: bool,
    /// The email the visitor left when nobody was there.
    pub contact: Option<String>,
}

/// A §11 message as the widget shows it, with what its answer cost.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OperatorMessage {
    #[serde(flatten)]
    pub message: MessageView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CallView {
    pub call: String,
    pub tool: String,
    pub label: String,
    pub policy: Policy,
    pub kind: CallKind,
    pub status: CallStatus,
    pub reason: Option<Reason>,
    pub arguments: serde_json::Value,
    pub created_at: String,
    pub decided_at: Option<String>,
    pub audit: Vec<serde_json::Value>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolView {
    pub site: String,
    pub name: String,
    pub label: String,
    pub description: String,
    pub policy: Policy,
    /// The `confirm_when` rule in force, if any (SPEC §20).
    pub confirm_when: Option<String>,
    pub source: &'static str,
    pub url: String,
    pub timeout_s: f64,
    pub input_schema: serde_json::Value,
    pub changed: bool,
    pub changed_by: Option<String>,
    pub changed_at: Option<String>,
    pub file: ToolFileView,
}

/// What the file says, for "Reset to file".
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ToolFileView {
    pub label: String,
    pub description: String,
    pub policy: Policy,
    pub confirm_when: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CardPreview {
    pub title: String,
    pub lines: Vec<ArgLine>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct UsageView {
    pub sites: Vec<SiteUsage>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SiteUsage {
    pub site: String,
    pub daily_token_budget: u64,
    pub days: Vec<DayUsage>,
    /// Quota use this UTC day and month, most used first (SPEC §20).
    pub quotas: Vec<QuotaUsage>,
}

/// How much of a tool's quota one visitor (or the site) used in a period.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QuotaUsage {
    pub tool: String,
    /// `visitor` or `site`.
    pub per: String,
    /// The visitor's id, for a quota per visitor.
    pub visitor: Option<String>,
    /// `2026-12-04` (a day) or `2026-12` (a month), UTC.
    pub period: String,
    pub used: i64,
    pub max: u32,
}

#[derive(Debug, Default, Clone, Serialize, utoipa::ToSchema)]
pub struct DayUsage {
    pub day: String,
    pub turns: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// What the budget was charged that day (reservations settled).
    pub spent: i64,
    pub confirmed: i64,
    pub cancelled: i64,
    pub expired: i64,
    pub auto_calls: i64,
    pub failures: i64,
    /// Answers rated helpful and not helpful that day (by the rating's last
    /// change): the day's satisfaction is `helpful / (helpful + not_helpful)`.
    pub helpful: i64,
    pub not_helpful: i64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KnowledgeView {
    pub site: String,
    pub sources: Vec<String>,
    pub indexed: bool,
    pub last_report: Option<ReportView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportView {
    pub at: String,
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub removed: usize,
    pub chunks: usize,
    pub skipped: Vec<SkippedView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SkippedView {
    pub source: String,
    pub reason: String,
}

/// An ingest job (`POST /v1/operator/knowledge/{site}/ingest` with `Prefer:
/// respond-async`, then `GET …/ingest/{job}`): how far it has come and how it
/// ended.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct IngestJobView {
    pub job: String,
    pub site: String,
    /// `running`, `finished` or `failed`.
    pub state: String,
    /// Pages and files read so far.
    pub read: i64,
    /// Pages and files found so far (grows as sitemaps and folders are walked).
    pub found: i64,
    /// The report, once finished.
    pub report: Option<ReportView>,
    /// Why it failed, in words fit to show.
    pub error: Option<String>,
    pub started_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PassageView {
    pub n: usize,
    pub title: String,
    pub url: Option<String>,
    pub text: String,
    pub score: f32,
    /// Which searches found it (`"bm25"`, `"dense"`), and its rank in each.
    pub found_by: Vec<&'static str>,
    pub bm25_rank: Option<u32>,
    pub dense_rank: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SearchView {
    pub passages: Vec<PassageView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub role: OperatorRole,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// One change the console's live list hears about.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct LiveChange {
    pub id: String,
    pub site: String,
    /// `started`, `card_raised`, `card_answered` or `turn_ended`.
    pub change: &'static str,
}

// ---- approvals (§20) ----------------------------------------------------------

/// `GET /v1/operator/approvals`: the calls waiting for a teammate, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApprovalsView {
    pub items: Vec<ApprovalItem>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApprovalItem {
    pub call: String,
    pub site: String,
    pub conversation: String,
    pub visitor: String,
    pub tool: String,
    pub label: String,
    pub policy: crate::states::Policy,
    /// The lines that will run, as the visitor's card shows them.
    pub arguments: Vec<super::ArgLine>,
    pub requested_at: String,
    pub expires_at: String,
    /// What `POST /v1/operator/approvals/{call}` must send back.
    pub signature: String,
    pub approvers: Vec<crate::states::OperatorRole>,
    /// Whether the signed-in operator's role may approve it.
    pub can_approve: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    Approve,
    Decline,
}

/// `POST /v1/operator/approvals/{call}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalBody {
    pub decision: ApprovalDecision,
    pub signature: String,
    /// Shown to the model with a decline (at most 1,000 characters).
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApprovalResult {
    pub call: String,
    /// `confirmed` (approved: the call runs) or `cancelled` (declined).
    pub status: crate::states::CallStatus,
}
