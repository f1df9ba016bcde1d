//! What the model is told: the site's instructions, the house rules of a turn, and
//! the conversation so far.

use crate::config::SiteConfig;
use crate::knowledge::Passage;
use crate::llm::ChatMessage;
use crate::states::Role;
use crate::store::Store;

/// How many earlier messages of the conversation the model sees.
const HISTORY_MESSAGES: i64 = 20;

pub enum Part {
    /// The visitor asked something.
    Question,
    /// The visitor answered a confirmation card; the turn resumes.
    Continuation,
}

/// What the model is told about the site's knowledge for a question: the numbered
/// passages, or that nothing relevant was found. `None` when the site has none.
pub fn sources(passages: Option<&[Passage]>) -> String {
    let Some(passages) = passages else {
        return String::new();
    };
    if passages.is_empty() {
        return "\n\nNo relevant passages were found in the site's documents for this question. \
                If you cannot answer from the conversation or a tool, say that you do not know; \
                do not invent an answer."
            .into();
    }
    let mut text = String::from("\n\nSources from the site's documents:\n");
    for (i, p) in passages.iter().enumerate() {
        text.push_str(&format!("\n[{}] {}\n{}\n", i + 1, p.title, p.text));
    }
    text.push_str(
        "\nAnswer from these sources when they are relevant and cite each fact you take from one \
         as [n], with its number. If they do not contain the answer, say that you do not know; \
         do not invent an answer.",
    );
    text
}

pub fn system(site: &SiteConfig, part: Part, knowledge: &str) -> ChatMessage {
    let mut text = String::new();
    if !site.instructions.trim().is_empty() {
        text.push_str(site.instructions.trim());
        text.push_str("\n\n");
    }
    text.push_str(&format!(
        "You are the assistant of {}. Answer briefly and truthfully. Use the tools when they help; \
         some tools run only after the visitor confirms the exact call on a card.",
        if site.name.is_empty() {
            &site.id
        } else {
            &site.name
        }
    ));
    if let Part::Continuation = part {
        text.push_str(
            "\n\nThe visitor has answered the confirmation card. Tool results are numbered sources: \
             when you use one, cite it as [n]. Do not cite anything else.",
        );
    }
    text.push_str(knowledge);
    ChatMessage::System { content: text }
}

/// What the model is told of the visitor's language (SPEC §22), before the
/// question's sources; nothing for English, the default it already speaks.
pub fn language(code: &str) -> String {
    if code == "en" {
        return String::new();
    }
    let name = crate::locale::name(code);
    format!(
        "\n\nThe visitor's language is {name}: answer in {name} unless they write in another language."
    )
}

/// The earlier messages of a conversation as model messages.
pub async fn history(store: &Store, conversation: &str) -> anyhow::Result<Vec<ChatMessage>> {
    let rows = store
        .conversations()
        .last_messages(conversation, HISTORY_MESSAGES)
        .await?;
    Ok(rows
        .iter()
        .filter(|m| !m.text.is_empty())
        .map(|m| match m.role {
            Role::Visitor => ChatMessage::User {
                content: m.text.clone(),
            },
            Role::Assistant => ChatMessage::Assistant {
                content: m.text.clone(),
                tool_calls: Vec::new(),
            },
            // A person's reply stands on the desk's side of the conversation,
            // marked so the model does not take it for its own words.
            Role::Operator => ChatMessage::Assistant {
                content: format!(
                    "[{} — a person from the support team — wrote:] {}",
                    m.author
                        .as_deref()
                        .unwrap_or(crate::desk::DEFAULT_OPERATOR_NAME),
                    m.text
                ),
                tool_calls: Vec::new(),
            },
            Role::Event => ChatMessage::System {
                content: format!("{RELEASED_NOTE} ({})", m.text),
            },
        })
        .collect())
}

/// What the model is told where a person handed the conversation back: the
/// human segment before it is settled, and not to be asked again.
pub const RELEASED_NOTE: &str = "A person from the support team handled the conversation up to here \
     (their messages are marked). What they settled with the visitor is settled: do not ask \
     the visitor again for what they already gave, and do not hand the conversation to a \
     person again for the same matter.";
