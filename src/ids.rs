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
