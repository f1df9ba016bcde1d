//! The confirmation promise at its edges (SPEC §5, §7): what the visitor confirms
//! is exactly what runs and what the audit shows, for any arguments; budgets and
//! slow clients cannot pin turns; bad bytes are refused or dropped, never a 500.

use deskbell::config::{Config, Policy};
use deskbell::testkit::{HookReply, Piece, Reply as Script};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{TestApp, for_racing};

/// Adds two tools with open schemas: `echo` (auto) and `approve` (confirm).
fn open_tools(c: &mut Config) {
    for_racing(c);
    let template = c.sites[0].tools[0].clone();
    for (name, policy) in [("echo", Policy::Auto), ("approve", Policy::Confirm)] {
        let mut tool = template.clone();
        tool.name = name.into();
        tool.label = name.into();
        tool.policy = policy;
        tool.url = template.url.replace("/lookup", &format!("/{name}"));
        tool.input_schema = json!({"type": "object"});
        c.sites[0].tools.push(tool);
    }
}

fn tool_call(name: &str, arguments: &str) -> Script {
    Script::Stream(vec![Piece::ToolCall {
        id: "call_fake_0".into(),
        name: name.into(),
        arguments: arguments.into(),
    }])
}

/// The arguments of the audit row, parsed.
async fn audited_arguments(t: &TestApp, call: &str) -> Value {
    let rows = t.app.store.audit().for_call(call).await.unwrap();
    serde_json::from_str(&rows[0].arguments).unwrap()
}

/// Strings with quotes, backslashes, controls, bidi and zero-width characters.
fn tricky_string() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('"'),
            Just('\\'),
            Just('\n'),
            Just('\u{202E}'),
            Just('\u{200B}'),
            Just('é'),
            Just('😀'),
            any::<char>().prop_filter("no NUL", |c| *c != '\0'),
            prop::char::range('a', 'z'),
        ],
        0..8,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-9_007_199_254_740_991i64..=9_007_199_254_740_991).prop_map(Value::from),
        // Doubles past 2^53 are whole numbers, and their shortest decimal form
        // (`1.2345678901234568e20`) names a number the double is not: refused, as
        // a test below holds. Every double below that is generated.
        any::<f64>()
            .prop_filter("below 2^53", |f| f.abs() < 9_007_199_254_740_992.0)
            .prop_map(Value::from),
        Just(json!(1e21)),
        Just(json!(-0.0)),
        Just(json!(0.1)),
        tricky_string().prop_map(Value::String),
    ]
}

fn arguments() -> impl Strategy<Value = Value> {
    let value = leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map(tricky_string(), value, 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// For generated arguments, over real HTTP: an auto call's backend body equals the
/// audited canonical value; a confirmed call's card lines are the lines of that
/// value and, once confirmed, the backend receives exactly that value.
#[test]
fn what_runs_is_what_was_shown_and_audited_for_any_arguments() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let t = runtime.block_on(TestApp::with(open_tools));
    let token = runtime.block_on(t.visitor());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    runner
        .run(&arguments(), |x| {
            runtime.block_on(async {
                let raw = x.to_string();
                // Auto: what the backend got is what the audit row holds.
                let before = t.hook.calls().len();
                t.llm.push(tool_call("echo", &raw));
                t.llm.push(Script::text("ok"));
                let r = t.question(&token, None, "echo").await;
                assert_eq!(r.event("done")["status"], "answered", "{:?}", r.events);
                let sent = t.hook.calls()[before].body.clone();
                let call = sent["call"].as_str().unwrap().to_string();
                assert_eq!(sent["arguments"], audited_arguments(&t, &call).await);

                // Confirm: the card shows the lines of the stored value, and that
                // value is what runs.
                t.llm.push(tool_call("approve", &raw));
                let r = t.question(&token, None, "approve").await;
                let card = r.event("confirm").clone();
                let call = card["call"].as_str().unwrap().to_string();
                let stored = audited_arguments(&t, &call).await;
                let lines = deskbell::tools::render::render(&json!({"type": "object"}), &stored);
                assert_eq!(card["arguments"], serde_json::to_value(&lines).unwrap());
                t.llm.push(Script::text("done"));
                let before = t.hook.calls().len();
                let done = t.answer(&token, &r.conversation(), &card, "confirm").await;
                assert_eq!(done.event("done")["status"], "answered");
                assert_eq!(t.hook.calls()[before].body["arguments"], stored);
            });
            Ok(())
        })
        .unwrap();
}

#[tokio::test]
async fn a_number_a_double_cannot_hold_is_refused_and_the_model_told_to_send_a_string() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(tool_call(
        "cancel_order",
        r#"{"order_id": 9007199254740993}"#,
    ));
    t.llm.push(Script::text("Please give me the id again."));
    let r = t
        .question(&token, None, "Cancel order 9007199254740993")
        .await;
    assert!(r.all("confirm").is_empty(), "no card for a rounded number");
    assert_eq!(r.event("done")["status"], "answered");
    let rows = t.audit().await;
    let events: Vec<_> = rows
        .iter()
        .map(|r| (r.event.as_str(), r.reason.map(|r| r.as_str())))
        .collect();
    assert_eq!(
        events,
        [("requested", None), ("refused", Some("invalid_arguments"))]
    );
    let told = t.llm.requests()[1]["messages"].to_string();
    assert!(told.contains("as a string"), "{told}");
    assert!(t.hook.calls().is_empty());
}

#[tokio::test]
async fn a_bidi_override_is_shown_on_the_card_and_the_backend_gets_what_was_shown() {
    let t = TestApp::with(open_tools).await;
    let token = t.visitor().await;
    t.llm.push(tool_call(
        "approve",
        r#"{"city": "Paris \u202e0001 sirap"}"#,
    ));
    let r = t.question(&token, None, "Ship to Paris").await;
    let card = r.event("confirm").clone();
    assert_eq!(card["arguments"][0]["value"], "Paris ⟨U+202E⟩0001 sirap");
    let history = t.history(&token, &r.conversation()).await;
    assert_eq!(
        history.json["messages"][1]["steps"][0]["arguments"], card["arguments"],
        "history shows the signed lines"
    );
    t.answer(&token, &r.conversation(), &card, "confirm").await;
    assert_eq!(
        t.hook.calls()[0].body["arguments"]["city"],
        "Paris \u{202e}0001 sirap"
    );
}

#[tokio::test]
async fn a_nul_in_a_question_is_an_invalid_request() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let r = t.question(&token, None, "hello\u{0}world").await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
}

#[tokio::test]
async fn nul_in_model_text_tool_names_and_tool_results_is_dropped_before_saving() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    t.llm.push(Script::Stream(vec![
        Piece::Text("a\u{0}b ".into()),
        Piece::ToolCall {
            id: "call\u{0}1".into(),
            name: "lookup_order".into(),
            arguments: r#"{"order_id": 42}"#.into(),
        },
        Piece::ToolCall {
            id: "call_2".into(),
            name: "no\u{0}such_tool".into(),
            arguments: r#"{"note": "x\u0000y"}"#.into(),
        },
    ]));
    t.hook.push(HookReply::ok("shipped\u{0} today"));
    t.llm.push(Script::text("done\u{0}."));
    let r = t.question(&token, None, "Where is order 42?").await;
    assert_eq!(r.event("done")["status"], "answered", "{:?}", r.events);
    let history = t.history(&token, &r.conversation()).await;
    assert_eq!(history.status, 200);
    assert_eq!(history.json["messages"][1]["text"], "ab done.");
    let told = t.llm.requests()[1]["messages"].to_string();
    assert!(told.contains("shipped today"), "{told}");
}

/// Decides a card one millisecond past its expiry, as a decision racing the
/// clock would; `swept` first lets the expiry sweep mark the card expired.
async fn decide_after_expiry(swept: bool) -> deskbell::store::Decided {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (_, card) = t.raise_card(&token).await;
    let call = t
        .app
        .store
        .calls()
        .get(card["call"].as_str().unwrap())
        .await
        .unwrap()
        .unwrap();
    let after = call.expires_at.unwrap() + 1;
    if swept {
        t.app.store.cards().expire_due(after, None).await.unwrap();
    }
    let bubble = continuation_bubble(&call, after);
    // When swept, the decision still believes the call pending, its clock read
    // before the expiry.
    let now = if swept { after - 2 } else { after };
    let confirmed = deskbell::store::Step {
        from: deskbell::store::CallStatus::Pending,
        to: deskbell::store::CallStatus::Confirmed,
        reason: None,
        by: None,
    };
    t.app
        .store
        .cards()
        .decide(&call, confirmed, now, &bubble, None)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_card_that_expires_between_the_checks_and_the_decision_is_late() {
    assert_eq!(
        decide_after_expiry(false).await,
        deskbell::store::Decided::Late
    );
}

#[tokio::test]
async fn a_card_the_sweep_expired_after_the_checks_is_late_not_replayed() {
    assert_eq!(
        decide_after_expiry(true).await,
        deskbell::store::Decided::Late
    );
}

#[tokio::test]
async fn a_stored_transcript_that_does_not_parse_leaves_the_card_undecided() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    let call = card["call"].as_str().unwrap();
    sqlx::query(
        "UPDATE calls SET context = '{\"v\":1,\"items\":[{\"role\":\"wizard\"}]}' WHERE id = $1",
    )
    .bind(call)
    .execute(&t.db().await)
    .await
    .unwrap();
    let r = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!((r.status, r.code()), (500, "internal_error"));
    assert!(t.hook.calls().is_empty(), "nothing ran");
    assert_eq!(
        t.audit_events(call).await,
        ["requested"],
        "nothing was decided"
    );
    let stored = t.app.store.calls().get(call).await.unwrap().unwrap();
    assert_eq!(stored.status.as_str(), "pending");
}

#[tokio::test]
async fn a_card_whose_lines_cannot_be_read_is_shown_without_a_signature() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let (conversation, card) = t.raise_card(&token).await;
    sqlx::query("UPDATE calls SET lines = 'not json' WHERE id = $1")
        .bind(card["call"].as_str().unwrap())
        .execute(&t.db().await)
        .await
        .unwrap();
    let history = t.history(&token, &conversation).await;
    let step = &history.json["messages"][1]["steps"][0];
    assert_eq!(step["status"], "pending");
    assert!(step.get("signature").is_none_or(Value::is_null), "{step}");
}

/// The row of a continuation's bubble, as a decision opens it.
fn continuation_bubble(
    call: &deskbell::store::CallRow,
    at: deskbell::clock::Millis,
) -> deskbell::store::MessageRow {
    deskbell::store::MessageRow {
        id: deskbell::ids::new_id("m"),
        conversation: call.conversation.clone(),
        turn: call.turn.clone(),
        role: deskbell::states::Role::Assistant,
        text: String::new(),
        status: deskbell::states::MessageStatus::Streaming,
        citations: None,
        created_at: at,
        owner: None,
        budget_day: None,
        reserved: 0,
        author: None,
    }
}

/// Any text but NUL, which neither database's text type holds: control
/// characters, every plane of Unicode, and drawn often the characters that
/// SQL and PostgreSQL's array literals (the group commit's columns there)
/// quote or escape.
fn any_text() -> impl Strategy<Value = String> {
    let special = proptest::sample::select(vec!['"', '\\', '\'', '{', '}', ',', ' ', '\n']);
    let char = prop_oneof![any::<char>().prop_filter("no NUL", |c| *c != '\0'), special];
    proptest::collection::vec(char, 0..120).prop_map(String::from_iter)
}

/// The group commit writes a batch a kind at a time: three turns
/// started in one batch and ended in another keep their questions, answers,
/// citations and usage byte for byte, and their budget row is reserved and
/// settled by exactly their shares, for any text, on both databases.
#[test]
fn a_batchs_rows_come_back_exactly_for_any_text() {
    use deskbell::budget::BudgetShare;
    use deskbell::states::{MessageStatus, Role};
    use deskbell::store::{Reservation, TurnEnd, TurnStart};
    use deskbell::wire::Usage;
    use sqlx::Row;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let t = runtime.block_on(TestApp::start());
    let db = runtime.block_on(t.db());
    let store = &t.app.store;
    let owner = store.leases().fence();
    let share = BudgetShare {
        site: "acme".into(),
        day: "2026-12-01".into(),
        reserved: 100,
        limit: 1_000_000_000,
    };
    let budget = |db: sqlx::AnyPool| async move {
        sqlx::query(
            "SELECT reserved, spent FROM budgets WHERE site = 'acme' AND day = '2026-12-01'",
        )
        .fetch_optional(&db)
        .await
        .unwrap()
        .map_or((0, 0), |r| {
            (r.get::<i64, _>("reserved"), r.get::<i64, _>("spent"))
        })
    };
    let texts = proptest::collection::vec((any_text(), any_text(), any_text()), 3);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(24));
    runner
        .run(&texts, |texts| {
            runtime.block_on(async {
                let mut starts = Vec::new();
                let mut ends = Vec::new();
                // Each turn its own reservation and usage, so that a value
                // bound to another row or column shows.
                for (i, (question, answer, citations)) in texts.iter().enumerate() {
                    let i = i as u64;
                    let share = BudgetShare {
                        reserved: 100 + 10 * i as i64,
                        ..share.clone()
                    };
                    let conversation = deskbell::ids::new_id("c");
                    let new_message =
                        |role| crate::support::message_row(&deskbell::ids::new_id("m"), &conversation, role);
                    let mut asked = new_message(Role::Visitor);
                    asked.text = question.clone();
                    // Missing values and the word NULL come back as they went in.
                    asked.author = (i == 1).then(|| "NULL".to_string());
                    let mut bubble = new_message(Role::Assistant);
                    bubble.text = String::new();
                    bubble.status = MessageStatus::Streaming;
                    bubble.owner = Some(owner.to_string());
                    bubble.budget_day = Some(share.day.clone());
                    bubble.reserved = share.reserved;
                    ends.push(TurnEnd {
                        message: bubble.id.clone(),
                        text: answer.clone(),
                        status: MessageStatus::Answered,
                        citations: (i != 0).then(|| citations.clone()),
                        usage: Usage { input_tokens: 7 + i, output_tokens: 9 + 2 * i },
                        unreported: 0,
                        budget: Some(share.clone()),
                        owner: owner.clone(),
                    });
                    starts.push(TurnStart {
                        conversation,
                        is_new: true,
                        site: "acme".into(),
                        visitor: "v_x".into(),
                        now: 1,
                        visitor_message: asked,
                        bubble,
                        budget: Some(share.clone()),
                    });
                }
                let (reserved, spent) = budget(db.clone()).await;
                let begun = store.turns().write_batch(&[], &starts).await.unwrap();
                assert_eq!(begun, [Reservation::Reserved; 3]);
                // 100 + 110 + 120 reserved; 16 + 19 + 22 tokens spent.
                assert_eq!(budget(db.clone()).await, (reserved + 330, spent));
                store.turns().write_batch(&ends, &[]).await.unwrap();
                assert_eq!(budget(db.clone()).await, (reserved, spent + 57));
                for (i, ((question, answer, citations), start)) in texts.iter().zip(&starts).enumerate() {
                    let i = i as i64;
                    let read = |id: &str| {
                        sqlx::query("SELECT text, status, citations, input_tokens, output_tokens FROM messages WHERE id = $1")
                            .bind(id.to_string())
                            .fetch_one(&db)
                    };
                    // Every column of both new messages, as they were given.
                    for m in [&start.visitor_message, &start.bubble] {
                        let row = sqlx::query(
                            "SELECT conversation, turn, role, created_at, owner, budget_day, reserved, author \
                             FROM messages WHERE id = $1",
                        )
                        .bind(m.id.clone())
                        .fetch_one(&db)
                        .await
                        .unwrap();
                        assert_eq!(row.get::<String, _>("conversation"), m.conversation);
                        assert_eq!(row.get::<String, _>("turn"), m.turn);
                        assert_eq!(row.get::<String, _>("role"), m.role.as_str());
                        assert_eq!(row.get::<i64, _>("created_at"), m.created_at);
                        assert_eq!(row.get::<Option<String>, _>("owner"), m.owner);
                        assert_eq!(row.get::<Option<String>, _>("budget_day"), m.budget_day);
                        assert_eq!(row.get::<i64, _>("reserved"), m.reserved);
                        assert_eq!(row.get::<Option<String>, _>("author"), m.author);
                    }
                    let row = sqlx::query("SELECT site, visitor, created_at FROM conversations WHERE id = $1")
                        .bind(start.conversation.clone())
                        .fetch_one(&db)
                        .await
                        .unwrap();
                    assert_eq!(
                        (row.get::<String, _>("site"), row.get::<String, _>("visitor"), row.get::<i64, _>("created_at")),
                        (start.site.clone(), start.visitor.clone(), start.now)
                    );
                    let row = read(&start.visitor_message.id).await.unwrap();
                    assert_eq!(&row.get::<String, _>("text"), question);
                    assert_eq!(row.get::<Option<String>, _>("citations"), None);
                    let row = read(&start.bubble.id).await.unwrap();
                    assert_eq!(&row.get::<String, _>("text"), answer);
                    assert_eq!(row.get::<String, _>("status"), "answered");
                    let expected = (i != 0).then_some(citations);
                    assert_eq!(row.get::<Option<String>, _>("citations").as_ref(), expected);
                    assert_eq!(
                        (row.get::<i64, _>("input_tokens"), row.get::<i64, _>("output_tokens")),
                        (7 + i, 9 + 2 * i)
                    );
                }
            });
            Ok(())
        })
        .unwrap();
}
