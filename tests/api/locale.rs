//! The widget's words and the model's language follow the site's `locale` or
//! the visitor's browser (SPEC §22); an operator's overrides apply.

use std::collections::BTreeMap;

use deskbell::locale::StringOverride;
use serde_json::json;

use crate::support::{ORIGIN, Reply, TestApp, read, sent};

async fn strings(t: &TestApp, site: &str, lang: &str) -> Reply {
    let url = format!("{}/v1/sites/{site}/strings?lang={lang}", t.base);
    read(t.http.get(url).send().await.unwrap()).await
}

#[tokio::test]
async fn the_widgets_words_follow_the_browser_unless_the_site_names_its_language() {
    let t = TestApp::with(|c| {
        c.sites[0].strings = BTreeMap::from([(
            "send".to_string(),
            StringOverride::PerLanguage(BTreeMap::from([(
                "ar".to_string(),
                "أرسل الآن".to_string(),
            )])),
        )]);
        c.sites[1].locale = "fr".into();
    })
    .await;
    let ar = strings(&t, "acme", "ar-EG,en;q=0.5").await;
    assert_eq!(ar.status, 200);
    assert_eq!(
        (ar.json["locale"].as_str(), ar.json["dir"].as_str()),
        (Some("ar"), Some("rtl"))
    );
    assert_eq!(ar.json["strings"]["send"], "أرسل الآن", "the override");
    let en = strings(&t, "acme", "pt-BR").await;
    assert_eq!(en.json["locale"], "en", "no catalog: English");
    assert_eq!(en.json["strings"]["send"], "Send");
    let fr = strings(&t, "other", "de-DE").await;
    assert_eq!(fr.json["locale"], "fr", "the site's own choice wins");
    assert_eq!(strings(&t, "nowhere", "de").await.code(), "site_not_found");
    let keys = en.json["strings"].as_object().unwrap().len();
    assert_eq!(
        fr.json["strings"].as_object().unwrap().len(),
        keys,
        "every key in every language"
    );
}

#[tokio::test]
async fn the_model_is_told_the_visitors_language() {
    let t = TestApp::start().await;
    let token = t.visitor().await;
    let ask = |language: &'static str| {
        t.http
            .post(format!("{}/v1/ask", t.base))
            .header("origin", ORIGIN)
            .header("accept-language", language)
            .bearer_auth(&token)
            .json(&json!({"message": "Hallo"}))
            .send()
    };
    read(ask("de-DE,de;q=0.9").await.unwrap()).await;
    read(ask("en-US").await.unwrap()).await;
    let requests = t.llm.requests();
    let system = |n: usize| sent::conversation(&requests[n])[0].1.clone();
    assert!(
        system(0).contains("The visitor's language is German"),
        "{}",
        system(0)
    );
    assert!(
        !system(1).contains("The visitor's language"),
        "English is the default: {}",
        system(1)
    );
}

#[tokio::test]
async fn an_override_of_a_string_that_does_not_exist_or_that_drops_a_placeholder_is_a_config_error()
{
    let base = "[[site]]\nid = \"acme\"\norigins = [\"https://acme.example\"]\n";
    let env = crate::support::env();
    for (strings, key) in [
        ("strings = { sned = \"Go\" }", "site[0].strings.sned"),
        (
            "strings = { open_chat = \"Chat\" }",
            "site[0].strings.open_chat",
        ),
        (
            "strings = { send = { tlh = \"yIngeH\" } }",
            "site[0].strings.send",
        ),
    ] {
        let text = format!("{base}{strings}\n");
        let error = deskbell::config::Config::from_toml(&text, "f.toml", &env).unwrap_err();
        assert!(
            error.problems.iter().any(|p| p.key == key),
            "{key}: {:?}",
            error.problems
        );
    }
    let fine = format!("{base}locale = \"xx\"\nstrings = {{ open_chat = \"Chat: {{title}}\" }}\n");
    let config = deskbell::config::Config::from_toml(&fine, "f.toml", &env).unwrap();
    assert_eq!(
        config.sites[0].locale, "xx",
        "an unknown locale is a warning at start, not an error"
    );
}

#[tokio::test]
async fn an_admin_gives_a_string_the_sites_own_words_from_the_console_and_resets_them() {
    use deskbell::states::OperatorRole;
    use reqwest::Method;
    let t = TestApp::with(|c| {
        c.sites[0].strings = BTreeMap::from([(
            "send".to_string(),
            StringOverride::All("From the file".into()),
        )]);
    })
    .await;
    let admin = t.console(OperatorRole::Admin).await;
    let path = "/v1/operator/sites/acme/strings/send";
    let all = admin
        .send(Method::PUT, path, json!({"language": "*", "text": " Go "}))
        .await;
    assert_eq!(all.status, 204, "{:?}", all.json);
    let german = admin
        .send(Method::PUT, path, json!({"language": "de", "text": "Los"}))
        .await;
    assert_eq!(german.status, 204);
    assert_eq!(
        strings(&t, "acme", "de").await.json["strings"]["send"],
        "Los"
    );
    assert_eq!(
        strings(&t, "acme", "fr").await.json["strings"]["send"],
        "Go",
        "the console wins over the file"
    );
    let listed = admin.get("/v1/operator/sites/acme/strings").await;
    let send = listed.json["strings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "send")
        .unwrap()
        .clone();
    assert_eq!(send["english"], "Send");
    assert_eq!(send["file"], "From the file");
    assert_eq!(send["console"].as_array().unwrap().len(), 2);

    for (body, status) in [
        (json!({"language": "tlh", "text": "x"}), 400),
        (json!({"language": "*", "text": ""}), 400),
        (json!({"language": "*", "text": "a\u{0}b"}), 400),
        (json!({"language": "*", "text": "x".repeat(501)}), 400),
        (json!({"language": "*"}), 400),
    ] {
        assert_eq!(
            admin.send(Method::PUT, path, body.clone()).await.status,
            status,
            "{body}"
        );
    }
    let dropped = admin
        .send(
            Method::PUT,
            "/v1/operator/sites/acme/strings/open_chat",
            json!({"language": "*", "text": "Chat"}),
        )
        .await;
    assert_eq!((dropped.status, dropped.code()), (400, "invalid_request"));
    let unknown = admin
        .send(
            Method::PUT,
            "/v1/operator/sites/acme/strings/sned",
            json!({"language": "*", "text": "Go"}),
        )
        .await;
    assert_eq!(unknown.status, 404);
    let agent = t.console(OperatorRole::Agent).await;
    assert_eq!(
        agent
            .send(Method::PUT, path, json!({"language": "*", "text": "Hi"}))
            .await
            .status,
        403
    );
    assert_eq!(
        agent.get("/v1/operator/sites/acme/strings").await.status,
        200
    );

    assert_eq!(
        admin.send(Method::DELETE, path, json!({})).await.status,
        204
    );
    assert_eq!(
        strings(&t, "acme", "de").await.json["strings"]["send"],
        "From the file",
        "back to the file's"
    );
}
