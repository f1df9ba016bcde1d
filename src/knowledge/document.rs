//! What reading a knowledge source gives: documents, and the sources skipped with
//! their reasons. Shared by the file reader (`source.rs`) and the web reader
//! (`web.rs`), which depend on it and not on each other's internals.

/// Files above this are skipped: knowledge is prose, not data dumps.
pub const MAX_FILE_BYTES: u64 = 5 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Document {
    /// The file's path, as the document's identity in the index.
    pub path: String,
    pub title: String,
    /// Where visitors can read it, when the source has a base URL.
    pub url: Option<String>,
    pub text: String,
    /// SHA-256 of the file's bytes, to skip unchanged documents.
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}
