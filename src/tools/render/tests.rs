use serde_json::json;

use super::{render, words};

fn lines(schema: serde_json::Value, args: serde_json::Value) -> Vec<String> {
    render(&schema, &args)
        .into_iter()
        .map(|l| format!("{}: {}", l.name, l.value))
        .collect()
}

#[test]
fn keys_are_written_out_in_words_with_initialisms_kept() {
    let table = [
        ("order_id", "Order ID"),
        ("customerEmail", "Customer email"),
        ("id", "ID"),
        ("ip_address", "IP address"),
        ("productSKU", "Product SKU"),
        ("callbackUrl", "Callback URL"),
        ("HTTPServer", "HTTP server"),
        ("line2", "Line 2"),
        ("order_ids", "Order IDs"),
        ("already Spaced", "Already spaced"),
        ("kebab-case-key", "Kebab case key"),
    ];
    for (key, expected) in table {
        assert_eq!(words(key), expected, "{key}");
    }
}

#[test]
fn a_schema_title_names_the_line() {
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "integer", "title": "Order number"}}});
    assert_eq!(lines(schema, json!({"order_id": 42})), ["Order number: 42"]);
}

#[test]
fn values_read_naturally() {
    let schema = json!({"type": "object", "properties": {
        "gift": {"type": "boolean"},
        "express": {"type": "boolean"},
        "skus": {"type": "array", "items": {"type": "string"}},
        "amount": {"type": "number"},
        "note": {"type": "string"},
        "speed": {"type": "string", "oneOf": [{"const": "std", "title": "Standard (3-5 days)"}, {"const": "exp", "title": "Express"}]},
    }});
    let args = json!({"gift": true, "express": false, "skus": ["A-1", "B-2"], "amount": 12.5, "note": "Leave at door", "speed": "std"});
    assert_eq!(
        lines(schema, args),
        [
            "Gift: Yes",
            "Express: No",
            "SKUs: A-1, B-2",
            "Amount: 12.5",
            "Note: Leave at door",
            "Speed: Standard (3-5 days)"
        ]
    );
}

#[test]
fn nested_objects_give_parent_child_names() {
    let schema = json!({"type": "object", "properties": {
        "order_id": {"type": "integer", "title": "Order ID"},
        "address": {"type": "object", "title": "New address", "properties": {"street": {"type": "string"}, "postal_code": {"type": "string"}}},
    }});
    let args =
        json!({"address": {"postal_code": "10115", "street": "Hauptstraße 5"}, "order_id": 7});
    assert_eq!(
        lines(schema, args),
        [
            "Order ID: 7",
            "New address › Street: Hauptstraße 5",
            "New address › Postal code: 10115"
        ]
    );
}

#[test]
fn lines_follow_the_schema_order_then_other_keys() {
    let schema =
        json!({"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}});
    assert_eq!(
        lines(schema, json!({"a": "1", "b": "2", "extra_field": "3"})),
        ["B: 2", "A: 1", "Extra field: 3"]
    );
}

#[test]
fn empty_and_null_values_show_a_dash() {
    let schema = json!({"type": "object"});
    assert_eq!(
        lines(schema, json!({"note": null, "meta": {}})),
        ["Note: —", "Meta: —"]
    );
}
