// The MLX matmuls: `W[r] · x[t]` for an MLX weight of BITS-bit values in groups of GS
// (mlx_common.wgsl), with the CPU backend's bits (hearth_quant::mlx), which never widens the
// weight:
//
//   per group g:  Σq·x  in 8 lanes (lane l takes columns ≡ l mod 8, in order), then
//                       ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))
//                 Σx    in column order
//                 term = keep(scale · Σq·x) + keep(bias · Σx)
//   y = term of group 0 + term of group 1 + ... in group order
//
// A workgroup takes rows_per_wg rows and a tile of TILE tokens (`row_sums`), and goes over
// their groups in passes of at most JOBS (row, group) jobs. One thread runs a job for each
// token of the tile; the terms meet in workgroup memory, where after a barrier one thread per
// (row, token) adds them in group order. The entry points (mlx_matmul.wgsl,
// mlx_matmul_qkv.wgsl, mlx_matmul_glu.wgsl) say which rows and where the sums go; each
// declares `w`, `x` (as vec4) and `p` (MlxParams).
//
// NOTE: no arrays indexed by loops in a job. The same job with its lanes, tokens and loaded
// words in such arrays took twice as long through NVIDIA's Vulkan driver (2026-11-24: 30.7
// against 14.8 µs for a [3072, 1024] 4-bit weight; a compiler may keep such arrays in local
// memory). Here the 8 lanes are two vec4 sums (componentwise: the same rounded operations), a
// 32-column chunk is straight-line code whose loads are in flight together, and the tokens of
// the tile are an outer loop.

const TILE: u32 = 4u;
const WG: u32 = 64u;
const JOBS: u32 = 256u;
const CHUNKS: u32 = GS / 32u; // 32-column chunks of a group; a chunk is BITS packed words

var<workgroup> terms: array<f32, 1024>; // [TILE, JOBS]

// `v`, each component opaque to the compiler (see `keep`).
fn keep4(v: vec4<f32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) | vec4<u32>(p.zero));
}

// Lanes 0-3 and 4-7 of the 8 columns of slice i of a chunk whose words start at word `cw`.
fn slice_q(cw: u32, i: u32) -> array<vec4<f32>, 2> {
    if (BITS == 4u) {
        let v = w[cw + i];
        let lo = (vec4<u32>(v) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u);
        let hi = (vec4<u32>(v) >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u);
        return array<vec4<f32>, 2>(vec4<f32>(lo), vec4<f32>(hi));
    }
    let shifts = vec4<u32>(0u, 8u, 16u, 24u);
    let lo = (vec4<u32>(w[cw + 2u * i]) >> shifts) & vec4<u32>(255u);
    let hi = (vec4<u32>(w[cw + 2u * i + 1u]) >> shifts) & vec4<u32>(255u);
    return array<vec4<f32>, 2>(vec4<f32>(lo), vec4<f32>(hi));
}

// `s` plus the components of `a`, then of `c`, one after another.
fn add8(s: f32, a: vec4<f32>, c: vec4<f32>) -> f32 {
    return s + a.x + a.y + a.z + a.w + c.x + c.y + c.z + c.w;
}

// The term of group `g` of the row at byte `rb` of w for token `t` (see the top of the file).
fn group_term(rb: u32, g: u32, t: u32) -> f32 {
    let s = group_param(rb, p.scales_at, g);
    let b = group_param(rb, p.biases_at, g);
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    // Σx starts at -0, as Rust's float sum does: -0 + v is v for every v, +0 included.
    var xs = bitcast<f32>(0x80000000u);
    for (var k = 0u; k < CHUNKS; k++) {
        let cw = rb / 4u + (g * CHUNKS + k) * BITS;
        let xo = (t * p.cols + (g * CHUNKS + k) * 32u) / 4u;
        let q0 = slice_q(cw, 0u);
        let q1 = slice_q(cw, 1u);
        let q2 = slice_q(cw, 2u);
        let q3 = slice_q(cw, 3u);
        let x0 = x[xo];
        let x1 = x[xo + 1u];
        let x2 = x[xo + 2u];
        let x3 = x[xo + 3u];
        let x4 = x[xo + 4u];
        let x5 = x[xo + 5u];
        let x6 = x[xo + 6u];
        let x7 = x[xo + 7u];
        lo += keep4(q0[0] * x0);
        hi += keep4(q0[1] * x1);
        lo += keep4(q1[0] * x2);
        hi += keep4(q1[1] * x3);
        lo += keep4(q2[0] * x4);
        hi += keep4(q2[1] * x5);
        lo += keep4(q3[0] * x6);
        hi += keep4(q3[1] * x7);
        xs = add8(add8(add8(add8(xs, x0, x1), x2, x3), x4, x5), x6, x7);
    }
    // ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)), lanes 0-3 in lo and 4-7 in hi.
    let dot = ((lo.x + hi.x) + (lo.y + hi.y)) + ((lo.z + hi.z) + (lo.w + hi.w));
    return keep(s * dot) + keep(b * xs);
}

// The sums of rows r0 .. r0 + nr of the weight whose rows start at byte `base` of w, for
// tokens t0 .. t0 + n: thread `lid` returns that of row r0 + lid / TILE and token
// t0 + lid % TILE (see `adds`). Every thread of the workgroup calls it (it has barriers).
fn row_sums(base: u32, r0: u32, nr: u32, t0: u32, n: u32, lid: u32) -> f32 {
    let my_row = lid / TILE;
    let my_t = lid % TILE;
    let groups = p.cols / GS;
    var sum = 0.0;
    for (var g0 = 0u; g0 < groups; g0 += p.groups_per_pass) {
        let ng = min(p.groups_per_pass, groups - g0);
        for (var j = lid; j < nr * ng; j += WG) {
            let rb = base + (r0 + j / ng) * p.row_bytes;
            for (var t = 0u; t < n; t++) {
                terms[t * JOBS + j] = group_term(rb, g0 + j % ng, t0 + t);
            }
        }
        workgroupBarrier();
        if (my_row < nr && my_t < n) {
            for (var k = 0u; k < ng; k++) {
                sum += terms[my_t * JOBS + my_row * ng + k];
            }
        }
        workgroupBarrier();
    }
    return sum;
}

// What workgroup `id` of a grid of `blocks` row blocks per token tile takes: block `block`
// (of a weight of `rows` rows) for its tile; no rows and no tokens past the grid's end.
struct Tile {
    r0: u32, // first row
    t0: u32, // first token
    nr: u32, // rows
    n: u32,  // tokens
}

fn tile(id: u32, blocks: u32, block: u32, rows: u32) -> Tile {
    let live = id < blocks * ((p.n_tokens + TILE - 1u) / TILE);
    let r0 = block * p.rows_per_wg;
    let t0 = (id / blocks) * TILE;
    let nr = select(0u, min(p.rows_per_wg, rows - r0), live);
    return Tile(r0, t0, nr, select(0u, min(TILE, p.n_tokens - t0), live));
}

// Whether thread `lid` holds a sum of `row_sums` (its row and token are in the tile).
fn adds(lid: u32, nr: u32, n: u32) -> bool {
    return lid / TILE < nr && lid % TILE < n;
}
