//! A tool call's arguments as one value (SPEC §7): the model's JSON is checked to be
//! I-JSON (RFC 7493, which RFC 8785 canonical JSON requires), written in canonical
//! form, and parsed back from that text. The card's lines, the signature, the
//! executor's body and the audit row all come from that re-parsed value, so they can
//! never disagree about a number the model wrote in a form a double cannot hold.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The largest integer I-JSON allows: every integer up to it is exact in a double.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Arguments ready to be shown, signed, run and audited.
#[derive(Debug, Clone, PartialEq)]
pub struct Arguments {
    /// Parsed from `canonical`, never from the model's own text.
    pub value: Value,
    /// RFC 8785 canonical JSON.
    pub canonical: String,
}

impl Arguments {
    /// Checks the model's text and brings it into the one form everything uses. The
    /// error is written for the model, which may try again.
    pub fn from_model(raw: &str) -> Result<Arguments, String> {
        let raw = if raw.trim().is_empty() { "{}" } else { raw };
        integer_literals_fit(raw)?;
        let mut de = serde_json::Deserializer::from_str(raw);
        IJson
            .deserialize(&mut de)
            .and_then(|()| de.end())
            .map_err(|e| describe(&e))?;
        let parsed: Value = serde_json::from_str(raw)
            .map_err(|e| format!("the arguments are not valid JSON ({e})"))?;
        let canonical = serde_json_canonicalizer::to_string(&parsed)
            .map_err(|e| format!("the arguments cannot be written as canonical JSON ({e})"))?;
        Self::from_canonical(canonical)
            .map_err(|e| format!("the arguments do not survive canonical form ({e})"))
    }

    /// Arguments stored in canonical form (a pending card, a call to deliver again).
    pub fn from_canonical(canonical: String) -> Result<Arguments, serde_json::Error> {
        let value = serde_json::from_str(&canonical)?;
        Ok(Arguments { value, canonical })
    }
}

/// The model is told what to change; a big number is the common case.
fn describe(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains(NOT_EXACT) {
        format!(
            "{text}. Integers larger than {MAX_SAFE_INTEGER} in magnitude cannot be passed as numbers: \
             send such a value (an id, for example) as a string."
        )
    } else if e.is_syntax() || e.is_eof() {
        format!("the arguments are not valid JSON ({text})")
    } else {
        format!("the arguments are not valid I-JSON ({text})")
    }
}

/// serde_json reads an integer literal past `u64::MAX` as a double without a word,
/// so integer literals are checked in the text itself: one written without a
/// fraction or exponent must be within ±(2^53 − 1). A decimal or exponent literal
/// is rounded to the nearest double, and that double is what is shown and run.
fn integer_literals_fit(raw: &str) -> Result<(), String> {
    let bytes = raw.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let start = i;
            while i < bytes.len()
                && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
            {
                i += 1;
            }
            let token = &raw[start..i];
            let digits = token.trim_start_matches('-');
            // A token that is not an integer literal at all is left for the parser
            // to report.
            let integer = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            let fits =
                digits.len() <= 16 && digits.parse::<u64>().is_ok_and(|n| n <= MAX_SAFE_INTEGER);
            if integer && !fits {
                return Err(describe_big(token));
            }
            let decimal = !integer && digits.starts_with(|c: char| c.is_ascii_digit());
            if decimal && !whole_decimal_is_exact(digits) {
                return Err(describe_big(token));
            }
            continue;
        }
        i += 1;
    }
    Ok(())
}

/// Whether a decimal or exponent literal (without its sign) that denotes a whole
/// number is held exactly by the double it is read as: `9007199254740993.0` and
/// `9.007199254740993e15` are not, `1e21` is. A fraction (`0.1`) is rounded
/// whichever way it is written, and passes: what is shown is that double.
fn whole_decimal_is_exact(literal: &str) -> bool {
    let (mantissa, exponent) = match literal.find(['e', 'E']) {
        Some(i) => (&literal[..i], literal[i + 1..].parse::<i64>().ok()),
        None => (literal, Some(0)),
    };
    let Some(exponent) = exponent else {
        return true; // Not a number the parser will accept; it reports it.
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits = format!("{whole}{fraction}")
        .trim_start_matches('0')
        .to_string();
    let mut exp10 = exponent.saturating_sub(fraction.len() as i64);
    while digits.ends_with('0') {
        digits.pop();
        exp10 += 1;
    }
    if digits.is_empty() || exp10 < 0 {
        return true;
    }
    // 5^23 > 2^53: a whole number with more than 22 trailing decimal zeros has an
    // odd part no double can hold.
    if exp10 > 22 {
        return false;
    }
    let Some(value) = digits
        .parse::<u128>()
        .ok()
        .and_then(|d| d.checked_mul(10u128.pow(exp10 as u32)))
    else {
        return false;
    };
    literal
        .parse::<f64>()
        .is_ok_and(|f| f.is_finite() && f as u128 == value)
}

fn describe_big(token: &str) -> String {
    format!(
        "{token} is {NOT_EXACT}. Integers larger than {MAX_SAFE_INTEGER} in magnitude cannot be passed as \
         numbers: send such a value (an id, for example) as a string."
    )
}

const NOT_EXACT: &str = "a number that a double cannot hold exactly";

/// A visitor that walks the model's JSON once and refuses what I-JSON forbids and
/// serde_json would silently accept: integers past 2^53 − 1 (they would be rounded)
/// and duplicate member names (the last would silently win).
struct IJson;

impl<'de> de::DeserializeSeed<'de> for IJson {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(IJson)
    }
}

impl<'de> Visitor<'de> for IJson {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("I-JSON")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<(), E> {
        match n <= MAX_SAFE_INTEGER {
            true => Ok(()),
            false => Err(E::custom(format!("{n} is {NOT_EXACT}"))),
        }
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<(), E> {
        match n.unsigned_abs() <= MAX_SAFE_INTEGER {
            true => Ok(()),
            false => Err(E::custom(format!("{n} is {NOT_EXACT}"))),
        }
    }

    fn visit_u128<E: de::Error>(self, n: u128) -> Result<(), E> {
        Err(E::custom(format!("{n} is {NOT_EXACT}")))
    }

    fn visit_i128<E: de::Error>(self, n: i128) -> Result<(), E> {
        Err(E::custom(format!("{n} is {NOT_EXACT}")))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<(), E> {
        // serde_json refuses literals outside a double's range; a decimal literal is
        // rounded to the nearest double here, and that double's shortest form is what
        // the card shows and the backend receives.
        match n.is_finite() {
            true => Ok(()),
            false => Err(E::custom("a number out of range")),
        }
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(IJson)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!(
                    "the member name {key:?} appears twice"
                )));
            }
            map.next_value_seed(IJson)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
