//! q, k and v of different weight types in one int8-activation GEMV launch (`gemv3_q8a_mixed`,
//! as Q4_K_M files keep v in Q6_K): each segment must give the bits of its own matrix's
//! single launch, at one token and at several. Without a usable GPU the test prints
//! "skipped: <reason>".

mod common;

use common::{gpu, random_host_weight};
use hearth_backend::Backend;
use hearth_cuda::CudaBackend;
use hearth_quant::GgmlType;
use rand::{Rng, SeedableRng};

type Weight = <CudaBackend as Backend>::Weight;

/// `W · x` alone.
fn one_matrix(
    gpu: &CudaBackend,
    w: &Weight,
    x: &[f32],
    tokens: usize,
    cols: usize,
    rows: usize,
) -> Vec<f32> {
    gpu.begin_forward(None);
    let xt = gpu.upload(x, tokens, cols).expect("upload");
    let mut out = gpu.alloc(tokens, rows).expect("alloc");
    gpu.matmul(w, &xt, &mut out).expect("matmul");
    gpu.to_host(&out).expect("to host")
}

#[test]
fn mixed_type_projections_in_one_launch_equal_one_launch_each() {
    let Some(gpu) = gpu() else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let cols = 768;
    // Rows of three sizes, the last an odd count (a warp's second row past the end).
    let rows = [200, 64, 63];
    let type_sets = [
        [GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K],
        [GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q6_K],
        [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K],
    ];
    for types in type_sets {
        let ws: Vec<Weight> = types
            .iter()
            .zip(rows)
            .map(|(&ty, r)| {
                let host = random_host_weight(ty, r, cols, &mut rng);
                gpu.load_weight(host).expect("load")
            })
            .collect();
        for tokens in [1, 3] {
            let x: Vec<f32> = (0..tokens * cols)
                .map(|_| rng.gen_range(-2.0..2.0))
                .collect();
            gpu.begin_forward(None);
            let xt = gpu.upload(&x, tokens, cols).expect("upload");
            let mut outs: Vec<_> = rows
                .iter()
                .map(|&r| gpu.alloc(tokens, r).expect("alloc"))
                .collect();
            let [a, b, c] = &mut outs[..] else {
                unreachable!("three outputs")
            };
            gpu.matmul3([&ws[0], &ws[1], &ws[2]], &xt, [a, b, c])
                .expect("matmul3");
            // Read back before the next pass reuses the pass's memory.
            let threes: Vec<_> = outs
                .iter()
                .map(|o| gpu.to_host(o).expect("to host"))
                .collect();
            for ((w, &r), three) in ws.iter().zip(&rows).zip(threes) {
                let one = one_matrix(&gpu, w, &x, tokens, cols, r);
                let what = format!("{types:?} x{tokens}: the {r}-row matrix");
                assert!(one.iter().all(|v| v.is_finite()), "{what}: not finite");
                assert!(
                    one.iter()
                        .zip(&three)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: matmul3 differs from its own launch"
                );
            }
        }
    }
}
