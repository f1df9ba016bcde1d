//! The server the widget's browser tests run against: Deskbell with a scripted model
//! and a recording tool endpoint, plus a host page on another origin that embeds the
//! widget. Prints one JSON line — `{"api", "page"}` — then serves until killed.
//!
//! The page origin also answers the tests' control calls: `POST /__script` queues a
//! model reply (`{"text"}`, `{"tool_calls": [{"name", "arguments"}]}` or
//! `{"status"}`), `GET /__calls` lists the tool calls received.
//! `DESKBELL_ACTION_APPROVAL_TTL_MIN` sets the card lifetime as usual.
//! `DESKBELL_E2E_SITE` adds keys to the site (its `locale`, `[site.strings]`
//! go after the tools, in `DESKBELL_E2E_TOOLS`); `DESKBELL_E2E_TOOLS` adds a test file's own `[[site.tool]]` tables to the
//! site, with `{hook}` standing for the recording tool endpoint.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::Html;
use axum::routing::{get, post};
use deskbell::config::{Config, Env};
use deskbell::testkit::{FakeLlm, Piece, Reply, Webhook};
use serde_json::{Value, json};

#[derive(Clone)]
struct Control {
    llm: FakeLlm,
    hook: Webhook,
    api: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let llm = FakeLlm::start().await?;
    let hook = Webhook::start().await?;
    let page_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let page = format!("http://{}", page_listener.local_addr()?);
    let api_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let api = format!("http://{}", api_listener.local_addr()?);
    let config = format!(
        r#"
[server]
database_url = "sqlite://{db}"

[llm]
base_url = "{llm}"
model = "fake"

[[site]]
id = "acme"
name = "Acme"
origins = ["{page}"]
identity_secret_env = "E2E_IDENTITY_SECRET"
{site_keys}

[site.handoff]
enabled = true

[[site.tool]]
name = "lookup_order"
label = "Look up an order"
policy = "auto"
url = "{lookup}"
input_schema = {{ type = "object", required = ["order_id"], properties = {{ order_id = {{ type = "integer" }} }} }}

[[site.tool]]
name = "cancel_order"
label = "Cancel an order"
policy = "confirm"
url = "{cancel}"
input_schema = {{ type = "object", required = ["order_id"], properties = {{ order_id = {{ type = "integer", title = "Order ID" }}, reason = {{ type = "string" }} }} }}
{extra}
"#,
        db = dir.path().join("e2e.db").display(),
        llm = llm.base_url,
        lookup = hook.url("/lookup"),
        cancel = hook.url("/cancel"),
        // `DESKBELL_E2E_SITE`: keys of the site itself (`locale = "de"`).
        site_keys = std::env::var("DESKBELL_E2E_SITE").unwrap_or_default(),
        extra = std::env::var("DESKBELL_E2E_TOOLS")
            .unwrap_or_default()
            .replace("{hook}", &hook.base_url),
    );
    let env = Env::from_process()
        .with(
            "BETTER_AUTH_SECRET",
            "e2e-secret-0123456789abcdef0123456789",
        )
        // The tests sign identity tokens with this, as an operator's backend would.
        .with("E2E_IDENTITY_SECRET", "e2e-identity-secret");
    let config = Config::from_toml(&config, "e2e.toml", &env)?;
    let app = deskbell::app::build(config, Default::default()).await?;
    // The console's tests sign in as these.
    let admin_password = "e2e-admin-password-0123";
    let agent_password = "e2e-agent-password-0123";
    let now = chrono_now();
    deskbell::operator::accounts::add_operator(
        &app.store,
        "admin@example.test",
        deskbell::states::OperatorRole::Admin,
        admin_password,
        now,
    )
    .await?;
    deskbell::operator::accounts::add_operator(
        &app.store,
        "agent@example.test",
        deskbell::states::OperatorRole::Agent,
        agent_password,
        now,
    )
    .await?;
    // Visitors see the admin's replies under this name, never the email.
    app.store
        .operators()
        .set_name("admin@example.test", "Ada")
        .await?;
    // The schema fuzzer calls the operator API with this token.
    let (_, operator_token) = deskbell::operator::accounts::new_token(
        &app.store,
        "e2e",
        deskbell::states::OperatorRole::Admin,
        now,
    )
    .await?;
    let router = deskbell::routes::router(app.clone());
    tokio::spawn(deskbell::routes::serve(
        app,
        router,
        api_listener,
        std::future::pending(),
    ));

    let control = Control {
        llm,
        hook,
        api: api.clone(),
    };
    let pages = axum::Router::new()
        .route("/", get(host_page))
        .route("/__script", post(script))
        .route("/__calls", get(calls))
        .route("/__requests", get(requests))
        .with_state(Arc::new(control));
    tokio::spawn(async move { axum::serve(page_listener, pages).await });
    println!(
        "{}",
        json!({
            "api": api,
            "page": page,
            "operator": {"email": "admin@example.test", "password": admin_password},
            "agent": {"email": "agent@example.test", "password": agent_password},
            "operator_token": operator_token,
        })
    );
    std::future::pending::<()>().await;
    Ok(())
}

fn chrono_now() -> i64 {
    use deskbell::clock::Clock;
    deskbell::clock::SystemClock.now_ms()
}

/// The host page. `?hostile=1` adds styles that try to restyle everything, and
/// `?bare=1` leaves the widget out (to compare globals).
async fn host_page(State(c): State<Arc<Control>>, Query(q): Query<Value>) -> Html<String> {
    let hostile = if q.get("hostile").is_some() {
        "<style>* { color: red !important; background: yellow !important; font-size: 40px !important; \
         display: block !important; border: 5px dotted green !important; } button { display: none !important; } \
         deskbell-widget { display: none !important; opacity: 0 !important; } div { visibility: hidden !important; }</style>"
    } else {
        ""
    };
    let widget = if q.get("bare").is_some() {
        String::new()
    } else {
        format!(
            r##"<script src="{}/widget.js" data-site="acme" data-title="Acme support" data-accent="#1f4fd1" async></script>"##,
            c.api
        )
    };
    Html(format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Shop</title>{hostile}</head>
<body><main><h1>Shop</h1><p>A host page for the widget's tests.</p></main>{widget}</body></html>"#
    ))
}

async fn script(State(c): State<Arc<Control>>, Json(body): Json<Value>) -> Json<Value> {
    let reply = if let Some(text) = body["text"].as_str() {
        Reply::Stream(vec![Piece::Text(text.into())])
    } else if let Some(status) = body["status"].as_u64() {
        Reply::Status(status as u16)
    } else {
        let calls: Vec<(String, Value)> = body["tool_calls"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| {
                        (
                            c["name"].as_str().unwrap_or_default().to_string(),
                            c["arguments"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let named: Vec<(&str, Value)> =
            calls.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
        Reply::tool_calls(&named)
    };
    c.llm.push(reply);
    Json(json!({"ok": true}))
}

/// The model requests so far: their count and the last one.
async fn requests(State(c): State<Arc<Control>>) -> Json<Value> {
    let all = c.llm.requests();
    Json(json!({"count": all.len(), "last": all.last()}))
}

async fn calls(State(c): State<Arc<Control>>) -> Json<Value> {
    Json(json!(
        c.hook
            .calls()
            .iter()
            .map(|r| json!({"path": r.path, "body": r.body}))
            .collect::<Vec<_>>()
    ))
}
