//! Batch invariance: `matmul` gives every (row, token) pair the same bits whatever the number
//! of tokens in the call, the token's position among them, and the number of threads.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::dot::tests::random_row;
use crate::*;

/// Token counts of the batched calls: every remainder of the 4-token tiles, and tiles plus one.
const TOKEN_COUNTS: [usize; 11] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33];

fn pool(threads: usize) -> rayon::ThreadPool {
    // NOTE: a test-only pool; failing to build one is an environment fault, not a result.
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool")
}

/// `matmul` of the first `n_tokens` rows of `x`.
fn run(w: &WeightMatrix, x: &[f32], n_tokens: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_tokens * w.rows];
    matmul(w, &x[..n_tokens * w.cols], n_tokens, &mut out).unwrap();
    out
}

fn check(
    ty: GgmlType,
    rows: usize,
    n_blocks: usize,
    rng: &mut StdRng,
    pools: &[rayon::ThreadPool],
) {
    let cols = n_blocks * ty.block_size();
    let data = random_row(ty, rows * n_blocks, rng);
    let w = WeightMatrix::new(ty, &data, rows, cols).unwrap();
    let max_tokens = TOKEN_COUNTS[TOKEN_COUNTS.len() - 1];
    let x: Vec<f32> = (0..max_tokens * cols)
        .map(|_| rng.gen_range(-2f32..2.0))
        .collect();
    // Each token alone, on one thread.
    let alone: Vec<Vec<f32>> = pools[0].install(|| {
        (0..max_tokens)
            .map(|t| run(&w, &x[t * cols..], 1))
            .collect()
    });
    for p in pools {
        let threads = p.current_num_threads();
        for t in [0, max_tokens - 1] {
            let got = p.install(|| run(&w, &x[t * cols..], 1));
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                alone[t].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{ty} rows={rows} cols={cols}: token {t} alone differs on {threads} threads"
            );
        }
        for n_tokens in TOKEN_COUNTS {
            let out = p.install(|| run(&w, &x, n_tokens));
            for (t, want) in alone.iter().take(n_tokens).enumerate() {
                for (r, &want) in want.iter().enumerate() {
                    let got = out[t * rows + r];
                    assert!(
                        got.to_bits() == want.to_bits(),
                        "{ty} rows={rows} cols={cols}, {threads} threads: out[{t}, {r}] = {got:e} \
                         among {n_tokens} tokens, {want:e} alone"
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_is_batch_invariant() {
    use GgmlType::*;
    let mut rng = StdRng::seed_from_u64(29);
    let pools = [pool(1), pool(2), pool(3)];
    for ty in [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F32, F16, BF16,
    ] {
        // Odd block counts (the wide kernels take blocks in pairs), and more than 16 blocks
        // (the packed Q4_1 tile adds its min term 16 blocks at a time).
        let block_counts: &[usize] = match ty.block_size() {
            1 => &[37, 300],
            32 => &[1, 13, 18, 35],
            _ => &[1, 3],
        };
        for &n_blocks in block_counts {
            // Rows that are no multiple of the 4-row tiles; the larger matrix is split over
            // the pool's threads.
            check(ty, 7, n_blocks, &mut rng, &pools);
            check(ty, 203, n_blocks, &mut rng, &pools);
        }
    }
}
