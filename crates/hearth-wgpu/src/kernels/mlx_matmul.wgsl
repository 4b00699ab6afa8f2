// `y[t, r] (+)= Σ_c W[r, c] · x[t, c]` for an MLX weight (mlx_matmul_common.wgsl): one
// workgroup per rows_per_wg rows of the part and tile of TILE tokens.

@group(0) @binding(0) var<storage, read> w: array<u32>;         // [part_rows] rows
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;   // [n_tokens, cols]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;   // [n_tokens, rows]
@group(0) @binding(3) var<storage, read> p: MlxParams;

@compute @workgroup_size(64)
fn matmul_mlx(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    let blocks = (p.part_rows + p.rows_per_wg - 1u) / p.rows_per_wg;
    let tl = tile(id, blocks, id % blocks, p.part_rows);
    let sum = row_sums(0u, tl.r0, tl.nr, tl.t0, tl.n, lid);
    if (adds(lid, tl.nr, tl.n)) {
        let o = (tl.t0 + lid % TILE) * p.rows + p.row0 + tl.r0 + lid / TILE;
        var v = sum;
        if (p.accumulate != 0u) {
            v += y[o];
        }
        y[o] = v;
    }
}
