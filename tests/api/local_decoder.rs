//! Deskbell's decoder, on its own 8-bit kernels, against candle's reference models
//! reading the same file: tiny random llama and qwen2 models with f32 weights,
//! which candle multiplies in plain f32, and the test model (llama, 4-bit), which
//! candle multiplies with its own 4-bit kernels after rounding the activations to
//! 8 bits. Deskbell re-quantizes every weight to 8 bits, so the logits differ a
//! little (about 0.5 % of their range against f32, 2–3 % against candle's 4-bit
//! arithmetic); a wrong rotary layout, a lost bias or a misplaced cached key
//! moves them by far more.
//! The steps read a prompt, one generated token (the kernels' own product), nine
//! tokens at once (the 8-bit product of many tokens, with the tokens rounded to 8
//! bits too; or, on a CPU without AVX-512 VNNI, the expanded weights and candle's
//! GEMM) and three more (the end of a prompt after a cached prefix).

use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2};
use deskbell::llm::local::{logits_after, logits_of_branches};

use crate::local::test_model;
use crate::local_arch::{Tiny, tiny_model_shaped};

const STEPS: [&[u32]; 4] = [
    &[1, 504, 3458, 314, 253, 1345],
    &[2817],
    &[30, 4875, 260, 3165, 288, 7119, 17, 216, 1000],
    &[42, 7, 3001],
];

/// The largest difference may be `share` of the reference's range of logits, and
/// our likeliest token must be one of the reference's likeliest within that. A
/// random model's logits can tie to within rounding, so only a real model is held
/// to the very same token (`same_top`).
fn assert_close(step: usize, ours: &[f32], reference: &[f32], share: f32, same_top: bool) {
    assert_eq!(ours.len(), reference.len());
    let (lo, hi) = reference
        .iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    let worst = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let argmax = |v: &[f32]| {
        v.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
    };
    println!(
        "step {step}: worst difference {worst} over a range of {}",
        hi - lo
    );
    assert!(
        worst <= share * (hi - lo),
        "step {step}: logits differ by {worst} over a range of {}",
        hi - lo
    );
    let (ours_top, top) = (argmax(ours), argmax(reference));
    if same_top {
        assert_eq!(ours_top, top, "step {step}: the likeliest token");
    }
    let near = |i: Option<usize>| i.map_or(f32::MIN, |i| reference[i]);
    assert!(
        near(ours_top) >= near(top) - 2.0 * share * (hi - lo),
        "step {step}: our likeliest token is far from the reference's"
    );
}

fn compare(
    path: &Path,
    share: f32,
    same_top: bool,
    mut reference: impl FnMut(&Tensor, usize) -> Tensor,
) {
    let ours = logits_after(path, &STEPS).unwrap();
    let mut position = 0;
    for (step, (tokens, ours)) in STEPS.iter().zip(&ours).enumerate() {
        let input = Tensor::new(*tokens, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let want = reference(&input, position);
        position += tokens.len();
        let want = want.squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        assert_close(step, ours, &want, share, same_top);
    }
}

fn content(path: &Path) -> (std::fs::File, gguf_file::Content) {
    let mut file = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    (file, content)
}

#[test]
fn the_decoder_reads_the_test_model_as_candle_s_llama_does() {
    let path = test_model();
    let (mut file, ct) = content(&path);
    let mut model = quantized_llama::ModelWeights::from_gguf(ct, &mut file, &Device::Cpu).unwrap();
    compare(&path, 0.04, true, |input, position| {
        model.forward(input, position).unwrap()
    });
}

/// A tiny random model of `arch` with f32 weights, against candle's model of it.
fn against_tiny<M>(
    arch: &str,
    tiny: &Tiny,
    load: fn(gguf_file::Content, &mut std::fs::File, &Device) -> candle_core::Result<M>,
    forward: fn(&mut M, &Tensor, usize) -> candle_core::Result<Tensor>,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("tiny-{arch}.gguf"));
    tiny_model_shaped(arch, &path, 64, tiny);
    let (mut file, ct) = content(&path);
    let mut model = load(ct, &mut file, &Device::Cpu).unwrap();
    compare(&path, 0.015, false, |input, position| {
        forward(&mut model, input, position).unwrap()
    });
}

#[test]
fn the_decoder_reads_a_llama_model_as_candle_s_llama_does_in_f32() {
    against_tiny(
        "llama",
        &Tiny::default(),
        quantized_llama::ModelWeights::from_gguf,
        quantized_llama::ModelWeights::forward,
    );
}

#[test]
fn the_decoder_reads_a_qwen2_model_as_candle_s_qwen2_does_in_f32() {
    against_tiny(
        "qwen2",
        &Tiny::default(),
        quantized_qwen2::ModelWeights::from_gguf,
        quantized_qwen2::ModelWeights::forward,
    );
}

/// Rows of 40 values are not whole blocks, so those matrices stay f32 (the
/// kernels' fallback), and the output head is the file's own, not the embeddings'.
#[test]
fn the_decoder_reads_f32_fallback_matrices_and_an_own_output_head_as_candle_does() {
    let tiny = Tiny {
        hidden: 40,
        own_output: true,
        ..Tiny::default()
    };
    against_tiny(
        "llama",
        &tiny,
        quantized_llama::ModelWeights::from_gguf,
        quantized_llama::ModelWeights::forward,
    );
}

#[test]
fn a_model_whose_heads_or_projections_do_not_fit_is_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    for (tiny, wrong) in [
        (
            Tiny {
                hidden: 66,
                ..Tiny::default()
            },
            "does not split into 4 even heads",
        ),
        (
            Tiny {
                up: 96,
                ..Tiny::default()
            },
            "gate and up projections differ in size",
        ),
    ] {
        let path = dir.path().join("misshapen.gguf");
        tiny_model_shaped("llama", &path, 64, &tiny);
        let refused = logits_after(&path, &[&[1, 2]]).unwrap_err();
        assert!(format!("{refused:#}").contains(wrong), "{refused:#}");
    }
}

#[test]
fn clones_that_read_on_from_one_prefix_leave_it_and_each_other_unchanged() {
    let path = test_model();
    let (prefix, branches) = (STEPS[0], [STEPS[2], STEPS[3], STEPS[1]]);
    let got = logits_of_branches(&path, prefix, &branches).unwrap();
    // The last result is the prefix's own model reading the first branch after
    // every clone has written to its copy of the cache.
    let expected = branches.iter().chain([&branches[0]]);
    for (i, (branch, got)) in expected.zip(&got).enumerate() {
        let fresh = logits_after(&path, &[prefix, branch]).unwrap();
        let worst = got
            .iter()
            .zip(&fresh[1])
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 1e-4,
            "branch {i}: differs from a fresh read by {worst}"
        );
    }
}
