// `y[t, r] (+)= Σ_c W[r, c] · x[t, c]` for a weight of raw blocks (BLOCK elements in
// BLOCK_BYTES bytes, read by DEQ). One workgroup computes one row for a tile of TILE tokens, so
// each weight element is dequantized once per tile; its 64 threads stride over the columns.
// The entry point (matmul_shared.wgsl or matmul_subgroup.wgsl) reduces the threads' sums.
// `w` may be one part of a weight split by rows (weight.rs): its rows are output features
// row0 .. row0 + part_rows.

struct MatParams {
    rows: u32, // output features of the whole weight (y's row length)
    cols: u32,
    n_tokens: u32,
    row_bytes: u32,
    accumulate: u32,
    row0: u32,      // the output feature of w's first row
    part_rows: u32, // rows of w
    zero: u32,      // 0, for `keep`
}

@group(0) @binding(0) var<storage, read> w: array<u32>;       // [part_rows] rows of blocks
@group(0) @binding(1) var<storage, read> x: array<f32>;       // [n_tokens, cols]
@group(0) @binding(2) var<storage, read_write> y: array<f32>; // [n_tokens, rows]
@group(0) @binding(3) var<storage, read> p: MatParams;

const TILE: u32 = 4u;
const WG: u32 = 64u;
var<workgroup> partial: array<f32, 256>; // [TILE, WG]

// This thread's partial sums for the tile of workgroup `id` (zeros past the end).
fn tile_sums(id: u32, lid: u32) -> array<f32, 4> {
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    if (id < p.part_rows * ((p.n_tokens + TILE - 1u) / TILE)) {
        let row = id % p.part_rows;
        let t0 = (id / p.part_rows) * TILE;
        let n = min(TILE, p.n_tokens - t0);
        for (var c = lid; c < p.cols; c += WG) {
            let wv = DEQ(row * p.row_bytes + (c / BLOCK) * BLOCK_BYTES, c % BLOCK);
            for (var t = 0u; t < n; t++) {
                acc[t] += wv * x[(t0 + t) * p.cols + c];
            }
        }
    }
    return acc;
}

// Thread `lid` (< TILE) of workgroup `id` stores the tile's sum for its token.
fn store(id: u32, lid: u32, sum: f32) {
    let t0 = (id / p.part_rows) * TILE;
    if (id < p.part_rows * ((p.n_tokens + TILE - 1u) / TILE) && lid < min(TILE, p.n_tokens - t0)) {
        let o = (t0 + lid) * p.rows + p.row0 + id % p.part_rows;
        var v = sum;
        if (p.accumulate != 0u) {
            v += y[o];
        }
        y[o] = v;
    }
}
