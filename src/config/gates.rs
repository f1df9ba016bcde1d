//! Checks of a tool's §20 settings at load: a `confirm_when` that compiles, an
//! `editable` list of plain top-level arguments, a quota that can be met.

use serde_json::Value;

use super::ToolConfig;
use crate::tools::rule::Rule;

pub(super) fn check_gates(tool: &ToolConfig) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(source) = &tool.confirm_when {
        if let Err(why) = Rule::compile(source) {
            out.push(("confirm_when", why));
        }
        if !tool.policy.is_gated() {
            out.push((
                "confirm_when",
                format!(
                    "decides when a call needs its policy's gate, but policy {:?} has none",
                    tool.policy.as_str()
                ),
            ));
        }
    }
    for (n, field) in tool.editable.iter().enumerate() {
        if tool.editable[..n].contains(field) {
            out.push(("editable", format!("{field:?} is listed twice")));
            continue;
        }
        if let Err(why) = editable_field(&tool.input_schema, field) {
            out.push(("editable", format!("{field:?} {why}")));
        }
    }
    if !tool.editable.is_empty() && !tool.policy.asks_visitor() {
        out.push((
            "editable",
            "is for fields the visitor changes on a card: the policy shows the visitor none".into(),
        ));
    }
    if tool.approvers.is_empty() {
        out.push((
            "approvers",
            "must name at least one role: \"admin\" or \"agent\"".into(),
        ));
    }
    if !(tool.approval_ttl_min.is_finite()
        && tool.approval_ttl_min > 0.0
        && tool.approval_ttl_min <= 43_200.0)
    {
        out.push((
            "approval_ttl_min",
            "must be more than 0 and at most 43200 minutes (30 days)".into(),
        ));
    }
    if let Some(quota) = &tool.quota
        && (quota.max == 0 || quota.max > 1_000_000)
    {
        out.push(("quota.max", "must be from 1 to 1000000".into()));
    }
    out
}

/// The schema of an editable field: a top-level property with a plain type the
/// widget can show as an input (a number, a string, a yes/no, a choice).
pub fn editable_field<'s>(schema: &'s Value, field: &str) -> Result<&'s Value, String> {
    let Some(property) = schema.get("properties").and_then(|p| p.get(field)) else {
        return Err("is not a property of the input schema".into());
    };
    if property.get("enum").is_some_and(Value::is_array) {
        return Ok(property);
    }
    match property.get("type").and_then(Value::as_str) {
        Some("integer" | "number" | "string" | "boolean") => Ok(property),
        _ => Err("must have type integer, number, string or boolean, or an enum".into()),
    }
}
