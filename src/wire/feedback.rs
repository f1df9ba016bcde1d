//! What the widget speaks with (issue 41): a visitor's rating of an answer, as
//! the API takes and shows it, and the widget's words in one language.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Rating {
    Up,
    Down,
}

impl Rating {
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Up => "up",
            Rating::Down => "down",
        }
    }

    /// A stored rating; only `up` and `down` are ever written, and anything
    /// else reads as the less flattering one rather than failing a page.
    pub fn parse(text: &str) -> Rating {
        match text {
            "up" => Rating::Up,
            _ => Rating::Down,
        }
    }
}

/// The body of `POST /v1/conversations/{id}/messages/{message}/feedback`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackRequest {
    pub rating: Rating,
    /// At most 1,000 characters; shown to operators as text, never as markup.
    #[serde(default)]
    pub comment: Option<String>,
}

/// A rating as stored: the last one given, and when the first was.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FeedbackView {
    pub rating: Rating,
    pub comment: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /v1/sites/{site}/strings`: the widget's words in one language.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WidgetStrings {
    /// The language chosen (`en`, `de`, `fr`, `es`, `ar`, `ja`).
    pub locale: String,
    /// `ltr` or `rtl`.
    pub dir: String,
    /// Every string by key, the site's overrides applied.
    pub strings: std::collections::BTreeMap<String, String>,
}
