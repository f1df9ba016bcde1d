//! What SPEC §20 adds to a card: the fields the visitor may change, and what is
//! left of the tool's quota.

use serde::{Deserialize, Serialize};

/// A line of the card the visitor may change before confirming. The widget
/// shows it as an input of its kind, filled with the value that would run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EditableField {
    /// The argument's key, as `edits` names it.
    pub field: String,
    /// The line's name, as on the card.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `select`.
    pub input: String,
    /// For `select`: the values to choose from, each with what is shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<EditOption>,
    /// The value that would run now (absent when the call leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub value: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EditOption {
    #[schema(value_type = Object)]
    pub value: serde_json::Value,
    pub title: String,
}

/// What is left of the tool's quota once this call runs ("2 of 3 left this
/// month").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaNote {
    pub left: u32,
    pub max: u32,
    /// `day` or `month` (UTC).
    pub window: String,
}
