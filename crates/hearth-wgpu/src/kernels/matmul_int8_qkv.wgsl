// `y_i[t, r] = W_i[r] · x[t]` for two or three weights side by side in one binding (q, k and
// v, loaded as a group: weight.rs), in one dispatch instead of one each. The workgroups of
// weight 0 come first, then those of weight 1, then weight 2; a workgroup's 4 jobs are of one
// weight, so it branches once, at the store. The sums are the single-weight kernel's.

struct QkvParams {
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,
    x_scales: u32, // first word of the activation scales in x
    x_sums: u32,   // first word of the Q8_K group sums in x
    zero: u32,     // 0, for `keep`
    eps: f32,      // RMSNorm's epsilon, for int8_input_normed.wgsl
    rows0: u32,    // output features of each weight
    rows1: u32,
    rows2: u32,
    base1: u32,    // byte where weight 1's rows start in w (weight 0's start at 0)
    base2: u32,
    groups0: u32,  // workgroups of weight 0, then of weight 1
    groups1: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;        // the weights' rows of blocks
@group(0) @binding(2) var<storage, read_write> y0: array<f32>; // [n_tokens, rows0]
@group(0) @binding(3) var<storage, read_write> y1: array<f32>; // [n_tokens, rows1]
@group(0) @binding(4) var<storage, read_write> y2: array<f32>; // [n_tokens, rows2]
@group(0) @binding(5) var<storage, read> p: QkvParams;
// binding 1: the activations (see the int8_input files)

@compute @workgroup_size(GROUP_THREADS)
fn matmul_qkv(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    var g = flat_group(wg, nwg);
    var sel = 0u;
    var rows = p.rows0;
    var base = 0u;
    if (g >= p.groups0 + p.groups1) {
        sel = 2u;
        g -= p.groups0 + p.groups1;
        rows = p.rows2;
        base = p.base2;
    } else if (g >= p.groups0) {
        sel = 1u;
        g -= p.groups0;
        rows = p.rows1;
        base = p.base1;
    }
    // The host gives int8_input_normed.wgsl only weights of whole workgroups of rows, so that a
    // workgroup's jobs are of one token.
    prepare_input(min(g * JOBS / rows, p.n_tokens - 1u), lid);
    let job = g * JOBS + lid / 16u;
    let live = job < rows * p.n_tokens;
    let row = job % rows;
    let t = job / rows;
    job_chains(live, base + row * p.row_bytes, act_token(t), lid);
    workgroupBarrier();
    if (live && lid % 16u == 0u) {
        let sum = job_sum(lid);
        let o = t * rows + row;
        if (sel == 0u) {
            y0[o] = sum;
        } else if (sel == 1u) {
            y1[o] = sum;
        } else {
            y2[o] = sum;
        }
    }
}
