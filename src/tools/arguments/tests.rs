use proptest::prelude::*;
use serde_json::{Value, json};

use super::{Arguments, MAX_SAFE_INTEGER};
use crate::tools::render::{hidden, render};

/// Strings with what breaks naive handling: quotes, backslashes, controls, bidi
/// overrides, zero-width characters, astral-plane characters and plain text.
fn tricky_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('\u{0}'),
            Just('\u{202E}'),
            Just('\u{200B}'),
            Just('\u{2066}'),
            Just('é'),
            Just('😀'),
            Just('/'),
            any::<char>(),
            prop::char::range('a', 'z'),
        ],
        0..12,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

/// Numbers an I-JSON producer may write: safe integers, and doubles of every size.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-(MAX_SAFE_INTEGER as i64)..=MAX_SAFE_INTEGER as i64).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        Just(json!(1e21)),
        Just(json!(-0.0)),
        Just(json!(0.1)),
        Just(json!(5e-324)),
        Just(json!(MAX_SAFE_INTEGER)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        tricky_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(tricky_string(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arguments() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(tricky_string(), value(), 0..6)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"order_id": {"type": "integer", "title": "Order ID"}}})
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// What is shown, signed, sent and audited is one value: re-reading the stored
    /// canonical text gives the same value, the same text and the same lines.
    #[test]
    fn shown_signed_sent_and_audited_are_one_value(x in arguments(), pretty in any::<bool>()) {
        let raw = if pretty { serde_json::to_string_pretty(&x).unwrap() } else { x.to_string() };
        let a = Arguments::from_model(&raw).unwrap();
        let stored = Arguments::from_canonical(a.canonical.clone()).unwrap();
        prop_assert_eq!(&stored.value, &a.value);
        prop_assert_eq!(serde_json_canonicalizer::to_string(&a.value).unwrap(), a.canonical.clone());
        prop_assert_eq!(render(&schema(), &stored.value), render(&schema(), &a.value));
        // The executor's body carries `value`; sent as JSON, it reads back the same.
        let body = json!({"arguments": a.value}).to_string();
        let received: Value = serde_json::from_str(&body).unwrap();
        prop_assert_eq!(&received["arguments"], &stored.value);
    }

    /// No line a visitor reads carries a character that hides or reorders text.
    #[test]
    fn card_lines_carry_no_invisible_characters(x in arguments()) {
        let a = Arguments::from_model(&x.to_string()).unwrap();
        for line in render(&schema(), &a.value) {
            prop_assert!(!line.name.chars().any(hidden), "{:?}", line.name);
            prop_assert!(!line.value.chars().any(hidden), "{:?}", line.value);
        }
    }

    /// Every integer a double cannot hold is refused, positive or negative, however
    /// it is nested, with a hint to send it as a string.
    #[test]
    fn integers_past_two_to_the_53_are_refused(n in (MAX_SAFE_INTEGER + 1)..=u64::MAX, negative in any::<bool>(), nested in any::<bool>()) {
        let literal = if negative { format!("-{n}") } else { n.to_string() };
        let raw = if nested { format!(r#"{{"a": [1, {{"id": {literal}}}]}}"#) } else { format!(r#"{{"id": {literal}}}"#) };
        let why = Arguments::from_model(&raw).unwrap_err();
        prop_assert!(why.contains("as a string"), "{}", why);
    }
}

#[test]
fn the_first_integer_a_double_cannot_hold_is_refused() {
    let why = Arguments::from_model(r#"{"order_id": 9007199254740993}"#).unwrap_err();
    assert!(why.contains("9007199254740993"), "{why}");
    assert!(why.contains("as a string"), "{why}");
    // Past u64 too, where serde_json alone would quietly read a double.
    assert!(Arguments::from_model(r#"{"id": 123456789012345678901234567890}"#).is_err());
    assert!(Arguments::from_model(r#"{"id": -9007199254740992}"#).is_err());
    // The largest safe integer, and the same id as a string, pass.
    assert!(Arguments::from_model(r#"{"id": 9007199254740991}"#).is_ok());
    let s = Arguments::from_model(r#"{"id": "9007199254740993"}"#).unwrap();
    assert_eq!(s.value["id"], "9007199254740993");
}

#[test]
fn numbers_in_strings_and_exponents_are_not_mistaken_for_integers() {
    let a = Arguments::from_model(
        r#"{"note": "id 99999999999999999999", "x": 1e21, "y": -0, "z": 0.1}"#,
    )
    .unwrap();
    assert_eq!(
        a.canonical,
        r#"{"note":"id 99999999999999999999","x":1e+21,"y":0,"z":0.1}"#
    );
    assert_eq!(a.value["y"], json!(0));
}

#[test]
fn duplicate_member_names_are_refused() {
    let why = Arguments::from_model(r#"{"order_id": 1, "order_id": 2}"#).unwrap_err();
    assert!(why.contains("twice"), "{why}");
}

#[test]
fn a_bidi_override_is_shown_not_obeyed() {
    let a = Arguments::from_model(r#"{"city": "Paris \u202e0001 sirap"}"#).unwrap();
    let lines = render(&json!({"type": "object"}), &a.value);
    assert_eq!(lines[0].value, "Paris ⟨U+202E⟩0001 sirap");
    // The backend receives the character itself, as the card said.
    assert_eq!(a.value["city"], "Paris \u{202e}0001 sirap");
}
