//! Decode steps quantize the inputs of the output and down projections inside the kernels
//! that produce them (the attention kernel, and the gated GEMV through per-group counters), so
//! the int8 GEMVs need no separate quantize launch. The projections must see the same bits as
//! when they quantize a copy of the rows themselves, also when the step is recorded as a CUDA
//! graph and replayed (the counters must be left at zero). Without a usable GPU each test
//! prints "skipped: <reason>".

mod common;

use common::{gpu, random_host_weight};
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

fn assert_same_bits(got: &[f32], want: &[f32], what: &str) {
    let diff = got
        .iter()
        .zip(want)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    assert_eq!(diff, 0, "{what}: {diff} of {} values differ", got.len());
}

/// down · act(gate · x) * (up · x), with the down projection reading the gated GEMV's output
/// (`fused`: and its 8-bit copy) or a plain copy of it.
#[allow(clippy::too_many_arguments)]
fn gated_then_down(
    gpu: &CudaBackend,
    key: Option<u64>,
    (gate, up, down): (&Weight, &Weight, &Weight),
    x: &[f32],
    (tokens, cols, ffn, out_cols): (usize, usize, usize, usize),
    fused: bool,
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
    let mut out = gpu.alloc(tokens, out_cols).expect("alloc");
    gpu.matmul(down, &h, &mut out).expect("down");
    gpu.to_host(&out).expect("to host")
}

#[test]
fn gated_output_quantized_in_the_gemv_gives_the_unfused_bits() {
    let Some(gpu) = gpu() else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (cols, out_cols) = (512, 256);
    // 40 groups spread over many blocks (a multiple of 256: the K-quant down projections').
    let ffn = 1280;
    for ty in TYPES {
        let gate = weight(&gpu, ty, ffn, cols, &mut rng);
        let up = weight(&gpu, ty, ffn, cols, &mut rng);
        let down = weight(&gpu, ty, out_cols, ffn, &mut rng);
        let ws = (&gate, &up, &down);
        for tokens in [1, 3] {
            let shape = (tokens, cols, ffn, out_cols);
            // Eager, then (same key) eager, recorded, replayed twice: new values each time.
            let key = Some(((ffn as u64) << 32) | ((ty.id() as u64) << 8) | tokens as u64);
            for (i, key) in [None, key, key, key, key].into_iter().enumerate() {
                let x = random_rows(tokens, cols, &mut rng);
                let want = gated_then_down(&gpu, None, ws, &x, shape, false);
                let got = gated_then_down(&gpu, key, ws, &x, shape, true);
                assert_same_bits(&got, &want, &format!("{ty} ffn {ffn} x{tokens} pass {i}"));
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
