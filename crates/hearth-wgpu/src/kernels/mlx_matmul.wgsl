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
    let per_wg = p.rows_per_wg;
    let blocks = (p.part_rows + per_wg - 1u) / per_wg;
    let live = id < blocks * ((p.n_tokens + TILE - 1u) / TILE);
    let r0 = (id % blocks) * per_wg;
    let t0 = (id / blocks) * TILE;
    let nr = select(0u, min(per_wg, p.part_rows - r0), live);
    let n = select(0u, min(TILE, p.n_tokens - t0), live);
    let sum = row_sums(0u, r0, nr, t0, n, lid);
    if (adds(lid, nr, n)) {
        let o = (t0 + lid % TILE) * p.rows + p.row0 + r0 + lid / TILE;
        var v = sum;
        if (p.accumulate != 0u) {
            v += y[o];
        }
        y[o] = v;
    }
}
