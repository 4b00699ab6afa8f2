// `y[t, r] (+)= W[r] · x[t]` for one weight (or one part of a weight split by rows), with the
// 8-bit dot products of matmul_int8_common.wgsl.

struct MatParams {
    rows: u32,
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,
    epilogue: u32, // 0: y = sum; 1: y += sum; 2: y = silu(y) * sum (y holds the gate)
    x_scales: u32, // first word of the activation scales in x
    x_sums: u32,   // first word of the Q8_K group sums in x
    // w may be one part of a weight split by rows (weight.rs): its rows are output features
    // row0 .. row0 + part_rows of the `rows`.
    row0: u32,
    part_rows: u32,
    zero: u32, // 0, for `keep`
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;       // [part_rows] rows of blocks
@group(0) @binding(2) var<storage, read_write> y: array<f32>; // [n_tokens, rows]
@group(0) @binding(3) var<storage, read> p: MatParams;
// binding 1: the activations (see the int8_input files)

@compute @workgroup_size(GROUP_THREADS)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let g = flat_group(wg, nwg);
    let job = g * JOBS + lid / 16u;
    let live = job < p.part_rows * p.n_tokens;
    let w_row = job % p.part_rows; // in this part's binding
    let row = p.row0 + w_row;      // the output feature
    let t = job / p.part_rows;
    job_chains(live, w_row * p.row_bytes, act_token(t), lid);
    workgroupBarrier();
    if (live && lid % 16u == 0u) {
        var sum = job_sum(lid);
        let o = t * p.rows + row;
        if (p.epilogue == 1u) {
            sum += y[o];
        } else if (p.epilogue == 2u) {
            // As elementwise.wgsl's glu_silu, so that the bits are the unfused ones.
            sum = silu_rn(y[o]) * sum;
        }
        y[o] = sum;
    }
}
