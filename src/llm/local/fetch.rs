//! The default model, downloaded once from the Hugging Face Hub with `hf-hub` into
//! a cache folder, at a pinned revision, with a progress bar and its SHA-256 checked
//! before it is used. A model file named by the operator never touches the network.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use hf_hub::HFClient;
use hf_hub::progress::{DownloadEvent, Progress, ProgressEvent, ProgressHandler};
use sha2::{Digest, Sha256};

/// A model file on the Hub, pinned.
#[derive(Debug, Clone)]
pub struct ModelSource {
    pub owner: String,
    pub name: String,
    pub file: String,
    /// A commit of the repository, so the bytes cannot change under us.
    pub revision: String,
    /// The file's SHA-256 in hex; `None` only for a source not pinned yet.
    pub sha256: Option<String>,
    /// The file's size in bytes, checked before its hash (a cut download is
    /// told apart from a changed file at once).
    pub size: Option<u64>,
    /// What a person can do instead of the download, said when it fails.
    pub instead: &'static str,
}

/// What to do instead of downloading the default chat model.
pub const CHAT_INSTEAD: &str = "set DESKBELL_LOCAL_MODEL to a GGUF model file you have; to use a \
     remote model, set OPENAI_API_KEY, or DESKBELL_LLM_BASE_URL and DESKBELL_LLM_MODEL";

/// The default model: Qwen2.5-0.5B-Instruct (Apache-2.0), Q4_K_M, pinned to the
/// commit, hash and size that the Hub's public record gives (see DECISIONS.md).
pub fn default_model() -> ModelSource {
    ModelSource {
        owner: "Qwen".into(),
        name: "Qwen2.5-0.5B-Instruct-GGUF".into(),
        file: "qwen2.5-0.5b-instruct-q4_k_m.gguf".into(),
        revision: "9217f5db79a29953eb74d5343926648285ec7e67".into(),
        sha256: Some("74a4da8c9fdbcd15bd1f6d01d621410d31c6fc00986f5eb687824e7b93d7a9db".into()),
        size: Some(491_400_032),
        instead: CHAT_INSTEAD,
    }
}

const HUB: &str = "https://huggingface.co";

impl ModelSource {
    /// Where the file is downloaded from.
    pub fn url(&self, endpoint: Option<&str>) -> String {
        format!(
            "{}/{}/{}/resolve/{}/{}",
            endpoint.unwrap_or(HUB).trim_end_matches('/'),
            self.owner,
            self.name,
            self.revision,
            self.file
        )
    }
}

/// The download could not happen (no network, a Hub that refuses). Its text is
/// one short paragraph for a person: the address once, and what to set instead;
/// the cause is logged, not shown.
#[derive(Debug, thiserror::Error)]
#[error("The model could not be downloaded from {url}. To run without a download, {instead}.")]
pub struct CannotDownload {
    pub url: String,
    pub instead: &'static str,
}

/// The model file, downloaded first if the cache does not hold a verified copy.
/// `endpoint` replaces `https://huggingface.co` (tests serve a local hub).
pub async fn fetch(
    source: &ModelSource,
    cache: &Path,
    endpoint: Option<&str>,
) -> anyhow::Result<PathBuf> {
    let mut builder = HFClient::builder().cache_dir(cache.join("hub"));
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint(endpoint);
    }
    let client = builder.build().context("cannot set up the Hub client")?;
    let repo = client.model(source.owner.clone(), source.name.clone());
    let cached = repo
        .download_file()
        .filename(source.file.clone())
        .revision(source.revision.clone())
        .local_files_only(true)
        .send()
        .await;
    let path = match cached {
        Ok(path) => path,
        Err(_) => {
            eprintln!(
                "Downloading the local model {}/{} ({}) once into {}",
                source.owner,
                source.name,
                source.file,
                cache.display()
            );
            let downloaded = repo
                .download_file()
                .filename(source.file.clone())
                .revision(source.revision.clone())
                .progress(Progress::new(Bar::default()))
                .send()
                .await;
            match downloaded {
                Ok(path) => path,
                Err(e) => {
                    tracing::debug!(error = %e, "the model download failed");
                    return Err(CannotDownload {
                        url: source.url(endpoint),
                        instead: source.instead,
                    }
                    .into());
                }
            }
        }
    };
    verify(&path, source).await?;
    Ok(path)
}

/// Checks the file's size, then its SHA-256 (about a second for the default
/// model), before use.
async fn verify(path: &Path, source: &ModelSource) -> anyhow::Result<()> {
    let refuse = |found: String, pinned: &str| {
        anyhow::anyhow!(
            "{} has {found}, not the pinned {pinned}, so it was not used. Delete it to \
             download it again, or {}.",
            path.display(),
            source.instead
        )
    };
    if let Some(size) = source.size {
        let found = std::fs::metadata(path)?.len();
        if found != size {
            return Err(refuse(format!("{found} bytes"), &format!("{size} bytes")));
        }
    }
    let owned = path.to_path_buf();
    let digest = tokio::task::spawn_blocking(move || sha256_of(&owned)).await??;
    match &source.sha256 {
        Some(expected) if !digest.eq_ignore_ascii_case(expected) => Err(refuse(
            format!("SHA-256 {digest}"),
            &format!("SHA-256 {expected}"),
        )),
        Some(_) => Ok(()),
        None => {
            tracing::warn!(file = %source.file, sha256 = %digest, "the model source is not pinned to a checksum");
            Ok(())
        }
    }
}

fn sha256_of(path: &Path) -> anyhow::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// A one-line progress bar on standard error.
#[derive(Default)]
struct Bar {
    last: Mutex<u64>,
}

impl ProgressHandler for Bar {
    fn on_progress(&self, event: &ProgressEvent) {
        let ProgressEvent::Download(event) = event else {
            return;
        };
        let (done, total) = match event {
            DownloadEvent::AggregateProgress {
                bytes_completed,
                total_bytes,
                ..
            } => (*bytes_completed, *total_bytes),
            DownloadEvent::Progress { files } => files.iter().fold((0, 0), |(d, t), f| {
                (d + f.bytes_completed, t + f.total_bytes)
            }),
            DownloadEvent::Complete => {
                eprintln!();
                return;
            }
            DownloadEvent::Start { .. } => return,
        };
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let percent = (done * 100).checked_div(total).unwrap_or(0);
        if percent == *last && done < total {
            return;
        }
        *last = percent;
        let filled = (percent / 4) as usize;
        let line = format!(
            "[{}{}] {percent:>3}% {} / {} MB",
            "#".repeat(filled),
            " ".repeat(25 - filled.min(25)),
            done >> 20,
            total >> 20
        );
        let mut err = std::io::stderr();
        let _ = if err.is_terminal() {
            write!(err, "\r{line}")
        } else if percent % 10 == 0 {
            writeln!(err, "{line}")
        } else {
            Ok(())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_model_is_pinned_to_a_commit_a_hash_and_a_size() {
        let m = default_model();
        assert!(m.revision.len() == 40 && m.revision.chars().all(|c| c.is_ascii_hexdigit()));
        let sha = m.sha256.unwrap_or_default();
        assert!(sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(m.size, Some(491_400_032));
        assert_eq!(
            default_model().url(None),
            "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/9217f5db79a29953eb74d5343926648285ec7e67/qwen2.5-0.5b-instruct-q4_k_m.gguf"
        );
    }
}
