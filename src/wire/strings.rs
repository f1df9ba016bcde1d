//! The console's view and edits of a site's widget words (SPEC §22).

use serde::{Deserialize, Serialize};

/// `GET /v1/operator/sites/{site}/strings`: every string with where its
/// words come from.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SiteStringsView {
    pub site: String,
    /// The site's `locale` (`auto` or a language code).
    pub locale: String,
    /// The languages with a catalog.
    pub languages: Vec<String>,
    pub strings: Vec<StringView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StringView {
    pub key: String,
    pub english: String,
    /// The config file's override, as written there (a text, or texts by
    /// language), when it has one.
    pub file: Option<serde_json::Value>,
    /// The console's words, by language (`*`: every language).
    pub console: Vec<ConsoleString>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConsoleString {
    pub language: String,
    pub text: String,
    pub operator: String,
    pub changed_at: String,
}

/// `PUT /v1/operator/sites/{site}/strings/{key}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StringChange {
    /// A language code, or `*` for every language.
    pub language: String,
    pub text: String,
}
