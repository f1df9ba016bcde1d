//! Environment overrides (§12). The environment is passed in as a snapshot so that
//! tests never touch the process environment.

use std::collections::HashMap;
use std::time::Duration;

use super::{Config, Problem};
use crate::secret::Secret;

/// A snapshot of environment variables.
#[derive(Debug, Clone, Default)]
pub struct Env(HashMap<String, String>);

impl Env {
    pub fn from_process() -> Self {
        Self(std::env::vars().collect())
    }

    pub fn empty() -> Self {
        Self::default()
    }

    pub fn with(mut self, key: &str, value: &str) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

pub const SECRET_VAR: &str = "BETTER_AUTH_SECRET";
pub const TTL_VAR: &str = "DESKBELL_ACTION_APPROVAL_TTL_MIN";

/// Applies overrides and reads the secrets that the file names by variable.
pub(super) fn apply(config: &mut Config, env: &Env) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(v) = env.get("DESKBELL_BIND") {
        config.server.bind = v.into();
    }
    if let Some(v) = env.get("DESKBELL_DATABASE_URL") {
        config.server.database_url = Some(v.into());
    }
    if let Some(v) = env.get("DESKBELL_REDIS_URL") {
        config.server.redis_url = Some(v.into());
    }
    if let Some(v) = env.get("DESKBELL_METRICS_BIND") {
        config.server.metrics_bind = Some(v.into());
    }
    if let Some(v) = env.get("DESKBELL_LLM_BASE_URL") {
        config.llm.base_url = v.into();
    }
    if let Some(v) = env.get("DESKBELL_LLM_MODEL") {
        config.llm.model = v.into();
    }
    if let Some(v) = env.get("DESKBELL_LOCAL_MODEL") {
        config.llm.local_model = Some(v.into());
    }
    if let Some(v) = env.get("DESKBELL_LOCAL_TOKENIZER") {
        config.llm.local_tokenizer = Some(v.into());
    }
    if let Some(v) = env.get("DESKBELL_EMBEDDING_MODEL") {
        config.knowledge.embedding_model = Some(v.into());
    }
    if let Some(v) = env.get("DESKBELL_EMBEDDING") {
        match v {
            "on" => config.knowledge.embedding = super::Embedding::On,
            "off" => config.knowledge.embedding = super::Embedding::Off,
            _ => problems.push(Problem {
                key: "DESKBELL_EMBEDDING".into(),
                reason: "must be \"on\" or \"off\"".into(),
            }),
        }
    }
    config.llm.local_cache = model_cache_dir(env);
    config.llm.hub_endpoint = env.get("HF_ENDPOINT").map(String::from);
    if let Some(v) = env.get(TTL_VAR) {
        match parse_ttl_minutes(v) {
            Some(ttl) => config.approval_ttl = ttl,
            None => problems.push(Problem {
                key: TTL_VAR.into(),
                reason: "must be a positive number of minutes (decimals allowed, such as 0.5)"
                    .into(),
            }),
        }
    }
    if let Some(v) = env.get(SECRET_VAR) {
        config.secret = Some(Secret::new(v));
    }
    if let Some(v) = env.get(&config.llm.api_key_env) {
        config.llm.api_key = Some(Secret::new(v));
    }
    for (i, site) in config.sites.iter_mut().enumerate() {
        if let Some(var) = &site.identity_secret_env {
            match env.get(var) {
                Some(v) => site.identity_secret = Some(Secret::new(v)),
                None => problems.push(Problem {
                    key: format!("site[{i}].identity_secret_env"),
                    reason: format!("the variable {var} is not set"),
                }),
            }
        }
        if let Some(hook) = site.approval_webhook.as_mut()
            && let Some(var) = &hook.secret_env
        {
            match env.get(var) {
                Some(v) => hook.secret = Some(Secret::new(v)),
                None => problems.push(Problem {
                    key: format!("site[{i}].approval_webhook.secret_env"),
                    reason: format!("the variable {var} is not set"),
                }),
            }
        }
        for (j, tool) in site.tools.iter_mut().enumerate() {
            if let Some(var) = &tool.secret_env {
                match env.get(var) {
                    Some(v) => tool.secret = Some(Secret::new(v)),
                    None => problems.push(Problem {
                        key: format!("site[{i}].tool[{j}].secret_env"),
                        reason: format!("the variable {var} is not set"),
                    }),
                }
            }
        }
    }
    problems
}

/// Minutes as a positive decimal, so `0.05` is three seconds.
pub fn parse_ttl_minutes(text: &str) -> Option<Duration> {
    let minutes: f64 = text.trim().parse().ok()?;
    if !minutes.is_finite() || minutes <= 0.0 || minutes > 60.0 * 24.0 * 365.0 {
        return None;
    }
    Some(Duration::from_secs_f64(minutes * 60.0))
}

/// The embedded model's download folder: `DESKBELL_MODEL_CACHE`, else `$XDG_CACHE_HOME/deskbell/models`,
/// else `~/.cache/deskbell/models`.
fn model_cache_dir(env: &Env) -> std::path::PathBuf {
    if let Some(dir) = env.get("DESKBELL_MODEL_CACHE") {
        return std::path::PathBuf::from(dir);
    }
    let base = env
        .get("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            env.get("HOME")
                .map(|h| std::path::Path::new(h).join(".cache"))
        })
        .unwrap_or_else(|| std::path::PathBuf::from(".cache"));
    base.join("deskbell").join("models")
}
