//! The argument lines of a confirmation card (SPEC §7), rendered on the server from
//! the canonical arguments that will run. What the visitor reads is what is signed,
//! what runs and what the audit row shows.

use serde_json::{Map, Value};

use crate::wire::ArgLine;

/// Words written in capitals wherever they stand in a key.
const INITIALISMS: &[&str] = &[
    "id", "url", "uri", "ip", "sku", "api", "uuid", "vat", "iban", "bic", "pin", "otp", "sms",
    "utc", "eta", "json", "html", "http", "https", "pdf", "csv", "usd", "eur", "gbp", "iso", "ssn",
    "dob", "po",
];

/// One line per argument, in the order of the schema's properties, then any other
/// keys in canonical order.
pub fn render(schema: &Value, arguments: &Value) -> Vec<ArgLine> {
    let mut lines = Vec::new();
    if let Value::Object(map) = arguments {
        object_lines(None, schema, map, &mut lines);
    }
    lines
}

fn object_lines(
    prefix: Option<&str>,
    schema: &Value,
    map: &Map<String, Value>,
    out: &mut Vec<ArgLine>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut keys: Vec<&String> = properties
        .map(|p| p.keys().filter(|k| map.contains_key(*k)).collect())
        .unwrap_or_default();
    keys.extend(
        map.keys()
            .filter(|k| !properties.is_some_and(|p| p.contains_key(*k))),
    );
    for key in keys {
        let Some(value) = map.get(key) else { continue };
        let sub = properties.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
        let own = sub
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| words(key));
        let name = match prefix {
            Some(p) => format!("{p} › {own}"),
            None => own,
        };
        match value {
            Value::Object(inner) if !inner.is_empty() => object_lines(Some(&name), sub, inner, out),
            _ => out.push(ArgLine {
                name: visible(&name),
                value: visible(&value_text(sub, value)),
            }),
        }
    }
}

fn value_text(schema: &Value, value: &Value) -> String {
    if let Some(title) = enum_title(schema, value) {
        return title;
    }
    match value {
        Value::Null => "—".into(),
        Value::Bool(true) => "Yes".into(),
        Value::Bool(false) => "No".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            items
                .iter()
                .map(|v| value_text(item_schema, v))
                .collect::<Vec<_>>()
                .join(", ")
        }
        Value::Object(map) if map.is_empty() => "—".into(),
        Value::Object(_) => serde_json_canonicalizer::to_string(value).unwrap_or_default(),
    }
}

/// The text with every character that could hide or reorder what the visitor reads
/// written out as `⟨U+XXXX⟩`: controls (a newline could fake a second line), bidi
/// overrides and isolates (the "Trojan Source" trick), zero-width and other format
/// characters, line and paragraph separators, and the Hangul fillers that render as
/// blank space. The escaped text is what is signed and shown; the backend receives
/// the characters themselves, as the visitor was shown.
pub fn visible(text: &str) -> String {
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("⟨U+{:04X}⟩", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Controls (Cc), format characters (Cf), separators (Zl, Zp) and invisible fillers.
pub fn hidden(c: char) -> bool {
    matches!(c as u32,
        0x0000..=0x001F | 0x007F..=0x009F // Cc
        | 0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
        | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F // Cf
        | 0x2028 | 0x2029 // Zl, Zp
        | 0x034F | 0x115F | 0x1160 | 0x3164 | 0xFFA0 // invisible joiners and fillers
    )
}

/// The title of the `oneOf`/`anyOf` branch whose `const` is this value.
fn enum_title(schema: &Value, value: &Value) -> Option<String> {
    ["oneOf", "anyOf"].iter().find_map(|k| {
        schema.get(*k)?.as_array()?.iter().find_map(|branch| {
            (branch.get("const")? == value)
                .then(|| branch.get("title")?.as_str().map(str::to_string))?
        })
    })
}

/// A key written out in words: `order_id` → `Order ID`, `customerEmail` →
/// `Customer email`.
pub fn words(key: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = key.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == '_' || c == '-' || c == ' ' || c == '.' {
            if !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1);
        let boundary = match prev {
            Some(p) if c.is_uppercase() => {
                p.is_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_uppercase() && next.is_some_and(|n| n.is_lowercase()))
            }
            Some(p) if c.is_ascii_digit() => !p.is_ascii_digit(),
            _ => false,
        };
        if boundary && !current.is_empty() {
            parts.push(std::mem::take(&mut current));
        }
        current.push(c);
    }
    if !current.is_empty() {
        parts.push(current);
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let lower = part.to_lowercase();
            let plural_stem = lower
                .strip_suffix('s')
                .filter(|stem| INITIALISMS.contains(stem));
            if INITIALISMS.contains(&lower.as_str()) {
                lower.to_uppercase()
            } else if let Some(stem) = plural_stem {
                format!("{}s", stem.to_uppercase())
            } else if i == 0 {
                let mut cs = lower.chars();
                cs.next()
                    .map(|f| f.to_uppercase().chain(cs).collect())
                    .unwrap_or_default()
            } else {
                lower
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
