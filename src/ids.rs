//! Identifiers: a short prefix naming the kind, then a UUIDv7 in hex, so ids sort by
//! creation time and a conversation id can never be mistaken for a call id.

use uuid::Uuid;

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", Uuid::now_v7().simple())
}

/// True for an id that `new_id(prefix)` could have made.
pub fn is_valid(prefix: &str, id: &str) -> bool {
    match id
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
    {
        Some(hex) => {
            hex.len() == 32
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        }
        None => false,
    }
}

/// Ids that come from requests, checked once at the edge: a value of these types
/// has the shape `new_id` gives, so nothing further down parses a caller's text.
macro_rules! request_id {
    ($(#[$meta:meta])* $name:ident = $prefix:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            /// `None` for anything `new_id` could not have made.
            pub fn parse(text: &str) -> Option<$name> {
                is_valid($prefix, text).then(|| $name(text.to_string()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

request_id!(
    /// A conversation's id (`c_…`).
    ConversationId = "c"
);
request_id!(
    /// A call's id (`call_…`).
    CallId = "call"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_their_own_check() {
        let id = new_id("c");
        assert!(is_valid("c", &id));
        assert!(!is_valid("call", &id));
        assert!(!is_valid("c", "c_../../etc"));
        assert!(!is_valid("c", &format!("{id}0")));
    }
}
