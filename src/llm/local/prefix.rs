//! The prompt-prefix cache: models that have already read a prompt prefix (the
//! system header and the tool definitions), keyed by the prefix's tokens. Reading
//! the prompt is the slowest part of a turn on a CPU, and the prefix is the same for
//! every turn of a site, so a turn starts from a copy of the model that has read it.

use super::model::Weights;

pub struct PrefixCache {
    /// Most recently used last.
    entries: Vec<(Vec<u32>, Weights)>,
    capacity: usize,
}

impl PrefixCache {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::new(),
            capacity,
        }
    }

    /// A copy of the model that has read exactly `prefix`, if one is kept.
    pub fn get(&mut self, prefix: &[u32]) -> Option<Weights> {
        let at = self.entries.iter().position(|(p, _)| p == prefix)?;
        let entry = self.entries.remove(at);
        let model = entry.1.clone();
        self.entries.push(entry);
        Some(model)
    }

    pub fn put(&mut self, prefix: Vec<u32>, model: Weights) {
        if self.entries.len() >= self.capacity {
            self.entries.remove(0);
        }
        self.entries.push((prefix, model));
    }
}
