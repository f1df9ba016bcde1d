//! Tool calls: their rows, their insertion with their first audit rows, and the
//! outcome of a running call, written by its owner only. The card's own
//! transitions (decision, expiry, superseding) are `cards.rs`.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::audit::{self, AuditRow};
use super::error::StoreResult;
use super::ownership::{Fence, owned};
use super::quotas::Held;
pub use super::quotas::QuotaUse;
use super::{Store, optional_state, sql, state};
use crate::clock::Millis;
pub use crate::states::CallStatus;
use crate::states::{AuditEvent, CallKind, Policy, Reason};

#[derive(Debug, Clone)]
pub struct CallRow {
    pub id: String,
    pub model_call_id: String,
    pub conversation: String,
    pub message: String,
    pub turn: String,
    pub site: String,
    pub visitor: String,
    pub tool: String,
    pub label: String,
    pub policy: Policy,
    pub kind: CallKind,
    /// Canonical JSON (RFC 8785).
    pub arguments: String,
    /// The rendered argument lines as JSON, for confirmations.
    pub lines: Option<String>,
    pub status: CallStatus,
    pub config_digest: Option<String>,
    pub expires_at: Option<Millis>,
    pub signature: Option<String>,
    pub decided_at: Option<Millis>,
    pub reason: Option<Reason>,
    /// The model transcript of the turn up to this call, to resume it.
    pub context: Option<String>,
    /// The message of the continuation that ran a confirmed call, and how it went.
    pub run_message: Option<String>,
    pub run_status: Option<CallStatus>,
    pub created_at: Millis,
    /// The process running the call (auto, or confirmed), until its outcome is
    /// recorded; then none.
    pub owner: Option<String>,
    /// How often the call was sent to its tool (more than once only after a crash).
    pub deliveries: i64,
    /// What the tool answered, as the model was told.
    pub result: Option<String>,
    /// What `confirm_when` said of this call, when a rule decided (SPEC §20).
    pub rule: Option<String>,
    /// The quota use this call holds, if its tool has a quota.
    pub quota: Option<QuotaUse>,
    /// For a card signed for a visitor's edits: the card it replaced.
    pub edited_from: Option<String>,
    /// The card's editable fields as shown (JSON), if any.
    pub editable: Option<String>,
}

impl CallRow {
    /// The quota use this call holds, if any.
    pub(super) fn held(&self) -> Option<Held<'_>> {
        self.quota.as_ref().map(|quota| Held {
            site: &self.site,
            tool: &self.tool,
            quota,
        })
    }
}

/// A call's audit rows carry the call's identity and its canonical arguments.
impl AuditRow {
    pub fn for_call(call: &CallRow, event: AuditEvent, reason: Option<Reason>, at: Millis) -> Self {
        Self {
            at,
            event,
            reason,
            call: call.id.clone(),
            site: call.site.clone(),
            conversation: call.conversation.clone(),
            visitor: call.visitor.clone(),
            tool: call.tool.clone(),
            policy: call.policy,
            arguments: call.arguments.clone(),
            http_status: None,
            duration_ms: None,
            operator: None,
            rule: match event {
                AuditEvent::Requested => call.rule.clone(),
                _ => None,
            },
        }
    }
}

pub(super) const COLUMNS: &str = "id, model_call_id, conversation, message, turn, site, visitor, tool, label, policy, kind, arguments, lines, \
     status, config_digest, expires_at, signature, decided_at, reason, context, run_message, run_status, created_at, owner, deliveries, result, \
     rule, quota_subject, quota_period, quota_note, edited_from, editable";

pub(super) fn call(row: &AnyRow) -> Result<CallRow, sqlx::Error> {
    Ok(CallRow {
        id: row.try_get("id")?,
        model_call_id: row.try_get("model_call_id")?,
        conversation: row.try_get("conversation")?,
        message: row.try_get("message")?,
        turn: row.try_get("turn")?,
        site: row.try_get("site")?,
        visitor: row.try_get("visitor")?,
        tool: row.try_get("tool")?,
        label: row.try_get("label")?,
        policy: state(row, "policy", Policy::parse)?,
        kind: state(row, "kind", CallKind::parse)?,
        arguments: row.try_get("arguments")?,
        lines: row.try_get("lines")?,
        status: state(row, "status", CallStatus::parse)?,
        config_digest: row.try_get("config_digest")?,
        expires_at: row.try_get("expires_at")?,
        signature: row.try_get("signature")?,
        decided_at: row.try_get("decided_at")?,
        reason: optional_state(row, "reason", Reason::parse)?,
        context: row.try_get("context")?,
        run_message: row.try_get("run_message")?,
        run_status: optional_state(row, "run_status", CallStatus::parse)?,
        created_at: row.try_get("created_at")?,
        owner: row.try_get("owner")?,
        deliveries: row.try_get("deliveries")?,
        result: row.try_get("result")?,
        rule: row.try_get("rule")?,
        quota: match (
            row.try_get::<Option<String>, _>("quota_subject")?,
            row.try_get::<Option<String>, _>("quota_period")?,
        ) {
            (Some(subject), Some(period)) => Some(QuotaUse {
                subject,
                period,
                note: row.try_get("quota_note")?,
            }),
            _ => None,
        },
        edited_from: row.try_get("edited_from")?,
        editable: row.try_get("editable")?,
    })
}

/// A conversation's tool calls: raised, decided, run and recorded (SPEC §6).
#[derive(Clone, Copy)]
pub struct Calls<'s>(&'s Store);

impl Store {
    pub fn calls(&self) -> Calls<'_> {
        Calls(self)
    }
}

impl Calls<'_> {
    /// Stores a call together with its first audit rows (such as `requested`).
    /// A call that runs at once (it has an owner) is stored only while its
    /// answer still streams under the same fence: a process paused before this
    /// insert must not leave a running call that another process would claim
    /// and deliver for an answer already taken over (`TakenOver`).
    pub async fn insert(self, c: &CallRow, audit_rows: &[AuditRow]) -> StoreResult<()> {
        let mut tx = self.0.writer().begin().await?;
        insert_in(&mut tx, c, audit_rows).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Stores a call that holds a quota use (`c.quota`), counting the use in
    /// the same transaction (SPEC §20): `Ok(None)` when `max` uses are already
    /// counted in the call's period (nothing is stored), else the call as
    /// stored, with what its card shows of what is left.
    pub async fn insert_counted(
        self,
        c: &CallRow,
        audit_rows: &[AuditRow],
        max: u32,
        window: &str,
    ) -> StoreResult<Option<CallRow>> {
        let mut tx = self.0.writer().begin().await?;
        let mut stored = c.clone();
        if let Some(quota) = stored.quota.as_mut() {
            let held = Held {
                site: &c.site,
                tool: &c.tool,
                quota,
            };
            let Some(used) = super::quotas::count_in(&mut tx, held, max).await? else {
                return Ok(None);
            };
            let left = max.saturating_sub(used);
            quota.note =
                Some(serde_json::json!({"left": left, "max": max, "window": window}).to_string());
        }
        insert_in(&mut tx, &stored, audit_rows).await?;
        tx.commit().await?;
        Ok(Some(stored))
    }

    pub async fn get(self, id: &str) -> StoreResult<Option<CallRow>> {
        let row = sqlx::query(sql(format!("SELECT {COLUMNS} FROM calls WHERE id = $1")))
            .bind(id)
            .fetch_optional(self.0.pool())
            .await?;
        Ok(row.as_ref().map(call).transpose()?)
    }

    pub async fn in_conversation(self, conversation: &str) -> StoreResult<Vec<CallRow>> {
        let rows = sqlx::query(sql(format!(
            "SELECT {COLUMNS} FROM calls WHERE conversation = $1 ORDER BY created_at, id"
        )))
        .bind(conversation)
        .fetch_all(self.0.pool())
        .await?;
        Ok(rows.iter().map(call).collect::<Result<_, _>>()?)
    }

    /// Records a running call's outcome with its audit row: an auto call's status,
    /// or a confirmed call's run (its step on the continuation's message), and
    /// what the tool answered. Only while the call runs under `fence`: when
    /// another process took it over, nothing is written and the answer is
    /// `TakenOver` (that process records the outcome).
    pub async fn record_outcome(
        self,
        call: &CallRow,
        status: CallStatus,
        result: Option<&str>,
        audit_row: &AuditRow,
        fence: &Fence,
    ) -> StoreResult<()> {
        let column = match call.kind {
            CallKind::Auto => "status",
            _ => "run_status",
        };
        let mut tx = self.0.writer().begin().await?;
        let recorded = sqlx::query(sql(format!(
            "UPDATE calls SET {column} = $1, result = COALESCE($2, result), owner = NULL WHERE id = $3 AND owner = $4"
        )))
        .bind(status.as_str())
        .bind(result)
        .bind(&call.id)
        .bind(fence.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if recorded == 0 && recorded_before(&mut tx, call, column, status).await? {
            return Ok(());
        }
        if let Err(e) = owned(recorded) {
            tracing::warn!(
                call = %call.id,
                "a call's outcome was not recorded: another process took it over when this one's lease lapsed"
            );
            return Err(e);
        }
        audit::insert(&mut *tx, audit_row).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A call whose deliveries were all interrupted by crashes: it is failed with
    /// reason `interrupted` and never sent again.
    pub async fn fail_interrupted(
        self,
        c: &CallRow,
        now: Millis,
        fence: &Fence,
    ) -> StoreResult<()> {
        let audit_row = AuditRow::for_call(c, AuditEvent::Failed, Some(Reason::Interrupted), now);
        self.record_outcome(c, CallStatus::Failed, None, &audit_row, fence)
            .await
    }

    /// The calls a turn's answer made, in order (to resume it after a crash).
    pub async fn of_message(self, message: &str) -> StoreResult<Vec<CallRow>> {
        let rows = sqlx::query(sql(format!(
            "SELECT {COLUMNS} FROM calls WHERE message = $1 ORDER BY created_at, id"
        )))
        .bind(message)
        .fetch_all(self.0.pool())
        .await?;
        Ok(rows.iter().map(call).collect::<Result<_, _>>()?)
    }
}

/// Whether this very outcome was recorded already (a commit reported failed
/// that went through): the call has no owner, the status written, and the
/// delivery count it had under this fence (a claim by another process counts
/// one more delivery).
async fn recorded_before(
    tx: &mut super::Tx<'_>,
    call: &CallRow,
    column: &str,
    status: CallStatus,
) -> StoreResult<bool> {
    let row = sqlx::query(sql(format!(
        "SELECT {column} AS status, owner, deliveries FROM calls WHERE id = $1"
    )))
    .bind(&call.id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    let now: Option<String> = row.try_get("status")?;
    let owner: Option<String> = row.try_get("owner")?;
    let deliveries: i64 = row.try_get("deliveries")?;
    Ok(owner.is_none() && deliveries == call.deliveries && now.as_deref() == Some(status.as_str()))
}

/// Stores a call and its first audit rows inside `tx` (see `Calls::insert`).
pub(super) async fn insert_in(
    tx: &mut super::Tx<'_>,
    c: &CallRow,
    audit_rows: &[AuditRow],
) -> StoreResult<()> {
    let inserted = sqlx::query(sql(format!(
        "INSERT INTO calls ({COLUMNS}) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, \
         $28, $29, $30, $31, $32, $33 \
         WHERE $24 IS NULL OR EXISTS (SELECT 1 FROM messages WHERE id = $4 AND owner = $24 AND status = $27)"
    )))
    .bind(&c.id)
    .bind(&c.model_call_id)
    .bind(&c.conversation)
    .bind(&c.message)
    .bind(&c.turn)
    .bind(&c.site)
    .bind(&c.visitor)
    .bind(&c.tool)
    .bind(&c.label)
    .bind(c.policy.as_str())
    .bind(c.kind.as_str())
    .bind(&c.arguments)
    .bind(&c.lines)
    .bind(c.status.as_str())
    .bind(&c.config_digest)
    .bind(c.expires_at)
    .bind(&c.signature)
    .bind(c.decided_at)
    .bind(c.reason.map(|s| s.as_str()))
    .bind(&c.context)
    .bind(&c.run_message)
    .bind(c.run_status.map(|s| s.as_str()))
    .bind(c.created_at)
    .bind(&c.owner)
    .bind(c.deliveries)
    .bind(&c.result)
    .bind(crate::states::MessageStatus::Streaming.as_str())
    .bind(&c.rule)
    .bind(c.quota.as_ref().map(|q| &q.subject))
    .bind(c.quota.as_ref().map(|q| &q.period))
    .bind(c.quota.as_ref().and_then(|q| q.note.as_ref()))
    .bind(&c.edited_from)
    .bind(&c.editable)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    owned(inserted)?;
    for row in audit_rows {
        audit::insert(&mut **tx, row).await?;
    }
    Ok(())
}
