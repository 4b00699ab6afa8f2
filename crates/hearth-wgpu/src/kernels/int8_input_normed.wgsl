// The 8-bit matmuls' activations as f32 rows before their RMSNorm, normed and quantized to
// Q8_0 by each workgroup into its own memory, for decode (a few tokens): the row of the
// workgroup's token. This takes the norm in front of the q/k/v and gate/up projections, a
// dispatch of its own otherwise, into their matmul.
//
// NOTE: why norm the same row in every workgroup? Through NVIDIA's Vulkan a dispatch costs
// several µs however little it does (the barrier in front of it, its launch), while 256
// threads norm and quantize a row from L2 in a few. These modules run 16 jobs (256 threads)
// per workgroup instead of 4, so that fewer workgroups repeat the work and each does it in
// fewer rounds. (The same for the down projection's input, without the norm, measured no gain
// there: a 1,024-row weight is then 64 workgroups, too few to fill an H100.)
//
// The values go through the steps of norm.wgsl's `rms_norm_to_q8` (256 threads, 8 per block:
// quantize_common.wgsl's `quantize_part_q8_0`), so the quants and scales have their bits. The
// sum of squares runs in another order than in norm.wgsl (each thread sums 4 neighbouring
// values), which changes the double word's last bits only (see double_word.wgsl): the mean
// rounds the same.
//
// Workgroup memory holds quantize.wgsl's layout for one token: `cols / 4` words of quants,
// then `cols / 32` scales (the host sets `p.x_scales` to `cols / 4`), and jobs read it as
// token 0 (`act_token`).

@group(0) @binding(1) var<storage, read> xf: array<vec4<f32>>;             // [n_tokens, cols]
@group(0) @binding(NORM_BINDING) var<storage, read> wn: array<vec4<f32>>; // [cols]

const THREADS: u32 = GROUP_THREADSu;

var<workgroup> xq: array<u32, ACT_WORDS>;
var<workgroup> rms_sums: array<vec2<f32>, GROUP_THREADS>;

fn act(i: u32) -> u32 {
    return xq[i];
}

fn act_token(t: u32) -> u32 {
    return 0u;
}

// 1 / rms of the row of vec4s from `base` on (every thread of the workgroup calls it).
fn row_inv_rms(base: u32, lid: u32) -> f32 {
    var acc = vec2<f32>(0.0, 0.0);
    for (var i = lid; i < p.cols / 4u; i += THREADS) {
        let v = xf[base + i];
        acc = dw_add(acc, square_exact(v.x));
        acc = dw_add(acc, square_exact(v.y));
        acc = dw_add(acc, square_exact(v.z));
        acc = dw_add(acc, square_exact(v.w));
    }
    rms_sums[lid] = acc;
    workgroupBarrier();
    for (var s = THREADS / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            rms_sums[lid] = dw_add(rms_sums[lid], rms_sums[lid + s]);
        }
        workgroupBarrier();
    }
    return inv_rms_of(rms_sums[0], f32(p.cols), p.eps);
}

// Token t's row normed and quantized into `xq` (every thread of the workgroup calls it, in uniform
// control flow).
fn prepare_input(t: u32, lid: u32) {
    let n4 = p.cols / 4u;
    let base = t * n4;
    let inv = row_inv_rms(base, lid);
    // THREADS / 8 blocks a round, 8 threads (4 values each) per block, as `rms_norm_to_q8`.
    let nb = p.cols / 32u;
    for (var b0 = 0u; b0 < nb; b0 += THREADS / 8u) {
        let b = b0 + lid / 8u;
        let i = 8u * b + lid % 8u;
        var v = vec4<f32>(0.0);
        if (b < nb) {
            v = xf[base + i] * inv * wn[i];
        }
        let qd = quantize_part_q8_0(v, lid);
        if (b < nb) {
            xq[i] = qd.x;
            if (lid % 8u == 0u) {
                xq[n4 + b] = qd.y;
            }
        }
    }
    workgroupBarrier();
}
