// MLX affine-quantized weights (hearth_quant::mlx), stored one row after another as
//
//   packed values (cols * bits / 8 bytes; value j of a word in bits [j * bits, (j + 1) * bits))
//   scales (cols / group_size values of f16, bf16 or f32, padded to whole words)
//   biases (the same)
//
// so that a weight split by rows (weight.rs) keeps each row's groups with it.
// w[r, c] = scale[r, g] * q[r, c] + bias[r, g], g = c / group_size.

struct MlxParams {
    rows: u32,       // output features of the whole weight (y's row length)
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,  // packed values, scales and biases of one row
    accumulate: u32,
    row0: u32,       // the output feature (or table row) of w's first row
    part_rows: u32,  // rows of w
    zero: u32,       // 0, for `keep`
    group_size: u32,
    scale_kind: u32, // 0: f16, 1: bf16, 2: f32
    scales_at: u32,  // byte offset of the scales in a row
    biases_at: u32,  // byte offset of the biases in a row
    bits: u32,
    rows_per_wg: u32,     // matmul: rows of one workgroup
    groups_per_pass: u32, // matmul: groups per pass, rows_per_wg * groups_per_pass <= JOBS
    _pad: u32,
    // The weights of a group after the first (mlx_matmul_qkv.wgsl, mlx_matmul_glu.wgsl): their
    // rows, and the byte where each one's rows start in w.
    rows1: u32,
    rows2: u32,
    base1: u32,
    base2: u32,
}

// Scale or bias `g` of the row starting at byte `row_byte`, from the table at byte `at` of it.
fn group_param(row_byte: u32, at: u32, g: u32) -> f32 {
    switch p.scale_kind {
        case 2u: {
            return bitcast<f32>(w[(row_byte + at) / 4u + g]);
        }
        case 1u: {
            let i = row_byte + at + 2u * g;
            return bitcast<f32>(((w[i >> 2u] >> ((i & 2u) * 8u)) & 0xffffu) << 16u);
        }
        default: {
            return half_at(row_byte + at + 2u * g);
        }
    }
}
