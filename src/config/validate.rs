//! Semantic checks of a parsed configuration. Each check adds a `Problem` instead of
//! stopping, so that `deskbell check` reports every problem in one run.

use std::collections::HashSet;
use std::net::IpAddr;

use super::{Config, McpConfig, Problem, SiteConfig, ToolConfig};

pub(super) fn check(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    let add = |out: &mut Vec<Problem>, key: String, reason: &str| {
        out.push(Problem {
            key,
            reason: reason.into(),
        })
    };
    if config.server.bind_addr().is_none() {
        add(
            &mut out,
            "server.bind".into(),
            "must be an address and port such as 127.0.0.1:8080",
        );
    }
    let url = config.server.database_url();
    if !(url.starts_with("sqlite:")
        || url.starts_with("postgres:")
        || url.starts_with("postgresql:"))
    {
        add(
            &mut out,
            "server.database_url".into(),
            "must start with sqlite:// or postgres://",
        );
    }
    for (i, proxy) in config.server.trusted_proxies.iter().enumerate() {
        if proxy.parse::<IpAddr>().is_err() {
            add(
                &mut out,
                format!("server.trusted_proxies[{i}]"),
                "must be an IP address",
            );
        }
    }
    if !positive(config.server.header_read_timeout_s) {
        add(
            &mut out,
            "server.header_read_timeout_s".into(),
            "must be a positive number of seconds",
        );
    }
    for (key, value) in [
        (
            "server.stalled_reader_timeout_s",
            config.server.stalled_reader_timeout_s,
        ),
        ("llm.turn_timeout_s", config.llm.turn_timeout_s),
        ("server.idle_timeout_s", config.server.idle_timeout_s),
    ] {
        if !positive(value) {
            add(&mut out, key.into(), "must be a positive number of seconds");
        }
    }
    for (key, value) in [
        ("server.max_connections", config.server.max_connections),
        (
            "server.max_connections_per_ip",
            config.server.max_connections_per_ip,
        ),
    ] {
        if value == 0 {
            add(&mut out, key.into(), "must be at least 1");
        }
    }
    // hyper's read buffer cannot be smaller than 8 KiB.
    if !(8..=1024).contains(&config.server.max_request_head_kib) {
        add(
            &mut out,
            "server.max_request_head_kib".into(),
            "must be between 8 and 1024",
        );
    }
    if let Some(url) = &config.server.redis_url
        && !(url.starts_with("redis://")
            || url.starts_with("rediss://")
            || url.starts_with("unix://"))
    {
        add(
            &mut out,
            "server.redis_url".into(),
            "must be a redis://, rediss:// or unix:// URL",
        );
    }
    if let Some(metrics) = &config.server.metrics_bind {
        match metrics.parse::<std::net::SocketAddr>() {
            Err(_) => add(
                &mut out,
                "server.metrics_bind".into(),
                "must be an address and port such as 127.0.0.1:9464",
            ),
            // The same port on the same address, or on every address.
            Ok(addr)
                if config.server.bind_addr().is_some_and(|bind| {
                    bind.port() == addr.port()
                        && (bind.ip() == addr.ip()
                            || bind.ip().is_unspecified()
                            || addr.ip().is_unspecified())
                }) =>
            {
                add(
                    &mut out,
                    "server.metrics_bind".into(),
                    "must not be the public address (server.bind): metrics are for your monitoring only",
                )
            }
            Ok(_) => {}
        }
    }
    if let Some(url) = &config.server.public_url
        && !is_http_url(url)
    {
        add(
            &mut out,
            "server.public_url".into(),
            "must be an http:// or https:// URL",
        );
    }
    if !(3.0..=3600.0).contains(&config.server.lease_s) {
        add(
            &mut out,
            "server.lease_s".into(),
            "must be between 3 and 3600 seconds",
        );
    }
    if config.llm.provider == "local" && !cfg!(feature = "local-model") {
        add(
            &mut out,
            "llm.provider".into(),
            "\"local\" needs a build with the embedded model (the `local-model` feature)",
        );
    }
    if !matches!(
        config.llm.provider.as_str(),
        "openai" | "anthropic" | "local"
    ) {
        add(
            &mut out,
            "llm.provider".into(),
            "must be \"openai\" (any OpenAI-compatible API), \"anthropic\" (Anthropic's Messages API) \
             or \"local\" (the embedded model)",
        );
    }
    if !is_http_url(&config.llm.base_url) {
        add(
            &mut out,
            "llm.base_url".into(),
            "must be an http:// or https:// URL",
        );
    }
    if config.llm.max_output_tokens == 0 {
        add(
            &mut out,
            "llm.max_output_tokens".into(),
            "must be at least 1",
        );
    }
    if !positive(config.llm.connect_timeout_s) || !positive(config.llm.idle_timeout_s) {
        add(
            &mut out,
            "llm".into(),
            "timeouts must be positive numbers of seconds",
        );
    }
    if config.sites.is_empty() {
        add(&mut out, "site".into(), "at least one [[site]] is needed");
    }
    // Variables that hold Deskbell's own secrets: no MCP child may be given them.
    let mut secrets: HashSet<&str> = HashSet::from([super::env::SECRET_VAR]);
    secrets.insert(config.llm.api_key_env.as_str());
    for site in &config.sites {
        secrets.extend(site.identity_secret_env.as_deref());
        secrets.extend(site.tools.iter().filter_map(|t| t.secret_env.as_deref()));
        secrets.extend(
            site.approval_webhook
                .iter()
                .filter_map(|h| h.secret_env.as_deref()),
        );
    }
    let mut ids = HashSet::new();
    for (i, site) in config.sites.iter().enumerate() {
        if !ids.insert(site.id.as_str()) {
            add(&mut out, format!("site[{i}].id"), "is used by another site");
        }
        check_site(&format!("site[{i}]"), site, &secrets, &mut out);
    }
    out
}

fn check_site(at: &str, site: &SiteConfig, secrets: &HashSet<&str>, out: &mut Vec<Problem>) {
    let add =
        |out: &mut Vec<Problem>, key: String, reason: String| out.push(Problem { key, reason });
    for (key, value) in &site.strings {
        if let Err(why) = crate::locale::check_override(key, value) {
            add(out, format!("{at}.strings.{key}"), why);
        }
    }
    if !is_identifier(&site.id) {
        add(
            out,
            format!("{at}.id"),
            "must be 1-64 letters, digits, '-' or '_'".into(),
        );
    }
    if let Some(hook) = &site.approval_webhook {
        if !is_http_url(&hook.url) {
            let why = format!("{:?} is not an http:// or https:// URL", hook.url);
            add(out, format!("{at}.approval_webhook.url"), why);
        }
        if !positive(hook.timeout_s) || hook.timeout_s > 300.0 {
            let why = "must be more than 0 and at most 300 seconds".to_string();
            add(out, format!("{at}.approval_webhook.timeout_s"), why);
        }
    }
    for (j, origin) in site.origins.iter().enumerate() {
        if let Err(reason) = check_origin(origin) {
            add(out, format!("{at}.origins[{j}]"), reason);
        }
    }
    if site.require_verified_identity && site.identity_secret_env.is_none() {
        add(
            out,
            format!("{at}.require_verified_identity"),
            "needs identity_secret_env to verify visitors".into(),
        );
    }
    if site.identity == crate::config::IdentityForms::Jwt && site.identity_secret_env.is_none() {
        add(
            out,
            format!("{at}.identity"),
            "\"jwt\" needs identity_secret_env to check identity tokens".into(),
        );
    }
    if let Some(Err(reason)) = site.handoff.parsed_hours() {
        add(out, format!("{at}.handoff.hours"), reason);
    }
    let l = &site.limits;
    let counts = [
        ("requests_per_minute", l.requests_per_minute as u64),
        (
            "requests_per_minute_per_ip",
            l.requests_per_minute_per_ip as u64,
        ),
        ("daily_token_budget", l.daily_token_budget),
        (
            "concurrent_streams_per_visitor",
            l.concurrent_streams_per_visitor as u64,
        ),
        ("concurrent_streams", l.concurrent_streams as u64),
        ("max_message_chars", l.max_message_chars as u64),
        ("max_tokens_per_turn", l.max_tokens_per_turn),
    ];
    for (key, value) in counts {
        if value == 0 {
            add(
                out,
                format!("{at}.limits.{key}"),
                "must be at least 1".into(),
            );
        }
    }
    let mut names = HashSet::new();
    for (j, tool) in site.tools.iter().enumerate() {
        let at = format!("{at}.tool[{j}]");
        if !names.insert(tool.name.as_str()) {
            add(
                out,
                format!("{at}.name"),
                format!("{:?} is used by another tool of this site", tool.name),
            );
        }
        // The desk's built-in tool has this name (SPEC §19).
        if site.handoff.enabled && tool.name == "handoff" {
            add(
                out,
                format!("{at}.name"),
                "\"handoff\" is the desk's own tool on a site with [site.handoff] enabled".into(),
            );
        }
        for (key, reason) in check_tool(tool) {
            add(out, format!("{at}.{key}"), reason);
        }
    }
    let mut servers = HashSet::new();
    for (j, server) in site.mcp.iter().enumerate() {
        let at = format!("{at}.mcp[{j}]");
        if !servers.insert(server.name.as_str()) {
            add(
                out,
                format!("{at}.name"),
                format!(
                    "{:?} is used by another MCP server of this site",
                    server.name
                ),
            );
        }
        for (key, reason) in check_mcp(server, secrets) {
            add(out, format!("{at}.{key}"), reason);
        }
    }
}

fn check_mcp(server: &McpConfig, secrets: &HashSet<&str>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !is_identifier(&server.name) || server.name.len() > 32 {
        out.push((
            "name".into(),
            "must be 1-32 letters, digits, '-' or '_'".into(),
        ));
    }
    match (&server.command, &server.url) {
        (Some(_), Some(_)) | (None, None) => out.push((
            "command".into(),
            "give either command (a server started as a child process) or url (streamable HTTP)"
                .into(),
        )),
        (Some(command), None) if command.first().is_none_or(|c| c.trim().is_empty()) => {
            out.push(("command".into(), "must name the program to start".into()))
        }
        (None, Some(url)) if !is_http_url(url) => out.push((
            "url".into(),
            format!("{url:?} is not an http:// or https:// URL"),
        )),
        _ => {}
    }
    if !positive(server.timeout_s) || server.timeout_s > 300.0 {
        out.push((
            "timeout_s".into(),
            "must be more than 0 and at most 300 seconds".into(),
        ));
    }
    for (k, var) in server.pass_env.iter().enumerate() {
        if var.is_empty() || var.contains('=') {
            out.push((format!("pass_env[{k}]"), "must be a variable name".into()));
        } else if secrets.contains(var.as_str()) {
            out.push((
                format!("pass_env[{k}]"),
                format!(
                    "{var} holds one of Deskbell's secrets and is never passed to an MCP server"
                ),
            ));
        }
    }
    for (name, tool) in &server.tools {
        if tool.label.as_ref().is_some_and(|l| l.trim().is_empty()) {
            out.push((
                format!("tools.{name}.label"),
                "must not be empty: visitors see it on the card".into(),
            ));
        }
        if tool
            .label
            .as_ref()
            .is_some_and(|l| l.chars().any(crate::tools::render::hidden))
        {
            out.push((
                format!("tools.{name}.label"),
                "must not contain invisible or control characters".into(),
            ));
        }
    }
    out
}

fn check_tool(tool: &ToolConfig) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if !is_identifier(&tool.name) {
        out.push(("name", "must be 1-64 letters, digits, '-' or '_'".into()));
    }
    if tool.label.trim().is_empty() {
        out.push((
            "label",
            "must not be empty: visitors see it on the card".into(),
        ));
    }
    if !is_http_url(&tool.url) {
        out.push((
            "url",
            format!("{:?} is not an http:// or https:// URL", tool.url),
        ));
    }
    if !positive(tool.timeout_s) || tool.timeout_s > 300.0 {
        out.push((
            "timeout_s",
            "must be more than 0 and at most 300 seconds".into(),
        ));
    }
    if let Err(reason) = crate::tools::schema::check_schema(&tool.input_schema) {
        out.push(("input_schema", reason));
    }
    out.extend(super::gates::check_gates(tool));
    out
}

/// A finite number of seconds above zero.
fn positive(seconds: f64) -> bool {
    seconds.is_finite() && seconds > 0.0
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn is_http_url(s: &str) -> bool {
    match reqwest::Url::parse(s) {
        Ok(url) => matches!(url.scheme(), "http" | "https") && url.host().is_some(),
        Err(_) => false,
    }
}

/// An origin is a scheme, a host and an optional port: nothing else, no wildcard.
fn check_origin(origin: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(origin)
        .map_err(|_| format!("{origin:?} is not an origin such as https://shop.example"))?;
    let bare = matches!(url.scheme(), "http" | "https")
        && url.host().is_some()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && !origin.ends_with('/');
    if bare && !origin.contains('*') {
        Ok(())
    } else {
        Err(format!(
            "{origin:?} must be scheme://host[:port] with no path, such as https://shop.example"
        ))
    }
}
