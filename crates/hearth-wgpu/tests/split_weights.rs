//! Weights stored in parts of whole rows because one binding cannot hold them, forced on small
//! tensors by lowering the backend's weight part limit: matmuls (every kernel path the backend
//! takes), the SwiGLU pair and embedding lookups of split weights, against the CPU backend with
//! the bounds of the op conformance table (conformance.rs) and against the same weights
//! unsplit, to the bit (each output is computed by the same kernel code either way).

mod common;

use common::*;
use hearth_backend::{Activation, Backend, HostWeight};
use hearth_quant::GgmlType;
use hearth_wgpu::kernels::{INT8_TYPES, WEIGHT_TYPES};
use hearth_wgpu::WgpuBackend;
use rand::{rngs::StdRng, SeedableRng};

/// Bytes per weight part in these tests: every weight below takes several parts, the last one
/// smaller (37 rows divide by none of the rows per part), and rows of 162, 198 or 306 bytes
/// leave parts that end inside a word.
const PART_LIMIT: u64 = 2000;
const ROWS: usize = 37;

/// Columns of the test weights of type `ty`: rows of 160 f32 / f16 values, 9 blocks of 32
/// (an odd count, for the 8-bit kernels' two block chains) or 2 blocks of 256.
fn cols_for(ty: GgmlType) -> usize {
    match ty.block_size() {
        1 => 160,
        32 => 288,
        _ => 512,
    }
}

/// A backend that splits weights at [`PART_LIMIT`], and one that does not.
fn split_and_whole(subgroups: bool) -> Option<(WgpuBackend, WgpuBackend)> {
    let split = gpu_with(subgroups)?.with_weight_part_limit(PART_LIMIT);
    Some((split, gpu_with(subgroups)?))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

fn n_parts(g: &WgpuBackend, w: &HostWeight) -> usize {
    g.load_weight(w.clone()).expect("load weight").n_parts()
}

#[test]
fn split_matmul_and_embed_every_weight_type() {
    check_split_weights(true);
}

/// The matmul kernels for adapters without subgroup operations, on any adapter.
#[test]
fn split_matmul_and_embed_without_subgroups() {
    check_split_weights(false);
}

fn check_split_weights(subgroups: bool) {
    let Some((split, whole)) = split_and_whole(subgroups) else {
        return;
    };
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(11);
    let mut failures = Vec::new();
    for &ty in WEIGHT_TYPES {
        let cols = cols_for(ty);
        let w = weight("w", ty, ROWS, cols, &random(&mut rng, ROWS * cols));
        let parts = n_parts(&split, &w);
        assert!(parts > 1, "{ty}: one part");
        for (n, add) in [(1, false), (4, false), (5, false), (3, true)] {
            let x: Vec<f32> = random(&mut rng, n * cols).iter().map(|v| v * 4.0).collect();
            let want = matmul_on(&c, w.clone(), &x, n, add);
            let got = matmul_on(&split, w.clone(), &x, n, add);
            let unsplit = matmul_on(&whole, w.clone(), &x, n, add);
            let e = nmse(&want, &got);
            let (_, worst) = rel_errors(&want, &got);
            let cpu_bits = want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            eprintln!(
                "split matmul {ty:>5} [{ROWS}x{cols}] in {parts} parts n={n} add={add}: \
                 nmse {e:.2e}, worst rel {worst:.2e}, CPU bits {cpu_bits}"
            );
            // The rules of conformance.rs: the 8-bit matmuls within f32 rounding of the CPU
            // and bit-equal where the CPU sums in their order, the others within `bound`.
            let int8 = INT8_TYPES.contains(&ty);
            let ok = if int8 {
                e <= 1e-12 && worst <= 1e-5 && (cpu_bits || !same_order_on_cpu(ty))
            } else {
                e <= bound(ty)
            };
            if !ok {
                failures.push(format!("matmul {ty} n={n} add={add}: nmse {e:.2e}"));
            }
            if bits(&got) != bits(&unsplit) {
                failures.push(format!("matmul {ty} n={n} add={add}: differs from unsplit"));
            }
        }
        // Rows of every part, repeated; then one token (one dispatch: parts without a token
        // are skipped).
        for tokens in [&[3u32, 0, 36, 3, 20, 35, 17][..], &[36]] {
            let want = embed_on(&c, w.clone(), tokens);
            let got = embed_on(&split, w.clone(), tokens);
            let e = nmse(&want, &got);
            eprintln!("split embed  {ty:>5} {tokens:?}: nmse {e:.2e}");
            if e > 1e-12 || bits(&got) != bits(&embed_on(&whole, w.clone(), tokens)) {
                failures.push(format!("embed {ty} {tokens:?}: nmse {e:.2e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// gated_matmul of split weights: the SwiGLU in the 8-bit up projection's epilogue reads the
/// gate where it writes, also where gate and up split at other rows (Q4_K: 6 rows a part,
/// Q6_K: 4); the unfused pair (no 8-bit kernel for Q4_1 / Q5_K) as well.
#[test]
fn split_gated_matmuls() {
    let Some((split, whole)) = split_and_whole(true) else {
        return;
    };
    let c = cpu();
    let mut rng = StdRng::seed_from_u64(12);
    let (cols, n) = (512, 3);
    let x = random(&mut rng, n * cols);
    for (gt, ut) in [
        (GgmlType::Q8_0, GgmlType::Q8_0),
        (GgmlType::Q4_K, GgmlType::Q6_K),
        (GgmlType::Q4_1, GgmlType::Q5_K),
    ] {
        let mut host = |ty| weight("w", ty, ROWS, cols, &random(&mut rng, ROWS * cols));
        let (gate, up) = (host(gt), host(ut));
        assert!(n_parts(&split, &gate) > 1 && n_parts(&split, &up) > 1);
        let want = gated_on(&c, &gate, &up, &x, n);
        let got = gated_on(&split, &gate, &up, &x, n);
        let e = nmse(&want, &got);
        eprintln!("split gated matmul {gt}/{ut}: nmse {e:.2e}");
        // As shared_input_matmuls_match_cpu in conformance.rs.
        assert!(e < 2e-6, "{gt}/{ut}: nmse {e:.2e}");
        let unsplit = gated_on(&whole, &gate, &up, &x, n);
        assert_eq!(
            bits(&got),
            bits(&unsplit),
            "{gt}/{ut}: differs from unsplit"
        );
    }
}

fn gated_on<B: Backend>(
    be: &B,
    gate: &HostWeight,
    up: &HostWeight,
    x: &[f32],
    n: usize,
) -> Vec<f32> {
    let load = |w: &HostWeight| be.load_weight(w.clone()).expect("load weight");
    let x = be.upload(x, n, gate.cols).expect("upload");
    let mut out = be.alloc(n, gate.rows).expect("alloc");
    be.gated_matmul(&load(gate), &load(up), &x, Activation::Silu, &mut out)
        .expect("gated_matmul");
    be.to_host(&out).expect("to_host")
}

/// A row larger than a part cannot be split: an error naming the tensor and the limit.
#[test]
fn a_row_larger_than_a_binding_is_an_error() {
    let Some((split, _)) = split_and_whole(true) else {
        return;
    };
    // 1024 f32 values: 4096 bytes a row.
    let w = weight("output.weight", GgmlType::F32, 4, 1024, &vec![0.5; 4096]);
    let err = split.load_weight(w).err().expect("too large").to_string();
    assert!(
        err.contains("output.weight") && err.contains("4096") && err.contains("2000"),
        "{err}"
    );
}
