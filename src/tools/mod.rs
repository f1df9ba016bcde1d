//! Tools an operator gives a site: their policy, input schema, HTTP executor, and the
//! digest of their configuration that a confirmation's signature covers.

pub mod arguments;
pub mod catalog;
pub mod editable;
pub mod http;
pub mod render;
pub mod rule;
pub mod schema;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::{Policy, Quota, ToolConfig};
use crate::llm::ToolSpec;
use crate::mcp::Target;
use crate::secret::Secret;

pub struct Tool {
    pub name: String,
    pub label: String,
    pub description: String,
    pub policy: Policy,
    pub url: String,
    pub timeout: Duration,
    pub secret: Option<Secret>,
    pub schema: serde_json::Value,
    /// For a tool an MCP server offers: its calls go there, not to `url`.
    pub mcp: Option<Target>,
    /// `confirm_when`: when set, a call needs the policy's gate only when it
    /// says so (SPEC §20).
    pub rule: Option<rule::Rule>,
    /// Top-level arguments the visitor may change on the card.
    pub editable: Vec<String>,
    pub quota: Option<Quota>,
    /// Who may approve, for the policies that ask a teammate (SPEC §20).
    pub approvers: Vec<crate::states::OperatorRole>,
    /// How long an approval may wait.
    pub approval_ttl: Duration,
    validator: jsonschema::Validator,
    /// SHA-256 of the canonical configuration (what visitors and the model are
    /// shown, policy, executor, schema): a pending card whose tool changed since it
    /// was signed is refused as stale.
    pub digest: String,
}

impl Tool {
    /// The tool of `config`; `mcp` says where its calls go when an MCP server
    /// offers it.
    pub fn from_config(config: &ToolConfig, mcp: Option<&Target>) -> anyhow::Result<Tool> {
        let validator = schema::compile(&config.input_schema).map_err(anyhow::Error::msg)?;
        // An MCP tool's schema is the server's: a server that changes it while a
        // card is pending makes that card stale (SPEC §17).
        let executor = match mcp {
            Some(target) => {
                let server = target.server.config();
                json!({"mcp": server.name, "command": server.command, "url": server.url, "tool": target.tool, "timeout_s": config.timeout_s})
            }
            None => {
                json!({"url": config.url, "timeout_s": config.timeout_s, "secret_env": config.secret_env})
            }
        };
        let mut canonical = json!({
            "name": config.name,
            "label": config.label,
            "description": config.description,
            "policy": config.policy.as_str(),
            "executor": executor,
            "schema": config.input_schema,
        });
        // What SPEC §20 adds is covered only when set, so a tool without it
        // keeps the digest its pending cards were signed under.
        if let Some(source) = &config.confirm_when {
            canonical["confirm_when"] = json!(source);
        }
        if !config.editable.is_empty() {
            canonical["editable"] = json!(config.editable);
        }
        if let Some(quota) = &config.quota {
            canonical["quota"] = json!(quota);
        }
        if config.policy.asks_teammate() {
            canonical["approvers"] = json!(config.approvers);
            canonical["approval_ttl_min"] = json!(config.approval_ttl_min);
        }
        let canonical = serde_json_canonicalizer::to_string(&canonical)?;
        let rule = match &config.confirm_when {
            Some(source) => Some(
                rule::Rule::compile(source)
                    .map_err(|why| anyhow::anyhow!("tool {}: confirm_when {why}", config.name))?,
            ),
            None => None,
        };
        Ok(Tool {
            name: config.name.clone(),
            label: config.label.clone(),
            description: config.description.clone(),
            policy: config.policy,
            url: config.url.clone(),
            timeout: Duration::from_secs_f64(config.timeout_s),
            secret: config.secret.clone(),
            schema: config.input_schema.clone(),
            mcp: mcp.cloned(),
            rule,
            editable: config.editable.clone(),
            quota: config.quota,
            approvers: config.approvers.clone(),
            approval_ttl: Duration::from_secs_f64(config.approval_ttl_min.max(0.0) * 60.0),
            validator,
            digest: hex::encode(Sha256::digest(canonical.as_bytes())),
        })
    }

    /// Checks arguments against the input schema; the errors are for the model.
    pub fn check_arguments(&self, arguments: &serde_json::Value) -> Result<(), String> {
        schema::check_instance(&self.validator, arguments)
    }

    /// Whether a valid call of this tool needs its policy's gate, and the
    /// rule's record for the audit when a rule decided.
    pub fn gate(&self, arguments: &serde_json::Value) -> (bool, Option<String>) {
        if !self.policy.is_gated() {
            return (false, None);
        }
        match &self.rule {
            Some(rule) => {
                let decision = rule.decide(arguments);
                (decision.gated, Some(decision.record))
            }
            None => (true, None),
        }
    }

    fn spec(&self) -> Arc<ToolSpec> {
        Arc::new(ToolSpec {
            name: self.name.clone(),
            description: if self.description.is_empty() {
                self.label.clone()
            } else {
                self.description.clone()
            },
            parameters: self.schema.clone(),
        })
    }
}

/// The tools of one site, by name, with the specs offered to the model built once.
#[derive(Default)]
pub struct Toolbox {
    tools: Vec<Arc<Tool>>,
    specs: Vec<Arc<ToolSpec>>,
    by_name: HashMap<String, usize>,
}

impl Toolbox {
    /// The tools of `configs`; an MCP server's tool has its `Target` in
    /// `targets`, by name.
    pub fn new(
        configs: &[ToolConfig],
        targets: &HashMap<String, Target>,
    ) -> anyhow::Result<Toolbox> {
        let mut toolbox = Toolbox::default();
        for config in configs {
            toolbox
                .by_name
                .insert(config.name.clone(), toolbox.tools.len());
            let tool = Tool::from_config(config, targets.get(&config.name))?;
            toolbox.specs.push(tool.spec());
            toolbox.tools.push(Arc::new(tool));
        }
        Ok(toolbox)
    }

    /// Every tool, in the file's order.
    pub fn all(&self) -> &[Arc<Tool>] {
        &self.tools
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// The tools the model may call: every tool not `off`, less the withheld one.
    pub fn offered(&self, withheld: Option<&str>) -> Vec<Arc<ToolSpec>> {
        self.tools
            .iter()
            .zip(&self.specs)
            .filter(|(t, _)| t.policy != Policy::Off && Some(t.name.as_str()) != withheld)
            .map(|(_, spec)| Arc::clone(spec))
            .collect()
    }
}
