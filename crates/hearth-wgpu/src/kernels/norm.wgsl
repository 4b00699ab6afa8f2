// RMSNorm in place: each group of `group` consecutive values is scaled by 1/rms and multiplied
// by the weight. One 64-thread workgroup per group.

struct NormParams {
    group: u32,
    n_groups: u32,
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> wt: array<f32>; // [group]
@group(0) @binding(2) var<storage, read> p: NormParams;

var<workgroup> sums: array<f32, 64>;

@compute @workgroup_size(64)
fn rms_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let g = flat_group(wg, nwg);
    let live = g < p.n_groups;
    let base = g * p.group;
    var acc = 0.0;
    if (live) {
        for (var i = lid; i < p.group; i += 64u) {
            let v = x[base + i];
            acc += v * v;
        }
    }
    sums[lid] = acc;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lid < s) {
            sums[lid] += sums[lid + s];
        }
        workgroupBarrier();
    }
    if (live) {
        let inv = 1.0 / sqrt(sums[0] / f32(p.group) + p.eps);
        for (var i = lid; i < p.group; i += 64u) {
            x[base + i] = x[base + i] * inv * wt[i];
        }
    }
}
