//! The op conformance table: every op and weight type of the wgpu backend on random data
//! against the CPU backend (the reference), measured as NMSE.
//!
//! Runs on whatever adapter wgpu finds (Mesa's lavapipe on a machine without a GPU). Without
//! one each test prints why and checks nothing else, unless `HEARTH_REQUIRE_WGPU=1` (set by the
//! project's test script once it has installed lavapipe), which turns that into a failure.

mod common;
mod norm_model;
mod xorshift;

use std::sync::Arc;

use common::*;
use hearth_backend::{
    Activation, AttnBatch, AttnParams, AttnSeq, Backend, HostWeight, KvSpec, KvType, RopeKind,
    RopeRows, RopeSpec,
};
use hearth_quant::GgmlType;
use hearth_wgpu::kernels::{INT8_TYPES, WEIGHT_TYPES};
use hearth_wgpu::{FmaChoice, WgpuBackend};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[test]
fn matmul_and_embed_every_weight_type() {
    let Some(g) = gpu() else { return };
    check_matmul_and_embed(&g);
}

/// The kernels for adapters without subgroup operations, on any adapter.
#[test]
fn matmul_without_subgroups() {
    let Some(g) = gpu_with(false) else { return };
    assert!(!g.name().contains("subgroups"), "{}", g.name());
    check_matmul_and_embed(&g);
}

fn check_matmul_and_embed(g: &WgpuBackend) {
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(1);
    let mut failures = Vec::new();
    for (&ty, (rows, cols)) in WEIGHT_TYPES
        .iter()
        .flat_map(|t| [(t, (37, 512)), (t, (128, 256))])
    {
        let vals = random(&mut rng, rows * cols);
        let w = weight("w", ty, rows, cols, &vals);
        for (n, add) in [(1, false), (4, false), (5, false), (3, true)] {
            let x = random(&mut rng, n * cols);
            let want = matmul_on(&c, w.clone(), &x, n, add);
            let got = matmul_on(g, w.clone(), &x, n, add);
            let e = nmse(&want, &got);
            eprintln!("matmul {ty:>5} [{rows}x{cols}] n={n} add={add}: nmse {e:.2e}");
            if e > bound(ty) {
                failures.push(format!("matmul {ty} n={n} add={add}: {e:.2e}"));
            }
        }
        let tokens = [3u32, 0, 36, 3, 20];
        let want = embed_on(&c, w.clone(), &tokens);
        let got = embed_on(g, w.clone(), &tokens);
        let e = nmse(&want, &got);
        eprintln!("embed  {ty:>5}: nmse {e:.2e}");
        if e > 1e-12 {
            failures.push(format!("embed {ty}: {e:.2e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// More workgroups than one grid dimension holds (65,535): the 2-D grid must cover them all.
#[test]
fn matmul_beyond_one_grid_dimension() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(2);
    let (rows, cols) = (70_000, 32);
    let vals = random(&mut rng, rows * cols);
    let x = random(&mut rng, cols);
    let w = weight("wide", GgmlType::F32, rows, cols, &vals);
    let want = matmul_on(&cpu(), w.clone(), &x, 1, false);
    let got = matmul_on(&g, w, &x, 1, false);
    assert!(nmse(&want, &got) < 1e-10, "nmse {}", nmse(&want, &got));
}

/// A row norm's weights (`norm`, `cols` values) and a head norm's (its first `head_dim`).
fn norm_weights<B: Backend>(
    be: &B,
    norm: &[f32],
    cols: usize,
    head_dim: usize,
) -> (B::Weight, B::Weight) {
    let load = |name: &str, n: usize| {
        be.load_weight(weight(name, GgmlType::F32, 1, n, &norm[..n]))
            .expect("norm")
    };
    (load("norm", cols), load("qnorm", head_dim))
}

/// Runs the element-wise and per-row ops on one backend; returns each op's output by name.
fn elementwise_on<B: Backend>(
    be: &B,
    a: &[f32],
    b: &[f32],
    norm: &[f32],
) -> Vec<(String, Vec<f32>)> {
    let (rows, cols, head_dim) = (3, 128, 32);
    let up = |v: &[f32]| be.upload(v, rows, cols).expect("upload");
    let host = |t: &B::Tensor| be.to_host(t).expect("to_host");
    let mut out = Vec::new();
    let (nw, hw) = norm_weights(be, norm, cols, head_dim);
    let mut x = up(a);
    be.rms_norm(&mut x, &nw, cols, 1e-6).expect("rms_norm");
    out.push(("rms_norm".into(), host(&x)));
    let mut x = up(a);
    be.rms_norm(&mut x, &hw, head_dim, 1e-6).expect("rms_norm");
    out.push(("rms_norm per head".into(), host(&x)));
    for (kind, n_rot, factors) in [
        (RopeKind::Normal, 32, vec![]),
        (RopeKind::Neox, 32, vec![]),
        (
            RopeKind::Neox,
            16,
            vec![1.0, 2.0, 4.0, 8.0, 1.5, 1.0, 3.0, 1.0],
        ),
    ] {
        let spec = RopeSpec {
            kind,
            n_rot,
            freq_base: 10000.0,
            freq_scale: 0.5,
            freq_factors: factors,
        };
        let mut x = up(a);
        be.rope(&mut x, RopeRows::at(&[0, 7, 300]), head_dim, &spec)
            .expect("rope");
        out.push((format!("rope {kind:?} n_rot {n_rot}"), host(&x)));
    }
    // Rows with bases of their own (dynamic NTK: a base raised per sequence).
    let spec = RopeSpec {
        kind: RopeKind::Neox,
        n_rot: 32,
        freq_base: 10000.0,
        freq_scale: 1.0,
        freq_factors: vec![],
    };
    let theta_scales = [spec.theta_scale(), 0.7, 0.8];
    let rows = RopeRows {
        positions: &[5, 290, 300],
        theta_scales: Some(&theta_scales),
    };
    let mut x = up(a);
    be.rope(&mut x, rows, head_dim, &spec).expect("rope");
    out.push(("rope with per-row bases".into(), host(&x)));
    let (mut q, mut k) = (up(a), up(b));
    be.qk_norm_rope(
        &mut q,
        &mut k,
        Some((&hw, &hw)),
        rows,
        head_dim,
        &spec,
        1e-6,
    )
    .expect("qk_norm_rope");
    out.push(("qk_norm_rope with per-row bases q".into(), host(&q)));
    out.push(("qk_norm_rope with per-row bases k".into(), host(&k)));
    let x = be.rms_norm_copy(&up(a), &nw, 1e-6).expect("rms_norm_copy");
    out.push(("rms_norm_copy".into(), host(&x)));
    // QK-norm then rope, fused on the GPU (q and k in one dispatch); full and partial
    // rotation, with k of other norm weights and half the heads (grouped-query attention).
    let kw = be
        .load_weight(weight(
            "knorm",
            GgmlType::F32,
            1,
            head_dim,
            &norm[head_dim..2 * head_dim],
        ))
        .expect("knorm");
    for (kind, n_rot) in [(RopeKind::Neox, 32), (RopeKind::Normal, 16)] {
        let spec = RopeSpec {
            kind,
            n_rot,
            freq_base: 1e6,
            freq_scale: 1.0,
            freq_factors: vec![],
        };
        let mut q = up(a);
        let (n, c) = be.shape(&q);
        let mut k = be.upload(&b[..n * c / 2], n, c / 2).expect("upload");
        be.qk_norm_rope(
            &mut q,
            &mut k,
            Some((&hw, &kw)),
            RopeRows::at(&[3, 9, 1000]),
            head_dim,
            &spec,
            1e-6,
        )
        .expect("qk_norm_rope");
        out.push((format!("qk_norm_rope {kind:?} {n_rot} q"), host(&q)));
        out.push((format!("qk_norm_rope {kind:?} {n_rot} k"), host(&k)));
    }
    let mut x = up(a);
    be.add(&mut x, &up(b)).expect("add");
    out.push(("add".into(), host(&x)));
    let mut x = up(a);
    be.scale(&mut x, -1.75).expect("scale");
    out.push(("scale".into(), host(&x)));
    for act in [Activation::Silu, Activation::GeluTanh] {
        let mut x = up(&a.iter().map(|v| v * 12.0).collect::<Vec<_>>());
        be.glu(&mut x, &up(b), act).expect("glu");
        out.push((format!("glu {act:?}"), host(&x)));
    }
    let x = be.gather_rows(&up(a), &[2, 0, 2]).expect("gather_rows");
    out.push(("gather_rows".into(), host(&x)));
    let x = be.copy(&up(b)).expect("copy");
    out.push(("copy".into(), host(&x)));
    out
}

#[test]
fn elementwise_ops() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(3);
    let (a, b, norm) = (
        random(&mut rng, 384),
        random(&mut rng, 384),
        random(&mut rng, 128),
    );
    let want = elementwise_on(&cpu(), &a, &b, &norm);
    let got = elementwise_on(&g, &a, &b, &norm);
    let mut failures = Vec::new();
    for ((name, w), (_, o)) in want.iter().zip(&got) {
        let e = nmse(w, o);
        eprintln!("{name:>24}: nmse {e:.2e}");
        // GELU rounds to f16 on both sides, which may round a value either way when the
        // two tanh implementations differ in the last bit: one f16 step is ~1e-3 relative.
        if e > 1e-8 {
            failures.push(format!("{name}: {e:.2e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// QK-norm and RoPE in front of the attention: the q and k norm weights (none: RoPE alone),
/// the rotation, and whether through the one op (`qk_norm_rope_attention`) or the two apart.
struct QkNormRope<'a> {
    norms: Option<(&'a [f32], &'a [f32])>,
    rope: RopeSpec,
    one_op: bool,
}

/// Two sequences with scattered block tables, a prompt chunk then one token each, with GQA,
/// and again with a sliding window and soft-capping; with `qk`, QK-norm and RoPE first.
fn attention_on<B: Backend>(
    be: &B,
    data: &[Vec<f32>],
    (hd, bs): (usize, usize),
    window: Option<usize>,
    softcap: Option<f32>,
    qk: Option<&QkNormRope>,
    after: &mut dyn FnMut(&B::Tensor),
) -> Vec<f32> {
    let (n_heads, n_kv) = (4, 2);
    let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
    let mut cache = be
        .new_kv_cache(&KvSpec {
            kv_dims: vec![kv_dim],
            n_blocks: 8,
            block_size: bs,
            dtype: KvType::F16,
        })
        .expect("cache");
    let tables: [Vec<u32>; 2] = [vec![5, 1, 6], vec![2, 7, 0]];
    let params = AttnParams {
        n_heads,
        n_kv_heads: n_kv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        window,
        softcap,
    };
    let mut outs = Vec::new();
    // Step 1: 6 and 5 prompt tokens; steps 2 and 3: one more token each (a decode step
    // writes its own keys and values on some backends; step 3 reads them from the cache).
    for (step, lens, firsts) in [
        (0, [6, 5], [0, 0]),
        (1, [1, 1], [6, 5]),
        (2, [1, 1], [7, 6]),
    ] {
        let n: usize = lens.iter().sum();
        let seqs = [
            AttnSeq {
                token_start: 0,
                n_tokens: lens[0],
                first_pos: firsts[0],
                block_table: &tables[0],
            },
            AttnSeq {
                token_start: lens[0],
                n_tokens: lens[1],
                first_pos: firsts[1],
                block_table: &tables[1],
            },
        ];
        let batch = AttnBatch {
            seqs: &seqs,
            block_size: bs,
        };
        let mut q = be
            .upload(&data[3 * step][..n * q_dim], n, q_dim)
            .expect("q");
        let mut k = be
            .upload(&data[3 * step + 1][..n * kv_dim], n, kv_dim)
            .expect("k");
        let v = be
            .upload(&data[3 * step + 2][..n * kv_dim], n, kv_dim)
            .expect("v");
        let mut out = be.alloc(n, q_dim).expect("out");
        if let Some(qk) = qk {
            let positions: Vec<u32> = (0..2)
                .flat_map(|s| (firsts[s]..firsts[s] + lens[s]).map(|p| p as u32))
                .collect();
            let rows = RopeRows::at(&positions);
            let norm = |name, v: &[f32]| {
                be.load_weight(weight(name, GgmlType::F32, 1, hd, v))
                    .expect("norm")
            };
            let loaded = qk
                .norms
                .map(|(q, k)| (norm("q_norm", q), norm("k_norm", k)));
            let norms = loaded.as_ref().map(|(q, k)| (q, k));
            if qk.one_op {
                be.qk_norm_rope_attention(
                    &mut q, &mut k, &v, norms, rows, &qk.rope, 1e-6, &mut cache, 0, &batch,
                    &params, &mut out,
                )
                .expect("qk_norm_rope_attention");
            } else {
                be.qk_norm_rope(&mut q, &mut k, norms, rows, hd, &qk.rope, 1e-6)
                    .expect("qk_norm_rope");
                be.attention(&q, &k, &v, &mut cache, 0, &batch, &params, &mut out)
                    .expect("attention");
            }
        } else {
            be.attention(&q, &k, &v, &mut cache, 0, &batch, &params, &mut out)
                .expect("attention");
        }
        after(&out);
        outs.extend(be.to_host(&out).expect("to_host"));
    }
    outs
}

#[test]
fn paged_attention() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(4);
    let data: Vec<Vec<f32>> = (0..9)
        .map(|_| random(&mut rng, 11 * 256).iter().map(|v| v * 3.0).collect())
        .collect();
    for (shape, window, softcap) in [
        ((64, 4), None, None),
        ((64, 4), Some(3), Some(2.0)),
        ((32, 32), None, None),
    ] {
        let want = attention_on(&cpu(), &data, shape, window, softcap, None, &mut |_| {});
        let got = attention_on(&g, &data, shape, window, softcap, None, &mut |_| {});
        let e = nmse(&want, &got);
        eprintln!("attention window {window:?} softcap {softcap:?}: nmse {e:.2e}");
        // Both round queries, keys, values and softmax weights to f16; the sums differ in order.
        assert!(
            e < 1e-6,
            "attention window {window:?} softcap {softcap:?}: nmse {e:.2e}"
        );
    }
}

/// Once a Q8_0 matmul has run, the attention kernel also writes its output as Q8_0 blocks for
/// the o projection: that projection then has the bits of one that quantizes the output apart,
/// for a prompt and two decode steps, with 1, 2 and 8 blocks per head.
#[test]
fn fused_attention_quantize_equals_separate_ops() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(11);
    let data: Vec<Vec<f32>> = (0..9)
        .map(|_| {
            random(&mut rng, 11 * 1024)
                .iter()
                .map(|v| v * 3.0)
                .collect()
        })
        .collect();
    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for hd in [32, 64, 256] {
        let (rows, cols) = (48, 4 * hd);
        let w = g
            .load_weight(weight(
                "o",
                GgmlType::Q8_0,
                rows,
                cols,
                &random(&mut rng, rows * cols),
            ))
            .expect("weight");
        // The output bits and the dispatches the matmul took.
        let matmul = |x: &hearth_wgpu::WgpuTensor| {
            let mut y = g.alloc(g.shape(x).0, rows).expect("alloc");
            let before = g.dispatches_recorded();
            g.matmul(&w, x, &mut y).expect("matmul");
            let n = g.dispatches_recorded() - before;
            (bits(g.to_host(&y).expect("to_host")), n)
        };
        let x = g.upload(&random(&mut rng, cols), 1, cols).expect("x");
        matmul(&x); // a Q8_0 matmul: from here on the attention output is quantized too
        let mut steps = 0;
        attention_on(&g, &data, (hd, 4), None, None, None, &mut |out| {
            let apart = g.copy(out).expect("copy");
            let (fused, n_fused) = matmul(out);
            let (separate, n_separate) = matmul(&apart);
            assert_eq!(fused, separate, "head_dim {hd}, step {steps}");
            // The fused output saved the matmul its quantize dispatch.
            assert_eq!((n_fused, n_separate), (1, 2), "head_dim {hd}, step {steps}");
            steps += 1;
        });
        assert_eq!(steps, 3);
    }
}

/// In a decode step the attention kernel norms and rotates q and k itself: the bits of the two
/// ops apart, a dispatch fewer (two for RoPE alone), and the CPU's values; for the prompt step
/// before them (which the two ops do apart) and two decode steps, with full and partial
/// rotations, with and without QK-norm.
#[test]
fn qk_norm_rope_in_the_attention_kernel() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(12);
    let data: Vec<Vec<f32>> = (0..9)
        .map(|_| random(&mut rng, 11 * 512).iter().map(|v| v * 3.0).collect())
        .collect();
    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    for (hd, kind, n_rot, with_norms) in [
        (64, RopeKind::Neox, 64, true),
        (64, RopeKind::Normal, 32, true),
        (128, RopeKind::Neox, 128, true),
        (64, RopeKind::Neox, 64, false),
        (64, RopeKind::Normal, 32, false),
    ] {
        let (qn, kn) = (random(&mut rng, hd), random(&mut rng, hd));
        let case = |one_op| QkNormRope {
            norms: with_norms.then_some((qn.as_slice(), kn.as_slice())),
            rope: RopeSpec {
                kind,
                n_rot,
                freq_base: 1e6,
                freq_scale: 1.0,
                freq_factors: vec![],
            },
            one_op,
        };
        let run = |one_op| {
            let before = g.dispatches_recorded();
            let out = attention_on(
                &g,
                &data,
                (hd, 4),
                None,
                None,
                Some(&case(one_op)),
                &mut |_| {},
            );
            (out, g.dispatches_recorded() - before)
        };
        let ((fused, n_fused), (apart, n_apart)) = (run(true), run(false));
        let want = attention_on(
            &cpu(),
            &data,
            (hd, 4),
            None,
            None,
            Some(&case(true)),
            &mut |_| {},
        );
        let e = nmse(&want, &fused);
        eprintln!(
            "qk_norm_rope_attention head_dim {hd} {kind:?} {n_rot} norms {with_norms}: nmse {e:.2e}"
        );
        assert!(e < 1e-6, "head_dim {hd} {kind:?} {n_rot}: nmse {e:.2e}");
        assert_eq!(bits(fused), bits(apart), "head_dim {hd} {kind:?} {n_rot}");
        // Two decode steps, each saving the QK-norm dispatch, or the two rope dispatches.
        let saved = if with_norms { 2 } else { 4 };
        assert_eq!(n_fused + saved, n_apart, "head_dim {hd} {kind:?} {n_rot}");
    }
}

/// A prompt of `len` tokens, then one decode step of two sequences (the second sharing the
/// first's cache blocks as a copy of its table): the prompt's output, then the decode step's.
/// Past 256 positions the prompt's attention scores positions twice; over a long context the
/// decode step takes the split (flash-decode) kernels.
fn long_attention_on<B: Backend>(
    be: &B,
    rng_seed: u64,
    len: usize,
    window: Option<usize>,
    hd: usize,
) -> Vec<f32> {
    let (n_heads, n_kv, bs) = (4, 2, 16);
    let (q_dim, kv_dim) = (n_heads * hd, n_kv * hd);
    let n_blocks = (len + 1).div_ceil(bs) + 1;
    let mut cache = be
        .new_kv_cache(&KvSpec {
            kv_dims: vec![kv_dim],
            n_blocks,
            block_size: bs,
            dtype: KvType::F16,
        })
        .expect("cache");
    // Blocks in reverse order: a scattered table.
    let table: Vec<u32> = (0..n_blocks as u32).rev().collect();
    let params = AttnParams {
        n_heads,
        n_kv_heads: n_kv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        window,
        softcap: None,
    };
    let mut rng = StdRng::seed_from_u64(rng_seed);
    let mut step = |n: usize, seqs: &[AttnSeq]| {
        let batch = AttnBatch {
            seqs,
            block_size: bs,
        };
        let q = be
            .upload(&random(&mut rng, n * q_dim), n, q_dim)
            .expect("q");
        let k = be
            .upload(&random(&mut rng, n * kv_dim), n, kv_dim)
            .expect("k");
        let v = be
            .upload(&random(&mut rng, n * kv_dim), n, kv_dim)
            .expect("v");
        let mut out = be.alloc(n, q_dim).expect("out");
        be.attention(&q, &k, &v, &mut cache, 0, &batch, &params, &mut out)
            .expect("attention");
        be.to_host(&out).expect("to_host")
    };
    let prompt = AttnSeq {
        token_start: 0,
        n_tokens: len,
        first_pos: 0,
        block_table: &table,
    };
    let mut outs = step(len, &[prompt]);
    // Token `len` of the sequence, and a second query at position len - 1 over the same
    // blocks (the key it writes there is overwritten with a different one).
    let decode = [
        AttnSeq {
            token_start: 0,
            n_tokens: 1,
            first_pos: len,
            block_table: &table,
        },
        AttnSeq {
            token_start: 1,
            n_tokens: 1,
            first_pos: len - 1,
            block_table: &table,
        },
    ];
    outs.extend(step(2, &decode));
    outs
}

#[test]
fn split_attention_over_a_long_context() {
    let Some(g) = gpu() else { return };
    for (len, window, hd) in [
        (300, None, 64),
        (300, Some(150), 64),
        (150, None, 64),
        (300, None, 128),
    ] {
        let want = long_attention_on(&cpu(), 5, len, window, hd);
        let got = long_attention_on(&g, 5, len, window, hd);
        let e = nmse(&want, &got);
        eprintln!("long attention {len} window {window:?} head_dim {hd}: nmse {e:.2e}");
        assert!(
            e < 1e-6,
            "long attention {len} window {window:?} head_dim {hd}: nmse {e:.2e}"
        );
    }
}

/// Where the adapter has shader-f16, the attention kernels read and write the KV cache as
/// `vec2<f16>`: the same bits as through u32 words, for prompts, decode steps that write their
/// own keys and values (with QK-norm and RoPE in the kernel), and the split kernels over a long
/// context; with values small enough to be subnormal in f16.
#[test]
fn f16_cache_words_give_the_bits_of_u32_words() {
    let Some(g) = gpu() else { return };
    let open = |f16| WgpuBackend::open_with_options(true, f16, FmaChoice::Probe).expect("device");
    let (typed, words) = (open(true), open(false));
    if !typed.name().contains("f16") {
        eprintln!(
            "SKIPPED (no shader-f16 on {}): the u32 path is the only one",
            g.name()
        );
        return;
    }
    assert!(!words.name().contains("f16"), "{}", words.name());
    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    let mut rng = StdRng::seed_from_u64(13);
    let hd = 64;
    let (qn, kn) = (random(&mut rng, hd), random(&mut rng, hd));
    let qk = QkNormRope {
        norms: Some((qn.as_slice(), kn.as_slice())),
        rope: RopeSpec {
            kind: RopeKind::Neox,
            n_rot: hd,
            freq_base: 1e6,
            freq_scale: 1.0,
            freq_factors: vec![],
        },
        one_op: true,
    };
    // 6e-5 and below are subnormal in f16.
    for scale in [3.0, 2e-5] {
        let data: Vec<Vec<f32>> = (0..9)
            .map(|_| {
                random(&mut rng, 11 * 256)
                    .iter()
                    .map(|v| v * scale)
                    .collect()
            })
            .collect();
        for qk in [None, Some(&qk)] {
            let run = |be: &WgpuBackend| {
                bits(attention_on(
                    be,
                    &data,
                    (hd, 4),
                    Some(5),
                    None,
                    qk,
                    &mut |_| {},
                ))
            };
            assert_eq!(
                run(&typed),
                run(&words),
                "scale {scale}, qk {}",
                qk.is_some()
            );
        }
    }
    for (len, window) in [(300, None), (300, Some(150))] {
        let run = |be: &WgpuBackend| bits(long_attention_on(be, 5, len, window, hd));
        assert_eq!(
            run(&typed),
            run(&words),
            "long attention {len} window {window:?}"
        );
    }
}

#[test]
fn bad_inputs_are_errors() {
    let Some(g) = gpu() else { return };
    let w = weight("tok_embd", GgmlType::Q8_0, 4, 64, &vec![0.1; 256]);
    let w = g.load_weight(w).expect("load");
    let mut out = g.alloc(1, 64).expect("alloc");
    let err = g.embed(&w, &[9], &mut out).unwrap_err().to_string();
    assert!(err.contains("token 9") && err.contains("tok_embd"), "{err}");
    let bad = HostWeight {
        name: "blk.0.ffn_up".into(),
        ty: GgmlType::Q8_0,
        rows: 2,
        cols: 64,
        data: Arc::new(vec![0u8; 10]),
        mlx: None,
    };
    let err = g.load_weight(bad).err().expect("short weight").to_string();
    assert!(err.contains("blk.0.ffn_up"), "{err}");
    let iq = HostWeight {
        name: "blk.0.attn_q".into(),
        ty: GgmlType::IQ2_XXS,
        rows: 2,
        cols: 256,
        data: Arc::new(vec![0u8; 2 * 66]),
        mlx: None,
    };
    let err = g
        .load_weight(iq)
        .err()
        .expect("unsupported type")
        .to_string();
    assert!(
        err.contains("blk.0.attn_q") && err.contains("not supported"),
        "{err}"
    );
}

/// Rows for the quantizers: random values at several scales, exact ties (amax 127 makes
/// `127 / amax` 1, so half-integers are ties), the `127 / 7` case where `x * (127 / amax)` and
/// `x / (amax / 127)` round apart, zeros, and the largest magnitude twice with both signs.
fn quant_rows(rng: &mut StdRng, n: usize) -> Vec<Vec<f32>> {
    let mut rows = Vec::new();
    for i in 0..48 {
        let scale = [1e-3f32, 0.07, 1.0, 3.3, 250.0, 1e4][i % 6];
        let mut x: Vec<f32> = random(rng, n).iter().map(|v| v * scale).collect();
        match i % 8 {
            0 => {
                x.iter_mut()
                    .for_each(|v| *v = rng.gen_range(-254i32..=254) as f32 * 0.5);
                x[rng.gen_range(0..n)] = if i % 16 == 0 { 127.0 } else { -127.0 };
            }
            1 => {
                x = random(rng, n);
                x[0] = 127.0 / 7.0;
                x[1] = 11.5;
            }
            2 => x[..n / 2].iter_mut().for_each(|v| *v = 0.0),
            3 => {
                let (a, b) = (rng.gen_range(0..n), rng.gen_range(0..n));
                x[a] = 5.0 * scale;
                x[b] = -5.0 * scale;
            }
            4 => x.iter_mut().for_each(|v| *v = 0.0),
            _ => {}
        }
        rows.push(x);
    }
    rows
}

/// The device's Q8_0 and Q8_K blocks equal the CPU's byte for byte: quants, scales (f16 for
/// Q8_0, f32 for Q8_K) and Q8_K group sums.
#[test]
fn activation_quantization_equals_cpu() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(6);
    for (act, cols) in [(GgmlType::Q8_0, 96), (GgmlType::Q8_K, 512)] {
        let rows = quant_rows(&mut rng, cols);
        let x: Vec<f32> = rows.concat();
        let bytes = x.len() / act.block_size() * act.type_size();
        let mut want = vec![0u8; bytes];
        hearth_quant::quantize_activations(act, &x, &mut want).expect("CPU quantize");
        let got = g
            .quantize_activations(act, &x, cols)
            .expect("wgpu quantize");
        let block = act.type_size();
        let bad: Vec<usize> = (0..bytes / block)
            .filter(|&b| want[b * block..(b + 1) * block] != got[b * block..(b + 1) * block])
            .collect();
        eprintln!("{act}: {} blocks, {} differ", bytes / block, bad.len());
        assert!(
            bad.is_empty(),
            "{act}: blocks {bad:?} differ from the CPU's"
        );
    }
}

/// The 8-bit matmuls on rows of many blocks (odd and even block counts) and on 1..9 tokens,
/// against the CPU. Both sides sum every lane of every block exactly in integers and then take
/// the same f32 steps in the same order (the AVX2 kernels' lanes, with fused multiply-adds), so
/// next to the AVX2 kernels the outputs must be bit-equal (measured: all of them, on lavapipe).
/// The AVX-512 kernels keep that order for Q8_0 and Q4_0 (bit-equal on an H100 host through
/// Vulkan), and by reading the kernels for Q5_0 (Q4_0's block order) and Q5_K (no 512-bit
/// kernel: the AVX2 one runs there), not yet measured on such a host; not for Q4_K and Q6_K
/// (there 5-40% of the values differ, worst relative 3.4e-7), and the scalar kernels add whole blocks in another order; elsewhere the bound is f32
/// rounding: 1e-5 of the largest output for the worst value, NMSE 1e-12.
#[test]
fn int8_matmuls_match_cpu() {
    let Some(g) = gpu() else { return };
    check_int8_matmuls(&g, true);
}

/// The 8-bit matmuls with the device's own `fma` whatever the probe says. Where the probe
/// finds it fused they must give the emulation's bits (on x86: the CPU's); where it is not
/// (lavapipe) each multiply-add rounds twice, and the bound is f32 rounding as above.
#[test]
fn int8_matmuls_with_the_device_fma() {
    let Some(probed) = gpu() else { return };
    let fused = probed.adapter().native_fma;
    drop(probed);
    let g = WgpuBackend::open_with_fma(true, FmaChoice::Native).expect("device");
    eprintln!("device fma fused: {fused}");
    check_int8_matmuls(&g, fused);
}

/// `fused`: whether the device's multiply-adds round once (then the CPU's bits are due where
/// the CPU sums in the same order).
fn check_int8_matmuls(g: &WgpuBackend, fused: bool) {
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(7);
    let mut failures = Vec::new();
    for &ty in INT8_TYPES {
        // An odd number of blocks: 33 of 32 values, 5 of 256.
        let odd = ty.block_size() * if ty.block_size() == 32 { 33 } else { 5 };
        for (rows, cols) in [(40, 2048), (9, odd)] {
            let vals = random(&mut rng, rows * cols);
            let w = weight("w", ty, rows, cols, &vals);
            for n in [1, 4, 9] {
                let x: Vec<f32> = random(&mut rng, n * cols).iter().map(|v| v * 4.0).collect();
                let want = matmul_on(&c, w.clone(), &x, n, false);
                let got = matmul_on(g, w.clone(), &x, n, false);
                let (mean, worst) = rel_errors(&want, &got);
                let e = nmse(&want, &got);
                let same = want
                    .iter()
                    .zip(&got)
                    .filter(|(a, b)| a.to_bits() == b.to_bits())
                    .count();
                eprintln!(
                    "int8 matmul {ty:>5} [{rows}x{cols}] n={n}: {}/{} bit-equal, nmse {e:.2e}, \
                     mean rel {mean:.2e}, worst rel {worst:.2e}",
                    same,
                    want.len()
                );
                let bit_equal = fused && same_order_on_cpu(ty);
                if e > 1e-12 || worst > 1e-5 || (bit_equal && same != want.len()) {
                    failures.push(format!("{ty} n={n}: nmse {e:.2e} worst {worst:.2e}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// matmul3 and gated_matmul quantize their shared input once per activation type and give
/// what separate matmuls give; weights of three forms (Q8_0 and Q8_K blocks, Q8_1-rounded
/// f32) read the same input.
#[test]
fn shared_input_matmuls_match_cpu() {
    let Some(g) = gpu() else { return };
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(8);
    let (cols, n) = (512, 5);
    let x = random(&mut rng, n * cols);
    let ws: Vec<HostWeight> = [
        (GgmlType::Q4_0, 64),
        (GgmlType::Q4_K, 32),
        (GgmlType::Q4_1, 32),
    ]
    .iter()
    .map(|&(ty, rows)| weight("w", ty, rows, cols, &random(&mut rng, rows * cols)))
    .collect();
    let gate = weight(
        "gate",
        GgmlType::Q8_0,
        48,
        cols,
        &random(&mut rng, 48 * cols),
    );
    let up = weight("up", GgmlType::Q6_K, 48, cols, &random(&mut rng, 48 * cols));
    let want = shared_on(&c, &ws, &gate, &up, &x, n);
    let got = shared_on(&g, &ws, &gate, &up, &x, n);
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        let e = nmse(a, b);
        eprintln!("shared input output {i}: nmse {e:.2e}");
        assert!(e < 2e-6, "output {i}: nmse {e:.2e}");
    }
}

/// gated_matmul with SiLU over 8-bit weights runs the SwiGLU in the up projection's epilogue:
/// the same bits as the two matmuls and the glu op apart.
#[test]
fn fused_swiglu_equals_separate_ops() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(9);
    let (rows, cols, n) = (96, 512, 3);
    let x = g.upload(&random(&mut rng, n * cols), n, cols).expect("x");
    for (gt, ut) in [
        (GgmlType::Q8_0, GgmlType::Q8_0),
        (GgmlType::Q4_K, GgmlType::Q6_K),
    ] {
        let load = |ty, rng: &mut StdRng| {
            g.load_weight(weight("w", ty, rows, cols, &random(rng, rows * cols)))
                .expect("weight")
        };
        let (gate, up) = (load(gt, &mut rng), load(ut, &mut rng));
        let mut fused = g.alloc(n, rows).expect("alloc");
        g.gated_matmul(&gate, &up, &x, Activation::Silu, &mut fused)
            .expect("gated");
        let mut a = g.alloc(n, rows).expect("alloc");
        let mut b = g.alloc(n, rows).expect("alloc");
        g.matmul(&gate, &x, &mut a).expect("gate");
        g.matmul(&up, &x, &mut b).expect("up");
        g.glu(&mut a, &b, Activation::Silu).expect("glu");
        let (f, s) = (
            g.to_host(&fused).expect("host"),
            g.to_host(&a).expect("host"),
        );
        let same = f.iter().zip(&s).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(
            same,
            "{gt}/{ut}: the fused SwiGLU differs from the separate ops"
        );
    }
}

/// Weights loaded as a group (q, k, v; gate, up) sit side by side in one buffer, and matmul3
/// and gated_matmul then take one dispatch each instead of three and two: the same bits as
/// the same weights loaded apart, for each 8-bit weight type, one token and several, and row
/// counts that leave a workgroup partly empty.
#[test]
fn grouped_weights_take_one_dispatch_with_the_same_bits() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(10);
    let cols = 512;
    for &ty in INT8_TYPES {
        for n in [1, 3] {
            let x = g.upload(&random(&mut rng, n * cols), n, cols).expect("x");
            let mut host =
                |rows: usize| weight("w", ty, rows, cols, &random(&mut rng, rows * cols));
            let (q, k, v) = (host(68), host(34), host(34));
            let (gate, up) = (host(90), host(90));
            let apart: Vec<_> = [&q, &k, &v, &gate, &up]
                .iter()
                .map(|w| g.load_weight((*w).clone()).expect("weight"))
                .collect();
            let qkv = g
                .load_weight_group(vec![q.clone(), k.clone(), v.clone()])
                .expect("qkv group");
            let gu = g
                .load_weight_group(vec![gate.clone(), up.clone()])
                .expect("gate/up group");
            let run = |w3: [&hearth_wgpu::WgpuWeight; 3], gate, up| {
                let before = g.dispatches_recorded();
                let mut outs: Vec<_> = [68, 34, 34, 90]
                    .iter()
                    .map(|&r| g.alloc(n, r).expect("alloc"))
                    .collect();
                let [o0, o1, o2, h] = &mut outs[..] else {
                    unreachable!()
                };
                g.matmul3(w3, &x, [o0, o1, o2]).expect("matmul3");
                g.gated_matmul(gate, up, &x, Activation::Silu, h)
                    .expect("gated_matmul");
                let dispatches = g.dispatches_recorded() - before;
                let host: Vec<Vec<u32>> = outs
                    .iter()
                    .map(|t| bits_of(&g.to_host(t).expect("to_host")))
                    .collect();
                (host, dispatches)
            };
            let (want, d_apart) = run([&apart[0], &apart[1], &apart[2]], &apart[3], &apart[4]);
            let (got, d_grouped) = run([&qkv[0], &qkv[1], &qkv[2]], &gu[0], &gu[1]);
            for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                let diff = a.iter().zip(b).filter(|(p, q)| p != q).count();
                assert_eq!(
                    diff, 0,
                    "{ty}, {n} tokens, output {i}: {diff} values differ"
                );
            }
            // Apart: q, k, v, gate and up; grouped: q/k/v and gate/up. Both quantize x once
            // (or not at all where the input already is quantized).
            assert_eq!(
                d_apart - d_grouped,
                3,
                "{ty}, {n} tokens: {d_apart} vs {d_grouped}"
            );
        }
    }
}

/// Once a Q8_0 matmul has run, the norm in front of projections also quantizes its output to
/// Q8_0 blocks in the same dispatch, and the 8-bit matmuls take them from there: the same bits
/// as a norm and a matmul apart, also after the normed tensor is written again.
#[test]
fn fused_norm_quantize_equals_separate_ops() {
    let Some(g) = gpu() else { return };
    let mut rng = StdRng::seed_from_u64(10);
    // 1024 columns: 32 blocks, 4 rounds of the kernel's 8; 864: 27, the last round partial.
    for cols in [1024, 864] {
        fused_norm_quantize_case(&g, &mut rng, cols);
    }
}

fn fused_norm_quantize_case(g: &hearth_wgpu::WgpuBackend, rng: &mut StdRng, cols: usize) {
    let (rows, n) = (64, 3);
    let w = g
        .load_weight(weight(
            "w",
            GgmlType::Q8_0,
            rows,
            cols,
            &random(rng, rows * cols),
        ))
        .expect("weight");
    let nw = g
        .load_weight(weight("norm", GgmlType::F32, 1, cols, &random(rng, cols)))
        .expect("norm");
    let x = g.upload(&random(rng, n * cols), n, cols).expect("x");
    let host = |t: &hearth_wgpu::WgpuTensor| g.to_host(t).expect("to_host");
    let matmul = |h: &hearth_wgpu::WgpuTensor| {
        let mut out = g.alloc(n, rows).expect("alloc");
        g.matmul(&w, h, &mut out).expect("matmul");
        host(&out)
    };
    let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    matmul(&x); // a Q8_0 matmul: from here on norms quantize their output
    let mut fused = g.rms_norm_copy(&x, &nw, 1e-6).expect("norm");
    let mut apart = g.copy(&x).expect("copy");
    g.rms_norm(&mut apart, &nw, cols, 1e-6).expect("norm");
    assert_eq!(
        bits(host(&fused)),
        bits(host(&apart)),
        "normed values, {cols}"
    );
    assert_eq!(
        bits(matmul(&fused)),
        bits(matmul(&apart)),
        "matmul of the normed values, {cols}"
    );
    // Written again: the blocks quantized by the norm no longer apply.
    g.scale(&mut fused, -3.5).expect("scale");
    g.scale(&mut apart, -3.5).expect("scale");
    assert_eq!(
        bits(matmul(&fused)),
        bits(matmul(&apart)),
        "matmul after a write, {cols}"
    );
}

/// matmul3 over `ws` and gated_matmul (SiLU) of `gate` and `up`, all on `x`.
fn shared_on<B: Backend>(
    be: &B,
    ws: &[HostWeight],
    gate: &HostWeight,
    up: &HostWeight,
    x: &[f32],
    n: usize,
) -> Vec<Vec<f32>> {
    let cols = gate.cols;
    let load = |w: &HostWeight| be.load_weight(w.clone()).expect("load weight");
    let x = be.upload(x, n, cols).expect("upload");
    let w3: Vec<B::Weight> = ws.iter().map(load).collect();
    let mut outs: Vec<B::Tensor> = ws
        .iter()
        .map(|w| be.alloc(n, w.rows).expect("alloc"))
        .collect();
    let [o0, o1, o2] = &mut outs[..] else {
        panic!("three weights")
    };
    be.matmul3([&w3[0], &w3[1], &w3[2]], &x, [o0, o1, o2])
        .expect("matmul3");
    let mut h = be.alloc(n, gate.rows).expect("alloc");
    be.gated_matmul(&load(gate), &load(up), &x, Activation::Silu, &mut h)
        .expect("gated_matmul");
    outs.push(h);
    outs.iter()
        .map(|t| be.to_host(t).expect("to_host"))
        .collect()
}

/// `v`'s bits, to compare floats exactly.
fn bits_of(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

/// How many of `x`'s groups of `group` values a plain f32 sum of squares (the kernel's order)
/// gives another mean than the CPU's f64 sum.
fn f32_mean_misses(x: &[f32], group: usize) -> usize {
    x.chunks(group)
        .filter(|g| norm_model::f32_tree_mean(g) != norm_model::cpu_mean(g))
        .count()
}

/// Positions of the values that differ, and how many.
fn bit_differences(want: &[f32], got: &[f32]) -> (usize, Vec<usize>) {
    let bad: Vec<usize> = (0..want.len())
        .filter(|&i| want[i].to_bits() != got.get(i).map_or(!0, |g| g.to_bits()))
        .collect();
    (bad.len(), bad.into_iter().take(8).collect())
}

/// The norm ops on one backend over `x` ([rows, cols]): each op's name and output, and the
/// Q8_0 matmul of the copying norm's output (on the device that norm, once a Q8_0 matmul has
/// run, also quantizes its output, and the matmul reads those blocks).
fn norms_on<B: Backend>(
    be: &B,
    x: &[f32],
    (rows, cols, head_dim): (usize, usize, usize),
    norm: &[f32],
    w: &HostWeight,
) -> (Vec<(&'static str, Vec<f32>)>, Vec<f32>) {
    let up = || be.upload(x, rows, cols).expect("upload");
    let host = |t: &B::Tensor| be.to_host(t).expect("to_host");
    let (nw, hw) = norm_weights(be, norm, cols, head_dim);
    let (w_rows, w) = (w.rows, be.load_weight(w.clone()).expect("weight"));
    let mut out = Vec::new();
    let mut t = up();
    be.rms_norm(&mut t, &nw, cols, 1e-6).expect("rms_norm");
    out.push(("rms_norm", host(&t)));
    let mut t = up();
    be.rms_norm(&mut t, &hw, head_dim, 1e-6).expect("rms_norm");
    out.push(("rms_norm per head", host(&t)));
    let spec = RopeSpec {
        kind: RopeKind::Neox,
        n_rot: head_dim,
        freq_base: 1e6,
        freq_scale: 1.0,
        freq_factors: vec![],
    };
    let positions: Vec<u32> = (0..rows as u32).map(|i| 37 * i + 5).collect();
    let (mut q, mut k) = (up(), up());
    let rope_rows = RopeRows::at(&positions);
    be.qk_norm_rope(
        &mut q,
        &mut k,
        Some((&hw, &hw)),
        rope_rows,
        head_dim,
        &spec,
        1e-6,
    )
    .expect("qk_norm_rope");
    out.push(("qk_norm_rope", host(&q)));
    let mut mm = be.alloc(rows, w_rows).expect("alloc");
    be.matmul(&w, &up(), &mut mm).expect("matmul"); // from here on the device's norms quantize
    let t = be.rms_norm_copy(&up(), &nw, 1e-6).expect("rms_norm_copy");
    out.push(("rms_norm_copy + Q8_0", host(&t)));
    be.matmul(&w, &t, &mut mm).expect("matmul");
    (out, host(&mm))
}

/// RMSNorm on the device equals the CPU's bit for bit, plain, fused with the Q8_0 quantizer
/// and fused with rope (QK-norm), on rows of 4096 with heads of 128 and on more rows of 1024
/// with heads of 64, all rows ones that a plain f32 sum of squares gets wrong (each row's
/// mean, and over a quarter of the heads': checked here).
#[test]
fn norms_equal_cpu_bit_for_bit() {
    let Some(g) = gpu() else { return };
    let mut failures = Vec::new();
    for (shape, seed) in [((8, 4096, 128), 11), ((128, 1024, 64), 12)] {
        failures.extend(check_norms(&g, shape, seed));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// [`norms_equal_cpu_bit_for_bit`] on `rows` rows of `cols` with heads of `head_dim`: what
/// differs from the CPU.
fn check_norms(
    g: &WgpuBackend,
    (rows, cols, head_dim): (usize, usize, usize),
    seed: u64,
) -> Vec<String> {
    // Rows whose mean a plain f32 sum of squares gets wrong, so that the test can fail.
    let mut rng = norm_model::Rng(0xace0_f5ca_1e5e_ed00 + seed);
    let x: Vec<f32> = (0..)
        .map(|i| norm_model::stress_row(&mut rng, cols, i))
        .filter(|r| f32_mean_misses(r, cols) == 1)
        .take(rows)
        .flatten()
        .collect();
    let heads = x.len() / head_dim;
    let head_misses = f32_mean_misses(&x, head_dim);
    eprintln!(
        "[{rows}, {cols}]: plain f32 sums give other means in every row, \
         {head_misses}/{heads} heads of {head_dim}"
    );
    assert!(head_misses >= heads / 4, "heads too easy");
    let mut srng = StdRng::seed_from_u64(seed);
    let norm = random(&mut srng, cols);
    let w = weight("w", GgmlType::Q8_0, 32, cols, &random(&mut srng, 32 * cols));
    let shape = (rows, cols, head_dim);
    let (want, _) = norms_on(&cpu(), &x, shape, &norm, &w);
    let (got, fused_mm) = norms_on(g, &x, shape, &norm, &w);
    let mut failures = Vec::new();
    for ((name, w), (_, o)) in want.iter().zip(&got) {
        let (n, first) = bit_differences(w, o);
        eprintln!("{name:>22}: {n}/{} values differ from the CPU's", w.len());
        if n > 0 {
            failures.push(format!(
                "[{rows}, {cols}] {name}: {n} differ, first at {first:?}"
            ));
        }
    }
    // The fused norm's Q8_0 blocks are those the device makes of the CPU's normed values
    // (activation_quantization_equals_cpu: the CPU's blocks).
    let apart = matmul_on(g, w, &want[0].1, rows, false);
    if bits_of(&fused_mm) != bits_of(&apart) {
        failures.push(format!(
            "[{rows}, {cols}]: matmul of the fused norm's blocks"
        ));
    }
    failures
}
