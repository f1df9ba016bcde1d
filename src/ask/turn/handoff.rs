//! The built-in `handoff` tool (SPEC §19): the assistant hands the
//! conversation to a person. Offered only where the site enables the desk; a
//! response that calls it ends the turn there, whatever else it asked for,
//! and calling it again (in this turn or a later one) is one handoff.

use super::{Stop, Turn};
use crate::llm::ToolCall;
use crate::wire::TurnStatus;

impl Turn {
    /// The reason of the response's `handoff` call, if it made one and the
    /// site's desk is on.
    pub(super) fn handoff_asked(&self, calls: &[ToolCall]) -> Option<String> {
        if !self.caller.site.config.handoff.enabled {
            return None;
        }
        let call = calls.iter().find(|c| c.name == crate::desk::HANDOFF_TOOL)?;
        let reason = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string))
            .unwrap_or_default();
        Some(reason.chars().take(500).collect())
    }

    /// Puts the conversation in the queue (audited as asked by the assistant)
    /// and ends the turn with the visitor told who holds it now.
    pub(super) async fn hand_off(&mut self, reason: &str) -> TurnStatus {
        let queued = crate::desk::to_queue(
            &self.app,
            &self.caller,
            &self.conversation,
            "assistant",
            reason,
        )
        .await;
        match queued {
            Ok(crate::desk::Handed::To(holder, _)) => self.stopped(Stop::HandedOff(holder)).await,
            // Nobody is there: the visitor is told so at once, and the
            // conversation stays with the assistant.
            Ok(crate::desk::Handed::Nobody(message)) => {
                self.sink
                    .send(crate::wire::StreamEvent::Offline { offline: message })
                    .await;
                TurnStatus::Answered
            }
            Err(e) => {
                self.stopped(Stop::Internal(anyhow::anyhow!("the handoff failed: {e}")))
                    .await
            }
        }
    }
}
