//! `--only encoder-product`: the embedding encoder's 8-bit products (SPEC §21)
//! on their own, the panel product (`Q8Matrix::product`, sixteen tokens across
//! a register) against the wide one (`Q8Wide::product`, sixteen weight rows
//! across it), on all-MiniLM-L6-v2's four shapes with 256 tokens (a passage at
//! its cut) and with 11 (a question). A passage's products run on one worker,
//! as at ingest; then on both at once, one passage each, which is what two
//! cores give an ingest. The rate is multiply-adds a second, so the floor of
//! an ingest's products is its multiply-adds over twice the two-worker rate.

use std::time::Instant;

use deskbell_kernels::{Q8Matrix, Q8Wide};
use rayon::prelude::*;

use crate::stats::report;

/// all-MiniLM-L6-v2's products, each once a layer: query, key and value
/// stacked; the attention's output; up; down (rows × columns).
const SHAPES: [(usize, usize); 4] = [(1152, 384), (384, 384), (1536, 384), (384, 1536)];

const LAYERS: usize = 6;

pub fn figures(quick: bool) -> anyhow::Result<()> {
    let matrices: Vec<(Q8Matrix, Option<Q8Wide>)> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(rows, cols))| {
            let values: Vec<f32> = (0..rows * cols)
                .map(|j| ((j * 7919 + i) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let m = Q8Matrix::quantize(rows, cols, &values)?;
            let wide = Q8Wide::pack(&m);
            Ok((m, wide))
        })
        .collect::<anyhow::Result<_>>()?;
    if matrices.iter().any(|(_, w)| w.is_none()) {
        report(
            "encoder products",
            "skipped: the wide product needs AVX-512 VNNI and no AMX-INT8",
            "",
        );
        return Ok(());
    }
    let repeats = if quick { 2 } else { 20 };
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let two = rayon::ThreadPoolBuilder::new().num_threads(2).build()?;
    for (label, tokens) in [
        ("a passage, 256 tokens", 256),
        ("a question, 11 tokens", 11),
    ] {
        let macs = (tokens * LAYERS * SHAPES.iter().map(|(r, c)| r * c).sum::<usize>()) as f64;
        // Each product's tokens, made once: the time is the products'.
        let inputs: Vec<Vec<f32>> = matrices
            .iter()
            .map(|(m, _)| {
                (0..tokens * m.cols())
                    .map(|j| (j % 17) as f32 / 8.0 - 1.0)
                    .collect()
            })
            .collect();
        let mut line = Vec::new();
        for wide in [false, true] {
            let encoder = || passage(&matrices, &inputs, tokens, wide);
            // A question shares its rows between the two workers; a passage is
            // one worker's, alone and then beside another.
            let alone = if tokens > 16 { &one } else { &two };
            let best = |f: &dyn Fn() -> anyhow::Result<()>| -> anyhow::Result<f64> {
                let mut best = f64::MAX;
                for _ in 0..repeats {
                    let started = Instant::now();
                    f()?;
                    best = best.min(started.elapsed().as_secs_f64());
                }
                Ok(best)
            };
            let t = alone.install(|| best(&encoder))?;
            let name = if wide { "wide" } else { "panel" };
            let mut part = format!("{name} {:.2} ms ({:.0} G/s)", t * 1e3, macs / t / 1e9);
            if tokens > 16 {
                let both = two.install(|| {
                    best(&|| {
                        (0..2)
                            .into_par_iter()
                            .with_max_len(1)
                            .try_for_each(|_| passage(&matrices, &inputs, tokens, wide))
                    })
                })?;
                part += &format!(", two at once {:.0} G/s", 2.0 * macs / both / 1e9);
            }
            line.push(part);
        }
        report(
            &format!(
                "encoder's 8-bit products, {label} (multiply-adds a second, best of {repeats})"
            ),
            &line.join("; "),
            "",
        );
    }
    Ok(())
}

/// Every product of the encoder's six layers for `tokens` tokens (`inputs`,
/// one per matrix), each into a new buffer as the encoder's are.
fn passage(
    matrices: &[(Q8Matrix, Option<Q8Wide>)],
    inputs: &[Vec<f32>],
    tokens: usize,
    wide: bool,
) -> anyhow::Result<()> {
    for _ in 0..LAYERS {
        for ((m, w), x) in matrices.iter().zip(inputs) {
            let mut out = vec![0f32; tokens * m.rows()];
            match (wide, w) {
                (true, Some(w)) => w.product(x, tokens, &mut out)?,
                _ => m.product(x, tokens, &mut out)?,
            }
        }
    }
    Ok(())
}
