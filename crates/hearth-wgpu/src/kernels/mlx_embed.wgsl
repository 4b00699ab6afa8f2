// `out[t, c] = W[tokens[t], c]` of an MLX weight (mlx_common.wgsl): `scale * q + bias`, the
// product rounded on its own as the CPU rounds it. A dispatch writes the tokens whose rows its
// part of the table holds.

@group(0) @binding(0) var<storage, read> w: array<u32>;         // [part_rows] rows
@group(0) @binding(1) var<storage, read> tokens: array<u32>;    // [n_tokens], checked < rows
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // [n_tokens, cols]
@group(0) @binding(3) var<storage, read> p: MlxParams;

@compute @workgroup_size(64)
fn embed_mlx(@builtin(global_invocation_id) gid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_thread(gid, nwg);
    if (i >= p.cols * p.n_tokens) {
        return;
    }
    let row = tokens[i / p.cols];
    if (row < p.row0 || row - p.row0 >= p.part_rows) {
        return;
    }
    let c = i % p.cols;
    let rb = (row - p.row0) * p.row_bytes;
    let per_word = 32u / p.bits;
    let word = w[rb / 4u + c / per_word];
    let q = (word >> ((c % per_word) * p.bits)) & ((1u << p.bits) - 1u);
    let g = c / p.group_size;
    out[i] = keep(group_param(rb, p.scales_at, g) * f32(q)) + group_param(rb, p.biases_at, g);
}
