//! A property of edited cards (SPEC §20): for generated schemas, arguments
//! and edits — valid or not — what runs is what the last card showed and what
//! the audit holds for it, byte for byte.

use deskbell::config::Policy;
use deskbell::testkit::{HookReply, Reply as Script};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::support::TestApp;

/// One property: its schema and a strategy for its values (sometimes outside
/// the schema, to be refused).
#[derive(Debug, Clone)]
enum Kind {
    Integer {
        min: i64,
        max: i64,
    },
    /// Quarters: numbers a double holds exactly.
    Decimal,
    Text {
        max_len: usize,
    },
    Flag,
    Choice(Vec<String>),
}

impl Kind {
    fn schema(&self) -> Value {
        match self {
            Kind::Integer { min, max } => {
                json!({"type": "integer", "minimum": min, "maximum": max})
            }
            Kind::Decimal => json!({"type": "number", "minimum": -5, "maximum": 5}),
            Kind::Text { max_len } => json!({"type": "string", "maxLength": max_len}),
            Kind::Flag => json!({"type": "boolean"}),
            Kind::Choice(options) => json!({"type": "string", "enum": options}),
        }
    }

    /// A value, valid or (about one time in four) not.
    fn value(&self) -> BoxedStrategy<Value> {
        match self.clone() {
            Kind::Integer { min, max } => (min - 3..=max + 3).prop_map(|n| json!(n)).boxed(),
            Kind::Decimal => (-24i32..24).prop_map(|n| json!(f64::from(n) / 4.0)).boxed(),
            Kind::Text { max_len } => "[a-zA-Z0-9 ]{0,12}"
                .prop_map(move |s| json!(s))
                .prop_filter("fits now and then", move |v| {
                    v.as_str().is_some_and(|s| s.len() <= max_len + 4)
                })
                .boxed(),
            Kind::Flag => any::<bool>().prop_map(|b| json!(b)).boxed(),
            Kind::Choice(options) => {
                let mut all = options.clone();
                all.push("none-of-these".into());
                prop::sample::select(all).prop_map(|s| json!(s)).boxed()
            }
        }
    }

    /// A value the schema takes, for the model's first call.
    fn valid(&self) -> BoxedStrategy<Value> {
        match self.clone() {
            Kind::Integer { min, max } => (min..=max).prop_map(|n| json!(n)).boxed(),
            Kind::Decimal => (-20i32..20).prop_map(|n| json!(f64::from(n) / 4.0)).boxed(),
            Kind::Text { max_len } => {
                prop::collection::vec(prop::char::range('a', 'z'), 0..=max_len)
                    .prop_map(|c| json!(c.into_iter().collect::<String>()))
                    .boxed()
            }
            Kind::Flag => any::<bool>().prop_map(|b| json!(b)).boxed(),
            Kind::Choice(options) => prop::sample::select(options).prop_map(|s| json!(s)).boxed(),
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        (-5i64..5, 0i64..20).prop_map(|(min, span)| Kind::Integer {
            min,
            max: min + span
        }),
        (1usize..10).prop_map(|max_len| Kind::Text { max_len }),
        Just(Kind::Flag),
        Just(Kind::Decimal),
        prop::collection::btree_set("[A-Z]{1,3}", 1..4)
            .prop_map(|s| Kind::Choice(s.into_iter().collect())),
    ]
}

/// A schema of 1–4 properties, first arguments that fit it, and up to three
/// rounds of edits.
/// The schema's properties, the model's first arguments, and the rounds of edits.
type Case = (Vec<Kind>, Map<String, Value>, Vec<Map<String, Value>>);

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec(kind(), 1..5).prop_flat_map(|kinds| {
        let first: Vec<_> = kinds.iter().map(Kind::valid).collect();
        let edit: Vec<_> = kinds
            .iter()
            .map(|k| prop::option::weighted(0.5, k.value()))
            .collect();
        let edits = prop::collection::vec(edit, 0..4);
        (Just(kinds), first, edits).prop_map(|(kinds, first, edits)| {
            let first = first
                .into_iter()
                .enumerate()
                .map(|(i, v)| (format!("f{i}"), v))
                .collect();
            let edits = edits
                .into_iter()
                .map(|round| {
                    round
                        .into_iter()
                        .enumerate()
                        .filter_map(|(i, v)| v.map(|v| (format!("f{i}"), v)))
                        .collect::<Map<String, Value>>()
                })
                // An empty `edits` is a plain Confirm: it would run the card.
                .filter(|round| !round.is_empty())
                .collect();
            (kinds, first, edits)
        })
    })
}

/// The arguments as the server writes and reads them back: canonical form.
fn canonical(map: &Map<String, Value>) -> Value {
    let text = serde_json_canonicalizer::to_string(&Value::Object(map.clone())).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// What a card line shows of a plain value (SPEC §7).
fn line_text(value: &Value) -> String {
    match value {
        Value::Bool(true) => "Yes".into(),
        Value::Bool(false) => "No".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

async fn run_case(
    kinds: Vec<Kind>,
    locked: Vec<bool>,
    first: Map<String, Value>,
    edits: Vec<Map<String, Value>>,
) {
    let properties: Map<String, Value> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| (format!("f{i}"), k.schema()))
        .collect();
    // Some fields are not editable: an edit touching one must be refused.
    let editable: Vec<String> = properties
        .keys()
        .zip(&locked)
        .filter(|(_, locked)| !**locked)
        .map(|(k, _)| k.clone())
        .collect();
    let schema = json!({"type": "object", "properties": properties});
    let listed = editable.clone();
    let t = TestApp::with(move |c| {
        let refund = super::tool(c, "refund");
        refund.policy = Policy::Confirm;
        refund.input_schema = schema;
        refund.editable = listed;
    })
    .await;
    let token = t.visitor().await;
    t.llm.push(Script::tool_calls(&[(
        "refund",
        Value::Object(first.clone()),
    )]));
    let r = t.question(&token, None, "Go").await;
    let conversation = r.conversation();
    let mut card = r.event("confirm").clone();
    let mut expected = first;
    for round in edits {
        let answer = json!({"conversation": conversation, "call": card["call"], "decision": "confirm",
                            "signature": card["signature"], "edits": round});
        let r = t.ask(&token, answer).await;
        let mut merged = expected.clone();
        merged.extend(round.clone());
        if round.keys().any(|k| !editable.contains(k)) {
            assert_eq!(r.status, 422, "an edit of a locked field: {round:?}");
        }
        if r.status == 200 {
            card = r.event("confirm").clone();
            expected = merged;
        } else {
            assert_eq!(r.status, 422, "{:?}", r.json);
        }
        // Whatever happened, the card in hand shows exactly what would run:
        // its signed lines (one a field, in the schema's order) and its inputs.
        let want = canonical(&expected);
        let lines: Vec<String> = card["arguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["value"].as_str().unwrap().to_string())
            .collect();
        let from_schema: Vec<String> = (0..kinds.len())
            .map(|i| line_text(&want[format!("f{i}")]))
            .collect();
        assert_eq!(lines, from_schema, "round {round:?}");
        for field in card["editable"].as_array().into_iter().flatten() {
            let name = field["field"].as_str().unwrap();
            assert_eq!(field["value"], want[name], "round {round:?}");
        }
    }
    t.hook.push(HookReply::ok("{}"));
    let ran = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(ran.status, 200, "{:?}", ran.json);
    let calls = t.hook.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body["arguments"], canonical(&expected));
    assert_eq!(calls[0].body["call"], card["call"]);
    let rows = t
        .app
        .store
        .audit()
        .for_call(card["call"].as_str().unwrap())
        .await
        .unwrap();
    let text = serde_json_canonicalizer::to_string(&Value::Object(expected)).unwrap();
    assert!(rows.iter().all(|r| r.arguments == text), "{rows:?}");
    assert_eq!(rows.last().unwrap().event.as_str(), "executed");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn what_runs_is_the_last_card_shown_and_the_audited_arguments(
        (kinds, first, edits) in case(),
        locked in prop::collection::vec(prop::bool::weighted(0.3), 4),
    ) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(run_case(kinds, locked, first, edits));
    }
}
