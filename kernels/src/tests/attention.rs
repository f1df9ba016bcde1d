//! Rotary embeddings and attention for short steps (`attention.rs`).

use proptest::prelude::*;

use crate::attention::{Heads, attend, rope};

/// Heads (and key heads dividing them), head size, cached positions, tokens.
fn shape() -> impl Strategy<Value = (Heads, usize, usize)> {
    (1usize..4, 1usize..4, 1usize..5, 0usize..20, 1usize..5).prop_map(
        |(kv_heads, group, half, first, tokens)| {
            let heads = Heads {
                heads: kv_heads * group,
                kv_heads,
                dim: half * 2 * 8,
            };
            (heads, first, tokens)
        },
    )
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| (((i + 1) * 2654435761 + seed * 97) % 2000) as f32 / 1000.0 - 1.0)
        .collect()
}

proptest! {
    #[test]
    fn attention_matches_a_plain_causal_softmax((shape, first, tokens) in shape(), seed in 0u64..1000) {
        let Heads { heads, kv_heads, dim } = shape;
        let q = values(tokens * heads * dim, seed);
        let k = values((first + tokens) * kv_heads * dim, seed + 1);
        let v = values((first + tokens) * kv_heads * dim, seed + 2);
        let mut out = vec![f32::NAN; q.len()];
        attend(&q, &k, &v, shape, first, &mut out).unwrap();
        for t in 0..tokens {
            for h in 0..heads {
                let kv = h / (heads / kv_heads);
                let q = &q[(t * heads + h) * dim..][..dim];
                let scores: Vec<f64> = (0..=first + t)
                    .map(|p| {
                        let k = &k[(p * kv_heads + kv) * dim..][..dim];
                        q.iter().zip(k).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()
                            / (dim as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for d in 0..dim {
                    let want: f64 = weights
                        .iter()
                        .enumerate()
                        .map(|(p, w)| w / total * f64::from(v[(p * kv_heads + kv) * dim + d]))
                        .sum();
                    let got = f64::from(out[(t * heads + h) * dim + d]);
                    prop_assert!((got - want).abs() < 1e-4, "token {t} head {h} value {d}: {got} against {want}");
                }
            }
        }
    }

    #[test]
    fn a_rotation_turns_each_pair_by_its_angle(heads in 1usize..4, half in 1usize..9, first in 0usize..6, tokens in 1usize..4, halves: bool) {
        let dim = half * 2;
        let positions = first + tokens;
        let angles: Vec<f32> = (0..positions * half).map(|i| i as f32 * 0.37).collect();
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let before = values(tokens * heads * dim, 7);
        let mut x = before.clone();
        rope(&mut x, heads, dim, first, &cos, &sin, halves).unwrap();
        for t in 0..tokens {
            for h in 0..heads {
                for i in 0..half {
                    let (a, b) = if halves { (i, i + half) } else { (2 * i, 2 * i + 1) };
                    let base = (t * heads + h) * dim;
                    let angle = angles[(first + t) * half + i];
                    let (x0, x1) = (before[base + a], before[base + b]);
                    let want = (x0 * angle.cos() - x1 * angle.sin(), x0 * angle.sin() + x1 * angle.cos());
                    prop_assert!((x[base + a] - want.0).abs() < 1e-5 && (x[base + b] - want.1).abs() < 1e-5);
                }
            }
        }
    }
}

#[test]
fn shapes_that_do_not_fit_are_refused() {
    let shape = Heads {
        heads: 3,
        kv_heads: 2,
        dim: 4,
    };
    let mut out = [0f32; 12];
    assert!(attend(&[0.0; 12], &[0.0; 8], &[0.0; 8], shape, 0, &mut out).is_err());
    let shape = Heads {
        heads: 2,
        kv_heads: 1,
        dim: 4,
    };
    let mut out = [0f32; 8];
    assert!(attend(&[0.0; 8], &[0.0; 4], &[0.0; 3], shape, 0, &mut out).is_err());
    assert!(attend(&[0.0; 8], &[0.0; 4], &[0.0; 4], shape, 1, &mut out).is_err());
    assert!(rope(&mut [0.0; 8], 2, 4, 0, &[1.0; 2], &[0.0; 1], true).is_err());
    assert!(rope(&mut [0.0; 6], 2, 3, 0, &[1.0; 4], &[0.0; 4], true).is_err());
}

/// The encoder's few-token attention as it was written before it was
/// vectorised: each dot product summed in order.
fn encoder_attention_in_order(qkv: &[f32], n: usize, d: usize, heads: usize) -> Vec<f32> {
    let size = d / heads;
    let scale = 1.0 / (size as f32).sqrt();
    let mut out = vec![0f32; n * d];
    for h in 0..heads {
        for i in 0..n {
            let q = &qkv[i * 3 * d + h * size..][..size];
            let mut weights: Vec<f32> = (0..n)
                .map(|j| {
                    let k = &qkv[j * 3 * d + d + h * size..][..size];
                    q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * scale
                })
                .collect();
            let max = weights.iter().fold(f32::NEG_INFINITY, |m, w| m.max(*w));
            weights.iter_mut().for_each(|w| *w = (*w - max).exp());
            let total: f32 = weights.iter().sum();
            for (j, w) in weights.iter().enumerate() {
                let v = &qkv[j * 3 * d + 2 * d + h * size..][..size];
                for (o, v) in out[i * d + h * size..][..size].iter_mut().zip(v) {
                    *o += w / total * v;
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn the_encoder_s_few_token_attention_sums_as_the_in_order_loop_does(
        (n, heads, size, qkv) in (1usize..20, 1usize..5, 1usize..40).prop_flat_map(|(n, heads, size)| {
            (Just(n), Just(heads), Just(size), prop::collection::vec(-3f32..3.0, n * 3 * heads * size))
        })
    ) {
        let d = heads * size;
        let got = crate::attention_few(&qkv, n, d, heads).unwrap();
        let want = encoder_attention_in_order(&qkv, n, d, heads);
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} against {w}");
        }
    }
}

#[test]
fn the_encoder_s_few_token_attention_refuses_buffers_that_do_not_fit() {
    let qkv = vec![0.5f32; 2 * 3 * 8];
    assert!(crate::attention_few(&qkv, 2, 8, 2).is_ok());
    assert!(
        crate::attention_few(&qkv, 2, 8, 3).is_err(),
        "heads that do not divide the width"
    );
    assert!(crate::attention_few(&qkv, 2, 8, 0).is_err(), "no heads");
    assert!(
        crate::attention_few(&qkv[1..], 2, 8, 2).is_err(),
        "a buffer a value short"
    );
    assert!(
        crate::attention_few(&qkv, 3, 8, 2).is_err(),
        "more tokens than the buffer holds"
    );
}
