//! Editing a card before confirming (SPEC §20): the fields of a card the
//! visitor may change, shown as inputs typed by the schema, and a visitor's
//! edits checked the way a model's arguments are — I-JSON, the schema — and
//! more: only the listed fields, only plain values, no invisible characters.
//! The edited arguments are what the server then signs on a new card.

use serde_json::{Map, Value};

use super::Tool;
use super::arguments::Arguments;
use super::render::{hidden, words};
use crate::wire::{EditOption, EditableField};

/// The card's editable lines, with the values that would run now.
pub fn fields(tool: &Tool, arguments: &Value) -> Vec<EditableField> {
    tool.editable
        .iter()
        .filter_map(|field| {
            let property = crate::config::gates::editable_field(&tool.schema, field).ok()?;
            let name = property
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| words(field));
            let options: Vec<EditOption> = property
                .get("enum")
                .and_then(Value::as_array)
                .map(|values| values.iter().map(|v| option(property, v)).collect())
                .unwrap_or_default();
            let input = match (
                options.is_empty(),
                property.get("type").and_then(Value::as_str),
            ) {
                (false, _) => "select",
                (true, Some(t)) => t,
                (true, None) => "string",
            };
            Some(EditableField {
                field: field.clone(),
                name,
                input: input.to_string(),
                options,
                value: arguments.get(field).cloned(),
            })
        })
        .collect()
}

/// An enum value with what the card shows for it: its `oneOf` title, else itself.
fn option(property: &Value, value: &Value) -> EditOption {
    let title = property
        .get("oneOf")
        .and_then(Value::as_array)
        .and_then(|alts| alts.iter().find(|a| a.get("const") == Some(value)))
        .and_then(|a| a.get("title"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    EditOption {
        value: value.clone(),
        title,
    }
}

/// The arguments of `current` with `edits` applied, checked; the error says
/// what is wrong, for the visitor.
pub fn apply(
    tool: &Tool,
    current: &Value,
    edits: &Map<String, Value>,
) -> Result<Arguments, String> {
    let Value::Object(merged) = current else {
        return Err("the card's arguments are not an object".into());
    };
    let mut merged = merged.clone();
    for (field, value) in edits {
        if !tool.editable.iter().any(|f| f == field) {
            return Err(format!("{field:?} cannot be changed on this card"));
        }
        match value {
            Value::Object(_) | Value::Array(_) | Value::Null => {
                return Err(format!("{field:?} must be a plain value"));
            }
            Value::String(s) if s.chars().any(hidden) => {
                return Err(format!(
                    "{field:?} contains an invisible or control character"
                ));
            }
            _ => {}
        }
        merged.insert(field.clone(), value.clone());
    }
    // Re-read from text, as a model's arguments are: a number an IEEE double
    // cannot hold exactly is refused here (SPEC §7).
    let arguments = Arguments::from_model(&Value::Object(merged).to_string())?;
    tool.check_arguments(&arguments.value)
        .map_err(|why| format!("the values do not fit the tool: {why}"))?;
    Ok(arguments)
}
