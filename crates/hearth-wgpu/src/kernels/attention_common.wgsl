// What the attention kernels share (attention.wgsl, attention_split.wgsl): their parameters,
// the slot of a position in the paged cache, and a query-key score. The including file
// declares `kc` (the key cache), `p` and `aux`.

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
    for (var d = 0u; d < p.head_dim / 2u; d++) {
        let kk = unpack2x16float(kc[base + d]);
        s += keep(qs[2u * d] * kk.x) + keep(qs[2u * d + 1u] * kk.y);
    }
    s *= p.scale;
    if (p.softcap > 0.0) {
        s = keep(p.softcap * tanh(div_rn(s, p.softcap)));
    }
    return s;
}

