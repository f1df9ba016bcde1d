//! `deskbell demo`: a complete demo site on 127.0.0.1:8080 with embedded defaults —
//! SQLite in `./deskbell-data`, a generated secret kept there, the "Acme Store" site
//! with bundled knowledge, a demo shop backend served by the same process, and a page
//! at `/` to chat from.

mod page;
mod shop;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::config::{Config, Env};

const DATA_DIR: &str = "./deskbell-data";
const TOOLS_SECRET_VAR: &str = "DESKBELL_DEMO_TOOLS_SECRET";

/// The demo site's bundled documents, by file name.
pub const KNOWLEDGE: &[(&str, &str)] = &[
    ("shipping.md", include_str!("knowledge/shipping.md")),
    ("returns.md", include_str!("knowledge/returns.md")),
    ("warranty.md", include_str!("knowledge/warranty.md")),
];

pub async fn run(env: &Env) -> anyhow::Result<ExitCode> {
    let data = PathBuf::from(DATA_DIR);
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    let knowledge = data.join("docs");
    std::fs::create_dir_all(&knowledge)?;
    for (name, text) in KNOWLEDGE {
        std::fs::write(knowledge.join(name), text)?;
    }
    let secret = kept_secret(&data.join("secret"))?;
    let tools_secret = kept_secret(&data.join("tools-secret"))?;
    let bind = env
        .get("DESKBELL_BIND")
        .unwrap_or("127.0.0.1:8080")
        .to_string();
    let mut env = env.clone().with(TOOLS_SECRET_VAR, &tools_secret);
    if env.get("BETTER_AUTH_SECRET").is_none() {
        env = env.with("BETTER_AUTH_SECRET", &secret);
    }
    // With no OpenAI-compatible endpoint configured, the demo answers with the
    // embedded model: a file named in DESKBELL_LOCAL_MODEL, or the default model,
    // downloaded once.
    let remote = env.get("DESKBELL_LLM_BASE_URL").is_some() || env.get("OPENAI_API_KEY").is_some();
    let mut config = Config::from_toml(
        &demo_config(&bind, &knowledge),
        "(demo configuration)",
        &env,
    )?;
    if !remote {
        println!("{LOCAL_MODEL}");
        use_local_model(&mut config.llm).await;
    }
    // The demo shows its metrics too, on their own address; a second demo (or
    // anything else on that port) only loses them.
    let metrics_bind = config
        .server
        .metrics_bind
        .clone()
        .unwrap_or_else(|| DEMO_METRICS.into());
    let metrics = match crate::ops::metrics::start(&metrics_bind).await {
        Ok(addr) => Some(addr),
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "the demo serves no metrics");
            None
        }
    };
    let app = crate::app::build(config, Default::default()).await?;
    // The bundled documents may have changed with this version: publish them again
    // (unchanged documents are skipped).
    for site in &app.config.sites {
        let report = app
            .knowledge
            .ingest(&app.store, &app.config.server.data_dir, site)
            .await?;
        crate::knowledge::log_report(&site.id, &report);
    }
    let operator = demo_operator(&app).await?;
    let router = crate::routes::router(app.clone())
        .merge(shop::router(tools_secret.into_bytes(), app.clock.clone()))
        .merge(page::router(KNOWLEDGE));
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .with_context(|| format!("cannot listen on {bind} (is another demo running?)"))?;
    println!("Operator console: http://{bind}/console");
    match operator {
        Some(password) => println!(
            "  sign in as {DEMO_OPERATOR} with the password {password}\n  (shown this once; add others with `deskbell operator add`)"
        ),
        None => println!(
            "  sign in as {DEMO_OPERATOR} (its password was printed on the demo's first start)"
        ),
    }
    if let Some(addr) = metrics {
        println!("Metrics (Prometheus): http://{addr}/metrics");
    }
    // The last line printed: whoever reads the demo's output may stop there.
    println!("Deskbell demo: open http://{bind}/ in a browser. Data is kept in {DATA_DIR}.");
    crate::routes::serve(app, router, listener, crate::server::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// Where the demo serves Prometheus metrics (`DESKBELL_METRICS_BIND` moves it).
const DEMO_METRICS: &str = "127.0.0.1:9464";

/// The operator the demo creates on its first start.
const DEMO_OPERATOR: &str = "admin@demo.deskbell";

/// Creates the demo's operator with a generated password on the first start
/// (when there is no operator yet) and returns that password, shown once.
async fn demo_operator(app: &crate::app::App) -> anyhow::Result<Option<String>> {
    if app.store.operators().count().await? > 0 {
        return Ok(None);
    }
    let password = crate::operator::accounts::random_text(18)?;
    crate::operator::accounts::add_operator(
        &app.store,
        DEMO_OPERATOR,
        crate::states::OperatorRole::Admin,
        &password,
        app.clock.now_ms(),
    )
    .await?;
    // Visitors see this name on the operator's replies, never the email.
    app.store
        .operators()
        .set_name(DEMO_OPERATOR, "Ada from Acme")
        .await?;
    Ok(Some(password))
}

const LOCAL_MODEL: &str = "No OpenAI-compatible endpoint is configured, so the demo answers with the \
embedded model, on this machine's CPU: the file in DESKBELL_LOCAL_MODEL, or the default model (downloaded once). \
To use a remote model instead, set OPENAI_API_KEY, or DESKBELL_LLM_BASE_URL and DESKBELL_LLM_MODEL for any \
OpenAI-compatible server (Ollama, llama.cpp's server, vLLM).";

/// Switches the demo to the embedded model, fetching the default model first when
/// no file is given. When it cannot be had (no network, say), the demo still
/// starts: the page and the shop work, and asking says the model is unavailable.
#[cfg(feature = "local-model")]
async fn use_local_model(llm: &mut crate::config::LlmConfig) {
    if llm.local_model.is_none() {
        let source = crate::llm::local::fetch::default_model();
        let fetched =
            crate::llm::local::fetch::fetch(&source, &llm.local_cache, llm.hub_endpoint.as_deref())
                .await;
        match fetched {
            Ok(path) => llm.local_model = Some(path.display().to_string()),
            Err(e) => {
                println!("\nThe assistant cannot answer yet. {e:#}\n");
                return;
            }
        }
    }
    llm.provider = "local".into();
    // A small model on a CPU writes a few tokens a second: a newcomer's first
    // answer should end in seconds, not run to the default cap.
    llm.max_output_tokens = llm.max_output_tokens.min(DEMO_ANSWER_CAP);
}

/// The embedded model's answer cap in the demo, in tokens.
#[cfg(feature = "local-model")]
pub const DEMO_ANSWER_CAP: u32 = 320;

/// A build without the embedded model has nothing to switch to: the demo says how
/// to point it at a remote model.
#[cfg(not(feature = "local-model"))]
async fn use_local_model(_: &mut crate::config::LlmConfig) {
    println!(
        "\nThis build has no embedded model (built without the `local-model` feature), so the assistant \
         cannot answer until OPENAI_API_KEY or DESKBELL_LLM_BASE_URL is set.\n"
    );
}

/// A secret kept in the data folder, generated on first start, so restarts keep
/// visitor tokens and pending cards valid.
fn kept_secret(path: &Path) -> anyhow::Result<String> {
    if let Ok(text) = std::fs::read_to_string(path) {
        let text = text.trim().to_string();
        if text.len() >= crate::secret::MIN_SECRET_BYTES {
            return Ok(text);
        }
    }
    let secret = crate::secret::random_hex_secret()?;
    std::fs::write(path, &secret).with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(secret)
}

fn demo_config(bind: &str, knowledge: &Path) -> String {
    let base = format!("http://{bind}");
    let localhost = base.replace("127.0.0.1", "localhost");
    format!(
        r#"
[server]
bind = "{bind}"
data_dir = "{DATA_DIR}"

[[site]]
id = "acme"
name = "Acme Store"
origins = ["{base}", "{localhost}"]
instructions = "You are the support assistant of Acme Store, a small online shop. Be friendly and brief. Look orders up before acting on them."
knowledge = [{{ path = "{knowledge}", base_url = "{base}/help" }}]

# The human desk: the widget offers "Talk to a person" and the assistant may
# hand over; with no operator's console open, visitors are told nobody is there.
[site.handoff]
enabled = true
offline_message = "Nobody from the Acme team is online right now. You can leave your email address for them."

[[site.tool]]
name = "lookup_order"
label = "Look up an order"
description = "Look up an order by its number: status, items, shipping address."
policy = "auto"
url = "{base}/demo-shop/lookup_order"
timeout_s = 5
secret_env = "{TOOLS_SECRET_VAR}"
input_schema = {{ type = "object", required = ["order_id"], additionalProperties = false, properties = {{ order_id = {{ type = "integer", title = "Order ID", minimum = 1 }} }} }}

[[site.tool]]
name = "cancel_order"
label = "Cancel an order"
description = "Cancel an order that has not shipped yet."
policy = "confirm"
url = "{base}/demo-shop/cancel_order"
timeout_s = 5
secret_env = "{TOOLS_SECRET_VAR}"
input_schema = {{ type = "object", required = ["order_id"], additionalProperties = false, properties = {{ order_id = {{ type = "integer", title = "Order ID", minimum = 1 }}, reason = {{ type = "string", title = "Reason", maxLength = 200 }} }} }}

[[site.tool]]
name = "change_address"
label = "Change the delivery address"
description = "Change where an order that has not shipped yet is delivered."
policy = "confirm"
url = "{base}/demo-shop/change_address"
timeout_s = 5
secret_env = "{TOOLS_SECRET_VAR}"
input_schema = {{ type = "object", required = ["order_id", "address"], additionalProperties = false, properties = {{ order_id = {{ type = "integer", title = "Order ID", minimum = 1 }}, address = {{ type = "object", title = "New address", required = ["street", "city", "postal_code", "country"], properties = {{ street = {{ type = "string" }}, city = {{ type = "string" }}, postal_code = {{ type = "string" }}, country = {{ type = "string" }} }} }} }} }}

# SPEC §20: refunds up to €100 run on their own; above that the visitor
# confirms and a teammate approves in the console; at most 3 a month each.
[[site.tool]]
name = "refund"
label = "Refund an order"
description = "Refund part or all of an order's price to the customer, in euros."
policy = "confirm+approve"
confirm_when = "args.amount > 100"
approvers = ["agent", "admin"]
quota = {{ per = "visitor", window = "month", max = 3 }}
url = "{base}/demo-shop/refund"
timeout_s = 5
secret_env = "{TOOLS_SECRET_VAR}"
input_schema = {{ type = "object", required = ["order_id", "amount"], additionalProperties = false, properties = {{ order_id = {{ type = "integer", title = "Order ID", minimum = 1 }}, amount = {{ type = "number", title = "Amount (€)", exclusiveMinimum = 0 }} }} }}

# SPEC §20: the visitor may change the quantity on the card before confirming.
[[site.tool]]
name = "reorder"
label = "Order the same items again"
description = "Place a new order of the same items as an earlier order."
policy = "confirm"
editable = ["quantity"]
url = "{base}/demo-shop/reorder"
timeout_s = 5
secret_env = "{TOOLS_SECRET_VAR}"
input_schema = {{ type = "object", required = ["order_id", "quantity"], additionalProperties = false, properties = {{ order_id = {{ type = "integer", title = "Order ID", minimum = 1 }}, quantity = {{ type = "integer", title = "Quantity", minimum = 1, maximum = 10 }} }} }}
"#,
        knowledge = knowledge.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_configuration_is_valid() {
        let env = Env::empty()
            .with("BETTER_AUTH_SECRET", "0123456789abcdef0123456789abcdef")
            .with(TOOLS_SECRET_VAR, "tools-secret");
        let config = Config::from_toml(
            &demo_config("127.0.0.1:8080", Path::new("./k")),
            "demo",
            &env,
        );
        let config = config.map_err(|e| e.to_string());
        assert!(config.is_ok(), "{config:?}");
    }
}
