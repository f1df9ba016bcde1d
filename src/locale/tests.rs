use std::collections::BTreeMap;

use super::*;

#[test]
fn every_catalog_parses_and_has_the_english_keys_and_placeholders() {
    let english = english();
    assert!(english.len() > 50, "{}", english.len());
    for (code, _, text) in LANGUAGES {
        let catalog: Catalog = serde_json::from_str(text).unwrap_or_else(|e| panic!("{code}: {e}"));
        let keys: Vec<&String> = catalog.keys().collect();
        let wanted: Vec<&String> = english.keys().collect();
        assert_eq!(keys, wanted, "{code} has other keys");
        for (key, value) in &catalog {
            assert_eq!(
                placeholders(value),
                placeholders(&english[key]),
                "{code}.{key}"
            );
            assert!(!value.trim().is_empty(), "{code}.{key}");
        }
    }
}

#[test]
fn the_language_follows_the_site_or_else_the_visitors_first_known_language() {
    assert_eq!(resolve("auto", "de-DE,de;q=0.9,en;q=0.8"), "de");
    assert_eq!(resolve("auto", "pt-BR, ar-EG;q=0.5"), "ar");
    assert_eq!(resolve("auto", "JA"), "ja");
    assert_eq!(resolve("auto", ""), "en");
    assert_eq!(resolve("auto", "xx, ,;;,"), "en");
    assert_eq!(resolve("fr", "de-DE"), "fr", "the site's choice wins");
    assert_eq!(resolve("fr-CA", "de"), "fr");
    assert_eq!(
        resolve("tlh", "de"),
        "en",
        "an unknown site locale is English"
    );
    assert_eq!(direction("ar"), "rtl");
    assert_eq!(direction("de"), "ltr");
}

#[test]
fn overrides_replace_strings_for_every_language_or_for_one() {
    let overrides = BTreeMap::from([
        ("send".to_string(), StringOverride::All("Go".into())),
        (
            "greeting".to_string(),
            StringOverride::PerLanguage(BTreeMap::from([("de".to_string(), "Moin!".to_string())])),
        ),
    ]);
    let de = strings("de", &overrides);
    assert_eq!(de["send"], "Go");
    assert_eq!(de["greeting"], "Moin!");
    let fr = strings("fr", &overrides);
    assert_eq!(fr["greeting"], strings("fr", &BTreeMap::new())["greeting"]);
}

#[test]
fn an_override_must_name_a_string_a_language_and_keep_the_placeholders() {
    assert!(check_override("send", &StringOverride::All("Go".into())).is_ok());
    assert!(check_override("sned", &StringOverride::All("Go".into())).is_err());
    assert!(check_override("open_chat", &StringOverride::All("Chat".into())).is_err());
    assert!(check_override("open_chat", &StringOverride::All("Chat: {title}".into())).is_ok());
    let klingon =
        StringOverride::PerLanguage(BTreeMap::from([("tlh".to_string(), "x".to_string())]));
    assert!(check_override("send", &klingon).is_err());
}

#[test]
fn placeholders_are_the_braced_names() {
    let found: Vec<&str> = placeholders("{left} of {max} {}, {a b} {x")
        .into_iter()
        .collect();
    assert_eq!(found, ["left", "max"]);
}
