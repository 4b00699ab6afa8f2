// `y[t, r] = silu(G[r] · x[t]) · (U[r] · x[t])` for MLX gate and up weights of one spec side by
// side in one binding (loaded as a group: weight.rs): both projections and the SwiGLU in one
// dispatch. A workgroup sums its gate rows, then the same up rows; the bits are those of the
// two matmuls and the element-wise SwiGLU (the gate stored as f32, then `silu_rn(gate) · up`).

@group(0) @binding(0) var<storage, read> w: array<u32>;         // gate rows, then up rows
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;   // [n_tokens, cols]
@group(0) @binding(2) var<storage, read_write> y: array<f32>;   // [n_tokens, rows]
@group(0) @binding(3) var<storage, read> p: MlxParams;

@compute @workgroup_size(64)
fn matmul_mlx_glu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    let per_wg = p.rows_per_wg;
    let blocks = (p.rows + per_wg - 1u) / per_wg;
    let live = id < blocks * ((p.n_tokens + TILE - 1u) / TILE);
    let r0 = (id % blocks) * per_wg;
    let t0 = (id / blocks) * TILE;
    let nr = select(0u, min(per_wg, p.rows - r0), live);
    let n = select(0u, min(TILE, p.n_tokens - t0), live);
    let gate = row_sums(0u, r0, nr, t0, n, lid);
    let up = row_sums(p.base1, r0, nr, t0, n, lid);
    if (adds(lid, nr, n)) {
        y[(t0 + lid % TILE) * p.rows + r0 + lid / TILE] = silu_rn(gate) * up;
    }
}
