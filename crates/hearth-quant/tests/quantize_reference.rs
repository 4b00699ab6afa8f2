//! The reference quantizers write the same bytes as llama.cpp's.
//!
//! The expected values are FNV-1a hashes of what llama.cpp 4227c9b (llama-cpp-python 0.3.16)
//! writes through `ggml_quantize_chunk` without an importance matrix, for the input below;
//! `scripts/check_quantize_llamacpp.py --reference-hashes` prints them. The input mixes block
//! kinds that take different paths through the scale searches: symmetric, all-positive and
//! all-negative blocks over a range of magnitudes, all-zero and constant blocks, an outlier,
//! values below the all-zero threshold and sparse blocks.

use hearth_quant::{quantize_row, GgmlType};

const ROW_LEN: usize = 1024;
const N_ROWS: usize = 32;

/// The test input: a 64-bit LCG, one kind of block per 256 elements (see the module docs).
fn reference_input() -> Vec<f32> {
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    (0..ROW_LEN * N_ROWS)
        .map(|i| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let u = (state >> 32) as u32;
            let b = i / 256;
            // Exact in f32: a 24-bit integer over 2^24, then doubled and shifted.
            let unit = (u >> 8) as f32 / 16_777_216.0;
            let sym = unit * 2.0 - 1.0;
            let scale = 2f32.powi((b % 13) as i32 - 8);
            match b % 8 {
                0 => sym * scale,
                1 => unit * scale,
                2 => -unit * scale,
                3 => 0.0,
                4 => 0.37,
                5 => sym * scale * if i % 256 == 17 { 64.0 } else { 1.0 },
                6 => sym * 2f32.powi(-70),
                _ if i % 5 == 0 => sym * scale,
                _ => 0.0,
            }
        })
        .collect()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let n_bytes = ty.bytes_for(x.len() as u64).unwrap() as usize;
    let mut out = vec![0u8; n_bytes];
    quantize_row(ty, x, &mut out).unwrap();
    out
}

#[test]
fn bytes_equal_llama_cpp() {
    let x = reference_input();
    let expected = [
        (GgmlType::Q4_0, 0xba49_6288_8321_352b_u64),
        (GgmlType::Q4_1, 0x6bd7_e832_7277_0024),
        (GgmlType::Q5_0, 0xfede_25e6_267d_2398),
        (GgmlType::Q5_1, 0xa156_ce61_ba97_ebd2),
        (GgmlType::Q8_0, 0x5a34_ce10_02c1_08bd),
        (GgmlType::Q2_K, 0xa823_fd3d_552d_5cca),
        (GgmlType::Q3_K, 0xcf19_d652_a09f_6c10),
        (GgmlType::Q4_K, 0x78b6_8c82_2efa_04ec),
        (GgmlType::Q5_K, 0x6acb_c7b9_3da6_490b),
        (GgmlType::Q6_K, 0xcba2_a55b_ce82_0e1e),
        (GgmlType::IQ4_NL, 0xe0e9_c5f8_15b2_0466),
        (GgmlType::F16, 0x0220_fe7e_7abd_1348),
        (GgmlType::BF16, 0xd3f0_7581_debf_1eec),
    ];
    let mismatched: Vec<String> = expected
        .iter()
        .filter_map(|&(ty, want)| {
            let got = fnv1a(&quantize(ty, &x));
            (got != want).then(|| format!("{ty}: {got:#018x}, llama.cpp {want:#018x}"))
        })
        .collect();
    assert!(mismatched.is_empty(), "{mismatched:#?}");
}

#[test]
fn rows_quantize_independently() {
    // llama.cpp quantizes a tensor in chunks of rows on several threads; a block's bytes must
    // not depend on its neighbours.
    let x = reference_input();
    for ty in [
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_1,
    ] {
        let whole = quantize(ty, &x);
        let row_bytes = whole.len() / N_ROWS;
        for (r, row) in x.chunks_exact(ROW_LEN).enumerate() {
            assert_eq!(
                quantize(ty, row),
                whole[r * row_bytes..(r + 1) * row_bytes],
                "{ty} row {r}"
            );
        }
    }
}
