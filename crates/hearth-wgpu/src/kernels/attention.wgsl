// Paged attention over an f16 KV cache (two f16 per word: kv_words.wgsl).
//
// ```text
//  cache slots (per layer):  [ block 0 | block 1 | block 2 | ... ]   each block = block_size slots
//  token t's block table:    aux[tables + aux[2t + 1] ..]  (physical block of each logical one)
//  slot of position j:       table[j / block_size] * block_size + j % block_size
// ```
// `kv_write` stores the batch's new keys/values in their slots; `attention` then runs one
// workgroup of 256 threads per (token, head), over tiles of 64 positions:
//
//   pass 1: the scores of a tile, four threads per position (each a quarter of the
//           query-key product), then the softmax max and sum over the visible positions (an
//           online softmax per position slot, merged across slots);
//   pass 2: each weight rounded to f16 (as the CPU reference does), and the weighted values
//           summed by four groups of threads, each over a quarter of the tile's positions
//           (in order) for every word of the head; the four sums are added at the end.
//
// NOTE: a GPU runs one workgroup's long dependent chains slowly (an H100 through Vulkan spent
// ~39 µs on a decode attention of Qwen3-0.6B with a thread per position and per output
// dimension); splitting every product and sum four ways shortens them. head_dim ≤ 256.

@group(0) @binding(0) var<storage, read> q: array<f32>;         // [n_tokens, n_heads * head_dim]
@group(0) @binding(1) var<storage, read> k: array<f32>;         // [n_tokens, kv_dim]
@group(0) @binding(2) var<storage, read> v: array<f32>;         // [n_tokens, kv_dim]
@group(0) @binding(3) var<storage, read_write> kc: array<kv_word>; // [slots, kv_dim / 2] f16 pairs
@group(0) @binding(4) var<storage, read_write> vc: array<kv_word>; // [slots, kv_dim / 2]
@group(0) @binding(5) var<storage, read_write> out: array<f32>; // [n_tokens, n_heads * head_dim]
@group(0) @binding(6) var<storage, read> p: AttnParams;
@group(0) @binding(7) var<storage, read> aux: array<u32>;       // [n_tokens, 2] (pos, table), tables
@group(0) @binding(8) var<storage, read_write> oq: array<u32>;  // p.q8: out as Q8_0 (quantize.wgsl)
@group(0) @binding(9) var<storage, read> q_norm: array<f32>;    // p.qk_norm: [head_dim]
@group(0) @binding(10) var<storage, read> k_norm: array<f32>;   // p.qk_norm: [head_dim]

@compute @workgroup_size(64)
fn kv_write(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let half_dim = p.n_kv_heads * p.head_dim / 2u;
    let i = flat_thread(gid, nwg);
    if (i >= p.n_tokens * half_dim) {
        return;
    }
    let t = i / half_dim;
    let d = i % half_dim;
    let slot = slot_of(aux[2u * t + 1u], aux[2u * t]);
    kc[slot * half_dim + d] = kv_pack(k[2u * i], k[2u * i + 1u]);
    vc[slot * half_dim + d] = kv_pack(v[2u * i], v[2u * i + 1u]);
}

// With p.own_kv (a decode step: every token its sequence's only one), `attention` also does
// kv_write's work: the first query head of each KV head stores the token's key and value in
// their slot. The other workgroups of the dispatch may not read that slot (its writer may not
// have run yet), so every workgroup takes its token's own key and value from `k` and `v`,
// packed to f16 words as kv_write packs them, into own_k / own_v: the same words, the same
// bits. Other positions are never written by this dispatch.
var<workgroup> own_k: array<kv_word, 128>;
var<workgroup> own_v: array<kv_word, 128>;

// Word w of the token's own value (see above), for attention_common.wgsl's `add_values`
// (which this kernel does not call: `partial_score` and `add_tile_values` read own_k and
// own_v themselves).
fn own_value_word(w: u32) -> kv_word {
    return own_v[w];
}

// The token's own key and value to own_k / own_v, and to the cache from the first query head
// of each KV head. With p.qk_norm the key is normed_k's (`norm_rope_qk`).
fn take_own_kv(t: u32, h: u32, kv_head: u32, slot: u32, lid: u32) {
    let half = p.head_dim / 2u;
    let half_dim = p.n_kv_heads * half;
    let at = t * 2u * half_dim + kv_head * p.head_dim;
    let writes = h % (p.n_heads / p.n_kv_heads) == 0u;
    for (var d = lid; d < half; d += WG) {
        var kw: kv_word;
        if (p.qk_norm != 0u) {
            kw = kv_pack(normed[256u + 2u * d], normed[256u + 2u * d + 1u]);
        } else {
            kw = kv_pack(k[at + 2u * d], k[at + 2u * d + 1u]);
        }
        let vw = kv_pack(v[at + 2u * d], v[at + 2u * d + 1u]);
        own_k[d] = kw;
        own_v[d] = vw;
        if (writes) {
            kc[slot * half_dim + kv_head * half + d] = kw;
            vc[slot * half_dim + kv_head * half + d] = vw;
        }
    }
}

const WG: u32 = 256u;

// p.qk_norm: QK-norm and rope here (QK_NORM_ROPE), rope alone here (ROPE_ONLY), or neither
// (0: q and k come rotated).
const QK_NORM_ROPE: u32 = 1u;
const ROPE_ONLY: u32 = 2u;

// With p.qk_norm: the workgroup's query head at 0 .. head_dim, and the token's own key head at
// 256 .., normed (QK_NORM_ROPE) and rotated (`norm_rope_qk`).
var<workgroup> normed: array<f32, 512>;
var<workgroup> norm_sums: array<vec2<f32>, 128>;

// QK-norm (unless ROPE_ONLY, with the bits of rope.wgsl then) and RoPE of the workgroup's
// query head and its token's own key head, from q and k to `normed`, with the steps and bits
// of norm.wgsl's `rms_norm_rope_qk`: threads 0 .. 63
// sum the squares of the query (thread i: values i, i + 64, ... in order, as one of that
// kernel's 64 threads does), 64 .. 127 those of the key, each half then a tree of the same
// shape; the rotation takes each pair (a, b) in one thread and the sines and cosines from
// aux. Call in uniform control flow; returns after a barrier.
fn norm_rope_qk(t: u32, h: u32, kv_head: u32, live: bool, lid: u32) {
    let hd = p.head_dim;
    for (var d = lid; d < hd; d += WG) {
        normed[d] = q[(t * p.n_heads + h) * hd + d];
        normed[256u + d] = k[(t * p.n_kv_heads + kv_head) * hd + d];
    }
    workgroupBarrier();
    let normed_too = p.qk_norm == QK_NORM_ROPE;
    let i = lid % 64u;
    let head_at = 256u * (lid / 64u);
    var acc = vec2<f32>(0.0, 0.0);
    if (normed_too && live && lid < 128u) {
        for (var d = i; d < hd; d += 64u) {
            acc = dw_add(acc, square_exact(normed[head_at + d]));
        }
    }
    if (lid < 128u) {
        norm_sums[lid] = acc;
    }
    workgroupBarrier();
    if (normed_too) {
        for (var s = 32u; s > 0u; s >>= 1u) {
            if (lid < 128u && i < s) {
                norm_sums[lid] = dw_add(norm_sums[lid], norm_sums[lid + s]);
            }
            workgroupBarrier();
        }
    }
    // Thread lid rotates pairs lid % 128 (, + 128 ...) of the query (lid < 128) or the key.
    let key = lid >= 128u;
    let base = select(0u, 256u, key);
    var inv = 1.0;
    if (normed_too) {
        inv = inv_rms_of(norm_sums[select(0u, 64u, key)], f32(hd), p.eps);
    }
    for (var j = lid % 128u; j < p.half_rot; j += 128u) {
        let ab = base + rope_pair(j, p.half_rot, p.neox != 0u);
        var x0 = normed[ab.x];
        var x1 = normed[ab.y];
        if (normed_too) {
            x0 = x0 * inv * norm_weight(key, ab.x - base);
            x1 = x1 * inv * norm_weight(key, ab.y - base);
        }
        let c = bitcast<f32>(aux[p.rope_at + 2u * (t * p.half_rot + j)]);
        let s = bitcast<f32>(aux[p.rope_at + 2u * (t * p.half_rot + j) + 1u]);
        let r = rotate(x0, x1, c, s);
        normed[ab.x] = r.x;
        normed[ab.y] = r.y;
    }
    if (normed_too) {
        for (var d = 2u * p.half_rot + lid % 128u; d < hd; d += 128u) {
            normed[base + d] = normed[base + d] * inv * norm_weight(key, d);
        }
    }
    workgroupBarrier();
}

fn norm_weight(key: bool, i: u32) -> f32 {
    if (key) {
        return k_norm[i];
    }
    return q_norm[i];
}

// Scores, then weights, of the first KEPT visible positions, kept from pass 1 for pass 2
// (past them pass 2 computes the score again; decode runs attention_split.wgsl over long
// contexts).
const KEPT: u32 = 512u;
var<workgroup> kept: array<f32, KEPT>;
// Where each position of the tile starts in the cache (word of its slot and KV head).
var<workgroup> tile_at: array<u32, 64>;
// Pass 1: the four partial products of each tile position, [4][64]; at the end, the four
// partial value sums of each output dimension, [4][256].
var<workgroup> partial: array<f32, 1024>;
var<workgroup> red_m: array<f32, 64>;
var<workgroup> red_l: array<f32, 64>;
var<workgroup> weights: array<f32, 64>;
var<workgroup> span: vec2<u32>;   // first visible position, own position
var<workgroup> table_at: u32;

// Key words w0 .. w1 of the position at `at` times the query, summed in order as `score`
// sums (the token's own key from own_k where `own`). Eight words are loaded before any is
// used (see `score`).
fn partial_score(at: u32, w0: u32, w1: u32, own: bool) -> f32 {
    var s = 0.0;
    var d = w0;
    for (; d + 8u <= w1; d += 8u) {
        let w = array<kv_word, 8>(kc[at + d], kc[at + d + 1u], kc[at + d + 2u], kc[at + d + 3u],
                              kc[at + d + 4u], kc[at + d + 5u], kc[at + d + 6u],
                              kc[at + d + 7u]);
        for (var i = 0u; i < 8u; i++) {
            let kk = kv_pair(select(w[i], own_k[d + i], own));
            s += keep(qs[2u * (d + i)] * kk.x) + keep(qs[2u * (d + i) + 1u] * kk.y);
        }
    }
    for (; d < w1; d++) {
        let kk = kv_pair(select(kc[at + d], own_k[d], own));
        s += keep(qs[2u * d] * kk.x) + keep(qs[2u * d + 1u] * kk.y);
    }
    return s;
}

// Where the `n` positions of the tile at j0 start in the cache, to tile_at. Call in uniform
// control flow; returns after a barrier.
fn locate_tile(table: u32, j0: u32, n: u32, head_at: u32, lid: u32) {
    if (lid < n) {
        let half_dim = p.n_kv_heads * p.head_dim / 2u;
        tile_at[lid] = slot_of(table, j0 + lid) * half_dim + head_at;
    }
    workgroupBarrier();
}

// The scores of the tile's n positions (tile_at set); thread i < n gets position i's.
// `own` is the tile row of the token's own position (none: ≥ 64). Call in uniform control
// flow.
fn tile_scores(n: u32, own: u32, lid: u32) -> f32 {
    let i = lid % 64u;
    let g = lid / 64u;
    let half = p.head_dim / 2u;
    let quarter = (half + 3u) / 4u;
    var s = 0.0;
    if (i < n) {
        s = partial_score(tile_at[i], min(g * quarter, half), min(g * quarter + quarter, half),
                          i == own);
    }
    partial[lid] = s;
    workgroupBarrier();
    var score = 0.0;
    if (lid < n) {
        score = scaled_score((partial[i] + partial[64u + i]) + (partial[128u + i] + partial[192u + i]));
    }
    // partial is written again by the next call.
    workgroupBarrier();
    return score;
}

@compute @workgroup_size(256)
fn attention(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    let live = id < p.n_tokens * p.n_heads;
    let t = min(id / p.n_heads, p.n_tokens - 1u);
    let h = id % p.n_heads;
    let kv_head = h / (p.n_heads / p.n_kv_heads);
    let hd = p.head_dim;
    let half = hd / 2u;
    let head_at = kv_head * half;
    if (lid == 0u) {
        let pos = aux[2u * t];
        var start = 0u;
        if (p.window > 0u && pos + 1u > p.window) {
            start = pos + 1u - p.window;
        }
        span = vec2<u32>(start, pos);
        table_at = aux[2u * t + 1u];
    }
    if (p.qk_norm != 0u) {
        norm_rope_qk(t, h, kv_head, live, lid);
        for (var d = lid; d < hd; d += WG) {
            qs[d] = f16_round(normed[d]);
        }
    } else {
        for (var d = lid; d < hd; d += WG) {
            qs[d] = f16_round(q[(t * p.n_heads + h) * hd + d]);
        }
    }
    let own_kv = p.own_kv != 0u;
    if (own_kv && live) {
        take_own_kv(t, h, kv_head, slot_of(aux[2u * t + 1u], aux[2u * t]), lid);
    }
    // (Also the barrier behind qs, own_k and own_v.)
    let sp = workgroupUniformLoad(&span);
    let table = workgroupUniformLoad(&table_at);

    // Pass 1: thread i < 64 keeps an online softmax (max m, sum l) of the positions
    // sp.x + i, sp.x + i + 64, ...
    var m = NEG_BIG;
    var l = 0.0;
    for (var j0 = sp.x; j0 <= sp.y; j0 += 64u) {
        let n = min(64u, sp.y + 1u - j0);
        let own = select(64u, sp.y - j0, own_kv);
        locate_tile(table, j0, n, head_at, lid);
        let s = tile_scores(n, own, lid);
        if (lid < n) {
            let k = j0 + lid - sp.x;
            if (k < KEPT) {
                kept[k] = s;
            }
            if (s > m) {
                l = keep(l * exp_rn(m - s)) + 1.0;
                m = s;
            } else {
                l += exp_rn(s - m);
            }
        }
    }
    // The overall max, then the sums rescaled to it and added.
    if (lid < 64u) {
        red_m[lid] = m;
    }
    workgroupBarrier();
    for (var r = 32u; r > 0u; r >>= 1u) {
        if (lid < r) {
            red_m[lid] = max(red_m[lid], red_m[lid + r]);
        }
        workgroupBarrier();
    }
    let big_m = red_m[0];
    if (lid < 64u) {
        red_l[lid] = keep(l * exp_rn(m - big_m));
    }
    workgroupBarrier();
    for (var r = 32u; r > 0u; r >>= 1u) {
        if (lid < r) {
            red_l[lid] += red_l[lid + r];
        }
        workgroupBarrier();
    }
    let inv_l = div_rn(1.0, red_l[0]);

    // Pass 2: group g = lid / 64 sums the weighted values of tile rows 16g .. 16g + 15, in
    // order, for words c and c + 64 of the head (c = lid % 64).
    let c = lid % 64u;
    let g = lid / 64u;
    var acc = array<vec2<f32>, 2>(vec2<f32>(0.0), vec2<f32>(0.0));
    for (var j0 = sp.x; j0 <= sp.y; j0 += 64u) {
        let n = min(64u, sp.y + 1u - j0);
        let own = select(64u, sp.y - j0, own_kv);
        locate_tile(table, j0, n, head_at, lid);
        var s = 0.0;
        if (j0 + n - sp.x > KEPT) {
            s = tile_scores(n, own, lid);
        }
        if (lid < n) {
            let k = j0 + lid - sp.x;
            if (k < KEPT) {
                s = kept[k];
            }
            weights[lid] = f16_round(exp_rn(s - big_m) * inv_l);
        }
        workgroupBarrier();
        let r0 = 16u * g;
        let r1 = min(r0 + 16u, n);
        for (var r = 0u; r < 2u; r++) {
            let w = c + 64u * r;
            if (w < half) {
                acc[r] = add_tile_values(acc[r], r0, r1, w, own);
            }
        }
        // weights and tile_at are written again by the next tile.
        workgroupBarrier();
    }
    for (var r = 0u; r < 2u; r++) {
        let w = c + 64u * r;
        if (w < half) {
            partial[256u * g + 2u * w] = acc[r].x;
            partial[256u * g + 2u * w + 1u] = acc[r].y;
        }
    }
    workgroupBarrier();
    var o = 0.0;
    if (lid < hd) {
        o = (partial[lid] + partial[256u + lid]) + (partial[512u + lid] + partial[768u + lid]);
        if (live) {
            out[(t * p.n_heads + h) * hd + lid] = o;
        }
    }
    if (p.q8 != 0u) {
        quantize_head(o, (t * p.n_heads + h) * hd / 32u, live, lid);
    }
}

// `acc` plus the weighted word w of the values of tile rows r0 .. r1, in order (row `own`:
// the token's own value, from own_v). Eight rows' words are loaded before any is added.
fn add_tile_values(acc: vec2<f32>, r0: u32, r1: u32, w: u32, own: u32) -> vec2<f32> {
    var a = acc;
    var r = r0;
    for (; r + 8u <= r1; r += 8u) {
        let x = array<kv_word, 8>(vc[tile_at[r] + w], vc[tile_at[r + 1u] + w],
                              vc[tile_at[r + 2u] + w], vc[tile_at[r + 3u] + w],
                              vc[tile_at[r + 4u] + w], vc[tile_at[r + 5u] + w],
                              vc[tile_at[r + 6u] + w], vc[tile_at[r + 7u] + w]);
        for (var i = 0u; i < 8u; i++) {
            let pair = kv_pair(select(x[i], own_v[w], r + i == own));
            a.x += keep(weights[r + i] * pair.x);
            a.y += keep(weights[r + i] * pair.y);
        }
    }
    for (; r < r1; r++) {
        let pair = kv_pair(select(vc[tile_at[r] + w], own_v[w], r == own));
        a.x += keep(weights[r] * pair.x);
        a.y += keep(weights[r] * pair.y);
    }
    return a;
}

// The head's output (`o`: dimension lid's, for lid < head_dim) as Q8_0 blocks first_block ..
// in `oq`, the bits quantize.wgsl gives: the o projection's 8-bit matmul then needs no
// quantize dispatch. head_dim is a multiple of 32 (the host asks for it only then).
fn quantize_head(o: f32, first_block: u32, live: bool, lid: u32) {
    let hd = p.head_dim;
    if (lid < hd) {
        kept[lid] = o; // (free by now)
    }
    workgroupBarrier();
    let n_blocks = hd / 32u;
    let k = lid / 8u;
    let mine = live && k < n_blocks;
    let i = 32u * k + 4u * (lid % 8u);
    var v = vec4<f32>(0.0);
    if (mine) {
        v = vec4<f32>(kept[i], kept[i + 1u], kept[i + 2u], kept[i + 3u]);
    }
    let qd = quantize_part_q8_0(v, lid);
    if (mine) {
        oq[8u * (first_block + k) + lid % 8u] = qd.x;
        if (lid % 8u == 0u) {
            oq[p.q8_scales + first_block + k] = qd.y;
        }
    }
}
