//! Caps on answers streaming at once, per visitor and per site. A slot is held by a
//! `StreamSlot` value and given back when it is dropped — however the turn ends:
//! finished, failed, abandoned by its client, or unwound by a panic. This file
//! keeps the per-process counts; `redis.rs` keeps shared ones behind the same
//! value.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct StreamCaps {
    open: Mutex<HashMap<String, u32>>,
}

/// A held slot; dropping it gives the slot back.
pub struct StreamSlot {
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl StreamSlot {
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        StreamSlot {
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl StreamCaps {
    /// Takes a slot under every `(key, cap)` at once, or none of them.
    pub fn acquire(self: &Arc<Self>, limits: &[(String, u32)]) -> Option<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if limits
            .iter()
            .any(|(key, cap)| open.get(key).copied().unwrap_or(0) >= *cap)
        {
            return None;
        }
        for (key, _) in limits {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        let caps = Arc::clone(self);
        let keys: Vec<String> = limits.iter().map(|(k, _)| k.clone()).collect();
        Some(StreamSlot::new(move || caps.release(&keys)))
    }

    pub fn open(&self, key: &str) -> u32 {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    fn release(&self, keys: &[String]) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            if let Some(n) = open.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.remove(key);
                }
            }
        }
    }
}
