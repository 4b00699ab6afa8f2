//! Element-wise and per-row CPU operations.
//!
//! NOTE: where llama.cpp's CPU code makes a numerical choice that changes results visibly
//! (double-precision norm sums, the f16-rounded GELU table, iteratively computed rope angles),
//! we make the same one: greedy outputs are compared token for token against it.

use std::sync::OnceLock;

use half::f16;
use rayon::prelude::*;

use super::simd;
use crate::{Activation, RopeKind, RopeRows, RopeSpec};

/// Rows below this many values are processed on the calling thread: splitting them costs more
/// than it saves.
const PAR_MIN_LEN: usize = 1 << 14;

/// RMS-normalize every `w.len()`-sized group of `x` and scale by `w`.
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let group = w.len();
    let norm = |g: &mut [f32]| {
        let sum = simd::sum_squares_f64(g);
        let mean = (sum / group as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        simd::scale_mul(g, scale, w);
    };
    if x.len() >= PAR_MIN_LEN {
        x.par_chunks_mut(group).for_each(norm);
    } else {
        x.chunks_mut(group).for_each(norm);
    }
}

/// Rotary embedding over `[n_rows, cols]` values laid out as heads of `head_dim`; row `i` at
/// `rows.positions[i]` (and its own base where `rows.theta_scales` gives one).
pub fn rope(x: &mut [f32], cols: usize, rows: RopeRows, head_dim: usize, rope: &RopeSpec) {
    let plain = rope.theta_scale();
    let apply_row = |(i, row): (usize, &mut [f32])| {
        let (cos, sin) = angles(rows.positions[i], rows.theta_scale(i, plain), rope);
        for head in row.chunks_mut(head_dim) {
            rotate(head, &cos, &sin, rope);
        }
    };
    if x.len() >= PAR_MIN_LEN {
        x.par_chunks_mut(cols).enumerate().for_each(apply_row);
    } else {
        x.chunks_mut(cols).enumerate().for_each(apply_row);
    }
}

/// cos and sin of each of the `n_rot / 2` rotation angles at `pos`, consecutive frequencies
/// `theta_scale` apart.
fn angles(pos: u32, theta_scale: f32, rope: &RopeSpec) -> (Vec<f32>, Vec<f32>) {
    let half = rope.n_rot / 2;
    let mut cos = Vec::with_capacity(half);
    let mut sin = Vec::with_capacity(half);
    // NOTE: the angle is advanced by repeated multiplication, as ggml does, rather than by
    // powf per index: the two differ in the last bits, which shows at large positions.
    let mut theta = pos as f32;
    for i in 0..half {
        let factor = rope.freq_factors.get(i).copied().unwrap_or(1.0);
        let t = rope.freq_scale * (theta / factor);
        cos.push(t.cos());
        sin.push(t.sin());
        theta *= theta_scale;
    }
    (cos, sin)
}

fn rotate(head: &mut [f32], cos: &[f32], sin: &[f32], rope: &RopeSpec) {
    let half = rope.n_rot / 2;
    for i in 0..half {
        let (a, b) = match rope.kind {
            RopeKind::Normal => (2 * i, 2 * i + 1),
            RopeKind::Neox => (i, i + half),
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * cos[i] - x1 * sin[i];
        head[b] = x0 * sin[i] + x1 * cos[i];
    }
}

/// `gate = act(gate) * up`.
pub fn glu(gate: &mut [f32], up: &[f32], act: Activation) {
    let f = match act {
        Activation::Silu => silu as fn(f32) -> f32,
        Activation::GeluTanh => gelu_f16_table,
    };
    let apply = |(g, u): (&mut [f32], &[f32])| {
        for (a, &b) in g.iter_mut().zip(u) {
            *a = f(*a) * b;
        }
    };
    if gate.len() >= PAR_MIN_LEN {
        gate.par_chunks_mut(4096)
            .zip(up.par_chunks(4096))
            .for_each(apply);
    } else {
        apply((gate, up));
    }
}

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU with the tanh approximation.
#[inline]
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
}

/// GELU as ggml's CPU code computes it: looked up in a table indexed by the f16 bits of the
/// input and holding f16 outputs; saturated outside ±10.
#[inline]
fn gelu_f16_table(x: f32) -> f32 {
    if x <= -10.0 {
        0.0
    } else if x >= 10.0 {
        x
    } else {
        gelu_table()[f16::from_f32(x).to_bits() as usize].to_f32()
    }
}

/// `gelu(x)` rounded to f16 for every f16 `x` (128 KiB, built on first use).
fn gelu_table() -> &'static [f16] {
    static TABLE: OnceLock<Vec<f16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(gelu(f16::from_bits(bits).to_f32())))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_matches_definition() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 0.0, 2.0];
        let w = vec![1.0, 0.5, 2.0, 1.0];
        let expect: Vec<f32> = x
            .chunks(4)
            .flat_map(|g| {
                let ms = g.iter().map(|v| v * v).sum::<f32>() / 4.0;
                let s = 1.0 / (ms + 1e-6).sqrt();
                g.iter()
                    .zip(&w)
                    .map(move |(v, w)| v * s * w)
                    .collect::<Vec<_>>()
            })
            .collect();
        rms_norm(&mut x, &w, 1e-6);
        for (a, b) in x.iter().zip(&expect) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    fn spec(kind: RopeKind) -> RopeSpec {
        RopeSpec {
            kind,
            n_rot: 4,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: vec![],
        }
    }

    #[test]
    fn rope_rotates_the_right_pairs() {
        // position 1, base 10000, n_rot 4: angles 1 and 0.01
        let (c0, s0, c1, s1) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        rope(&mut x, 4, RopeRows::at(&[1]), 4, &spec(RopeKind::Normal));
        let e = [
            c0 - 2.0 * s0,
            s0 + 2.0 * c0,
            3.0 * c1 - 4.0 * s1,
            3.0 * s1 + 4.0 * c1,
        ];
        for (a, b) in x.iter().zip(&e) {
            assert!((a - b).abs() < 1e-6);
        }
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        rope(&mut x, 4, RopeRows::at(&[1]), 4, &spec(RopeKind::Neox));
        let e = [
            c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
        ];
        for (a, b) in x.iter().zip(&e) {
            assert!((a - b).abs() < 1e-6);
        }
    }

    #[test]
    fn rope_at_position_zero_is_identity() {
        let mut x: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let orig = x.clone();
        rope(
            &mut x,
            8,
            RopeRows::at(&[0, 0]),
            8,
            &RopeSpec {
                n_rot: 8,
                ..spec(RopeKind::Neox)
            },
        );
        assert_eq!(x, orig);
    }

    /// A row with its own base rotates as a whole call with that base would.
    #[test]
    fn rope_rows_take_their_own_base() {
        let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.7).collect();
        let (plain, raised) = (spec(RopeKind::Neox), 40000.0);
        let other = RopeSpec {
            freq_base: raised,
            ..plain.clone()
        };
        let scales = [plain.theta_scale(), other.theta_scale()];
        let rows = RopeRows {
            positions: &[5, 9],
            theta_scales: Some(&scales),
        };
        let mut mixed = x.clone();
        rope(&mut mixed, 8, rows, 4, &plain);
        let (mut a, mut b) = (x[..8].to_vec(), x[8..].to_vec());
        rope(&mut a, 8, RopeRows::at(&[5]), 4, &plain);
        rope(&mut b, 8, RopeRows::at(&[9]), 4, &other);
        assert_eq!(mixed, [a, b].concat());
    }

    #[test]
    fn activations() {
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-5);
        assert_eq!(gelu_f16_table(-11.0), 0.0);
        assert!((gelu_f16_table(1.0) - 0.841_192).abs() < 1e-3);
        let mut g = vec![1.0, -2.0];
        glu(&mut g, &[2.0, 3.0], Activation::Silu);
        assert!((g[0] - 2.0 * silu(1.0)).abs() < 1e-6 && (g[1] - 3.0 * silu(-2.0)).abs() < 1e-6);
    }
}
