//! The default embedding model: sentence-transformers/all-MiniLM-L6-v2
//! (Apache-2.0, 384 dimensions, 6 layers), pinned to a commit of its Hub
//! repository with each file's size and SHA-256, downloaded once like the chat
//! model (`llm::local::fetch`). Why this model and not bge-small: DECISIONS.md,
//! "Hybrid retrieval".

use std::path::{Path, PathBuf};

use crate::llm::local::fetch::{ModelSource, fetch as fetch_file};

const REVISION: &str = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf";

const INSTEAD: &str = "set DESKBELL_EMBEDDING_MODEL to a folder holding config.json, \
     tokenizer.json and model.safetensors of a BERT-family sentence-embedding model, or \
     [knowledge] embedding = \"off\" for BM25 only";

/// The files, with their sizes and SHA-256 as the Hub's record gives them.
const FILES: [(&str, u64, &str); 3] = [
    (
        "config.json",
        612,
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "tokenizer.json",
        466_247,
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
    (
        "model.safetensors",
        90_868_376,
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
];

/// The folder holding the three files, each verified, downloaded first if the
/// cache does not hold them.
pub async fn fetch(cache: &Path, endpoint: Option<&str>) -> anyhow::Result<PathBuf> {
    let mut folder = None;
    for (file, size, sha256) in FILES {
        let source = ModelSource {
            owner: "sentence-transformers".into(),
            name: "all-MiniLM-L6-v2".into(),
            file: file.into(),
            revision: REVISION.into(),
            sha256: Some(sha256.into()),
            size: Some(size),
            instead: INSTEAD,
        };
        let path = fetch_file(&source, cache, endpoint).await?;
        folder = path.parent().map(Path::to_path_buf);
    }
    folder.ok_or_else(|| anyhow::anyhow!("the embedding model's folder is unknown"))
}
