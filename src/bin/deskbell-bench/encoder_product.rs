//! `--only encoder-product`: the embedding encoder's products (SPEC §21) on
//! their own, on all-MiniLM-L6-v2's four shapes with 256 tokens (a passage at
//! its cut) and with 11 (a question), in each form this CPU runs: where it has
//! AVX-512 VNNI, the panel product (`Q8Matrix::product`, sixteen tokens across a
//! register) against the wide one (`Q8Wide::product`, sixteen weight rows
//! across it); where it has AVX2 alone, the f32 weights on the f32 GEMM (what a
//! passage took there before) against the widened product
//! (`Q8Widened::product`, eight rows' 16-bit weights across a register). A
//! passage's products run on one worker, as at ingest; then on both at once,
//! one passage each, which is what two cores give an ingest. The rate is
//! multiply-adds a second, so the floor of an ingest's products is its
//! multiply-adds over twice the two-worker rate.

use std::time::Instant;

use deskbell_kernels::dense::{Strided, StridedMut, gemm};
use deskbell_kernels::{Q8Matrix, Q8Wide, Q8Widened};
use rayon::prelude::*;

use crate::stats::report;

/// all-MiniLM-L6-v2's products, each once a layer: query, key and value
/// stacked; the attention's output; up; down (rows × columns).
const SHAPES: [(usize, usize); 4] = [(1152, 384), (384, 384), (1536, 384), (384, 1536)];

const LAYERS: usize = 6;

/// One matrix in each form a product here takes.
struct Forms {
    blocks: Q8Matrix,
    f32: Vec<f32>,
    wide: Option<Q8Wide>,
    widened: Option<Q8Widened>,
}

#[derive(Clone, Copy, PartialEq)]
enum Form {
    Panel,
    Wide,
    F32,
    Widened,
}

impl Form {
    fn name(self) -> &'static str {
        match self {
            Form::Panel => "panel",
            Form::Wide => "wide",
            Form::F32 => "f32 GEMM",
            Form::Widened => "widened",
        }
    }
}

pub fn figures(quick: bool) -> anyhow::Result<()> {
    let matrices: Vec<Forms> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, &(rows, cols))| {
            let values: Vec<f32> = (0..rows * cols)
                .map(|j| ((j * 7919 + i) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let m = Q8Matrix::quantize(rows, cols, &values)?;
            Ok(Forms {
                wide: Q8Wide::pack(&m),
                widened: Q8Widened::pack(&m),
                blocks: m,
                f32: values,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let forms = if matrices.iter().all(|m| m.wide.is_some()) {
        [Form::Panel, Form::Wide]
    } else if matrices.iter().all(|m| m.widened.is_some()) {
        [Form::F32, Form::Widened]
    } else {
        report(
            "encoder products",
            "skipped: the wide product needs AVX-512 VNNI and no AMX-INT8, the widened one AVX2 without VNNI",
            "",
        );
        return Ok(());
    };
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
            .map(|m| {
                (0..tokens * m.blocks.cols())
                    .map(|j| (j % 17) as f32 / 8.0 - 1.0)
                    .collect()
            })
            .collect();
        let mut line = Vec::new();
        for form in forms {
            let encoder = || passage(&matrices, &inputs, tokens, form);
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
            let name = form.name();
            let mut part = format!("{name} {:.2} ms ({:.0} G/s)", t * 1e3, macs / t / 1e9);
            if tokens > 16 {
                let both = two.install(|| {
                    best(&|| {
                        (0..2)
                            .into_par_iter()
                            .with_max_len(1)
                            .try_for_each(|_| passage(&matrices, &inputs, tokens, form))
                    })
                })?;
                part += &format!(", two at once {:.0} G/s", 2.0 * macs / both / 1e9);
            }
            line.push(part);
        }
        report(
            &format!("encoder's products, {label} (multiply-adds a second, best of {repeats})"),
            &line.join("; "),
            "",
        );
    }
    attention_figure(repeats);
    Ok(())
}

/// The few-token attention of a question (11 tokens, twelve heads of 32) in
/// each of the six layers, on the calling thread: the median of many runs, as
/// it is microseconds.
fn attention_figure(repeats: usize) {
    let (n, d, heads) = (11, 384, 12);
    let qkv: Vec<f32> = (0..n * 3 * d)
        .map(|j| ((j * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut times: Vec<f64> = (0..repeats * 50)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..LAYERS {
                std::hint::black_box(deskbell_kernels::attention_few(&qkv, n, d, heads).ok());
            }
            started.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    report(
        "encoder's attention, a question, 11 tokens, six layers (median)",
        &format!("{:.1} µs", times[times.len() / 2] * 1e6),
        "",
    );
}

/// Every product of the encoder's six layers for `tokens` tokens (`inputs`,
/// one per matrix), each into a new buffer as the encoder's are.
fn passage(
    matrices: &[Forms],
    inputs: &[Vec<f32>],
    tokens: usize,
    form: Form,
) -> anyhow::Result<()> {
    for _ in 0..LAYERS {
        for (m, x) in matrices.iter().zip(inputs) {
            let (rows, cols) = (m.blocks.rows(), m.blocks.cols());
            let mut out = vec![0f32; tokens * rows];
            match (form, &m.wide, &m.widened) {
                (Form::Wide, Some(w), _) => w.product(x, tokens, &mut out)?,
                (Form::Widened, _, Some(w)) => w.product(x, tokens, &mut out)?,
                // As `knowledge::embed::long::linear` multiplies a passage.
                (Form::F32, _, _) => gemm(
                    StridedMut::rows(&mut out, tokens, rows),
                    Strided::rows(x, tokens, cols),
                    Strided::transposed(&m.f32, rows, cols),
                    true,
                )?,
                _ => m.blocks.product(x, tokens, &mut out)?,
            }
        }
    }
    Ok(())
}
