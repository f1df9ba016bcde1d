//! `[[site.tool]]` and `[[site.mcp]]`: a site's tools as configured (SPEC §12,
//! §17). Only data: where an MCP tool's calls go at run time is the tool
//! catalog's (`tools::catalog`), never the configuration's.

use serde::Deserialize;

use super::Policy;
use crate::secret::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    pub name: String,
    pub label: String,
    #[serde(default)]
    pub description: String,
    pub policy: Policy,
    pub url: String,
    #[serde(default = "default_tool_timeout")]
    pub timeout_s: f64,
    pub secret_env: Option<String>,
    #[serde(default = "empty_object_schema")]
    pub input_schema: serde_json::Value,
    /// A CEL expression on the arguments (`args`): the call goes through its
    /// policy's gate when it is true, and runs on its own otherwise (SPEC §20).
    pub confirm_when: Option<String>,
    /// Top-level arguments the visitor may change on the card (SPEC §20).
    #[serde(default)]
    pub editable: Vec<String>,
    /// How often the tool may run per visitor or site, per UTC day or month.
    pub quota: Option<Quota>,
    /// Who may approve its calls, for policies `approve` and `confirm+approve`.
    #[serde(default = "default_approvers")]
    pub approvers: Vec<crate::states::OperatorRole>,
    /// How long a call waits for a teammate's approval, in minutes.
    #[serde(default = "default_approval_ttl")]
    pub approval_ttl_min: f64,
    #[serde(skip)]
    pub secret: Option<Secret>,
}

/// `[site.approval_webhook]`: a team's endpoint told of each call that waits
/// for a teammate, to route it to chat or email (SPEC §20).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalWebhook {
    pub url: String,
    pub secret_env: Option<String>,
    #[serde(default = "default_tool_timeout")]
    pub timeout_s: f64,
    #[serde(skip)]
    pub secret: Option<Secret>,
}

/// `quota = { per = "visitor", window = "month", max = 3 }` (SPEC §20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    pub per: QuotaPer,
    pub window: QuotaWindow,
    pub max: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaPer {
    Visitor,
    Site,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuotaWindow {
    Day,
    Month,
}

/// `[[site.mcp]]`: an MCP server started as a child process (`command`) or reached
/// over streamable HTTP (`url`), whose tools the site offers (SPEC §17).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    pub name: String,
    pub command: Option<Vec<String>>,
    pub url: Option<String>,
    /// The operator's word on each tool, by the name the server gives it; it wins
    /// over what the server's annotations suggest.
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, McpToolConfig>,
    /// Seconds one call may take (an extension of §12).
    #[serde(default = "default_mcp_timeout")]
    pub timeout_s: f64,
    /// Variables of Deskbell's environment the child process may see besides
    /// PATH, HOME and the locale (an extension of §12): the child gets no other,
    /// so Deskbell's own secrets never reach a third party's server.
    #[serde(default)]
    pub pass_env: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolConfig {
    pub policy: Option<Policy>,
    pub label: Option<String>,
    pub description: Option<String>,
}

fn default_approvers() -> Vec<crate::states::OperatorRole> {
    vec![crate::states::OperatorRole::Admin]
}

pub fn default_approval_ttl() -> f64 {
    60.0
}

fn default_tool_timeout() -> f64 {
    10.0
}

fn default_mcp_timeout() -> f64 {
    30.0
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}})
}
