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
    let blocks = (p.rows + p.rows_per_wg - 1u) / p.rows_per_wg;
    let tl = tile(id, blocks, id % blocks, p.rows);
    let gate = row_sums(0u, tl.r0, tl.nr, tl.t0, tl.n, lid);
    let up = row_sums(p.base1, tl.r0, tl.nr, tl.t0, tl.n, lid);
    if (adds(lid, tl.nr, tl.n)) {
        y[(tl.t0 + lid % TILE) * p.rows + tl.r0 + lid / TILE] = silu_rn(gate) * up;
    }
}
