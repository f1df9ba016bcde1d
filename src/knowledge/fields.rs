//! The index's fields and what a search gives back, shared by the index
//! (`index/`) and the passages' kept text (`texts.rs`).

use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};

#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub path: Field,
    pub title: Field,
    pub url: Field,
    pub body: Field,
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
    let fields = Fields {
        path: builder.add_text_field("path", STRING | STORED),
        title: builder.add_text_field("title", stemmed.clone()),
        url: builder.add_text_field("url", STORED),
        body: builder.add_text_field("body", stemmed),
    };
    (builder.build(), fields)
}

/// A passage found for a question.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    pub title: String,
    pub url: Option<String>,
    pub text: String,
    pub score: f32,
}
