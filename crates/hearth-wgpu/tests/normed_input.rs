//! The q/k/v and gate/up 8-bit matmuls that RMSNorm and quantize their f32 input rows
//! themselves in decode: the CPU backend's bits, in one dispatch per projection group instead
//! of two.

mod common;

use common::*;
use hearth_backend::{Activation, Backend, HostWeight};
use hearth_quant::GgmlType;
use hearth_wgpu::kernels::INT8_TYPES;
use rand::{rngs::StdRng, SeedableRng};

/// The projections of a dense decoder layer, as a model loads them.
struct Layer {
    attn_norm: HostWeight,
    qkv: [HostWeight; 3],
    ffn_norm: HostWeight,
    gate: HostWeight,
    up: HostWeight,
    down: HostWeight,
}

/// The calls a dense layer makes around its attention, on `x` (`n` rows): q/k/v of the
/// attention norm, then the SwiGLU of the feed-forward norm. Returns q, k, v and the SwiGLU
/// output.
fn normed_projections_on<B: Backend>(be: &B, l: &Layer, x: &[f32], n: usize) -> Vec<Vec<f32>> {
    let load = |w: &HostWeight| be.load_weight(w.clone()).expect("load");
    let (attn_norm, ffn_norm) = (load(&l.attn_norm), load(&l.ffn_norm));
    let qkv = be.load_weight_group(l.qkv.to_vec()).expect("q/k/v");
    let gu = be
        .load_weight_group(vec![l.gate.clone(), l.up.clone()])
        .expect("gate/up");
    let x = be.upload(x, n, l.gate.cols).expect("upload");
    let mut outs: Vec<B::Tensor> = l
        .qkv
        .iter()
        .map(|w| be.alloc(n, w.rows).expect("alloc"))
        .collect();
    let [q, k, v] = &mut outs[..] else {
        unreachable!()
    };
    let w3 = [&qkv[0], &qkv[1], &qkv[2]];
    be.rms_norm_matmul3(&x, &attn_norm, 1e-6, w3, [q, k, v])
        .expect("rms_norm_matmul3");
    let mut act = be.alloc(n, l.gate.rows).expect("alloc");
    be.rms_norm_gated_matmul(
        &x,
        &ffn_norm,
        1e-6,
        &gu[0],
        &gu[1],
        Activation::Silu,
        &mut act,
    )
    .expect("rms_norm_gated_matmul");
    outs.push(act);
    outs.iter()
        .map(|t| be.to_host(t).expect("to_host"))
        .collect()
}

/// `x + down · act` (`n` rows), as the down projection adds to the residual stream.
fn down_on<B: Backend>(be: &B, down: &HostWeight, act: &[f32], x: &[f32], n: usize) -> Vec<f32> {
    let down_w = be.load_weight(down.clone()).expect("load");
    let act = be.upload(act, n, down.cols).expect("upload");
    let mut x = be.upload(x, n, down.rows).expect("upload");
    be.matmul_add(&down_w, &act, &mut x).expect("matmul_add");
    be.to_host(&x).expect("to_host")
}

fn layer(rng: &mut StdRng, ty: GgmlType, cols: usize, n_ff: usize) -> Layer {
    let mut w = |name: &str, ty: GgmlType, rows: usize, cols: usize| {
        weight(name, ty, rows, cols, &random(rng, rows * cols))
    };
    Layer {
        attn_norm: w("attn_norm", GgmlType::F32, 1, cols),
        qkv: [
            w("q", ty, 128, cols),
            w("k", ty, 64, cols),
            w("v", ty, 64, cols),
        ],
        ffn_norm: w("ffn_norm", GgmlType::F32, 1, cols),
        gate: w("gate", ty, n_ff, cols),
        up: w("up", ty, n_ff, cols),
        down: w("down", ty, cols, n_ff),
    }
}

/// Every 8-bit weight type, decode (1 and 3 tokens) and a longer input (9 tokens, where the
/// input is quantized once instead): the CPU's bits where the CPU sums in the kernels' order
/// (else within the type's bound), and for Q8_0 activations one dispatch per projection.
#[test]
fn normed_and_quantized_in_the_projections_with_the_cpu_bits() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(21);
    // 1,280 columns: 40 Q8_0 blocks, two rounds of the kernel's 32 (the second partial). The
    // projections' rows are whole workgroups of 16 jobs.
    let (cols, n_ff) = (1280, 768);
    for &ty in INT8_TYPES {
        let l = layer(&mut rng, ty, cols, n_ff);
        let q8_0_acts = hearth_quant::matmul_activation_type(ty) == Some(GgmlType::Q8_0);
        for n in [1, 3, 9] {
            let x = random(&mut rng, n * cols);
            let before = g.dispatches_recorded();
            let got = normed_projections_on(&g, &l, &x, n);
            let got_x = down_on(&g, &l.down, &got[3], &x, n);
            let dispatches = g.dispatches_recorded() - before;
            let mut want = normed_projections_on(&c, &l, &x, n);
            // The down projection from the same SwiGLU output on both: the CPU's silu calls
            // glibc's `expf`, which is not always correctly rounded (the kernels' exp is).
            want.push(down_on(&c, &l.down, &got[3], &x, n));
            for (i, (a, b)) in want.iter().zip(got.iter().chain([&got_x])).enumerate() {
                let what = format!("{ty}, {n} tokens, output {i}");
                if !same_order_on_cpu(ty) {
                    let e = nmse(a, b);
                    assert!(e <= bound(ty), "{what}: nmse {e:.2e}");
                } else if i == 3 {
                    let (_, max) = rel_errors(a, b);
                    assert!(max <= 1e-6, "{what}: {max:.2e}");
                } else {
                    let differ = a.iter().zip(b).filter(|(p, q)| p.to_bits() != q.to_bits());
                    assert_eq!(differ.count(), 0, "{what}");
                }
            }
            // Q8_0 activations in decode: one dispatch per normed projection group, and the
            // down projection's quantize and matmul. Otherwise the norms are dispatches of
            // their own (and K-quant weights quantize apart).
            if q8_0_acts && n <= 8 {
                assert_eq!(dispatches, 4, "{ty}, {n} tokens");
            } else {
                assert!(dispatches > 4, "{ty}, {n} tokens: {dispatches}");
            }
        }
    }
}
