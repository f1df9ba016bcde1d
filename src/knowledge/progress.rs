//! How far an ingest's reading of its sources has come (`operator::ingest`).

/// How far a reading of sources has come, for an ingest's progress
/// (`GET /v1/operator/knowledge/{site}/ingest/{job}`): pages and files found so
/// far, and how many of them were read. The total grows as sitemaps and folders
/// are walked, so the fraction is an estimate until reading ends.
#[derive(Debug, Default)]
pub struct Progress {
    found: std::sync::atomic::AtomicUsize,
    read: std::sync::atomic::AtomicUsize,
}

impl Progress {
    pub(super) fn found(&self, n: usize) {
        self.found
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn read_one(&self) {
        self.read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// (read, found) so far.
    pub fn counts(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.read.load(Relaxed), self.found.load(Relaxed))
    }
}
