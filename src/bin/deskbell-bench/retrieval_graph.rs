//! `--only retrieval-graph`: where an approximate index (HNSW) starts to pay
//! for itself (SPEC §21, `knowledge::dense::GRAPH_MIN`). For each size, one
//! segment's worth of 384-dimension unit vectors around a thousand topics, the
//! question's exact scan against the graph's walk (latency and the share of the
//! exact top 8 the walk finds), the graph's building time (on a thread of its
//! own) and its memory: the resident growth while it is held, the vectors
//! already read. Sizes run one after another in this process, so a size may
//! reuse pages an earlier one freed (an undercount), or keep some of its own
//! build's scratch (an overcount).

use std::sync::Arc;
use std::time::Instant;

use deskbell::knowledge::dense::{Graph, Rows, synthetic};

use crate::stats::{Samples, ms, report, rss_mib};

pub fn figures(quick: bool) {
    let sizes: &[usize] = if quick {
        &[1_000, 2_000]
    } else {
        &[10_000, 50_000, 100_000, 200_000]
    };
    for &n in sizes {
        // The last 200 are the questions, near the same topics, not indexed.
        let vectors = synthetic(n + 200, 384, 1_000, n as u64);
        let mut rows = Rows::new(384);
        for (doc, v) in vectors[..n].iter().enumerate() {
            rows.push(v, doc as u32);
        }
        let rows = Arc::new(rows);
        let before = rss_mib("self");
        let started = Instant::now();
        let graph = Graph::build(&rows);
        let built = started.elapsed();
        let held = rss_mib("self") - before;
        let (mut exact, mut walk, mut hits) = (Samples::default(), Samples::default(), 0);
        // A question asks each search for 40 (`knowledge::DEPTH`): the walk's
        // share of the exact top 40 too, outside the timing.
        let mut hits_40 = 0;
        for _ in 0..if quick { 1 } else { 5 } {
            for q in &vectors[n..] {
                let q = Arc::new(Rows::question(q));
                let t = Instant::now();
                let best = rows.exact(&q, 8, |_| true);
                exact.push(t.elapsed());
                let t = Instant::now();
                let near = graph.nearest(&q, 8, |_| true);
                walk.push(t.elapsed());
                hits += near
                    .iter()
                    .filter(|f| best.iter().any(|b| b.0 == f.0))
                    .count();
                let best_40 = rows.exact(&q, 40, |_| true);
                hits_40 += graph
                    .nearest(&q, 40, |_| true)
                    .iter()
                    .filter(|f| best_40.iter().any(|b| b.0 == f.0))
                    .count();
            }
        }
        report(
            &format!("nearest 8 of {n} vectors: exact scan · graph walk"),
            &format!(
                "p50 {} · {}, p99 {} · {}; the walk finds {:.3} of the exact top 8 and {:.3} of the top 40; graph built in {:.1} s on one thread, {:.1} MiB resident more",
                ms(exact.p50()),
                ms(walk.p50()),
                ms(exact.p99()),
                ms(walk.p99()),
                hits as f64 / (8 * exact.len()) as f64,
                hits_40 as f64 / (40 * exact.len()) as f64,
                built.as_secs_f64(),
                held
            ),
            "",
        );
    }
}
