// `out[t, c] = W[tokens[t], c]`: rows of an embedding table, dequantized (DEQ over raw blocks).
// `w` may be one part of a table split by rows (weight.rs), rows row0 .. row0 + part_rows: a
// dispatch writes the tokens whose rows it holds.

struct EmbedParams {
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,
    row0: u32,
    part_rows: u32,
    zero: u32, // 0, for `keep`
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>; // [part_rows] rows of blocks
@group(0) @binding(1) var<storage, read> tokens: array<u32>; // [n_tokens], checked < rows
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // [n_tokens, cols]
@group(0) @binding(3) var<storage, read> p: EmbedParams;

@compute @workgroup_size(64)
fn embed(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i >= p.cols * p.n_tokens) {
        return;
    }
    let row = tokens[i / p.cols];
    if (row < p.row0 || row - p.row0 >= p.part_rows) {
        return;
    }
    let c = i % p.cols;
    let base = (row - p.row0) * p.row_bytes + (c / BLOCK) * BLOCK_BYTES;
    out[i] = DEQ(base, c % BLOCK);
}
