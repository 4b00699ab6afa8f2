// `out[t, c] = W[tokens[t], c]`: rows of an embedding table, dequantized (DEQ over raw blocks).

struct EmbedParams {
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,
    zero: u32, // 0, for `keep`
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>; // [n_tokens], checked < rows
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // [n_tokens, cols]
@group(0) @binding(3) var<storage, read> p: EmbedParams;

@compute @workgroup_size(64)
fn embed(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i >= p.cols * p.n_tokens) {
        return;
    }
    let c = i % p.cols;
    let base = tokens[i / p.cols] * p.row_bytes + (c / BLOCK) * BLOCK_BYTES;
    out[i] = DEQ(base, c % BLOCK);
}
