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
        // Doubles past 2^53 are whole numbers, and their shortest decimal form
        // (`1.2345678901234568e20`) names a number the double is not: refused, as
        // a test below holds. Every double below that is generated.
        any::<f64>()
            .prop_filter("below 2^53", |f| f.abs() < 9_007_199_254_740_992.0)
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

    /// Canonical form is a fixed point: the model's text, however it was written,
    /// and the stored canonical text given back as the model's text, are the same
    /// arguments — one value, one text, one set of card lines. (That the backend
    /// and the audit get this value is held over HTTP in `tests/api/edges.rs`.)
    #[test]
    fn canonical_form_is_a_fixed_point(x in arguments(), pretty in any::<bool>()) {
        let raw = if pretty { serde_json::to_string_pretty(&x).unwrap() } else { x.to_string() };
        let a = Arguments::from_model(&raw).unwrap();
        let again = Arguments::from_model(&a.canonical).unwrap();
        prop_assert_eq!(&again.canonical, &a.canonical);
        prop_assert_eq!(&again.value, &a.value);
        prop_assert_eq!(render(&schema(), &again.value), render(&schema(), &a.value));
        // Every number in the value is one a double holds: nothing changes when
        // it is written out and read back as plain JSON either.
        let plain: Value = serde_json::from_str(&a.value.to_string()).unwrap();
        prop_assert_eq!(&plain, &a.value);
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
fn whole_numbers_written_as_decimals_are_refused_only_when_a_double_cannot_hold_them() {
    for inexact in [
        "9007199254740993.0",
        "9.007199254740993e15",
        "1e23",
        "-9007199254740993.0",
    ] {
        let why = Arguments::from_model(&format!(r#"{{"id": {inexact}}}"#)).unwrap_err();
        assert!(why.contains("as a string"), "{inexact}: {why}");
    }
    for exact in [
        "1e21",
        "9007199254740992.0",
        "4.5e3",
        "0.1",
        "1.5",
        "1e22",
        "-0.0",
    ] {
        assert!(
            Arguments::from_model(&format!(r#"{{"x": {exact}}}"#)).is_ok(),
            "{exact}"
        );
    }
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
