// What the attention kernels share (attention.wgsl, attention_split.wgsl): their parameters,
// the slot of a position in the paged cache, a query-key score and a weighted sum of values.
// The including file declares `kc` and `vc` (the key and value caches, `array<kv_word>`: see
// kv_words.wgsl), `p`, `aux`, `weights` (a tile's softmax weights, `array<f32, 64>` in
// workgroup memory) and `own_value_word`.

struct AttnParams {
    n_tokens: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    block_size: u32,
    window: u32,   // 0: no sliding window
    scale: f32,
    softcap: f32,  // 0: none
    tables: u32,   // where the block tables start in aux
    n_chunks: u32, // attention_split: chunks of 64 positions per (token, head)
    ml_at: u32,    // attention_split: where the chunks' (max, sum) pairs start in `part`
    acc_at: u32,   // attention_split: where the chunks' weighted value sums start in `part`
    zero: u32,     // 0, for `keep`
    q8: u32,       // attention: 1: also write the output as Q8_0 blocks to `oq`
    q8_scales: u32, // attention: first word of the block scales in `oq`
    own_kv: u32,    // attention: 1: write each token's own key and value (see attention.wgsl)
    qk_norm: u32,   // attention (own_kv only): 1: QK-norm and RoPE of q and k here, 2: RoPE
                    // alone (`norm_rope_qk`)
    half_rot: u32,  // ... n_rot / 2
    neox: u32,      // ... 1: pairs (i, i + half_rot); 0: pairs (2i, 2i + 1)
    eps: f32,       // ... the norm's epsilon
    rope_at: u32,   // ... where the rotations start in aux: [n_tokens, half_rot, (cos, sin)]
}

var<workgroup> qs: array<f32, 256>; // the query of the workgroup's head, f16-rounded

const NEG_BIG: f32 = -3.0e38;

fn slot_of(table: u32, pos: u32) -> u32 {
    return aux[p.tables + table + pos / p.block_size] * p.block_size + pos % p.block_size;
}

fn score(kv_head: u32, table: u32, j: u32) -> f32 {
    let half_dim = p.n_kv_heads * p.head_dim / 2u;
    let base = slot_of(table, j) * half_dim + kv_head * p.head_dim / 2u;
    var s = 0.0;
    // NOTE: eight words of the key are loaded before any is used: in a loop that uses each
    // load at once a GPU waits out the memory latency per word (an H100 through Vulkan spent
    // ~60 µs per decode attention that way). The sum's order is the one-at-a-time order.
    let n = p.head_dim / 2u;
    var d = 0u;
    for (; d + 8u <= n; d += 8u) {
        var w = array<kv_word, 8>(kc[base + d], kc[base + d + 1u], kc[base + d + 2u],
                              kc[base + d + 3u], kc[base + d + 4u], kc[base + d + 5u],
                              kc[base + d + 6u], kc[base + d + 7u]);
        for (var i = 0u; i < 8u; i++) {
            let kk = kv_pair(w[i]);
            s += keep(qs[2u * (d + i)] * kk.x) + keep(qs[2u * (d + i) + 1u] * kk.y);
        }
    }
    for (; d < n; d++) {
        let kk = kv_pair(kc[base + d]);
        s += keep(qs[2u * d] * kk.x) + keep(qs[2u * d + 1u] * kk.y);
    }
    return scaled_score(s);
}

// The query-key product `s` scaled and soft-capped.
fn scaled_score(dot: f32) -> f32 {
    var s = dot * p.scale;
    if (p.softcap > 0.0) {
        s = keep(p.softcap * tanh(div_rn(s, p.softcap)));
    }
    return s;
}


// acc[r] += weights[jj] · (value of position start + jj)[d] for jj < n (n ≤ 64), in order of
// jj, where d = lid + 64 r < head_dim and head_at is the kv head's first word in a slot.
// Four positions' values are loaded before any is added (see `score`).
//
// Where `own` < n, position start + own is the token's own one, whose values are not in the
// cache yet: they come from `own_value_word` (the step's own values, see attention.wgsl).
fn add_values(acc: ptr<function, array<f32, 4>>, table: u32, start: u32, n: u32, head_at: u32,
              lid: u32, own: u32) {
    let hd = p.head_dim;
    let half_dim = p.n_kv_heads * hd / 2u;
    var jj = 0u;
    // NOTE: eight positions' words are loaded before any is added, as in `score` (each load
    // named in an array constructor: filling arrays in a loop made NVIDIA's Vulkan compiler
    // slower, not faster). The sums keep the one-at-a-time order.
    for (; jj + 8u <= n; jj += 8u) {
        let j = start + jj;
        var base = array<u32, 8>(slot_of(table, j) * half_dim + head_at,
                                 slot_of(table, j + 1u) * half_dim + head_at,
                                 slot_of(table, j + 2u) * half_dim + head_at,
                                 slot_of(table, j + 3u) * half_dim + head_at,
                                 slot_of(table, j + 4u) * half_dim + head_at,
                                 slot_of(table, j + 5u) * half_dim + head_at,
                                 slot_of(table, j + 6u) * half_dim + head_at,
                                 slot_of(table, j + 7u) * half_dim + head_at);
        for (var r = 0u; r < 4u; r++) {
            let d = lid + 64u * r;
            if (d < hd) {
                let w = d / 2u;
                var vals = array<kv_word, 8>(vc[base[0] + w], vc[base[1] + w], vc[base[2] + w],
                                         vc[base[3] + w], vc[base[4] + w], vc[base[5] + w],
                                         vc[base[6] + w], vc[base[7] + w]);
                if (own - jj < 8u) {
                    vals[own - jj] = own_value_word(w);
                }
                for (var i = 0u; i < 8u; i++) {
                    let pair = kv_pair(vals[i]);
                    (*acc)[r] += keep(weights[jj + i] * select(pair.x, pair.y, (d & 1u) == 1u));
                }
            }
        }
    }
    for (; jj + 4u <= n; jj += 4u) {
        var base = array<u32, 4>(slot_of(table, start + jj) * half_dim + head_at,
                                 slot_of(table, start + jj + 1u) * half_dim + head_at,
                                 slot_of(table, start + jj + 2u) * half_dim + head_at,
                                 slot_of(table, start + jj + 3u) * half_dim + head_at);
        for (var r = 0u; r < 4u; r++) {
            let d = lid + 64u * r;
            if (d < hd) {
                var vals = array<kv_word, 4>(vc[base[0] + d / 2u], vc[base[1] + d / 2u],
                                         vc[base[2] + d / 2u], vc[base[3] + d / 2u]);
                if (own - jj < 4u) {
                    vals[own - jj] = own_value_word(d / 2u);
                }
                for (var i = 0u; i < 4u; i++) {
                    let pair = kv_pair(vals[i]);
                    (*acc)[r] += keep(weights[jj + i] * select(pair.x, pair.y, (d & 1u) == 1u));
                }
            }
        }
    }
    for (; jj < n; jj++) {
        let base = slot_of(table, start + jj) * half_dim + head_at;
        for (var r = 0u; r < 4u; r++) {
            let d = lid + 64u * r;
            if (d < hd) {
                var word = vc[base + d / 2u];
                if (jj == own) {
                    word = own_value_word(d / 2u);
                }
                let pair = kv_pair(word);
                (*acc)[r] += keep(weights[jj] * select(pair.x, pair.y, (d & 1u) == 1u));
            }
        }
    }
}
