//! The default model, downloaded once from the Hugging Face Hub with `hf-hub` into
//! a cache folder, at a pinned revision, with a progress bar and its SHA-256 checked
//! before it is used. A model file named by the operator never touches the network.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
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
}

/// The default model: Qwen2.5-0.5B-Instruct (Apache-2.0), Q4_K_M. See DECISIONS.md
/// for why this one, and the issue note for the pin: this machine cannot reach the
/// Hub, so its commit and checksum could not be read here and `main` stands in.
pub fn default_model() -> ModelSource {
    ModelSource {
        owner: "Qwen".into(),
        name: "Qwen2.5-0.5B-Instruct-GGUF".into(),
        file: "qwen2.5-0.5b-instruct-q4_k_m.gguf".into(),
        revision: "main".into(),
        sha256: None,
    }
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
            repo.download_file()
                .filename(source.file.clone())
                .revision(source.revision.clone())
                .progress(Progress::new(Bar::default()))
                .send()
                .await
                .with_context(|| {
                    format!(
                        "cannot download {} from the Hub; to run without a download, set \
                         DESKBELL_LOCAL_MODEL to a GGUF model file you have",
                        source.file
                    )
                })?
        }
    };
    verify(&path, source).await?;
    Ok(path)
}

/// Checks the file's SHA-256 (about a second for the default model) before use.
async fn verify(path: &Path, source: &ModelSource) -> anyhow::Result<()> {
    let path = path.to_path_buf();
    let digest = tokio::task::spawn_blocking(move || sha256_of(&path)).await??;
    match &source.sha256 {
        Some(expected) if !digest.eq_ignore_ascii_case(expected) => bail!(
            "the downloaded {} has SHA-256 {digest}, not the pinned {expected}: it was not used",
            source.file
        ),
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
