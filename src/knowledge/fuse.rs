//! Reciprocal rank fusion (SPEC §21): a passage scores the sum of `1 / (K + rank)`
//! over the searches that found it. Ranks, not scores, are fused: BM25's scores
//! and cosines are on scales that do not compare, and RRF needs no tuning per
//! site. `K = 60` is the value of the method's paper (Cormack, Clarke and
//! Büttcher, 2009), which BEIR-style hybrid baselines use too.

use std::collections::HashMap;

use tantivy::DocAddress;

use super::fields::Found;

const K: f32 = 60.0;

/// The `limit` best passages of two ranked lists, best first, with their fused
/// score and their rank in each list. Ties keep BM25's order, then the dense one.
pub fn rrf(
    bm25: &[(DocAddress, f32)],
    dense: &[(DocAddress, f32)],
    limit: usize,
) -> Vec<(DocAddress, f32, Found)> {
    let mut fused: HashMap<DocAddress, (f32, Found, usize)> = HashMap::new();
    for (i, (address, _)) in bm25.iter().enumerate() {
        let entry = fused.entry(*address).or_insert((0.0, Found::default(), i));
        entry.0 += 1.0 / (K + i as f32 + 1.0);
        entry.1.bm25 = Some(i as u32 + 1);
    }
    for (i, (address, _)) in dense.iter().enumerate() {
        let entry = fused
            .entry(*address)
            .or_insert((0.0, Found::default(), bm25.len() + i));
        entry.0 += 1.0 / (K + i as f32 + 1.0);
        entry.1.dense = Some(i as u32 + 1);
    }
    let mut ranked: Vec<(DocAddress, f32, Found, usize)> = fused
        .into_iter()
        .map(|(a, (score, found, first))| (a, score, found, first))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.3.cmp(&b.3)));
    ranked
        .into_iter()
        .take(limit)
        .map(|(a, score, found, _)| (a, score, found))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(doc: u32) -> DocAddress {
        DocAddress::new(0, doc)
    }

    #[test]
    fn a_passage_both_searches_found_comes_first_and_names_both() {
        let bm25 = [(at(1), 9.0), (at(2), 8.0), (at(3), 7.0)];
        let dense = [(at(4), 0.9), (at(3), 0.8)];
        let fused = rrf(&bm25, &dense, 3);
        assert_eq!(fused[0].0, at(3));
        assert_eq!(
            fused[0].2,
            Found {
                bm25: Some(3),
                dense: Some(2)
            }
        );
        // Equal scores (first of each list) keep BM25's first.
        assert_eq!(fused[1].0, at(1));
        assert_eq!(fused[2].0, at(4));
        assert_eq!(fused.len(), 3);
    }

    #[test]
    fn one_empty_list_leaves_the_other_in_its_order() {
        let dense = [(at(7), 0.9), (at(5), 0.8)];
        let fused = rrf(&[], &dense, 8);
        let order: Vec<_> = fused.iter().map(|f| f.0).collect();
        assert_eq!(order, vec![at(7), at(5)]);
        assert!(fused.iter().all(|f| f.2.bm25.is_none()));
    }
}
