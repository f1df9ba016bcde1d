//! Wakes the live channels of one conversation, not every channel: with ten
//! thousand open, a reply must not wake ten thousand tasks to have all but
//! a few find it was not for them. Each conversation being listened to has one
//! `Notify`, shared by its channels and dropped with the last of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

#[derive(Default)]
pub struct Wakers {
    map: Mutex<HashMap<String, Arc<Notify>>>,
}

/// One channel's hold on its conversation's `Notify`.
pub struct Watch {
    pub notify: Arc<Notify>,
    conversation: String,
    wakers: Arc<Wakers>,
}

impl Wakers {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A watch on `conversation`, shared with its other channels.
    pub fn watch(self: &Arc<Self>, conversation: &str) -> Watch {
        let notify = self
            .map()
            .entry(conversation.to_string())
            .or_default()
            .clone();
        Watch {
            notify,
            conversation: conversation.to_string(),
            wakers: Arc::clone(self),
        }
    }

    /// Wakes the channels of `conversation` that are waiting (a channel reads
    /// after enabling its wait, so none misses a wake between the two).
    pub fn wake(&self, conversation: &str) {
        if let Some(notify) = self.map().get(conversation) {
            notify.notify_waiters();
        }
    }

    /// Wakes every channel (after this process may have missed some wakes).
    pub fn wake_all(&self) {
        for notify in self.map().values() {
            notify.notify_waiters();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = self.wakers.map();
        // The map's and this watch's: no other channel listens any more.
        if Arc::strong_count(&self.notify) == 2 {
            map.remove(&self.conversation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_the_conversations_channels_only_and_the_last_watch_cleans_up() {
        let wakers = Arc::new(Wakers::default());
        let a = wakers.watch("c_a");
        let a2 = wakers.watch("c_a");
        let b = wakers.watch("c_b");
        {
            let (wa, wb) = (a.notify.notified(), b.notify.notified());
            tokio::pin!(wa, wb);
            wa.as_mut().enable();
            wb.as_mut().enable();
            wakers.wake("c_a");
            assert!(futures_util::poll!(wa.as_mut()).is_ready());
            assert!(futures_util::poll!(wb.as_mut()).is_pending());
        }
        drop((a, b));
        assert_eq!(wakers.map().len(), 1, "c_a is still watched");
        drop(a2);
        assert!(wakers.map().is_empty());
    }
}
