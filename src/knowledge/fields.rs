//! The index's fields and what a search gives back, shared by the index
//! (`index/`) and the passages' kept text (`texts.rs`).

use tantivy::schema::{
    FAST, Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};

#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub path: Field,
    pub title: Field,
    pub url: Field,
    /// The passage's text, kept for the prompt and citations; searched
    /// through `flat`.
    pub body: Field,
    /// The passage's own heading (`Chunk::own_heading`) and body together,
    /// indexed and not stored: BM25's "flat" field, where a heading's word
    /// counts as a body word does. The whole heading path is also searched on
    /// its own (`title`, boosted).
    pub flat: Field,
    /// The passage's vector (SPEC §21), in the same document as its text so
    /// that a generation's passages and vectors are committed together; a fast
    /// field (a column), not stored, so the document store keeps text only.
    pub vector: Field,
}

pub(super) fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let stemmed = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
        .set_stored();
    let searched_only = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("en_stem")
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        path: builder.add_text_field("path", STRING | STORED),
        title: builder.add_text_field("title", stemmed.clone()),
        url: builder.add_text_field("url", STORED),
        body: builder.add_text_field("body", STORED),
        flat: builder.add_text_field("flat", searched_only),
        vector: builder.add_bytes_field("vector", FAST),
    };
    (builder.build(), fields)
}

/// A passage found for a question.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// The document it is from, as its source named it.
    pub path: String,
    pub title: String,
    pub url: Option<String>,
    pub text: String,
    pub score: f32,
    /// Which searches found it (SPEC §21): its rank by BM25 and by meaning, from 1.
    pub found: Found,
}

/// A passage's rank in each search that found it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Found {
    pub bm25: Option<u32>,
    pub dense: Option<u32>,
}

impl Found {
    /// The searches by name, for citations and the console's preview.
    pub fn names(self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.bm25.is_some() {
            names.push("bm25");
        }
        if self.dense.is_some() {
            names.push("dense");
        }
        names
    }
}
