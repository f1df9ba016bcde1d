//! Approvals beyond the visitor (SPEC §20): rules by argument value, quotas,
//! and edits re-signed as new cards.

mod approvals;
mod crash;
mod edits;
mod notices;
mod property;
mod quotas;
mod rules;

use deskbell::config::{Config, Policy, ToolConfig};

/// The test site's tool named `name`, to change before the app starts.
pub fn tool<'c>(c: &'c mut Config, name: &str) -> &'c mut ToolConfig {
    c.sites[0]
        .tools
        .iter_mut()
        .find(|t| t.name == name)
        .expect("the test site has this tool")
}

/// A shop's order tool whose quantity, size, gift flag and note the visitor
/// may change on the card.
pub fn order_tool(url: String) -> ToolConfig {
    ToolConfig {
        name: "order_more".into(),
        label: "Order more".into(),
        description: "Order more of a product.".into(),
        policy: Policy::Confirm,
        url,
        timeout_s: 5.0,
        secret_env: None,
        input_schema: serde_json::json!({
            "type": "object",
            "required": ["sku", "quantity"],
            "properties": {
                "sku": {"type": "string", "title": "SKU"},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
                "size": {"type": "string", "enum": ["S", "M", "L"]},
                "gift": {"type": "boolean"},
                "note": {"type": "string", "maxLength": 40}
            }
        }),
        confirm_when: None,
        editable: vec![
            "quantity".into(),
            "size".into(),
            "gift".into(),
            "note".into(),
        ],
        quota: None,
        approvers: vec![deskbell::states::OperatorRole::Admin],
        approval_ttl_min: 60.0,
        secret: None,
    }
}
