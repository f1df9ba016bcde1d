//! The widget's words in the visitor's language (SPEC §22). One catalog per
//! language (`catalogs/*.json`, their sources in `catalogs/SOURCES.md`), all
//! with the same keys and placeholders (a unit test holds them to that);
//! a site picks a language with `[site] locale` or follows the visitor's
//! browser (`"auto"`), and may override any string in `[site.strings]`.
//! Only the chosen language is sent to a widget, so the script stays small.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde::Deserialize;

/// Each language: its code, its English name (for the model's instructions)
/// and its catalog.
const LANGUAGES: &[(&str, &str, &str)] = &[
    ("en", "English", include_str!("catalogs/en.json")),
    ("de", "German", include_str!("catalogs/de.json")),
    ("fr", "French", include_str!("catalogs/fr.json")),
    ("es", "Spanish", include_str!("catalogs/es.json")),
    ("ar", "Arabic", include_str!("catalogs/ar.json")),
    ("ja", "Japanese", include_str!("catalogs/ja.json")),
];

/// Languages written right to left.
const RIGHT_TO_LEFT: &[&str] = &["ar", "he", "fa", "ur"];

pub type Catalog = BTreeMap<String, String>;

/// An operator's own words for one string: for every language, or per
/// language (`{ de = "…", fr = "…" }`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum StringOverride {
    All(String),
    PerLanguage(BTreeMap<String, String>),
}

fn catalogs() -> &'static BTreeMap<&'static str, Catalog> {
    static CATALOGS: OnceLock<BTreeMap<&'static str, Catalog>> = OnceLock::new();
    CATALOGS.get_or_init(|| {
        LANGUAGES
            .iter()
            .map(|(code, _, text)| {
                // The catalogs are compiled in and checked by a unit test; a
                // broken one would only fall back to English, never panic.
                (*code, serde_json::from_str(text).unwrap_or_default())
            })
            .collect()
    })
}

/// The English catalog, every key a string can have.
pub fn english() -> &'static Catalog {
    static EMPTY: Catalog = BTreeMap::new();
    catalogs().get("en").unwrap_or(&EMPTY)
}

/// Whether there is a catalog for `code` (`"de"`).
pub fn is_known(code: &str) -> bool {
    catalogs().contains_key(code)
}

pub fn known() -> Vec<&'static str> {
    LANGUAGES.iter().map(|(code, _, _)| *code).collect()
}

/// The language's name in English, for telling the model.
pub fn name(code: &str) -> &'static str {
    LANGUAGES
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or("English", |(_, name, _)| name)
}

pub fn direction(code: &str) -> &'static str {
    match RIGHT_TO_LEFT.contains(&code) {
        true => "rtl",
        false => "ltr",
    }
}

/// The language to speak: the site's `locale` when it names a known one,
/// else (`"auto"`) the first of the visitor's languages — an
/// `Accept-Language` value or the browser's list, comma-separated — that has
/// a catalog, by its primary subtag; English when none has.
pub fn resolve(setting: &str, visitor: &str) -> &'static str {
    let pick = |tag: &str| {
        let primary = tag.split(';').next().unwrap_or("").trim();
        let primary = primary
            .split(['-', '_'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        LANGUAGES
            .iter()
            .map(|(code, _, _)| *code)
            .find(|code| *code == primary)
    };
    if setting != "auto" {
        return pick(setting).unwrap_or("en");
    }
    visitor.split(',').take(16).find_map(pick).unwrap_or("en")
}

/// Every string in `code`, with the site's overrides applied.
pub fn strings(code: &str, overrides: &BTreeMap<String, StringOverride>) -> Catalog {
    let mut out = english().clone();
    if let Some(catalog) = catalogs().get(code) {
        out.extend(catalog.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for (key, value) in overrides {
        let text = match value {
            StringOverride::All(text) => Some(text),
            StringOverride::PerLanguage(by) => by.get(code),
        };
        if let (Some(text), Some(slot)) = (text, out.get_mut(key)) {
            *slot = text.clone();
        }
    }
    out
}

/// The `{name}` placeholders of a string.
pub fn placeholders(text: &str) -> BTreeSet<&str> {
    text.split('{')
        .skip(1)
        .filter_map(|part| part.split_once('}').map(|(name, _)| name))
        .filter(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .collect()
}

/// What is wrong with an override of `key`, if anything: a key no string
/// has, a language with no catalog, or placeholders other than the string's.
pub fn check_override(key: &str, value: &StringOverride) -> Result<(), String> {
    let Some(english) = english().get(key) else {
        return Err("is not one of the widget's strings".into());
    };
    let wanted = placeholders(english);
    let texts: Vec<(Option<&str>, &String)> = match value {
        StringOverride::All(text) => vec![(None, text)],
        StringOverride::PerLanguage(by) => by.iter().map(|(l, t)| (Some(l.as_str()), t)).collect(),
    };
    for (language, text) in texts {
        if let Some(language) = language.filter(|l| !is_known(l)) {
            return Err(format!(
                "{language:?} is not a language with a catalog ({})",
                known().join(", ")
            ));
        }
        if placeholders(text) != wanted {
            let names: Vec<String> = wanted.iter().map(|n| format!("{{{n}}}")).collect();
            return Err(format!(
                "must keep the placeholders {}",
                if names.is_empty() {
                    "(none)".into()
                } else {
                    names.join(" ")
                }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
