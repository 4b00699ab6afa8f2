//! Decode steps quantize the inputs of the output and down projections without a separate
//! quantize launch: inside the kernels that produce them (the attention kernel, and the gated
//! GEMV through per-group counters), or in each block of the down projection for itself. The
//! projections must see the same bits as after a quantize launch on a copy of the rows, also
//! when the step is recorded as a CUDA graph and replayed (the counters must be left at zero).
//! Without a usable GPU each test prints "skipped: <reason>".

mod common;

use common::{assert_same_bits, gpu, random_host_weight};
use hearth_backend::{Activation, AttnBatch, AttnParams, AttnSeq, Backend, KvSpec, KvType};
use hearth_cuda::CudaBackend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

const TYPES: [GgmlType; 4] = [
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
];

type Weight = <CudaBackend as Backend>::Weight;

fn weight(gpu: &CudaBackend, ty: GgmlType, rows: usize, cols: usize, rng: &mut impl Rng) -> Weight {
    gpu.load_weight(random_host_weight(ty, rows, cols, rng))
        .expect("load")
}

fn random_rows(n: usize, cols: usize, rng: &mut impl Rng) -> Vec<f32> {
    (0..n * cols).map(|_| rng.gen_range(-2.0..2.0)).collect()
}

/// down · act(gate · x) * (up · x), with the down projection reading the gated GEMV's output
/// (`fused`: and its 8-bit copy, if the gated GEMV made one) or a plain copy of it; `add`:
/// added to rows `base` (a decode step's residual), as `matmul_add` does.
#[allow(clippy::too_many_arguments)]
fn gated_then_down(
    gpu: &CudaBackend,
    key: Option<u64>,
    (gate, up, down): (&Weight, &Weight, &Weight),
    (x, base): (&[f32], &[f32]),
    (tokens, cols, ffn, out_cols): (usize, usize, usize, usize),
    fused: bool,
    add: bool,
) -> Vec<f32> {
    gpu.begin_forward(key);
    let xt = gpu.upload(x, tokens, cols).expect("upload");
    let mut h = gpu.alloc(tokens, ffn).expect("alloc");
    gpu.gated_matmul(gate, up, &xt, Activation::Silu, &mut h)
        .expect("gated");
    let h = if fused {
        h
    } else {
        gpu.copy(&h).expect("copy")
    };
    let mut out = gpu.upload(base, tokens, out_cols).expect("upload");
    if add {
        gpu.matmul_add(down, &h, &mut out).expect("down");
    } else {
        gpu.matmul(down, &h, &mut out).expect("down");
    }
    gpu.to_host(&out).expect("to host")
}

/// The down projection's input quantized three ways gives the same bits: by a quantize_q8_1
/// launch on a plain copy (the reference), by the gated GEMV (counters), and by each block of
/// the down projection for itself (`with_own_q8_bytes`, kernels/gemv_q8a.cu `OwnQ8`).
#[test]
fn gated_output_quantized_in_the_gemv_gives_the_unfused_bits() {
    let Some(gpu) = gpu() else {
        return;
    };
    let counters = gpu.with_own_q8_bytes(0);
    let own = CudaBackend::open(0)
        .expect("a second backend")
        .with_own_q8_bytes(usize::MAX);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (cols, out_cols) = (512, 256);
    // 40 groups spread over many blocks (a multiple of 256: the K-quant down projections'),
    // and 3,072 (the 0.6B's: every load of a block's own copy in one batch) and 4,096 (two).
    for ffn in [1280, 3072, 4096] {
        for ty in TYPES {
            let host = [(ffn, cols), (ffn, cols), (out_cols, ffn)]
                .map(|(r, c)| random_host_weight(ty, r, c, &mut rng));
            let on = |b: &CudaBackend| host.clone().map(|w| b.load_weight(w).expect("load"));
            let (wc, wo) = (on(&counters), on(&own));
            for (tokens, add) in [(1, false), (1, true), (3, false), (3, true)] {
                let shape = (tokens, cols, ffn, out_cols);
                // Eager, then (same key) eager, recorded, replayed twice: new values each time.
                let key = (ffn << 32) as u64 | (ty.id() as u64) << 8 | (tokens * 2) as u64;
                let key = Some(key | add as u64);
                for (i, key) in [None, key, key, key, key].into_iter().enumerate() {
                    let x = random_rows(tokens, cols, &mut rng);
                    let base = random_rows(tokens, out_cols, &mut rng);
                    let rows = (&x[..], &base[..]);
                    let ws = (&wc[0], &wc[1], &wc[2]);
                    let want = gated_then_down(&counters, None, ws, rows, shape, false, add);
                    let got = gated_then_down(&counters, key, ws, rows, shape, true, add);
                    let what = format!("{ty} ffn {ffn} x{tokens} pass {i}");
                    assert_same_bits(&got, &want, &format!("{what}, the gated GEMV's copy"));
                    let ws = (&wo[0], &wo[1], &wo[2]);
                    let got = gated_then_down(&own, key, ws, rows, shape, true, add);
                    assert_same_bits(&got, &want, &format!("{what}, the blocks' own copies"));
                }
            }
        }
    }
}

#[test]
fn attention_output_quantized_in_the_kernel_gives_the_unfused_bits() {
    let Some(gpu) = gpu() else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    const BLOCK: usize = 16;
    // Every decode kernel's lane share; 80 has no whole groups per head (no 8-bit copy). Query
    // widths are multiples of 256, as the K-quant o projections need.
    for (hd, n_heads, n_kv_heads) in [
        (128, 8, 2),
        (64, 4, 4),
        (256, 2, 1),
        (32, 8, 4),
        (80, 16, 4),
    ] {
        let (q_dim, kv_dim) = (n_heads * hd, n_kv_heads * hd);
        let p = AttnParams {
            n_heads,
            n_kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: None,
            softcap: None,
        };
        let spec = KvSpec {
            kv_dims: vec![kv_dim],
            n_blocks: 8,
            block_size: BLOCK,
            dtype: KvType::F16,
        };
        let mut cache = gpu.new_kv_cache(&spec).expect("cache");
        let tables: [Vec<u32>; 2] = [vec![3, 0, 5], vec![1, 7, 2]];
        for ty in TYPES {
            let o = weight(&gpu, ty, 192, q_dim, &mut rng);
            // Two sequences: a prompt of 20 positions each, then decode tokens at 20 and 21.
            for (first, n_each) in [(0, 20), (20, 1), (21, 1)] {
                let seqs: Vec<AttnSeq> = (0..2)
                    .map(|s| AttnSeq {
                        token_start: s * n_each,
                        n_tokens: n_each,
                        first_pos: first,
                        block_table: &tables[s],
                    })
                    .collect();
                let batch = AttnBatch {
                    seqs: &seqs,
                    block_size: BLOCK,
                };
                let n = 2 * n_each;
                let (q, k, v) = (
                    random_rows(n, q_dim, &mut rng),
                    random_rows(n, kv_dim, &mut rng),
                    random_rows(n, kv_dim, &mut rng),
                );
                let mut results = Vec::new();
                for fused in [true, false] {
                    gpu.begin_forward(None);
                    let qt = gpu.upload(&q, n, q_dim).expect("upload");
                    let kt = gpu.upload(&k, n, kv_dim).expect("upload");
                    let vt = gpu.upload(&v, n, kv_dim).expect("upload");
                    let mut a = gpu.alloc(n, q_dim).expect("alloc");
                    gpu.attention(&qt, &kt, &vt, &mut cache, 0, &batch, &p, &mut a)
                        .expect("attention");
                    let a = if fused {
                        a
                    } else {
                        gpu.copy(&a).expect("copy")
                    };
                    let mut out = gpu.alloc(n, 192).expect("alloc");
                    gpu.matmul(&o, &a, &mut out).expect("o projection");
                    results.push(gpu.to_host(&out).expect("to host"));
                }
                assert_same_bits(
                    &results[0],
                    &results[1],
                    &format!("hd {hd} {ty} positions {first}+{n_each}"),
                );
            }
        }
    }
}
