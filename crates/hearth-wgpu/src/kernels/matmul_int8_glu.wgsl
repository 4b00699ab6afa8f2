// `y[t, r] = silu(G[r] · x[t]) · (U[r] · x[t])` for gate and up weights side by side in one
// binding (loaded as a group: weight.rs): the SwiGLU of the up projection's epilogue, with both
// projections in one dispatch. Jobs 2i and 2i + 1 of a workgroup are the gate and up rows of
// one output, so the up job's first thread finds the gate's sum in workgroup memory; the bits
// are those of the two-dispatch path (the gate stored as f32, then `silu_rn(gate) · up`).

struct GluParams {
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,
    x_scales: u32, // first word of the activation scales in x
    x_sums: u32,   // first word of the Q8_K group sums in x
    zero: u32,     // 0, for `keep`
    rows: u32,     // output features (rows of each weight)
    base_up: u32,  // byte where the up weight's rows start in w (the gate's start at 0)
    eps: f32,      // RMSNorm's epsilon, for int8_input_normed.wgsl
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;       // gate rows, then up rows
@group(0) @binding(2) var<storage, read_write> y: array<f32>; // [n_tokens, rows]
@group(0) @binding(3) var<storage, read> p: GluParams;
// binding 1: the activations (see the int8_input files)

var<workgroup> sums: array<f32, JOB_COUNT>; // [JOBS]

@compute @workgroup_size(GROUP_THREADS)
fn matmul_glu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let j = lid / 16u;
    let g = flat_group(wg, nwg);
    // As in matmul_int8_qkv.wgsl, a workgroup's jobs are of one token.
    prepare_input(min(g * (JOBS / 2u) / p.rows, p.n_tokens - 1u), lid);
    let out = g * (JOBS / 2u) + j / 2u;
    let live = out < p.rows * p.n_tokens;
    let row = out % p.rows;
    let t = out / p.rows;
    let base = select(0u, p.base_up, j % 2u == 1u);
    job_chains(live, base + row * p.row_bytes, act_token(t), lid);
    workgroupBarrier();
    if (lid % 16u == 0u) {
        sums[j] = job_sum(lid);
    }
    workgroupBarrier();
    if (live && lid % 32u == 16u) {
        y[t * p.rows + row] = silu_rn(sums[j - 1u]) * sums[j];
    }
}
