//! What happens to the tool calls of one model response (SPEC §6 step 3): refusals,
//! auto calls, and the one card a turn may raise (through `confirm::card`).

use std::sync::Arc;

use super::finish::step_event;
use super::rounds::without_nul;
use super::{Bubble, Turn};
use crate::config::Policy;
use crate::confirm;
use crate::ids::new_id;
use crate::llm::{ChatMessage, ToolCall};
use crate::states::{AuditEvent, CallKind, Reason};
use crate::store::{AuditRow, CallRow, CallStatus};
use crate::tools::Tool;
use crate::tools::arguments::Arguments;

/// At most this many tool calls of one model response are considered; the rest
/// are refused (audited `too_many_calls`) and the model is told.
pub const MAX_CALLS_PER_RESPONSE: usize = 8;

/// How one call of the response is to be handled.
enum Plan {
    Refuse {
        reason: Reason,
        tell: String,
    },
    /// Runs now; with the `confirm_when` record when a rule let it.
    Auto(Arc<Tool>, Arguments, Option<String>),
    Card(Arc<Tool>, Arguments, Option<String>),
}

impl Turn {
    /// Handles the calls of one response. Auto calls run first, in order; then the
    /// first confirm call (if this turn has not shown a card yet) becomes the card.
    /// Returns true when a card now stops the turn.
    pub(super) async fn handle_calls(
        &mut self,
        messages: &mut Vec<ChatMessage>,
        bubble: &Bubble,
        calls: Vec<ToolCall>,
    ) -> anyhow::Result<bool> {
        let mut card: Option<(ToolCall, Arc<Tool>, Arguments, Option<String>)> = None;
        for (n, call) in calls.into_iter().enumerate() {
            // A prompt-injected model could fan out any number of calls: only the
            // first few of a response are considered (SPEC §6.3).
            let plan = match n < MAX_CALLS_PER_RESPONSE {
                true => self.plan(&call, card.is_some()),
                false => Plan::Refuse {
                    reason: Reason::TooManyCalls,
                    tell: format!(
                        "Not run: at most {MAX_CALLS_PER_RESPONSE} tool calls are considered per response. \
                         Call fewer tools at once."
                    ),
                },
            };
            let (result, is_error) = match plan {
                Plan::Refuse { reason, tell } => {
                    self.record_refusal(&call, bubble, reason).await?;
                    (tell, true)
                }
                Plan::Auto(tool, args, rule) => {
                    self.run_auto(&call, &tool, &args, rule, bubble).await?
                }
                Plan::Card(tool, args, rule) => {
                    card = Some((call, tool, args, rule));
                    continue;
                }
            };
            messages.push(ChatMessage::Tool {
                tool_call_id: call.id.clone(),
                content: result,
                is_error,
            });
        }
        let Some((call, tool, args, rule)) = card else {
            return Ok(false);
        };
        if self
            .raise_card(messages, bubble, &call, &tool, &args, rule)
            .await?
        {
            return Ok(true);
        }
        // The quota is spent: no card, and the model is told (SPEC §20).
        messages.push(ChatMessage::Tool {
            tool_call_id: call.id.clone(),
            content: self.quota_spent(&call, &tool, bubble).await?,
            is_error: true,
        });
        Ok(false)
    }

    fn plan(&self, call: &ToolCall, card_planned: bool) -> Plan {
        let tool = self
            .tools
            .get(&call.name)
            .filter(|t| t.policy != Policy::Off);
        let Some(tool) = tool.cloned() else {
            return Plan::Refuse {
                reason: Reason::ToolOff,
                tell: format!(
                    "Error: there is no tool named {:?} available. Do not call it again.",
                    call.name
                ),
            };
        };
        // The schema is checked on the value re-read from canonical form: the one
        // value that is shown, signed, run and audited.
        let arguments = match Arguments::from_model(&call.arguments) {
            Ok(a) => a,
            Err(why) => {
                return Plan::Refuse {
                    reason: Reason::InvalidArguments,
                    tell: format!("Error: the call was not run: {why}"),
                };
            }
        };
        if let Err(why) = tool.check_arguments(&arguments.value) {
            return Plan::Refuse {
                reason: Reason::InvalidArguments,
                tell: format!("Error: the arguments do not fit the tool's input schema: {why}"),
            };
        }
        // A `confirm_when` decides, on the arguments, whether the call needs
        // its policy's gate at all (SPEC §20).
        let (gated, rule) = tool.gate(&arguments.value);
        if !gated {
            return Plan::Auto(tool, arguments, rule);
        }
        if self.card_raised || card_planned {
            return Plan::Refuse {
                reason: Reason::OnePerTurn,
                tell: "Not run: only one confirmation is possible per turn. Tell the visitor to ask for this \
                       separately once the current request is settled."
                    .into(),
            };
        }
        Plan::Card(tool, arguments, rule)
    }

    fn call_row(
        &self,
        call: &ToolCall,
        bubble: &Bubble,
        tool: Option<&Tool>,
        arguments: String,
        kind: CallKind,
        status: CallStatus,
    ) -> CallRow {
        CallRow {
            id: new_id("call"),
            model_call_id: without_nul(call.id.clone()),
            conversation: self.conversation.clone(),
            message: bubble.id.clone(),
            turn: self.turn.clone(),
            site: self.caller.site.config.id.clone(),
            visitor: self.caller.visitor.clone(),
            tool: without_nul(call.name.clone()),
            label: tool
                .map(|t| t.label.clone())
                .unwrap_or_else(|| without_nul(call.name.clone())),
            policy: tool.map_or(Policy::Off, |t| t.policy),
            kind,
            arguments,
            lines: None,
            status,
            config_digest: None,
            expires_at: None,
            signature: None,
            decided_at: None,
            reason: None,
            context: None,
            run_message: None,
            run_status: None,
            created_at: self.app.clock.now_ms(),
            owner: None,
            deliveries: 0,
            result: None,
            rule: None,
            quota: None,
            edited_from: None,
            editable: None,
        }
    }

    async fn record_refusal(
        &self,
        call: &ToolCall,
        bubble: &Bubble,
        reason: Reason,
    ) -> anyhow::Result<()> {
        let tool = self.tools.get(&call.name).map(Arc::as_ref);
        let kind = if tool.is_some_and(|t| t.policy.is_gated()) {
            CallKind::Confirmation
        } else {
            CallKind::Auto
        };
        let row = self.call_row(
            call,
            bubble,
            tool,
            audit_arguments(&call.arguments),
            kind,
            CallStatus::Refused,
        );
        let now = self.app.clock.now_ms();
        let audit = [
            AuditRow::for_call(&row, AuditEvent::Requested, None, now),
            AuditRow::for_call(&row, AuditEvent::Refused, Some(reason), now),
        ];
        tracing::info!(tool = %call.name, reason = reason.as_str(), "tool call refused");
        // Only the site's own tool names become label values.
        crate::ops::metrics::tool_call(
            &row.site,
            tool.map(|t| t.name.as_str()),
            row.policy.as_str(),
            "refused",
        );
        Ok(self.app.store.calls().insert(&row, &audit).await?)
    }

    async fn run_auto(
        &self,
        call: &ToolCall,
        tool: &Tool,
        arguments: &Arguments,
        rule: Option<String>,
        bubble: &Bubble,
    ) -> anyhow::Result<(String, bool)> {
        let mut row = self.call_row(
            call,
            bubble,
            Some(tool),
            arguments.canonical.clone(),
            CallKind::Auto,
            CallStatus::Running,
        );
        row.rule = rule;
        // Running under this process's lease: a crash before the outcome is
        // recorded leaves a call that recovery delivers again.
        row.owner = Some(self.fence.to_string());
        row.deliveries = 1;
        let requested = AuditRow::for_call(&row, AuditEvent::Requested, None, row.created_at);
        // The fencing tests pause here: the answer may be taken over before
        // its call exists.
        crate::crashpoint::reached("before_call_insert");
        match &tool.quota {
            None => self.app.store.calls().insert(&row, &[requested]).await?,
            Some(quota) => {
                row.quota = Some(confirm::quota::use_of(quota, &row.visitor, row.created_at));
                let window = confirm::quota::window_name(quota.window);
                let counted = self.app.store.calls();
                if counted
                    .insert_counted(&row, &[requested], quota.max, window)
                    .await?
                    .is_none()
                {
                    return Ok((self.quota_spent(call, tool, bubble).await?, true));
                }
            }
        }
        let (outcome, status) = self.run_tool(&row.id, tool, &arguments.value).await?;
        confirm::run::record(&self.app, &row, &outcome, status, &self.fence).await?;
        self.sink.send(step_event(&row.id, tool, status)).await;
        Ok((outcome.result, status == CallStatus::Failed))
    }

    /// Raises the turn's one card (`confirm::card`) and shows it; false when
    /// the tool's quota is spent and no card was raised.
    async fn raise_card(
        &mut self,
        messages: &[ChatMessage],
        bubble: &Bubble,
        call: &ToolCall,
        tool: &Tool,
        arguments: &Arguments,
        rule: Option<String>,
    ) -> anyhow::Result<bool> {
        let mut row = self.call_row(
            call,
            bubble,
            Some(tool),
            arguments.canonical.clone(),
            CallKind::Confirmation,
            CallStatus::Pending,
        );
        row.rule = rule;
        let Some(card) = confirm::card::raise(&self.app, row, tool, arguments, messages).await?
        else {
            return Ok(false);
        };
        self.card_raised = true;
        self.sink.send(card).await;
        Ok(true)
    }

    /// A call refused because its tool's quota is spent: audited, and what the
    /// model is told.
    async fn quota_spent(
        &self,
        call: &ToolCall,
        tool: &Tool,
        bubble: &Bubble,
    ) -> anyhow::Result<String> {
        self.record_refusal(call, bubble, Reason::Quota).await?;
        Ok(tool
            .quota
            .as_ref()
            .map(confirm::quota::spent)
            .unwrap_or_default())
    }
}

/// Arguments for the audit row of a refused call: canonical when they are I-JSON,
/// else the raw text as a JSON string, so the row always holds valid JSON.
fn audit_arguments(raw: &str) -> String {
    match Arguments::from_model(raw) {
        Ok(a) => a.canonical,
        Err(_) => serde_json::Value::String(raw.chars().take(4096).collect()).to_string(),
    }
}
