//! Live changes for the operator console (SPEC §15): a conversation started, a
//! card raised or answered, a turn ended. Turns publish here; the console's event
//! stream (`GET /v1/operator/events`) subscribes. Within one process; with
//! several replicas each console sees the changes of the replica it is connected
//! to live, and everything on its next read.

use tokio::sync::broadcast;

use crate::wire::LiveChange;

/// A broadcast of recent changes; a subscriber that falls behind skips ahead
/// (it re-reads the list anyway), and nothing waits for a slow console.
#[derive(Clone)]
pub struct Live {
    sender: broadcast::Sender<LiveChange>,
}

impl Default for Live {
    fn default() -> Self {
        let (sender, _) = broadcast::channel(256);
        Live { sender }
    }
}

impl Live {
    pub fn publish(&self, site: &str, conversation: &str, change: &'static str) {
        // No subscriber is the usual case and not an error.
        let _ = self.sender.send(LiveChange {
            id: conversation.to_string(),
            site: site.to_string(),
            change,
        });
    }

    pub fn subscribe(&self) -> broadcast::Receiver<LiveChange> {
        self.sender.subscribe()
    }
}
