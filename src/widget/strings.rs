//! `GET /v1/sites/{site}/strings?lang=…`: the widget's words for one visitor
//! (SPEC §22), fetched by the widget before it draws itself, so only the
//! language in use travels. `lang` is the browser's language list
//! (`navigator.languages`, comma-separated); the site's `locale` wins when it
//! is not `"auto"`, and its `[site.strings]` overrides apply, then the
//! console's (`src/operator/strings.rs`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::app::App;
use crate::error::ApiError;
use crate::operator::Params;
use crate::wire::WidgetStrings;

#[derive(Debug, Deserialize)]
pub struct StringsQuery {
    #[serde(default)]
    lang: String,
}

pub async fn strings(
    State(app): State<App>,
    Path(site): Path<String>,
    Params(query): Params<StringsQuery>,
) -> Result<Response, ApiError> {
    let site = app.site(&site).ok_or(ApiError::SiteNotFound)?;
    let locale = crate::locale::resolve(&site.config.locale, &query.lang);
    let mut strings = crate::locale::strings(locale, &site.config.strings);
    // The console's words win over the file's: those for every language
    // first, then those for this one.
    let console = app.store.widget_strings().of_site(&site.config.id).await?;
    for language in ["*", locale] {
        for row in console.iter().filter(|r| r.language == language) {
            if let Some(slot) = strings.get_mut(&row.key) {
                slot.clone_from(&row.text);
            }
        }
    }
    let body = WidgetStrings {
        locale: locale.to_string(),
        dir: crate::locale::direction(locale).to_string(),
        strings,
    };
    let mut response = Json(body).into_response();
    // The same for every visitor of the site with these languages; a config
    // change reaches widgets within minutes.
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    Ok(response)
}
