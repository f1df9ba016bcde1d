use super::{Config, Env};

fn env() -> Env {
    Env::empty().with("BETTER_AUTH_SECRET", "0123456789abcdef0123456789abcdef")
}

fn problems(text: &str) -> Vec<String> {
    match Config::from_toml(text, "f.toml", &env()) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.key, p.reason))
            .collect(),
    }
}

#[test]
fn the_example_of_the_spec_is_valid() {
    let text = r#"
[server]
bind = "127.0.0.1:8080"
data_dir = "./deskbell-data"
database_url = "sqlite://./deskbell-data/deskbell.db"
trusted_proxies = []

[llm]
provider = "openai"
base_url = "https://api.openai.com/v1"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
max_output_tokens = 1024

[[site]]
id = "acme"
name = "Acme Store"
origins = ["https://acme.example"]
instructions = "You are Acme's support assistant."
knowledge = ["./docs"]
identity_secret_env = "ACME_IDENTITY_SECRET"
require_verified_identity = false

[site.limits]
requests_per_minute = 20
requests_per_minute_per_ip = 60
daily_token_budget = 1000000
concurrent_streams_per_visitor = 2
concurrent_streams = 200
max_message_chars = 4000

[[site.tool]]
name = "cancel_order"
label = "Cancel an order"
description = "Cancel an order that has not shipped yet."
policy = "confirm"
url = "http://127.0.0.1:9000/cancel"
timeout_s = 10
secret_env = "ACME_TOOLS_SECRET"
input_schema = { type = "object", required = ["order_id"], properties = { order_id = { type = "integer", title = "Order ID" } } }
"#;
    let env = env()
        .with("ACME_IDENTITY_SECRET", "i")
        .with("ACME_TOOLS_SECRET", "t")
        .with("OPENAI_API_KEY", "sk-very-secret-key");
    let config = Config::from_toml(text, "spec.toml", &env)
        .map_err(|e| e.to_string())
        .unwrap();
    assert_eq!(config.sites[0].tools[0].policy, super::Policy::Confirm);
    assert!(config.llm.api_key.is_some());
    assert!(
        !format!("{config:?}").contains("very-secret"),
        "secrets never print"
    );
}

#[test]
fn a_missing_secret_variable_is_named() {
    let found = problems("[[site]]\nid = \"a\"\nidentity_secret_env = \"NOPE\"\n");
    assert_eq!(
        found,
        ["site[0].identity_secret_env: the variable NOPE is not set"]
    );
}

#[test]
fn wrong_types_and_missing_keys_name_their_path() {
    let found = problems(
        "[[site]]\nid = \"a\"\n[[site.tool]]\nname = \"t\"\nlabel = \"T\"\npolicy = \"sometimes\"\nurl = \"http://x\"\n",
    );
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("site[0].tool[0].policy"), "{found:?}");
    let found = problems("[[site]]\nid = 5\n");
    assert!(found[0].starts_with("site[0].id"), "{found:?}");
}

#[test]
fn a_tool_schema_must_describe_an_object() {
    let found = problems(
        "[[site]]\nid = \"a\"\n[[site.tool]]\nname = \"t\"\nlabel = \"T\"\npolicy = \"auto\"\nurl = \"http://x\"\ninput_schema = { type = \"string\" }\n",
    );
    assert!(
        found[0].starts_with("site[0].tool[0].input_schema"),
        "{found:?}"
    );
}

#[test]
fn duplicate_sites_and_zero_limits_are_problems() {
    let found = problems(
        "[[site]]\nid = \"a\"\n[site.limits]\nmax_message_chars = 0\n[[site]]\nid = \"a\"\n",
    );
    assert!(
        found.iter().any(|p| p.starts_with("site[1].id")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("site[0].limits.max_message_chars")),
        "{found:?}"
    );
}

#[test]
fn ttl_minutes_accept_decimals_and_refuse_the_rest() {
    use super::env::parse_ttl_minutes;
    assert_eq!(
        parse_ttl_minutes("10"),
        Some(std::time::Duration::from_secs(600))
    );
    assert_eq!(
        parse_ttl_minutes("0.05"),
        Some(std::time::Duration::from_secs(3))
    );
    for bad in ["0", "-1", "abc", "NaN", "inf", ""] {
        assert_eq!(parse_ttl_minutes(bad), None, "{bad}");
    }
}

/// The keys this version added to §12 refuse values that make no sense, each
/// named with its reason.
#[test]
fn the_added_limits_and_timeouts_refuse_nonsense() {
    let found = problems(
        r#"
[server]
lease_s = 1
stalled_reader_timeout_s = 0
idle_timeout_s = -1
max_connections = 0
max_connections_per_ip = 0
max_request_head_kib = 4

[llm]
turn_timeout_s = 0

[[site]]
id = "acme"
origins = ["https://acme.example"]
identity = "jwt"
"#,
    );
    for key in [
        "server.lease_s",
        "server.stalled_reader_timeout_s",
        "server.idle_timeout_s",
        "server.max_connections",
        "server.max_connections_per_ip",
        "server.max_request_head_kib",
        "llm.turn_timeout_s",
        "site[0].identity",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(key)),
            "{key} not reported in {found:?}"
        );
    }
    let unknown = problems("[[site]]\nid = \"a\"\nidentity = \"sometimes\"\n");
    assert!(
        unknown.iter().any(|p| p.contains("sometimes")),
        "{unknown:?}"
    );
    let private = problems(
        "[[site]]\nid = \"a\"\nknowledge = [{ path = \"https://intranet.example/\", allow_private = \"yes\" }]\n",
    );
    assert!(!private.is_empty(), "allow_private must be a boolean");
}

/// The replica keys (SPEC §16): a Redis URL must be one, and the group commit
/// switch a boolean.
#[test]
fn the_replica_keys_refuse_nonsense_by_name() {
    let found = problems("[server]\nredis_url = \"http://127.0.0.1:6379\"\n");
    assert!(
        found.iter().any(|p| p.starts_with("server.redis_url")),
        "{found:?}"
    );
    let found = problems("[server]\ngroup_commit = \"yes\"\n");
    assert!(
        found.iter().any(|p| p.contains("group_commit")),
        "{found:?}"
    );
    let found = problems("[llm]\nhttp2 = \"yes\"\n");
    assert!(found.iter().any(|p| p.contains("http2")), "{found:?}");
    let fine = problems("[server]\nredis_url = \"redis://127.0.0.1:6379\"\ngroup_commit = false\n");
    assert!(
        !fine
            .iter()
            .any(|p| p.contains("redis_url") || p.contains("group_commit")),
        "{fine:?}"
    );
}

#[test]
fn desk_hours_that_do_not_parse_are_named_with_their_site_and_reason() {
    let found = problems(
        "[[site]]\nid = \"a\"\n[site.handoff]\nenabled = true\nhours = \"Mon-Fri 09:00-17:00 Europe/Nowhere\"\n",
    );
    assert_eq!(
        found,
        ["site[0].handoff.hours: \"Europe/Nowhere\" is not a time zone of the IANA database"]
    );
    let found = problems("[[site]]\nid = \"a\"\n[site.handoff]\nenabled = true\nhour = \"x\"\n");
    assert!(found[0].starts_with("site[0].handoff"), "{found:?}");
}

#[test]
fn a_site_tool_may_not_take_the_desks_handoff_name() {
    let found = problems(
        "[[site]]\nid = \"a\"\n[site.handoff]\nenabled = true\n[[site.tool]]\nname = \"handoff\"\nlabel = \"H\"\npolicy = \"auto\"\nurl = \"http://x\"\n",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("site[0].tool[0].name"), "{found:?}");
}

#[test]
fn a_tools_gates_are_checked_at_load_naming_site_tool_and_position() {
    let text = r#"
[llm]
base_url = "http://127.0.0.1:1/v1"
model = "m"

[[site]]
id = "acme"
origins = ["https://acme.example"]

[[site.tool]]
name = "refund"
label = "Refund"
policy = "confirm"
url = "http://127.0.0.1:9/refund"
confirm_when = "args.amount >"
editable = ["amount", "nope", "items"]
quota = { per = "visitor", window = "month", max = 0 }
input_schema = { type = "object", properties = { amount = { type = "number" }, items = { type = "array" } } }

[[site.tool]]
name = "lookup"
label = "Look up"
policy = "auto"
url = "http://127.0.0.1:9/lookup"
confirm_when = "true"
"#;
    let found = problems(text);
    let has = |prefix: &str| found.iter().any(|p| p.starts_with(prefix));
    assert!(
        has("site[0].tool[0].confirm_when: does not compile at line 1, column 14"),
        "{found:?}"
    );
    assert!(
        has("site[0].tool[0].editable: \"nope\" is not a property"),
        "{found:?}"
    );
    assert!(
        has("site[0].tool[0].editable: \"items\" must have type"),
        "{found:?}"
    );
    assert!(
        has("site[0].tool[0].quota.max: must be from 1"),
        "{found:?}"
    );
    assert!(
        has("site[0].tool[1].confirm_when: decides when"),
        "{found:?}"
    );
    assert_eq!(found.len(), 5, "{found:?}");
    let bad_quota = text.replace("window = \"month\"", "window = \"week\"");
    assert!(
        problems(&bad_quota).iter().any(|p| p.contains("week")),
        "{:?}",
        problems(&bad_quota)
    );
}

#[test]
fn approval_settings_have_safe_defaults_and_bad_ones_are_named() {
    let base = r#"
[llm]
base_url = "http://127.0.0.1:1/v1"
model = "m"

[[site]]
id = "acme"
origins = ["https://acme.example"]

[[site.tool]]
name = "refund"
label = "Refund"
policy = "approve"
url = "http://127.0.0.1:9/refund"
"#;
    let config = Config::from_toml(base, "f.toml", &env()).unwrap();
    let refund = &config.sites[0].tools[0];
    assert_eq!(refund.approvers, [crate::states::OperatorRole::Admin]);
    assert_eq!(refund.approval_ttl_min, 60.0);
    let bad = format!(
        "{base}approvers = []\napproval_ttl_min = 0\n\n[site.approval_webhook]\nurl = \"ftp://x\"\ntimeout_s = -1\n"
    );
    let found = problems(&bad);
    for want in [
        "site[0].tool[0].approvers: must name at least one role",
        "site[0].tool[0].approval_ttl_min: must be more than 0",
        "site[0].approval_webhook.url: \"ftp://x\" is not an http",
        "site[0].approval_webhook.timeout_s: must be more than 0",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(want)),
            "{want}: {found:?}"
        );
    }
    let unknown = format!("{base}approvers = [\"owner\"]\n");
    assert!(!problems(&unknown).is_empty(), "an unknown role is refused");
}

#[test]
fn the_embedding_setting_defaults_to_on_and_a_bad_value_is_named() {
    let base = "[[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n";
    let config = Config::from_toml(base, "f.toml", &env()).unwrap();
    assert_eq!(config.knowledge.embedding, super::Embedding::On);
    assert_eq!(config.knowledge.embedding_model, None);
    let off = Config::from_toml(
        &format!("[knowledge]\nembedding = \"off\"\nembedding_model = \"/m\"\n{base}"),
        "f.toml",
        &env(),
    )
    .unwrap();
    assert_eq!(off.knowledge.embedding, super::Embedding::Off);
    assert_eq!(off.knowledge.embedding_model.as_deref(), Some("/m"));
    let found = problems(&format!("[knowledge]\nembedding = \"maybe\"\n{base}"));
    assert!(
        found.iter().any(|p| p.starts_with("knowledge.embedding")),
        "{found:?}"
    );
    let found = problems(&format!("[knowledge]\nembeding = \"off\"\n{base}"));
    assert!(found.iter().any(|p| p.contains("embeding")), "{found:?}");
    // The environment overrides the file, and says so when it is wrong.
    let from_env = env()
        .with("DESKBELL_EMBEDDING", "off")
        .with("DESKBELL_EMBEDDING_MODEL", "/e");
    let config = Config::from_toml(base, "f.toml", &from_env).unwrap();
    assert_eq!(config.knowledge.embedding, super::Embedding::Off);
    assert_eq!(config.knowledge.embedding_model.as_deref(), Some("/e"));
    let bad = env().with("DESKBELL_EMBEDDING", "yes");
    let error = Config::from_toml(base, "f.toml", &bad).unwrap_err();
    assert!(
        error.problems.iter().any(|p| p.key == "DESKBELL_EMBEDDING"),
        "{error:?}"
    );
}

#[test]
fn the_anthropic_provider_defaults_to_anthropics_url_key_and_model() {
    let base = "[[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n";
    let keyed = env().with("ANTHROPIC_API_KEY", "sk-ant-1");
    let config = Config::from_toml(
        &format!("[llm]\nprovider = \"anthropic\"\n{base}"),
        "f.toml",
        &keyed,
    )
    .unwrap();
    assert_eq!(config.llm.base_url, "https://api.anthropic.com/v1");
    assert_eq!(config.llm.api_key_env, "ANTHROPIC_API_KEY");
    assert_eq!(config.llm.model, "claude-haiku-4-5");
    assert_eq!(
        config.llm.api_key.as_ref().map(|k| k.expose()),
        Some(&b"sk-ant-1"[..])
    );
    // What the file says is kept.
    let own = format!(
        "[llm]\nprovider = \"anthropic\"\nbase_url = \"http://gateway:8080/v1\"\nmodel = \"claude-x\"\napi_key_env = \"MY_KEY\"\n{base}"
    );
    let config = Config::from_toml(&own, "f.toml", &env().with("MY_KEY", "k")).unwrap();
    assert_eq!(config.llm.base_url, "http://gateway:8080/v1");
    assert_eq!(config.llm.model, "claude-x");
    assert!(config.llm.api_key.is_some());
    let found = problems(&format!("[llm]\nprovider = \"claude\"\n{base}"));
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("llm.provider") && p.contains("anthropic")),
        "{found:?}"
    );
}
