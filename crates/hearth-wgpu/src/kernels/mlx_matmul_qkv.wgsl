// `y_k[t, r] = W_k[r] · x[t]` for two or three MLX weights of one spec and width side by side
// in one binding (q, k and v, loaded as a group: weight.rs), in one dispatch: the workgroups
// of weight 0's row blocks, then weight 1's, then weight 2's, for each tile of TILE tokens.
// The bits are those of one dispatch per weight (mlx_matmul.wgsl).

@group(0) @binding(0) var<storage, read> w: array<u32>;          // the weights' rows
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;    // [n_tokens, cols]
@group(0) @binding(2) var<storage, read_write> y0: array<f32>;   // [n_tokens, rows]
@group(0) @binding(3) var<storage, read_write> y1: array<f32>;   // [n_tokens, rows1]
@group(0) @binding(4) var<storage, read_write> y2: array<f32>;   // [n_tokens, rows2]
@group(0) @binding(5) var<storage, read> p: MlxParams;

@compute @workgroup_size(64)
fn matmul_mlx_qkv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    let per_wg = p.rows_per_wg;
    let b0 = (p.rows + per_wg - 1u) / per_wg;
    let b1 = (p.rows1 + per_wg - 1u) / per_wg;
    let b2 = (p.rows2 + per_wg - 1u) / per_wg;
    let blocks = b0 + b1 + b2;
    let blk = id % blocks;
    // Which weight: its rows, where they start in w, and its first block.
    var k = 0u;
    var rows = p.rows;
    var base = 0u;
    var first = 0u;
    if (blk >= b0 + b1) {
        k = 2u;
        rows = p.rows2;
        base = p.base2;
        first = b0 + b1;
    } else if (blk >= b0) {
        k = 1u;
        rows = p.rows1;
        base = p.base1;
        first = b0;
    }
    let tl = tile(id, blocks, blk - first, rows);
    let sum = row_sums(base, tl.r0, tl.nr, tl.t0, tl.n, lid);
    if (adds(lid, tl.nr, tl.n)) {
        let o = (tl.t0 + lid % TILE) * rows + tl.r0 + lid / TILE;
        if (k == 0u) {
            y0[o] = sum;
        } else if (k == 1u) {
            y1[o] = sum;
        } else {
            y2[o] = sum;
        }
    }
}
