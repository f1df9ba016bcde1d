//! Web sources: a page by URL, or a whole site by its `sitemap.xml`. Same-host links
//! only (every redirect hop checked, internal addresses refused: `fetch_guard.rs`),
//! `robots.txt` respected, bodies capped while they stream, bounded sitemap depth
//! and page count (nested sitemaps count as pages), and a few requests at a time
//! so the operator's own site is not hammered.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::Url;
use sha2::{Digest, Sha256};

use super::document::{Document, MAX_FILE_BYTES, Skipped};
use super::fetch_guard;

/// `robots.txt` is read up to this size.
const MAX_ROBOTS_BYTES: u64 = 512 * 1024;

/// Pages fetched from one sitemap at the most.
pub const MAX_PAGES: usize = 500;
/// Sitemap indexes nest at most this deep.
const MAX_SITEMAP_DEPTH: usize = 2;
/// Requests in flight at once, per source.
const CONCURRENCY: usize = 4;
const USER_AGENT: &str = "DeskbellBot";

pub fn is_url(source: &str) -> bool {
    source.starts_with("http://") || source.starts_with("https://")
}

/// Reads one web source: a sitemap (every page it lists) or a single page.
pub async fn read(
    source: &str,
    allow_private: bool,
    documents: &mut Vec<Document>,
    skipped: &mut Vec<Skipped>,
    progress: &super::progress::Progress,
) {
    let Ok(url) = Url::parse(source) else {
        return skipped.push(Skipped {
            path: source.into(),
            reason: "not a valid URL".into(),
        });
    };
    if let Err(reason) = fetch_guard::check_url(&url, &url, allow_private) {
        return skipped.push(Skipped {
            path: source.into(),
            reason,
        });
    }
    let http = match reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .timeout(Duration::from_secs(15))
        .redirect(fetch_guard::redirects(url.clone(), allow_private))
        .dns_resolver(fetch_guard::resolver(allow_private))
        // A proxy would resolve names itself, past the guard's resolver.
        .no_proxy()
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            return skipped.push(Skipped {
                path: source.into(),
                reason: format!("no HTTP client: {e}"),
            });
        }
    };
    let robots = robots(&http, &url).await;
    let pages = if url.path().ends_with(".xml") {
        let mut walk = Walk {
            pages: Vec::new(),
            seen: HashSet::new(),
            budget: MAX_PAGES,
            skipped,
        };
        sitemap(&http, url.clone(), &url, 0, &mut walk).await;
        walk.pages
    } else {
        vec![url.clone()]
    };
    let mut allowed = Vec::new();
    for page in pages {
        if page.host_str() != url.host_str() {
            skipped.push(Skipped {
                path: page.to_string(),
                reason: "on another host".into(),
            });
        } else if robots.as_ref().is_some_and(|r| !r.allowed(page.as_str())) {
            skipped.push(Skipped {
                path: page.to_string(),
                reason: "disallowed by robots.txt".into(),
            });
        } else {
            allowed.push(page);
        }
    }
    progress.found(allowed.len());
    let fetched: Vec<Result<Document, Skipped>> = futures_util::stream::iter(allowed)
        .map(|page| async {
            let fetched = fetch_page(&http, page).await;
            progress.read_one();
            fetched
        })
        .buffered(CONCURRENCY)
        .collect()
        .await;
    for result in fetched {
        match result {
            Ok(d) => documents.push(d),
            Err(s) => skipped.push(s),
        }
    }
}

async fn robots(http: &reqwest::Client, url: &Url) -> Option<texting_robots::Robot> {
    let robots_url = url.join("/robots.txt").ok()?;
    let response = http.get(robots_url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = capped_body(response, MAX_ROBOTS_BYTES).await.ok()?;
    texting_robots::Robot::new(USER_AGENT, &body).ok()
}

/// A sitemap walk's state: the pages found, the URLs seen, the fetches left under
/// the page cap, and what was skipped.
struct Walk<'a> {
    pages: Vec<Url>,
    seen: HashSet<String>,
    budget: usize,
    skipped: &'a mut Vec<Skipped>,
}

/// Collects the page URLs of a sitemap, following nested sitemap indexes.
async fn sitemap(http: &reqwest::Client, url: Url, root: &Url, depth: usize, walk: &mut Walk<'_>) {
    if !walk.seen.insert(url.to_string()) {
        return;
    }
    // Every fetch counts against the page cap, nested sitemaps included: an index
    // of a thousand sitemaps is no way around it.
    if walk.budget == 0 {
        return walk.skipped.push(Skipped {
            path: url.to_string(),
            reason: format!("over the limit of {MAX_PAGES} pages"),
        });
    }
    walk.budget -= 1;
    let text = match get_text(http, &url).await {
        Ok(t) => t,
        Err(reason) => {
            return walk.skipped.push(Skipped {
                path: url.to_string(),
                reason,
            });
        }
    };
    let doc = match roxmltree::Document::parse(&text) {
        Ok(d) => d,
        Err(e) => {
            return walk.skipped.push(Skipped {
                path: url.to_string(),
                reason: format!("not a valid sitemap: {e}"),
            });
        }
    };
    let nested = doc.root_element().tag_name().name() == "sitemapindex";
    let locations: Vec<String> = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "loc")
        .filter_map(|n| n.text().map(|t| t.trim().to_string()))
        .collect();
    for location in locations {
        let Ok(next) = url.join(&location) else {
            continue;
        };
        if nested {
            if depth + 1 > MAX_SITEMAP_DEPTH {
                walk.skipped.push(Skipped {
                    path: next.to_string(),
                    reason: "sitemaps nested too deep".into(),
                });
            } else if next.host_str() == root.host_str() {
                Box::pin(sitemap(http, next, root, depth + 1, walk)).await;
            }
        } else if walk.budget == 0 {
            walk.skipped.push(Skipped {
                path: next.to_string(),
                reason: format!("over the limit of {MAX_PAGES} pages"),
            });
        } else if walk.seen.insert(next.to_string()) {
            walk.budget -= 1;
            walk.pages.push(next);
        }
    }
}

async fn get_text(http: &reqwest::Client, url: &Url) -> Result<String, String> {
    let response = http
        .get(url.clone())
        .send()
        .await
        .map_err(|e| format!("cannot be fetched: {}", e.without_url()))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|l| l > MAX_FILE_BYTES)
    {
        return Err(format!("larger than {} MiB", MAX_FILE_BYTES / 1024 / 1024));
    }
    let bytes = capped_body(response, MAX_FILE_BYTES).await?;
    String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())
}

/// Reads a body chunk by chunk and stops past `limit`, whatever its
/// `Content-Length` said (or did not say).
async fn capped_body(mut response: reqwest::Response, limit: u64) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("cannot be read: {}", e.without_url()))?
    {
        if bytes.len() as u64 + chunk.len() as u64 > limit {
            return Err(format!(
                "larger than {} KiB (read as it streamed)",
                limit / 1024
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

async fn fetch_page(http: &reqwest::Client, url: Url) -> Result<Document, Skipped> {
    let raw = get_text(http, &url).await.map_err(|reason| Skipped {
        path: url.to_string(),
        reason,
    })?;
    let (title, text) = super::html::to_text(&raw);
    let fallback = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .filter(|s| !s.is_empty())
        .unwrap_or("Page")
        .to_string();
    Ok(Document {
        path: url.to_string(),
        title: title.unwrap_or(fallback),
        url: Some(url.to_string()),
        text,
        hash: hex::encode(Sha256::digest(raw.as_bytes())),
    })
}
