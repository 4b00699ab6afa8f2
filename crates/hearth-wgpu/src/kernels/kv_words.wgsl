// The KV cache's words: two f16 values each, as u32 words converted with the core
// `pack2x16float` / `unpack2x16float` (every adapter has them). kv_words_f16.wgsl is the same
// interface over `vec2<f16>`, for adapters with shader-f16.

alias kv_word = u32;

// The two values of a word.
fn kv_pair(w: kv_word) -> vec2<f32> {
    return unpack2x16float(w);
}

// a and b rounded to f16 (ties to even, see `f16_round`) as one word.
fn kv_pack(a: f32, b: f32) -> kv_word {
    return pack_f16(a, b);
}
