//! How well a model answers and chooses tools in Deskbell (issue 20), scored on a
//! fixed set: questions on the demo's documents, each with the facts its answer
//! must contain and the document it must cite, and tool scenarios, each with the
//! tool it should call (and, for a card, the order it names) or no tool at all.
//! It runs the real `deskbell demo` as a child process — its documents, its shop's
//! tools, its prompts — against the model named by the environment:
//!
//! - `BENCH_QUALITY_URL` (an OpenAI-compatible `…/v1`) with `BENCH_QUALITY_MODEL`
//!   and `OPENAI_API_KEY` if the server needs one;
//! - else the embedded model on `DESKBELL_LOCAL_MODEL` or `DESKBELL_TEST_MODEL`.
//!
//! An automatic tool's call shows in the stream as a step (its name); a card shows
//! its arguments, so a confirm tool's order number is checked too.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::Command;

use crate::client::Client;
use crate::stats::report;

/// A question, the facts its answer must hold (each fact: any one of its
/// spellings, compared without case), and the document it must cite.
struct Question {
    ask: &'static str,
    facts: &'static [&'static [&'static str]],
    source: &'static str,
}

const QUESTIONS: &[Question] = &[
    Question {
        ask: "How long does standard shipping take?",
        facts: &[&["3 to 5", "3-5", "three to five"]],
        source: "shipping",
    },
    Question {
        ask: "How much does express shipping cost?",
        facts: &[&["12.90", "12,90"]],
        source: "shipping",
    },
    Question {
        ask: "How fast is express delivery?",
        facts: &[&["1 to 2", "1-2", "one to two"]],
        source: "shipping",
    },
    Question {
        ask: "Is standard shipping ever free?",
        facts: &[&["50"]],
        source: "shipping",
    },
    Question {
        ask: "Do you ship to Norway?",
        facts: &[&["yes", "norway"]],
        source: "shipping",
    },
    Question {
        ask: "What does standard shipping cost?",
        facts: &[&["4.90", "4,90"]],
        source: "shipping",
    },
    Question {
        ask: "Until what time must I order for same-day dispatch?",
        facts: &[&["14:00", "2 pm", "2pm"]],
        source: "shipping",
    },
    Question {
        ask: "How do I track my parcel?",
        facts: &[&["tracking number", "tracking"], &["email", "e-mail"]],
        source: "shipping",
    },
    Question {
        ask: "Can I change the address after ordering?",
        facts: &[&["until it ships", "before it ships", "not shipped"]],
        source: "shipping",
    },
    Question {
        ask: "How many days do I have to return an item?",
        facts: &[&["30"]],
        source: "returns",
    },
    Question {
        ask: "How do I get a return label?",
        facts: &[
            &["label"],
            &["one working day", "1 working day", "within a day"],
        ],
        source: "returns",
    },
    Question {
        ask: "When will I get my refund?",
        facts: &[&["5 working days", "five working days"]],
        source: "returns",
    },
    Question {
        ask: "Is return shipping free?",
        facts: &[&["free"], &["eu", "european union"]],
        source: "returns",
    },
    Question {
        ask: "Does the item need its original packaging to be returned?",
        facts: &[&["original packaging"]],
        source: "returns",
    },
    Question {
        ask: "Where does my refund go?",
        facts: &[&["original payment method", "same payment method"]],
        source: "returns",
    },
    Question {
        ask: "How long is the warranty?",
        facts: &[&["two years", "2 years", "two-year", "2-year"]],
        source: "warranty",
    },
    Question {
        ask: "Does the warranty cover accidental damage?",
        facts: &[&["not cover", "does not", "doesn't", "no"]],
        source: "warranty",
    },
    Question {
        ask: "How do I make a warranty claim?",
        facts: &[&["photo"], &["order number"]],
        source: "warranty",
    },
    Question {
        ask: "What does the warranty cover?",
        facts: &[&["manufacturing defect"]],
        source: "warranty",
    },
    Question {
        ask: "What happens if my product is defective?",
        facts: &[&["repair", "replace"]],
        source: "warranty",
    },
];

/// A scenario and the tool it should lead to: `Some((tool, order))`, where an
/// order is checked on a card; `None` for no tool.
struct Scenario {
    ask: &'static str,
    tool: Option<(&'static str, Option<u64>)>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        ask: "Where is order 42?",
        tool: Some(("lookup_order", None)),
    },
    Scenario {
        ask: "What is the status of order 43?",
        tool: Some(("lookup_order", None)),
    },
    Scenario {
        ask: "Can you look up order 41 for me?",
        tool: Some(("lookup_order", None)),
    },
    Scenario {
        ask: "Has order 44 shipped yet?",
        tool: Some(("lookup_order", None)),
    },
    Scenario {
        ask: "Please cancel order 44.",
        tool: Some(("cancel_order", Some(44))),
    },
    Scenario {
        ask: "I ordered by mistake, cancel order 42 please.",
        tool: Some(("cancel_order", Some(42))),
    },
    Scenario {
        ask: "Please send order 42 to Keizersgracht 1, 1015 Amsterdam, Netherlands instead.",
        tool: Some(("change_address", Some(42))),
    },
    Scenario {
        ask: "Hello!",
        tool: None,
    },
    Scenario {
        ask: "How long does standard shipping take?",
        tool: None,
    },
    Scenario {
        ask: "What is your warranty?",
        tool: None,
    },
];

pub async fn figures() -> anyhow::Result<()> {
    let Some((provider, env)) = provider() else {
        report(
            "quality",
            "skipped: set BENCH_QUALITY_URL, DESKBELL_LOCAL_MODEL or DESKBELL_TEST_MODEL",
            "",
        );
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let port = crate::server::free_port()?;
    let base = format!("http://127.0.0.1:{port}");
    let mut command = Command::new(crate::server::deskbell_binary()?);
    command
        .arg("demo")
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .env("DESKBELL_BIND", format!("127.0.0.1:{port}"))
        .env(
            "DESKBELL_METRICS_BIND",
            format!("127.0.0.1:{}", crate::server::free_port()?),
        )
        .env("DESKBELL_LOG", "error")
        .env_remove("DESKBELL_LLM_BASE_URL")
        .env_remove("DESKBELL_LLM_MODEL")
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let _demo = command.spawn()?;
    wait_ready(&base).await?;
    let client = Client::with_origin(&base, &base);
    let started = Instant::now();
    let (mut facts, mut cited) = (0, 0);
    for q in QUESTIONS {
        let events = ask(&client, q.ask).await?;
        let text = text_of(&events).to_lowercase();
        let has_facts = q
            .facts
            .iter()
            .all(|fact| fact.iter().any(|f| text.contains(&f.to_lowercase())));
        let cites = events.iter().any(|(name, data)| {
            name == "citations"
                && data["items"].as_array().is_some_and(|items| {
                    items.iter().any(|c| {
                        let said = format!("{} {}", c["title"], c["url"]).to_lowercase();
                        said.contains(q.source)
                    })
                })
        });
        facts += usize::from(has_facts);
        cited += usize::from(cites);
    }
    let mut right = 0;
    for s in SCENARIOS {
        let events = ask(&client, s.ask).await?;
        right += usize::from(chose_well(&events, s.tool));
    }
    report(
        &format!(
            "answer quality ({provider}), {} questions on the demo's documents",
            QUESTIONS.len()
        ),
        &format!(
            "all facts in {facts}/{n}; the right document cited in {cited}/{n}",
            n = QUESTIONS.len()
        ),
        "",
    );
    report(
        &format!("tool choice ({provider}), {} scenarios", SCENARIOS.len()),
        &format!(
            "{right}/{} right (the tool, the order on a card, or no tool); {:.0} s in all",
            SCENARIOS.len(),
            started.elapsed().as_secs_f64()
        ),
        "",
    );
    Ok(())
}

/// The model to score and the demo's environment for it.
fn provider() -> Option<(String, Vec<(&'static str, String)>)> {
    if let Ok(url) = std::env::var("BENCH_QUALITY_URL") {
        let model = std::env::var("BENCH_QUALITY_MODEL").unwrap_or_else(|_| "default".into());
        return Some((
            format!("{model} at {url}"),
            vec![
                ("DESKBELL_LLM_BASE_URL", url),
                ("DESKBELL_LLM_MODEL", model),
            ],
        ));
    }
    let file = ["DESKBELL_LOCAL_MODEL", "DESKBELL_TEST_MODEL"]
        .iter()
        .find_map(|v| std::env::var(v).ok())?;
    let name = std::path::Path::new(&file)
        .file_name()
        .map_or(file.clone(), |n| n.to_string_lossy().into_owned());
    Some((
        format!("embedded model {name}"),
        vec![("DESKBELL_LOCAL_MODEL", file)],
    ))
}

/// The tool scenario's verdict: the expected tool was called (for a card, with
/// the expected order), or no tool was called when none should be.
fn chose_well(events: &[(String, Value)], expected: Option<(&str, Option<u64>)>) -> bool {
    let called: Vec<&Value> = events
        .iter()
        .filter(|(name, _)| name == "step" || name == "confirm")
        .map(|(_, data)| data)
        .collect();
    let Some((tool, order)) = expected else {
        return called.is_empty();
    };
    called.iter().any(|data| {
        data["tool"] == tool
            && order.is_none_or(|order| {
                data["arguments"].as_array().is_some_and(|lines| {
                    lines.iter().any(|l| l["value"] == json!(order.to_string()))
                })
            })
    })
}

/// Each question in a conversation of its own, by a new visitor.
async fn ask(client: &Client, message: &str) -> anyhow::Result<Vec<(String, Value)>> {
    let token = client.visitor("acme").await?;
    Ok(client
        .ask(&token, &json!({"message": message}))
        .await?
        .events)
}

fn text_of(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter(|(name, _)| name == "delta")
        .filter_map(|(_, d)| d["text"].as_str())
        .collect()
}

async fn wait_ready(base: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the demo did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
