// The KV cache's words as kv_words.wgsl's, typed `vec2<f16>` (the module starts with `enable
// f16;`): the same bytes in the cache and the same values, read and written as f16 by the
// device's own conversions. Exact both ways: every value written is an f16 already
// (`f16_round`), and every f16 is an f32.

alias kv_word = vec2<f16>;

fn kv_pair(w: kv_word) -> vec2<f32> {
    return vec2<f32>(w);
}

fn kv_pack(a: f32, b: f32) -> kv_word {
    return vec2<f16>(vec2<f32>(f16_round(a), f16_round(b)));
}
