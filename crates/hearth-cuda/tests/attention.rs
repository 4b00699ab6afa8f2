//! Paged attention on the CUDA backend against the CPU backend: prompt chunks (the tensor-core
//! flash kernel, from 16 queries of one sequence) and decode steps (the per-query kernel), with
//! grouped heads, sliding windows, soft-capping, scattered cache blocks and sequences that
//! continue after cached positions. Without a usable GPU each test prints "skipped: <reason>".

mod common;

use common::gpu;
use hearth_backend::cpu::CpuBackend;
use hearth_backend::{AttnBatch, AttnParams, AttnSeq, Backend, KvSpec, KvType};
use hearth_cuda::CudaBackend;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const BLOCK: usize = 16;

/// Σ (a − b)² / Σ b², and max |a − b|.
fn errors(a: &[f32], b: &[f32]) -> (f64, f32) {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    let max = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    (num / den.max(1e-30), max)
}

/// One attention call on `be`: new rows of (q, k, v) for each (first position, count) of
/// `seqs`, returning the output rows.
#[allow(clippy::too_many_arguments)]
fn attend<B: Backend>(
    be: &B,
    cache: &mut B::KvCache,
    tables: &[Vec<u32>],
    seqs: &[(usize, usize)],
    qkv: &(Vec<f32>, Vec<f32>, Vec<f32>),
    p: &AttnParams,
) -> Vec<f32> {
    let n: usize = seqs.iter().map(|s| s.1).sum();
    let (q_dim, kv_dim) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    let mut start = 0;
    let attn_seqs: Vec<AttnSeq> = seqs
        .iter()
        .zip(tables)
        .map(|(&(first_pos, n_tokens), table)| {
            let s = AttnSeq {
                token_start: start,
                n_tokens,
                first_pos,
                block_table: table,
            };
            start += n_tokens;
            s
        })
        .collect();
    let batch = AttnBatch {
        seqs: &attn_seqs,
        block_size: BLOCK,
    };
    be.begin_forward(None);
    let q = be.upload(&qkv.0, n, q_dim).expect("upload q");
    let k = be.upload(&qkv.1, n, kv_dim).expect("upload k");
    let v = be.upload(&qkv.2, n, kv_dim).expect("upload v");
    let mut out = be.alloc(n, q_dim).expect("alloc");
    be.attention(&q, &k, &v, cache, 0, &batch, p, &mut out)
        .expect("attention");
    be.to_host(&out).expect("to host")
}

fn random_rows(n: usize, cols: usize, rng: &mut impl Rng) -> Vec<f32> {
    (0..n * cols).map(|_| rng.gen_range(-2.0..2.0)).collect()
}

/// Σ (a − b)² / Σ b² bound of both kernels against the CPU backend.
/// NOTE: both round the final softmax weights to f16 as the CPU does, so what is left is the
/// order of f32 sums (q·k, the softmax sum, p·v) and expf's last bit, now and then moving a
/// weight by one f16 step. Measured on an H100: at most 2.2e-10 (prompt steps; decode steps
/// 1e-14 to 1.7e-10). Kernels that weighted values with f32 (decode) or running (prompt)
/// weights gave 4.6e-8, which this bound rejects; a wrong mask or scale gives 1e-2 and more.
const NMSE_BOUND: f64 = 1e-8;

/// Runs `steps` (each a batch of (first position, count) per sequence) through the CPU and
/// CUDA backends with random rows, and checks every step's output against the CPU's.
fn check_steps(
    gpu: &impl Backend,
    cpu: &CpuBackend,
    p: &AttnParams,
    steps: &[&[(usize, usize)]],
    rng: &mut impl Rng,
) {
    let (q_dim, kv_dim) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    // Each sequence's blocks, scattered over the cache (a step names the first sequences).
    let n_seqs = steps.iter().map(|s| s.len()).max().unwrap_or(0);
    let per_seq: Vec<usize> = (0..n_seqs)
        .map(|i| {
            let end = steps
                .iter()
                .filter_map(|s| s.get(i).map(|&(first, n)| first + n))
                .max()
                .unwrap_or(0);
            end.div_ceil(BLOCK) + 1
        })
        .collect();
    let n_blocks: usize = per_seq.iter().sum();
    let mut blocks: Vec<u32> = (0..n_blocks as u32).collect();
    blocks.shuffle(rng);
    let mut rest = &blocks[..];
    let tables: Vec<Vec<u32>> = per_seq
        .iter()
        .map(|&n| {
            let (mine, after) = rest.split_at(n);
            rest = after;
            mine.to_vec()
        })
        .collect();
    let spec = KvSpec {
        kv_dims: vec![kv_dim],
        n_blocks,
        block_size: BLOCK,
        dtype: KvType::F16,
    };
    let mut cache_cpu = cpu.new_kv_cache(&spec).expect("cpu cache");
    let mut cache_gpu = gpu.new_kv_cache(&spec).expect("gpu cache");
    let hd = p.head_dim;
    for (i, seqs) in steps.iter().enumerate() {
        let n: usize = seqs.iter().map(|s| s.1).sum();
        let qkv = (
            random_rows(n, q_dim, rng),
            random_rows(n, kv_dim, rng),
            random_rows(n, kv_dim, rng),
        );
        let want = attend(cpu, &mut cache_cpu, &tables, seqs, &qkv, p);
        let got = attend(gpu, &mut cache_gpu, &tables, seqs, &qkv, p);
        let (nmse, max) = errors(&got, &want);
        eprintln!(
            "hd {hd} heads {}/{} step {i}: nmse {nmse:.2e} max {max:.2e}",
            p.n_heads, p.n_kv_heads
        );
        assert!(
            nmse < NMSE_BOUND,
            "hd {hd} heads {}/{} step {i}: nmse {nmse:e} ≥ {NMSE_BOUND:e}",
            p.n_heads,
            p.n_kv_heads
        );
    }
}

fn params(
    hd: usize,
    n_heads: usize,
    n_kv_heads: usize,
    window: Option<usize>,
    softcap: Option<f32>,
) -> AttnParams {
    AttnParams {
        n_heads,
        n_kv_heads,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        window,
        softcap,
    }
}

/// (head_dim, n_heads, n_kv_heads, window, softcap) of a test case.
type Case = (usize, usize, usize, Option<usize>, Option<f32>);

/// `check_steps` for every case on both families of split decode kernels: head sizes 64, 128
/// and 256 take the tensor-core kernels (attention_gqa.cu) by default, the others
/// attention_split.cu's; the second round runs all of them on the latter.
fn check_on_both_families(
    mut gpu: CudaBackend,
    cpu: &CpuBackend,
    cases: &[Case],
    steps: &[&[(usize, usize)]],
    rng: &mut impl Rng,
) {
    for gqa in [true, false] {
        gpu = gpu.with_gqa_attention(gqa);
        for &(hd, n_heads, n_kv_heads, window, softcap) in cases {
            let p = params(hd, n_heads, n_kv_heads, window, softcap);
            check_steps(&gpu, cpu, &p, steps, rng);
        }
    }
}

#[test]
fn prompt_and_decode_attention_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    // (head_dim, n_heads, n_kv_heads, window, softcap): every flash kernel, one head size
    // without one (80: the per-query kernel serves prompts too), GQA, windows, soft-capping.
    let cases = [
        (128, 16, 8, None, None),
        (64, 8, 2, Some(40), None),
        (256, 4, 1, None, Some(50.0)),
        (96, 6, 6, None, None),
        (32, 4, 2, Some(7), Some(30.0)),
        (16, 4, 4, None, None),
        (80, 4, 2, None, None),
    ];
    // Step 1: prompts (one of 130 tokens: three flash tiles, the last partial).
    // Step 2: continuations after the cached positions, next to a decode token.
    // Step 3: a decode step of all three (the per-query kernel, in its wide blocks: 3 tokens).
    // Step 4: the next, reading the rows step 3 wrote (the second sequence's span is short
    // enough for the one-pass blocks, which write the new row as they load it).
    let steps: [&[(usize, usize)]; 4] = [
        &[(0, 130), (0, 20), (0, 3)],
        &[(130, 77), (20, 1), (3, 150)],
        &[(207, 1), (21, 1), (153, 1)],
        &[(208, 1), (22, 1), (154, 1)],
    ];
    check_on_both_families(gpu, &cpu, &cases, &steps, &mut rng);
}

/// Spans longer than the per-query kernel keeps scores of (its ATTN_KEPT, 2,048 positions):
/// the second pass computes the scores past them again. Decode steps in 4-warp blocks (five
/// tokens) and in wide ones (one token), each head in one block.
#[test]
fn long_spans_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let gpu = gpu.with_attention_split_from(usize::MAX);
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    let steps: [&[(usize, usize)]; 3] = [
        &[(0, 2100), (0, 2060), (0, 5), (0, 40), (0, 1)],
        &[(2100, 1), (2060, 1), (5, 1), (40, 1), (1, 1)],
        &[(2101, 1)],
    ];
    for (hd, window) in [(128, None), (64, Some(2070))] {
        let p = params(hd, 4, 2, window, None);
        check_steps(&gpu, &cpu, &p, &steps, &mut rng);
    }
}

/// Decode steps whose heads' positions are split across blocks (kernels/attention_split.cu;
/// every step splits here): spans of one split (one position, or a window of 40), of two or
/// three, and of many; each head size, grouped heads (groups of 1 to 4), soft-capping.
#[test]
fn split_heads_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let gpu = gpu.with_attention_split_from(0);
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(23);
    let cases = [
        (128, 16, 8, None, None),
        // Sixteen query heads a KV head: every row of the tensor-core kernels' products.
        (64, 16, 1, None, None),
        (64, 8, 2, Some(300), None),
        (64, 8, 2, Some(40), None),
        (256, 4, 1, None, Some(50.0)),
        (32, 4, 2, None, Some(30.0)),
        (80, 4, 2, None, None),
        // Groups of one and of three.
        (128, 4, 4, None, None),
        (64, 6, 2, Some(300), None),
    ];
    // Three sequences decoding together (wide blocks, a few splits a head), with prompts
    // between their first and their later decode steps.
    let steps: [&[(usize, usize)]; 4] = [
        &[(0, 1), (0, 1), (0, 1)],
        &[(1, 699), (1, 64), (1, 130)],
        &[(700, 1), (65, 1), (131, 1)],
        &[(701, 1), (66, 1), (132, 1)],
    ];
    check_on_both_families(gpu, &cpu, &cases, &steps, &mut rng);
}

/// Splits longer than the scores they keep (ATTN_KEPT): as many heads as make two splits a
/// head on this GPU, over 4,200 positions, so that each split computes its last scores again.
#[test]
fn split_spans_past_the_kept_scores_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let n_heads = gpu.device().info().sm_count as usize / 2;
    let gpu = gpu.with_attention_split_from(0);
    let cpu = CpuBackend::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
        .expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(24);
    let steps: [&[(usize, usize)]; 3] = [&[(0, 2100)], &[(2100, 2100)], &[(4200, 1)]];
    let p = params(32, n_heads, 1, None, None);
    check_steps(&gpu, &cpu, &p, &steps, &mut rng);
}

/// Prompt chunks whose spans are split across blocks (kernels/flash_prefill.cu, three
/// launches; here from 128 keys): early tiles with fewer key tiles than splits (empty
/// splits), chunks after cached positions, two sequences, windows, every flash head size.
#[test]
fn split_prompt_spans_match_the_cpu() {
    let Some(gpu) = gpu() else {
        return;
    };
    let gpu = gpu.with_flash_split_keys(64);
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(25);
    let cases = [
        (128, 16, 8, None, None),
        (64, 8, 2, Some(200), None),
        (256, 4, 1, None, Some(50.0)),
        (96, 6, 6, None, None),
        (32, 4, 2, Some(7), Some(30.0)),
        (16, 4, 4, None, None),
    ];
    let steps: [&[(usize, usize)]; 3] = [
        &[(0, 300), (0, 40)],
        &[(300, 130), (40, 64)],
        &[(430, 1), (104, 1)],
    ];
    check_on_both_families(gpu, &cpu, &cases, &steps, &mut rng);
}
