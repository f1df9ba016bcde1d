//! The index's tests: concurrent writers, kept passage text, searching in place.

use super::ingest::read_manifest;
use super::*;
use crate::knowledge::source::Document;

fn document(path: &str, text: &str, version: u32) -> Document {
    Document {
        path: path.into(),
        title: path.into(),
        url: None,
        text: text.into(),
        hash: format!("{path}-{version}"),
    }
}

/// Writers of one folder (replicas on one machine, the CLI beside a server)
/// take turns: whatever their order, the index holds each document once.
#[test]
fn writers_of_one_folder_take_turns_and_leave_no_duplicates() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let docs = vec![
                    document("kettle.md", "Descale the kettle with citric acid.", i % 2),
                    document("returns.md", "Return anything within thirty days.", 0),
                ];
                ingest(&dir, docs, Vec::new(), None).unwrap()
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let index = SiteIndex::open(&dir).unwrap();
    index.reload().unwrap();
    let found = index.search("citric acid kettle", 10).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(read_manifest(&dir).unwrap().len(), 2);
}

/// A search never waits for the kept text: one that meets an update first
/// (here tantivy's own reload, as after an ingest by another process) reads
/// the document store, and the new generation is kept soon after.
#[test]
fn a_search_meeting_an_update_first_reads_the_store_and_the_text_is_kept_after() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    let kettle = |fix: &str, version| {
        vec![document(
            "kettle.md",
            &format!("Descale the kettle with {fix}."),
            version,
        )]
    };
    ingest(&dir, kettle("citric acid", 0), Vec::new(), None).unwrap();
    let index = SiteIndex::open(&dir).unwrap();
    assert!(index.texts.kept(&index.reader.searcher()));
    ingest(&dir, kettle("white vinegar", 1), Vec::new(), None).unwrap();
    index.reader.reload().unwrap();
    assert!(!index.texts.kept(&index.reader.searcher()));
    let found = index.search("descale the kettle", 5).unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].text, "Descale the kettle with white vinegar.");
    let waited = std::time::Instant::now();
    while !index.texts.kept(&index.reader.searcher()) {
        assert!(
            waited.elapsed().as_secs() < 10,
            "the new text was never kept"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let again = index.search("descale the kettle", 5).unwrap();
    assert_eq!(again, found);
}

/// Passages come back the same from memory as from the document store, and
/// an update is seen after a reload: the kept text follows the searcher's
/// generation, whose document addresses are its own.
#[test]
fn kept_passages_match_the_store_and_follow_each_update() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    let docs = |version, fix: &str| {
        vec![
            document(
                "kettle.md",
                &format!("Descale the kettle with {fix}."),
                version,
            ),
            document("returns.md", "Return anything within thirty days.", version),
            document("shipping.md", "Parcels leave the warehouse daily.", version),
        ]
    };
    ingest(&dir, docs(0, "citric acid"), Vec::new(), None).unwrap();
    let kept = SiteIndex::open(&dir).unwrap();
    let stored = SiteIndex::open_keeping(&dir, 0).unwrap();
    assert!(kept.texts.kept(&kept.reader.searcher()));
    assert!(!stored.texts.kept(&stored.reader.searcher()));
    for question in ["citric acid kettle", "return days", "warehuose", "nothing"] {
        assert_eq!(
            kept.search(question, 5).unwrap(),
            stored.search(question, 5).unwrap(),
            "{question}"
        );
    }
    // Every document changes, so the old segment goes and the new one's
    // addresses are the old ones: kept text read for the old generation
    // would be the wrong text at the right address.
    ingest(&dir, docs(1, "white vinegar"), Vec::new(), None).unwrap();
    kept.reload().unwrap();
    stored.reload().unwrap();
    for question in ["descale the kettle", "vinegar", "parcels"] {
        let found = kept.search(question, 5).unwrap();
        assert_eq!(found, stored.search(question, 5).unwrap(), "{question}");
        assert!(
            !found.iter().any(|p| p.text.contains("citric")),
            "{found:?}"
        );
    }
    let found = kept.search("descale the kettle", 1).unwrap();
    assert!(found[0].text.contains("white vinegar"), "{found:?}");
}

/// A site's index of `docs` in a fresh folder, which the first value keeps.
fn index_of(docs: Vec<Document>) -> (tempfile::TempDir, SiteIndex) {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    ingest(&dir, docs, Vec::new(), None).unwrap();
    let index = SiteIndex::open(&dir).unwrap();
    (data, index)
}

/// tantivy reloads with nothing changed too (its watcher's first look at a
/// just-written index): the new generation has the same segments, so the
/// kept text still serves it.
#[test]
fn a_reload_with_nothing_changed_keeps_the_text() {
    let (_data, index) = index_of(vec![document("kettle.md", "Descale the kettle.", 0)]);
    let before = index.reader.searcher().generation().generation_id();
    index.reader.reload().unwrap();
    let searcher = index.reader.searcher();
    assert_ne!(searcher.generation().generation_id(), before);
    assert!(index.texts.kept(&searcher));
}

/// The query language is not for visitors: a question's `NOT`, `AND` or `OR`
/// is a word like any other, and excludes nothing.
#[test]
fn a_question_s_operator_words_are_only_words() {
    let (_data, index) = index_of(vec![document("shipping.md", "Shipping takes two days.", 0)]);
    for question in [
        "NOT shipping",
        "shipping AND returns",
        "-shipping",
        "shipping OR",
        "NOT shiping",
    ] {
        assert_eq!(index.search(question, 5).unwrap().len(), 1, "{question}");
    }
}

/// The in-place search (`Knowledge::search_top`) tries the words only as
/// written, only for a short question and only when the passages' text is
/// in memory (the document store would be a read from disk); the rest is
/// left to the full search, which forgives a typo.
#[test]
fn only_a_short_exact_question_is_searched_in_place() {
    let (data, index) = index_of(vec![document("shipping.md", "Shipping takes two days.", 0)]);
    let stored = SiteIndex::open_keeping(&data.path().join("knowledge").join("acme"), 0).unwrap();
    assert_eq!(stored.search_in_place("shipping", 5).unwrap(), None);
    assert_eq!(stored.search("shipping", 5).unwrap().len(), 1);
    let in_place = |q: &str| index.search_in_place(q, 5).unwrap().map(|p| p.len());
    assert_eq!(in_place("shipping"), Some(1));
    assert_eq!(in_place("shiping"), None);
    assert_eq!(index.search("shiping", 5).unwrap().len(), 1);
    let long = format!("shipping{}", " and".repeat(IN_PLACE_WORDS));
    assert_eq!(in_place(&long), None);
    assert_eq!(index.search(&long, 5).unwrap().len(), 1);
}

/// A larger index is searched on a blocking thread, however short the
/// question: its search may take longer than a task should hold a thread.
#[test]
fn a_large_index_is_not_searched_in_place() {
    let passages = IN_PLACE_PASSAGES as usize + 1;
    let docs = (0..passages)
        .map(|i| {
            document(
                &format!("doc{i}.md"),
                &format!("Parcel {i} ships daily."),
                0,
            )
        })
        .collect();
    let (_data, index) = index_of(docs);
    assert_eq!(index.reader.searcher().num_docs(), passages as u64);
    assert_eq!(index.search_in_place("parcel", 5).unwrap(), None);
    assert_eq!(index.search("parcel", 5).unwrap().len(), 5);
}

/// The question parser's exact query as it was: one group per word over the
/// heading path (boosted) and the `flat` field.
fn parsed_query(index: &SiteIndex, cleaned: &str) -> Box<dyn Query> {
    let tantivy = index.reader.searcher().index().clone();
    let mut parser = QueryParser::for_index(&tantivy, vec![index.fields.title, index.fields.flat]);
    parser.set_field_boost(index.fields.title, TITLE_BOOST);
    parser.parse_query_lenient(cleaned).0
}

fn scored(index: &SiteIndex, query: &dyn Query, limit: usize) -> Vec<(f32, tantivy::DocAddress)> {
    let top = TopDocs::with_limit(limit).order_by_score();
    index.reader.searcher().search(query, &top).unwrap()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// The flat exact query finds the passages the parser's nested one finds,
    /// with the same scores, for every limit: skipping blocks changes the work,
    /// never the answer.
    #[test]
    fn the_flat_exact_query_scores_as_the_parsed_one(
        texts in proptest::collection::vec(proptest::collection::vec(0usize..40, 1..30), 1..400),
        questions in proptest::collection::vec(proptest::collection::vec(0usize..45, 0..6), 1..12),
        limit in 1usize..6,
    ) {
        let word = |w: usize| format!("w{}ord{}", w % 7, w);
        let docs = texts
            .iter()
            .enumerate()
            .map(|(i, words)| {
                let text: Vec<String> = words.iter().map(|&w| word(w)).collect();
                let mut doc = document(&format!("doc{i}.md"), &text.join(" "), 0);
                doc.title = word(words[0]);
                doc
            })
            .collect();
        let (_data, index) = index_of(docs);
        for question in &questions {
            let words: Vec<String> = question.iter().map(|&w| word(w)).collect();
            let cleaned = words.join(" ");
            let flat = index.exact_query(&cleaned);
            let parsed = parsed_query(&index, &cleaned);
            // With room for every passage, the same passages with the same scores.
            let mut everything = scored(&index, &flat, texts.len());
            let mut before = scored(&index, parsed.as_ref(), texts.len());
            everything.sort_by_key(|(_, address)| *address);
            before.sort_by_key(|(_, address)| *address);
            proptest::prop_assert_eq!(everything.len(), before.len(), "{}", cleaned);
            for ((a, x), (b, y)) in everything.iter().zip(&before) {
                proptest::prop_assert_eq!(x, y);
                proptest::prop_assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{} {} {}", cleaned, a, b);
            }
            // With a small limit, the same best scores (ties may pick either passage).
            let best = scored(&index, &flat, limit);
            let best_before = scored(&index, parsed.as_ref(), limit);
            proptest::prop_assert_eq!(best.len(), best_before.len());
            for ((a, _), (b, _)) in best.iter().zip(&best_before) {
                proptest::prop_assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{} {} {}", cleaned, a, b);
            }
        }
    }
}

/// The same unit vector for every text, along the first axis.
struct Axis;

impl Embed for Axis {
    fn model(&self) -> &str {
        "axis"
    }

    fn vectors(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|_| vec![1.0, 0.0, 0.0, 0.0]).collect())
    }
}

/// An index from before SPEC §21 (no vector field) is built again with
/// vectors, which live in a column beside the text, not in the stored text.
#[test]
fn an_index_without_the_vector_field_is_built_again_with_vectors() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    let mut old = tantivy::schema::Schema::builder();
    old.add_text_field("path", tantivy::schema::STRING | tantivy::schema::STORED);
    std::fs::create_dir_all(&dir).unwrap();
    Index::create_in_dir(&dir, old.build()).unwrap();
    std::fs::write(dir.join("deskbell-manifest.json"), "{}").unwrap();

    let docs = vec![document(
        "returns.md",
        "Return anything within thirty days.",
        0,
    )];
    let report = ingest(&dir, docs, Vec::new(), Some(&Axis)).unwrap();
    assert_eq!(report.added, 1, "{report:?}");
    let index = SiteIndex::open(&dir).unwrap();
    let dense = index.dense().expect("vectors were read");
    let near = dense.nearest(&[1.0, 0.0, 0.0, 0.0], 3);
    assert_eq!(near.len(), 1);
    assert!((near[0].1 - 1.0).abs() < 0.01, "{near:?}");
    let stored: tantivy::TantivyDocument = dense.searcher.doc(near[0].0).unwrap();
    assert!(
        stored.get_first(index.fields.vector).is_none(),
        "the document store holds text only"
    );
    let found = index.search("thirty days", 3).unwrap();
    assert_eq!(found[0].text, "Return anything within thirty days.");
    // The manifest names the model, so the same documents are not embedded again.
    let again = ingest(
        &dir,
        vec![document(
            "returns.md",
            "Return anything within thirty days.",
            0,
        )],
        Vec::new(),
        Some(&Axis),
    )
    .unwrap();
    assert_eq!((again.unchanged, again.added), (1, 0), "{again:?}");
}

/// The first axis for a text about kettles, the second for any other.
struct Topics;

impl Embed for Topics {
    fn model(&self) -> &str {
        "topics"
    }

    fn vectors(&self, texts: &[String]) -> anyhow::Result<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| match t.contains("kettle") {
                true => vec![1.0, 0.0, 0.0, 0.0],
                false => vec![0.0, 1.0, 0.0, 0.0],
            })
            .collect())
    }
}

/// A segment's vectors are read once and kept by the generations that have it,
/// and a changed document's old passage is never found (whether its segment
/// keeps it as dead or is dropped depends on how the writer's threads shared the
/// documents; `dense::tests` holds the first case alone).
#[test]
fn a_new_generation_keeps_its_segments_vectors_and_never_finds_a_deleted_passage() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    // A hundred documents, so that each of the writer's segments holds many and
    // outlives the delete of one (tantivy drops a segment whose documents are
    // all dead).
    let docs = |version: u32| {
        (0..100)
            .map(|i| match i {
                0 => document(
                    "kettle-0.md",
                    &format!("Descale the kettle, step {version}."),
                    version,
                ),
                i if i < 50 => document(
                    &format!("kettle-{i}.md"),
                    &format!("The kettle number {i}."),
                    0,
                ),
                i => document(
                    &format!("returns-{i}.md"),
                    &format!("Return item {i} within thirty days."),
                    0,
                ),
            })
            .collect::<Vec<_>>()
    };
    ingest(&dir, docs(1), Vec::new(), Some(&Topics)).unwrap();
    let index = SiteIndex::open(&dir).unwrap();
    let first = index.dense().expect("vectors were read");
    let report = ingest(&dir, docs(2), Vec::new(), Some(&Topics)).unwrap();
    assert_eq!((report.updated, report.unchanged), (1, 99), "{report:?}");
    index.reload().unwrap();
    let second = index.dense().expect("vectors were read");
    assert!(
        second.shared_with(&first) >= 1,
        "the first commit's segments are kept"
    );
    let searcher = &second.searcher;
    let near = second.nearest(&[1.0, 0.0, 0.0, 0.0], 100);
    let kettles: Vec<_> = near.iter().filter(|(_, cosine)| *cosine > 0.9).collect();
    assert_eq!(kettles.len(), 50, "the old passage is dead");
    let texts: Vec<String> = kettles
        .iter()
        .map(|(address, _)| {
            let stored: tantivy::TantivyDocument = searcher.doc(*address).unwrap();
            stored
                .get_first(index.fields.body)
                .and_then(|v| tantivy::schema::Value::as_str(&v).map(String::from))
                .unwrap_or_default()
        })
        .collect();
    assert!(texts.iter().any(|t| t.contains("step 2")), "{texts:?}");
}

/// A segment with more than a fifth of its passages dead is merged away at the
/// ingest that killed them, though too few segments share its size for
/// tantivy's default policy, which would have kept it (dead vectors in memory,
/// scanned rather than walked) until enough others came.
#[test]
fn a_segment_with_a_fifth_of_its_passages_dead_is_merged_away() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("knowledge").join("acme");
    let docs = |version: u32| {
        (0..100)
            .map(|i| {
                // Every other document changes in the second ingest.
                let v = if i % 2 == 0 { version } else { 0 };
                document(
                    &format!("kettle-{i}.md"),
                    &format!("The kettle number {i}, step {v}."),
                    v,
                )
            })
            .collect::<Vec<_>>()
    };
    ingest(&dir, docs(1), Vec::new(), Some(&Topics)).unwrap();
    let report = ingest(&dir, docs(2), Vec::new(), Some(&Topics)).unwrap();
    assert_eq!((report.updated, report.unchanged), (50, 50), "{report:?}");
    let index = SiteIndex::open(&dir).unwrap();
    let dense = index.dense().expect("vectors were read");
    for segment in dense.searcher.segment_readers() {
        assert!(
            segment.num_deleted_docs() * 5 <= segment.max_doc(),
            "a segment keeps {} dead of {}",
            segment.num_deleted_docs(),
            segment.max_doc()
        );
    }
    assert_eq!(index.search("kettle step", 200).unwrap().len(), 100);
}
