//! The repetition guard. Small models fall into loops: greedy decoding that has
//! written a sentence once finds it likelier the second time, and then the same
//! paragraphs repeat until the output cap. Two rules stop that, on the answer's
//! own tokens (not the prompt's, so quoting a document once is free):
//!
//! - no n-gram of `NGRAM` tokens may appear twice: a token that would complete
//!   one already written is banned, so the model takes its next choice;
//! - a model that keeps reaching for banned tokens is looping, whatever it writes
//!   instead: after `LOOP_STRIKES` bans within `LOOP_WINDOW` tokens the answer
//!   ends there.

/// Tokens in a run that may not repeat: long enough that ordinary prose and
/// an order number named twice are untouched, short enough to catch a sentence.
pub const NGRAM: usize = 6;
/// Bans within the window that end the answer.
pub const LOOP_STRIKES: usize = 4;
pub const LOOP_WINDOW: usize = 32;

/// Tokens that, written after `tokens`, would repeat an n-gram of `n` tokens
/// already in `tokens`.
pub fn banned(tokens: &[u32], n: usize) -> Vec<u32> {
    if n < 2 || tokens.len() < n {
        return Vec::new();
    }
    let key = &tokens[tokens.len() - (n - 1)..];
    let mut out = Vec::new();
    for start in 0..=tokens.len() - n {
        if &tokens[start..start + n - 1] == key {
            let next = tokens[start + n - 1];
            if !out.contains(&next) {
                out.push(next);
            }
        }
    }
    out
}

/// Counts the bans of the last `LOOP_WINDOW` tokens and says when to stop.
#[derive(Default)]
pub struct Strikes {
    /// The positions (token counts) at which a ban changed the choice.
    at: Vec<usize>,
}

impl Strikes {
    /// Records that the model's first choice at `position` was banned; true when
    /// the answer should end.
    pub fn strike(&mut self, position: usize) -> bool {
        self.at.retain(|&p| p + LOOP_WINDOW > position);
        self.at.push(position);
        self.at.len() >= LOOP_STRIKES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_token_that_would_repeat_a_run_is_banned() {
        // "a b c" then "a b": "c" would repeat "a b c".
        assert_eq!(banned(&[1, 2, 3, 1, 2], 3), vec![3]);
        assert_eq!(banned(&[1, 2, 3, 4, 2], 3), Vec::<u32>::new());
        assert_eq!(banned(&[1, 2], 3), Vec::<u32>::new());
    }

    #[test]
    fn bans_close_together_end_the_answer_and_scattered_ones_do_not() {
        let mut s = Strikes::default();
        assert!(!s.strike(10));
        assert!(!s.strike(11));
        assert!(!s.strike(12));
        assert!(s.strike(13));
        let mut s = Strikes::default();
        for p in (0..10).map(|i| i * LOOP_WINDOW) {
            assert!(!s.strike(p));
        }
    }

    proptest! {
        /// Whatever was written, a text that only ever takes unbanned tokens
        /// never holds the same n-gram twice.
        #[test]
        fn a_text_of_unbanned_tokens_never_repeats_an_ngram(choices in proptest::collection::vec(0u32..4, 0..200)) {
            let mut text: Vec<u32> = Vec::new();
            for wanted in choices {
                let bans = banned(&text, NGRAM);
                // The model's choice, or the next token the ban allows.
                let token = (0..5).map(|k| (wanted + k) % 5).find(|t| !bans.contains(t));
                let Some(token) = token else { break };
                text.push(token);
            }
            let mut seen = std::collections::HashSet::new();
            for w in text.windows(NGRAM) {
                prop_assert!(seen.insert(w.to_vec()), "{:?} repeats", w);
            }
        }
    }
}
