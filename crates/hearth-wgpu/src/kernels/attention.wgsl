// Paged attention over an f16 KV cache (two f16 per u32 word).
//
// ```text
//  cache slots (per layer):  [ block 0 | block 1 | block 2 | ... ]   each block = block_size slots
//  token t's block table:    aux[tables + aux[2t + 1] ..]  (physical block of each logical one)
//  slot of position j:       table[j / block_size] * block_size + j % block_size
// ```
// `kv_write` stores the batch's new keys/values in their slots; `attention` then runs one
// workgroup per (token, head): pass 1 finds the softmax max and sum over the visible positions
// (an online softmax per thread, merged across threads), pass 2 walks the positions in tiles of
// 64, rounds each weight to f16 (as the CPU reference does) and accumulates the values; each
// thread owns the output dimensions lid, lid + 64, ... (head_dim ≤ 256).

@group(0) @binding(0) var<storage, read> q: array<f32>;         // [n_tokens, n_heads * head_dim]
@group(0) @binding(1) var<storage, read> k: array<f32>;         // [n_tokens, kv_dim]
@group(0) @binding(2) var<storage, read> v: array<f32>;         // [n_tokens, kv_dim]
@group(0) @binding(3) var<storage, read_write> kc: array<u32>;  // [slots, kv_dim / 2] f16 pairs
@group(0) @binding(4) var<storage, read_write> vc: array<u32>;  // [slots, kv_dim / 2]
@group(0) @binding(5) var<storage, read_write> out: array<f32>; // [n_tokens, n_heads * head_dim]
@group(0) @binding(6) var<storage, read> p: AttnParams;
@group(0) @binding(7) var<storage, read> aux: array<u32>;       // [n_tokens, 2] (pos, table), tables
@group(0) @binding(8) var<storage, read_write> oq: array<u32>;  // p.q8: out as Q8_0 (quantize.wgsl)

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
    kc[slot * half_dim + d] = pack_f16(k[2u * i], k[2u * i + 1u]);
    vc[slot * half_dim + d] = pack_f16(v[2u * i], v[2u * i + 1u]);
}

// With p.own_kv (a decode step: every token its sequence's only one), `attention` also does
// kv_write's work: the first query head of each KV head stores the token's key and value in
// their slot. The other workgroups of the dispatch may not read that slot (its writer may not
// have run yet), so every workgroup takes its token's own key and value from `k` and `v`,
// packed to f16 words as kv_write packs them, into own_k / own_v: the same words, the same
// bits. Other positions are never written by this dispatch.
var<workgroup> own_k: array<u32, 128>;
var<workgroup> own_v: array<u32, 128>;

// Word w of the token's own value (see above).
fn own_value_word(w: u32) -> u32 {
    return own_v[w];
}

// `score` of the token's own position, from own_k.
fn own_score() -> f32 {
    var s = 0.0;
    for (var d = 0u; d < p.head_dim / 2u; d++) {
        let kk = unpack2x16float(own_k[d]);
        s += keep(qs[2u * d] * kk.x) + keep(qs[2u * d + 1u] * kk.y);
    }
    return scaled_score(s);
}

// The token's own key and value to own_k / own_v, and to the cache from the first query head
// of each KV head.
fn take_own_kv(t: u32, h: u32, kv_head: u32, slot: u32, lid: u32) {
    let half = p.head_dim / 2u;
    let half_dim = p.n_kv_heads * half;
    let at = t * 2u * half_dim + kv_head * p.head_dim;
    let writes = h % (p.n_heads / p.n_kv_heads) == 0u;
    for (var d = lid; d < half; d += 64u) {
        let kw = pack_f16(k[at + 2u * d], k[at + 2u * d + 1u]);
        let vw = pack_f16(v[at + 2u * d], v[at + 2u * d + 1u]);
        own_k[d] = kw;
        own_v[d] = vw;
        if (writes) {
            kc[slot * half_dim + kv_head * half + d] = kw;
            vc[slot * half_dim + kv_head * half + d] = vw;
        }
    }
}

// Scores a thread keeps from pass 1 for pass 2: positions up to 64 · KEPT past the first
// visible one (decode runs attention_split.wgsl past 128).
const KEPT: u32 = 4u;

var<workgroup> red_m: array<f32, 64>;
var<workgroup> red_l: array<f32, 64>;
var<workgroup> weights: array<f32, 64>;
var<workgroup> span: vec2<u32>;   // first visible position, own position
var<workgroup> table_at: u32;

@compute @workgroup_size(64)
fn attention(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let id = flat_group(wg, nwg);
    let live = id < p.n_tokens * p.n_heads;
    let t = min(id / p.n_heads, p.n_tokens - 1u);
    let h = id % p.n_heads;
    let kv_head = h / (p.n_heads / p.n_kv_heads);
    let hd = p.head_dim;
    if (lid == 0u) {
        let pos = aux[2u * t];
        var start = 0u;
        if (p.window > 0u && pos + 1u > p.window) {
            start = pos + 1u - p.window;
        }
        span = vec2<u32>(start, pos);
        table_at = aux[2u * t + 1u];
    }
    for (var d = lid; d < hd; d += 64u) {
        qs[d] = f16_round(q[(t * p.n_heads + h) * hd + d]);
    }
    let own_kv = p.own_kv != 0u;
    if (own_kv && live) {
        take_own_kv(t, h, kv_head, slot_of(aux[2u * t + 1u], aux[2u * t]), lid);
    }
    // (Also the barrier behind qs, own_k and own_v.)
    let sp = workgroupUniformLoad(&span);
    let table = workgroupUniformLoad(&table_at);

    // Pass 1: max and sum of exp over the visible positions. A thread keeps the scores of
    // its first KEPT positions for pass 2, which needs them again (the same thread's ones).
    var m = NEG_BIG;
    var l = 0.0;
    var kept: array<f32, KEPT>;
    for (var j = sp.x + lid; j <= sp.y; j += 64u) {
        var s = 0.0;
        if (own_kv && j == sp.y) {
            s = own_score();
        } else {
            s = score(kv_head, table, j);
        }
        let k = (j - sp.x) / 64u;
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
    red_m[lid] = m;
    red_l[lid] = l;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (lid < s) {
            let m2 = max(red_m[lid], red_m[lid + s]);
            red_l[lid] = keep(red_l[lid] * exp_rn(red_m[lid] - m2))
                + keep(red_l[lid + s] * exp_rn(red_m[lid + s] - m2));
            red_m[lid] = m2;
        }
        workgroupBarrier();
    }
    let big_m = red_m[0];
    let inv_l = div_rn(1.0, red_l[0]);

    // Pass 2: f16-rounded weights times values, 64 positions at a time.
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    let head_at = kv_head * hd / 2u;
    for (var j0 = sp.x; j0 <= sp.y; j0 += 64u) {
        let j = j0 + lid;
        var wj = 0.0;
        if (j <= sp.y) {
            let k = (j0 - sp.x) / 64u;
            var s = 0.0;
            if (k < KEPT) {
                s = kept[k];
            } else if (own_kv && j == sp.y) {
                s = own_score();
            } else {
                s = score(kv_head, table, j);
            }
            wj = f16_round(exp_rn(s - big_m) * inv_l);
        }
        weights[lid] = wj;
        workgroupBarrier();
        let own = select(0xffffffffu, sp.y - j0, own_kv);
        add_values(&acc, table, j0, min(64u, sp.y + 1u - j0), head_at, lid, own);
        workgroupBarrier();
    }
    if (live) {
        for (var r = 0u; r < 4u; r++) {
            let d = lid + 64u * r;
            if (d < hd) {
                out[(t * p.n_heads + h) * hd + d] = acc[r];
            }
        }
    }
    if (p.q8 != 0u) {
        quantize_head(acc, (t * p.n_heads + h) * hd / 32u, live, lid);
    }
}

var<workgroup> head_out: array<f32, 256>;

// The head's output (acc as `attention` holds it) as Q8_0 blocks first_block .. in `oq`, the
// bits quantize.wgsl gives: the o projection's 8-bit matmul then needs no quantize dispatch.
// head_dim is a multiple of 32 (the host asks for it only then).
fn quantize_head(acc: array<f32, 4>, first_block: u32, live: bool, lid: u32) {
    let hd = p.head_dim;
    for (var r = 0u; r < 4u; r++) {
        let d = lid + 64u * r;
        if (d < hd) {
            head_out[d] = acc[r];
        }
    }
    workgroupBarrier();
    let n_blocks = hd / 32u;
    for (var k0 = 0u; k0 < n_blocks; k0 += 8u) {
        let k = k0 + lid / 8u;
        let mine = live && k < n_blocks;
        let i = 32u * k + 4u * (lid % 8u);
        var v = vec4<f32>(0.0);
        if (mine) {
            v = vec4<f32>(head_out[i], head_out[i + 1u], head_out[i + 2u], head_out[i + 3u]);
        }
        let qd = quantize_part_q8_0(v, lid);
        if (mine) {
            oq[8u * (first_block + k) + lid % 8u] = qd.x;
            if (lid % 8u == 0u) {
                oq[p.q8_scales + first_block + k] = qd.y;
            }
        }
    }
}
