//! The embedded model (`provider = "local"`) with a real, tiny GGUF model:
//! SmolLM2-135M-Instruct, fetched by `scripts/fetch-test-model`. It is too small to
//! answer well, so these tests hold behaviour, not wording.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use deskbell::config::{Config, KnowledgeSource};
use deskbell::llm::{ChatMessage, ChatRequest, LocalProvider, ModelEvent, Provider};
use deskbell::wire::Usage;
use futures_util::StreamExt;
use serde_json::json;

use crate::support::{ORIGIN, TestApp};

/// The test model; `scripts/test` fetches it and names it in `DESKBELL_TEST_MODEL`.
pub fn test_model() -> PathBuf {
    let path = std::env::var_os("DESKBELL_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/deskbell/test-models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        path.exists(),
        "the test model {} is missing: run scripts/fetch-test-model",
        path.display()
    );
    path
}

pub fn use_local_model(c: &mut Config) {
    c.llm.provider = "local".into();
    c.llm.local_model = Some(test_model().display().to_string());
    c.llm.max_output_tokens = 48;
}

fn request(question: &str, max_tokens: u32) -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::System {
                content: "You are a helpful assistant.".into(),
            },
            ChatMessage::User {
                content: question.into(),
            },
        ],
        tools: Vec::new(),
        max_tokens,
        stable_system: "You are a helpful assistant.".len(),
    }
}

#[tokio::test]
async fn the_local_model_streams_an_answer_through_ask_and_counts_its_usage() {
    let t = TestApp::with(use_local_model).await;
    let token = t.visitor().await;
    let reply = t
        .question(&token, None, "What is the capital of France?")
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.json);
    assert!(reply.all("delta").len() > 1, "{:?}", reply.names());
    assert!(reply.text().contains("Paris"), "{}", reply.text());
    let usage = &reply.event("done")["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 100, "{usage}");
    let output = usage["output_tokens"].as_u64().unwrap();
    assert!(output > 1 && output <= 48, "{usage}");
}

#[tokio::test]
async fn a_full_queue_answers_503_provider_unavailable() {
    let t = TestApp::with(|c| {
        use_local_model(c);
        c.llm.max_output_tokens = 400;
        c.llm.local_queue = 0;
    })
    .await;
    let token = t.visitor().await;
    let busy = t
        .http
        .post(format!("{}/v1/ask", t.base))
        .header("origin", ORIGIN)
        .bearer_auth(&token)
        .json(
            &json!({"message": "Write a very long story about a dragon who learns to bake bread."}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(busy.status(), 200);
    // Once the first answer streams, the one worker is taken and no turn may wait.
    let mut body = busy.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(!first.is_empty());
    let other = t.visitor().await;
    let refused = t.question(&other, None, "Hello?").await;
    assert_eq!(refused.status, 503, "{:?}", refused.json);
    assert_eq!(refused.code(), "provider_unavailable");
}

#[tokio::test]
async fn a_second_turn_starts_from_the_cached_prompt_prefix_and_answers_the_same() {
    let (provider, _) = LocalProvider::start(test_model(), None, 4).unwrap();
    let tools = vec![Arc::new(deskbell::llm::ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order by its number.".into(),
        parameters: json!({"type": "object", "properties": {"order_id": {"type": "integer"}}}),
    })];
    let mut answers = Vec::new();
    for question in [
        "Name three colours.",
        "Name three colours.",
        "Where is Paris?",
    ] {
        let mut r = request(question, 24);
        r.tools = tools.clone();
        answers.push(collect(&provider, r).await.0);
    }
    // The system text and tool definitions were read once; the questions differ.
    assert_eq!(provider.stats.prefix_hits.load(Ordering::Relaxed), 2);
    assert_eq!(answers[0], answers[1]);
    assert!(!answers[0].is_empty());
}

#[tokio::test]
async fn a_dropped_stream_frees_the_worker_for_the_next_turn() {
    let (provider, _) = LocalProvider::start(test_model(), None, 1).unwrap();
    let mut stream = provider
        .stream(request("Write a very long story about a dragon.", 400))
        .await
        .unwrap();
    assert!(matches!(stream.next().await, Some(Ok(ModelEvent::Text(_)))));
    drop(stream);
    // The worker notices nobody reads and takes the next turn long before 400 tokens.
    let next = tokio::time::timeout(
        Duration::from_secs(20),
        collect(&provider, request("Say hello.", 8)),
    )
    .await
    .expect("the worker was not freed");
    assert!(next.1.output_tokens > 0);
    assert_eq!(provider.stats.abandoned.load(Ordering::Relaxed), 1);
}

/// The answer's text and its usage (zero if none was reported).
pub async fn collect(provider: &LocalProvider, request: ChatRequest) -> (String, Usage) {
    let mut stream = provider.stream(request).await.unwrap();
    let (mut text, mut usage) = (String::new(), Usage::ZERO);
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            ModelEvent::Text(t) => text.push_str(&t),
            ModelEvent::Usage(u) => usage = u,
            ModelEvent::ToolCalls(_) => {}
        }
    }
    (text, usage)
}

#[test]
fn the_vocabulary_read_from_the_model_file_tokenises_as_llama_cpp_does() {
    let vocab = deskbell::llm::local::Vocab::of_model(&test_model(), None).unwrap();
    let fixture: Vec<serde_json::Value> =
        serde_json::from_str(include_str!("../fixtures/smollm2-tokens.json")).unwrap();
    assert!(fixture.len() >= 10);
    for sample in fixture {
        let text = sample["text"].as_str().unwrap();
        let expected: Vec<u32> = serde_json::from_value(sample["ids"].clone()).unwrap();
        let ids = vocab.encode(text).unwrap();
        assert_eq!(ids, expected, "tokenising {text:?}");
        assert_eq!(vocab.decode(&ids).unwrap(), text, "round trip of {text:?}");
    }
}

/// Site instructions under which the 135M test model opens a tool call when the
/// visitor's message starts one; it does not choose tools on its own (it is far too
/// small). Everything after the opening `<tool_call>` is the grammar's doing.
const STEER: &str = "Answer questions from the sources. For orders, answer with a tool call and nothing else, like this:\n<tool_call>\n{\"name\": \"lookup_order\", \"arguments\": {\"order_id\": 7}}\n</tool_call>";

/// The demo site's shape: its bundled documents, an auto lookup and a confirm
/// cancellation (the test configuration's tools), and the steering instructions.
async fn demo_like_site() -> (TestApp, tempfile::TempDir) {
    demo_like_site_with(None, |_| {}).await
}

/// `demo_like_site` answering with a given local provider, its configuration
/// changed further by `edit`.
async fn demo_like_site_with(
    provider: Option<Arc<LocalProvider>>,
    edit: impl FnOnce(&mut Config),
) -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    for (name, text) in deskbell::demo::KNOWLEDGE {
        std::fs::write(docs.join(name), text).unwrap();
    }
    let data = dir.path().join("data");
    let provider = provider.map(|p| p as Arc<dyn Provider>);
    let t = TestApp::with_provider(provider, |c| {
        use_local_model(c);
        c.server.data_dir = data;
        let site = &mut c.sites[0];
        site.knowledge = vec![KnowledgeSource::Path(docs.display().to_string())];
        site.instructions = STEER.into();
        edit(c);
    })
    .await;
    (t, dir)
}

#[tokio::test]
async fn a_site_s_questions_share_its_cached_prefix_and_another_site_s_do_not() {
    let (provider, _) = LocalProvider::start(test_model(), None, 4).unwrap();
    let provider = Arc::new(provider);
    // A second site with the same tools but its own instructions.
    let (t, _dir) = demo_like_site_with(Some(provider.clone()), |c| {
        let tools = c.sites[0].tools.clone();
        c.sites[1].tools = tools;
        c.sites[1].instructions = "You help the Other shop.".into();
    })
    .await;
    let hits = || provider.stats.prefix_hits.load(Ordering::Relaxed);
    let (acme, other) = (t.visitor().await, t.visitor_for("other").await);
    let question = json!({"message": "How long does shipping take?"});
    for (token, origin) in [(&acme, ORIGIN), (&other, "https://other.example")] {
        let r = t
            .post("/v1/ask", Some(token), origin, question.clone())
            .await;
        assert_eq!(r.status, 200, "{:?}", r.json);
    }
    assert_eq!(hits(), 0, "a site's instructions are part of its prefix");
    // A new question brings new sources, which follow the prefix.
    let r = t
        .question(&acme, None, "What does the warranty cover?")
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(hits(), 1, "the site's prefix was read once");
}

#[tokio::test]
async fn a_constrained_tool_call_is_valid_against_its_schema_and_raises_a_card() {
    let (t, _dir) = demo_like_site().await;
    let token = t.visitor().await;
    let reply = t
        .question(&token, None, "<tool_call> cancel_order 42")
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.json);
    let card = reply.event("confirm");
    assert_eq!(card["tool"], "cancel_order", "{card}");
    // The arguments are what the grammar let through: an integer order id, and
    // nothing the schema does not allow.
    assert_eq!(
        card["arguments"],
        json!([{"name": "Order ID", "value": "42"}])
    );
    assert_eq!(reply.event("done")["status"], "awaiting_confirmation");
    assert!(
        t.hook.calls().is_empty(),
        "nothing ran before the visitor confirmed"
    );
}

#[tokio::test]
async fn the_demo_flow_runs_on_the_local_model_from_question_to_confirmed_cancellation() {
    let (t, _dir) = demo_like_site().await;
    let token = t.visitor().await;

    // A question about the documents is answered from them, citing one.
    let answer = t
        .question(&token, None, "What does [1] say about shipping?")
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.json);
    assert!(answer.text().contains("ship"), "{}", answer.text());
    let cited = answer.event("citations")["items"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        !cited.is_empty() && cited[0]["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{cited:?}"
    );
    assert_eq!(answer.event("done")["status"], "answered");

    // An order lookup runs at once: its policy is auto.
    let lookup = t
        .question(&token, None, "<tool_call> lookup_order 42")
        .await;
    let steps: Vec<_> = lookup
        .all("step")
        .iter()
        .map(|s| (s["tool"].clone(), s["status"].clone()))
        .collect();
    assert!(
        steps.contains(&(json!("lookup_order"), json!("succeeded"))),
        "{steps:?}"
    );
    assert_eq!(t.hook.calls()[0].path, "/lookup");
    assert_eq!(t.hook.calls()[0].body["arguments"], json!({"order_id": 42}));

    // A cancellation waits on a card; confirming it runs exactly the shown call.
    let cancel = t
        .question(&token, None, "<tool_call> cancel_order 42")
        .await;
    let conversation = cancel.conversation();
    let card = cancel.event("confirm").clone();
    let ran = t.answer(&token, &conversation, &card, "confirm").await;
    assert_eq!(ran.status, 200, "{:?}", ran.json);
    let step = ran.all("step").last().cloned().cloned().unwrap();
    assert_eq!(
        (step["tool"].clone(), step["status"].clone()),
        (json!("cancel_order"), json!("succeeded"))
    );
    let calls = t.hook.calls();
    assert_eq!(calls.last().unwrap().path, "/cancel");
    assert_eq!(
        calls.last().unwrap().body["arguments"],
        json!({"order_id": 42})
    );
    let call = card["call"].as_str().unwrap();
    assert_eq!(
        t.audit_events(call).await[..3],
        ["requested", "confirmed", "executed"]
    );
}

/// A panic in generation fails that turn with an error, and the worker serves the
/// next one (issue 14, item 9).
#[tokio::test]
async fn a_panic_in_generation_fails_the_turn_and_the_worker_serves_the_next() {
    let (provider, _) = LocalProvider::start(test_model(), None, 1).unwrap();
    provider.panic_on_next_turn();
    let failed = provider.stream(request("Say hello.", 8)).await;
    assert!(failed.is_err(), "the turn failed");
    assert_eq!(provider.stats.panics.load(Ordering::Relaxed), 1);
    let next = tokio::time::timeout(
        Duration::from_secs(30),
        collect(&provider, request("Say hello.", 8)),
    )
    .await
    .expect("the worker is still there");
    assert!(next.1.output_tokens > 0, "the next turn was answered");
}
