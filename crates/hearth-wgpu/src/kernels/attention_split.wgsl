// Attention split over the positions (flash-decode), for a few tokens over a long context,
// where attention.wgsl's one workgroup per (token, head) leaves most of a GPU idle. Each
// (token, head) gets `n_chunks` workgroups of 64 positions; `part` holds their scratch:
//
// ```text
//  part:  [ scores: (token, head, chunk) × 64 | (max, sum) per chunk | value sums: × head_dim ]
//  attn_split_scores: scores of the chunk's positions, their max m_c and Σ exp(s - m_c)
//  attn_split_values: M and L over all chunks (merged in chunk order), the f16-rounded weights
//                     exp(s - M) / L of the chunk (as attention.wgsl rounds them) times values
//  attn_split_reduce: out = Σ over chunks of the value sums, in chunk order
// ```
// The results differ from attention.wgsl's by summation order only (L and the value sums).
// Chunk c covers positions start + 64c ..; chunks past a token's own position are empty.

@group(0) @binding(0) var<storage, read> q: array<f32>;          // [n_tokens, n_heads * head_dim]
@group(0) @binding(1) var<storage, read> kc: array<kv_word>;     // [slots, kv_dim / 2] f16 pairs
@group(0) @binding(2) var<storage, read> vc: array<kv_word>;     // [slots, kv_dim / 2]
@group(0) @binding(3) var<storage, read_write> out: array<f32>;  // [n_tokens, n_heads * head_dim]
@group(0) @binding(4) var<storage, read> p: AttnParams;
@group(0) @binding(5) var<storage, read> aux: array<u32>;        // as in attention.wgsl
@group(0) @binding(6) var<storage, read_write> part: array<f32>; // the scratch above

// The split kernels read every position from the cache (kv_write runs before them).
fn own_value_word(w: u32) -> kv_word {
    return kv_word();
}

var<workgroup> red_m: array<f32, 64>;
var<workgroup> red_l: array<f32, 64>;
var<workgroup> weights: array<f32, 64>;

// The workgroup's (token, head, chunk) and the token's visible span [first, own position].
struct Job {
    t: u32,
    h: u32,
    c: u32,
    first: u32,
    last: u32,
    table: u32,
    live: bool,
}

fn job_of(id: u32) -> Job {
    var j: Job;
    j.live = id < p.n_tokens * p.n_heads * p.n_chunks;
    j.c = id % p.n_chunks;
    j.h = (id / p.n_chunks) % p.n_heads;
    j.t = min(id / (p.n_chunks * p.n_heads), p.n_tokens - 1u);
    let pos = aux[2u * j.t];
    j.first = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        j.first = pos + 1u - p.window;
    }
    j.last = pos;
    j.table = aux[2u * j.t + 1u];
    return j;
}

// Index of (token, head, chunk) among all chunks.
fn chunk_index(j: Job) -> u32 {
    return (j.t * p.n_heads + j.h) * p.n_chunks + j.c;
}

@compute @workgroup_size(64)
fn attn_split_scores(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let j = job_of(flat_group(wg, nwg));
    let hd = p.head_dim;
    for (var d = lid; d < hd; d += 64u) {
        qs[d] = f16_round(q[(j.t * p.n_heads + j.h) * hd + d]);
    }
    workgroupBarrier();
    let pos = j.first + 64u * j.c + lid;
    var s = NEG_BIG;
    if (j.live && pos <= j.last) {
        s = score(j.h / (p.n_heads / p.n_kv_heads), j.table, pos);
    }
    red_m[lid] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid < k) {
            red_m[lid] = max(red_m[lid], red_m[lid + k]);
        }
        workgroupBarrier();
    }
    let m = red_m[0];
    var e = 0.0;
    if (s > NEG_BIG) {
        e = exp_rn(s - m);
    }
    red_l[lid] = e;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (lid < k) {
            red_l[lid] += red_l[lid + k];
        }
        workgroupBarrier();
    }
    if (j.live) {
        let ci = chunk_index(j);
        part[64u * ci + lid] = s;
        if (lid == 0u) {
            part[p.ml_at + 2u * ci] = m;
            part[p.ml_at + 2u * ci + 1u] = red_l[0];
        }
    }
}

@compute @workgroup_size(64)
fn attn_split_values(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let j = job_of(flat_group(wg, nwg));
    if (!j.live) {
        return;
    }
    // M and L over the chunks, merged in chunk order (every thread alike).
    let first_chunk = chunk_index(j) - j.c;
    var big_m = NEG_BIG;
    var l = 0.0;
    for (var c = 0u; c < p.n_chunks; c++) {
        let mc = part[p.ml_at + 2u * (first_chunk + c)];
        let lc = part[p.ml_at + 2u * (first_chunk + c) + 1u];
        if (lc > 0.0) {
            let m2 = max(big_m, mc);
            l = keep(l * exp_rn(big_m - m2)) + keep(lc * exp_rn(mc - m2));
            big_m = m2;
        }
    }
    let inv_l = div_rn(1.0, l);
    let start = j.first + 64u * j.c;
    let s = part[64u * chunk_index(j) + lid];
    var wj = 0.0;
    if (s > NEG_BIG) {
        wj = f16_round(exp_rn(s - big_m) * inv_l);
    }
    weights[lid] = wj;
    workgroupBarrier();
    let hd = p.head_dim;
    let kv_head = j.h / (p.n_heads / p.n_kv_heads);
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    var n = 0u;
    if (start <= j.last) {
        n = min(64u, j.last + 1u - start);
    }
    add_values(&acc, j.table, start, n, kv_head * hd / 2u, lid, 0xffffffffu);
    for (var r = 0u; r < 4u; r++) {
        let d = lid + 64u * r;
        if (d < hd) {
            part[p.acc_at + chunk_index(j) * hd + d] = acc[r];
        }
    }
}

@compute @workgroup_size(64)
fn attn_split_reduce(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    if (id >= p.n_tokens * p.n_heads) {
        return;
    }
    let hd = p.head_dim;
    for (var d = lid; d < hd; d += 64u) {
        var sum = 0.0;
        for (var c = 0u; c < p.n_chunks; c++) {
            sum += part[p.acc_at + (id * p.n_chunks + c) * hd + d];
        }
        out[id * hd + d] = sum;
    }
}
