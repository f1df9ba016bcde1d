//! A decoder layer's cache of keys and values, shared by clones of the model
//! until one of them appends (`decoder.rs`).

use std::sync::Arc;

use candle_core::{Result, bail};

/// Positions of room a cache copied from a shared one gets, so that the answer's
/// tokens are appended without moving it again.
const ROOM: usize = 256;

/// A layer's cached keys and values (`positions × kv_heads × dim` each). Clones
/// share them until one appends: then that one copies first, so a kept prompt
/// prefix is never changed by the turns that start from it.
#[derive(Debug, Clone, Default)]
pub(super) struct Cache {
    pub(super) keys: Arc<Vec<f32>>,
    pub(super) values: Arc<Vec<f32>>,
}

impl Cache {
    /// Keeps the first `position` positions and appends `keys` and `values`.
    pub(super) fn append(
        &mut self,
        position: usize,
        width: usize,
        keys: &[f32],
        values: &[f32],
    ) -> Result<()> {
        let kept = position * width;
        if self.keys.len() < kept || self.values.len() < kept {
            bail!("the cache holds fewer positions than the step starts at");
        }
        for (cache, new) in [(&mut self.keys, keys), (&mut self.values, values)] {
            if let Some(own) = Arc::get_mut(cache) {
                own.truncate(kept);
                own.extend_from_slice(new);
                continue;
            }
            // Shared with a clone: copy what is kept, with room for an answer.
            let mut copy = Vec::with_capacity(kept + new.len() + ROOM * width);
            copy.extend_from_slice(&cache[..kept]);
            copy.extend_from_slice(new);
            *cache = Arc::new(copy);
        }
        Ok(())
    }

    pub(super) fn shrink(&mut self) {
        for cache in [&mut self.keys, &mut self.values] {
            if let Some(own) = Arc::get_mut(cache) {
                own.shrink_to_fit();
            }
        }
    }
}
