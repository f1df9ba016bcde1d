//! Reading a site's knowledge sources into documents: Markdown, plain text, HTML and
//! PDF files, alone or in folders, and web pages (`web.rs`). A source that cannot be
//! read is reported with its path and reason and skipped; the others are ingested.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use super::document::{Document, MAX_FILE_BYTES, Skipped};
use super::progress::Progress;
use crate::config::KnowledgeSource;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Markdown,
    Text,
    Html,
    Pdf,
}

/// Every readable document of the sources, and every one that was skipped.
pub async fn read_sources(
    sources: &[KnowledgeSource],
    progress: &Progress,
) -> (Vec<Document>, Vec<Skipped>) {
    let mut documents = Vec::new();
    let mut skipped = Vec::new();
    for source in sources {
        let (root, base_url) = source.parts();
        if super::web::is_url(root) {
            let allow = source.allow_private();
            super::web::read(root, allow, &mut documents, &mut skipped, progress).await;
            continue;
        }
        let root = PathBuf::from(root);
        if root.is_dir() {
            let mut files = Vec::new();
            walk(&root, &mut files, &mut skipped);
            files.sort();
            progress.found(files.len());
            for file in files {
                let url = base_url.and_then(|base| public_url(base, &root, &file));
                read_one(&file, url, &mut documents, &mut skipped);
                progress.read_one();
            }
        } else if root.is_file() {
            let url = base_url.map(str::to_string);
            progress.found(1);
            read_one(&root, url, &mut documents, &mut skipped);
            progress.read_one();
        } else {
            skipped.push(Skipped {
                path: root.display().to_string(),
                reason: "no such file or folder".into(),
            });
        }
    }
    (documents, skipped)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>, skipped: &mut Vec<Skipped>) {
    walk_once(dir, files, skipped, &mut std::collections::HashSet::new());
}

/// Reads a folder tree once: a folder reached again through a symbolic link (a
/// loop, or two links to one place) is reported, not read again.
fn walk_once(
    dir: &Path,
    files: &mut Vec<PathBuf>,
    skipped: &mut Vec<Skipped>,
    seen: &mut std::collections::HashSet<PathBuf>,
) {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !seen.insert(real) {
        return skipped.push(Skipped {
            path: dir.display().to_string(),
            reason: "a folder already read (a symbolic link loop?)".into(),
        });
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            skipped.push(Skipped {
                path: dir.display().to_string(),
                reason: format!("cannot be read: {e}"),
            });
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk_once(&path, files, skipped, seen);
        } else if kind_of(&path).is_some() {
            files.push(path);
        } else {
            skipped.push(Skipped {
                path: path.display().to_string(),
                reason: "not a Markdown, text, HTML or PDF file".into(),
            });
        }
    }
}

fn kind_of(path: &Path) -> Option<Kind> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "md" | "markdown" => Some(Kind::Markdown),
        "txt" => Some(Kind::Text),
        "html" | "htm" => Some(Kind::Html),
        "pdf" => Some(Kind::Pdf),
        _ => None,
    }
}

fn read_one(
    path: &Path,
    url: Option<String>,
    documents: &mut Vec<Document>,
    skipped: &mut Vec<Skipped>,
) {
    let shown = path.display().to_string();
    let mut skip = |reason: String| {
        skipped.push(Skipped {
            path: shown.clone(),
            reason,
        })
    };
    let Some(kind) = kind_of(path) else {
        return skip("not a Markdown, text, HTML or PDF file".into());
    };
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            return skip(format!("larger than {} MiB", MAX_FILE_BYTES / 1024 / 1024));
        }
        Ok(_) => {}
        Err(e) => return skip(format!("cannot be read: {e}")),
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return skip(format!("cannot be read: {e}")),
    };
    let (title, text) = if kind == Kind::Pdf {
        match pdf_text(&bytes) {
            Some(text) => (None, text),
            None => return skip("not a readable PDF".into()),
        }
    } else {
        let Ok(raw) = String::from_utf8(bytes.clone()) else {
            return skip("is not UTF-8 text".into());
        };
        match kind {
            Kind::Html => super::html::to_text(&raw),
            _ => (markdown_title(&raw), raw),
        }
    };
    let fallback = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("Document")
        .replace(['-', '_'], " ");
    documents.push(Document {
        path: shown.clone(),
        title: title.unwrap_or(fallback),
        url,
        text,
        hash: hex::encode(Sha256::digest(&bytes)),
    });
}

/// The text of a PDF. The parser can panic on malformed files, which must not take
/// the ingest down with it: a panic is a broken PDF like any other.
fn pdf_text(bytes: &[u8]) -> Option<String> {
    let text = std::panic::catch_unwind(|| pdf_extract::extract_text_from_mem(bytes))
        .ok()?
        .ok()?;
    let paragraphs: Vec<String> = text
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect();
    (!paragraphs.is_empty()).then(|| paragraphs.join("\n\n"))
}

fn markdown_title(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(|t| t.trim().to_string())
}

/// `docs/returns.md` under base `https://acme.example/help` → `https://acme.example/help/returns`.
fn public_url(base: &str, root: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(root).ok()?.with_extension("");
    let tail: Vec<&str> = relative.iter().filter_map(|p| p.to_str()).collect();
    Some(format!("{}/{}", base.trim_end_matches('/'), tail.join("/")))
}
