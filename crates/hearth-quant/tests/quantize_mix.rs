//! The per-tensor type mix of each preset equals llama.cpp's.
//!
//! The expected types are what `llama_model_quantize` (llama-cpp-python 0.3.16) chose for
//! `wide-qwen3-f16.gguf`, the 8-layer model `scripts/check_quantize_llamacpp.py` writes
//! (rows of 256 and 768, 8 query heads over 2 KV heads, separate output.weight).

use hearth_quant::{choose_types, llama_tensor_order, GgmlType, ModelShape, Preset, TensorSpec};

const N_LAYER: usize = 8;
const KINDS: [(&str, [u64; 2]); 7] = [
    ("attn_q", [256, 512]),
    ("attn_k", [256, 128]),
    ("attn_v", [256, 128]),
    ("attn_output", [512, 256]),
    ("ffn_gate", [256, 768]),
    ("ffn_up", [256, 768]),
    ("ffn_down", [768, 256]),
];

/// Tensors whose type differs from the preset's default, per kind in layer order.
#[rustfmt::skip]
const LLAMA_CPP_MIX: &[(&str, &[(&str, &str)])] = &[
    ("Q4_0", &[("output", "Q6_K")]),
    ("Q4_1", &[("output", "Q6_K")]),
    ("Q5_0", &[("output", "Q6_K")]),
    ("Q5_1", &[("output", "Q6_K")]),
    ("Q8_0", &[]),
    ("Q2_K", &[("output", "Q6_K"), ("attn_output", "Q3_K Q3_K Q3_K Q3_K Q3_K Q3_K Q3_K Q3_K"), ("attn_v", "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K"), ("ffn_down", "Q3_K Q3_K Q3_K Q3_K Q3_K Q3_K Q3_K Q3_K")]),
    ("Q3_K_S", &[("output", "Q6_K")]),
    ("Q3_K_M", &[("output", "Q6_K"), ("attn_output", "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K"), ("attn_v", "Q5_K Q5_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K"), ("ffn_down", "Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K")]),
    ("Q4_K_S", &[("output", "Q6_K"), ("attn_v", "Q5_K Q5_K Q5_K Q5_K Q4_K Q4_K Q4_K Q4_K"), ("ffn_down", "Q5_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K Q4_K")]),
    ("Q4_K_M", &[("output", "Q6_K"), ("attn_v", "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K"), ("ffn_down", "Q6_K Q4_K Q4_K Q6_K Q4_K Q4_K Q6_K Q6_K")]),
    ("Q5_K_S", &[("output", "Q6_K")]),
    ("Q5_K_M", &[("output", "Q6_K"), ("attn_v", "Q6_K Q5_K Q5_K Q6_K Q5_K Q5_K Q6_K Q6_K"), ("ffn_down", "Q6_K Q5_K Q5_K Q6_K Q5_K Q5_K Q6_K Q6_K")]),
    ("Q6_K", &[]),
];

fn type_named(name: &str) -> GgmlType {
    (0..40)
        .filter_map(GgmlType::from_id)
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no type {name}"))
}

/// (name, dims) of the wide model, in file order: embeddings and norms first, then layers.
fn wide_model() -> Vec<(String, Vec<u64>)> {
    let mut t = vec![
        ("token_embd.weight".to_string(), vec![256, 512]),
        ("output_norm.weight".to_string(), vec![256]),
        ("output.weight".to_string(), vec![256, 512]),
    ];
    for i in 0..N_LAYER {
        t.push((format!("blk.{i}.attn_norm.weight"), vec![256]));
        for (kind, dims) in KINDS {
            t.push((format!("blk.{i}.{kind}.weight"), dims.to_vec()));
        }
        t.push((format!("blk.{i}.attn_q_norm.weight"), vec![64]));
    }
    t
}

#[test]
fn preset_mixes_equal_llama_cpp() {
    let shape = ModelShape {
        arch: "qwen3".into(),
        n_layer: N_LAYER as u32,
        n_head: 8,
        n_head_kv: 2,
        n_expert: 0,
    };
    let model = wide_model();
    let specs: Vec<TensorSpec<'_>> = model
        .iter()
        .map(|(name, dims)| TensorSpec {
            name,
            dims,
            ty: if dims.len() == 1 {
                GgmlType::F32
            } else {
                GgmlType::F16
            },
        })
        .collect();
    for &(preset_name, overrides) in LLAMA_CPP_MIX {
        let preset = Preset::parse(preset_name).unwrap();
        let choices = choose_types(preset, &shape, &specs).unwrap();
        for (spec, choice) in specs.iter().zip(&choices) {
            let kind = spec
                .name
                .trim_end_matches(".weight")
                .rsplit('.')
                .next()
                .unwrap();
            let layer = spec
                .name
                .split('.')
                .nth(1)
                .and_then(|l| l.parse::<usize>().ok());
            let want = match overrides.iter().find(|(k, _)| *k == kind) {
                _ if spec.dims.len() == 1 => GgmlType::F32,
                Some((_, types)) => {
                    let types: Vec<&str> = types.split(' ').collect();
                    type_named(types[layer.unwrap_or(0)])
                }
                None => preset.default_type(),
            };
            assert_eq!(choice.ty, want, "{preset_name} {}", spec.name);
            assert!(!choice.fallback, "{preset_name} {}", spec.name);
        }
    }
}

#[test]
fn layers_are_walked_by_number_not_by_name() {
    let names = [
        "blk.10.attn_v.weight",
        "blk.2.attn_v.weight",
        "output.weight",
    ];
    assert_eq!(llama_tensor_order(&names), vec![2, 1, 0]);
    // With 12 layers, Q4_K_M gives attn_v Q6_K in layers 0, 3, 6, 9, 10 and 11 (the first
    // eighth, the last eighth, and every third layer between), whatever order the file has.
    let names: Vec<String> = (0..12)
        .rev()
        .map(|i| format!("blk.{i}.attn_v.weight"))
        .collect();
    let dims = [256u64, 256];
    let specs: Vec<TensorSpec<'_>> = names
        .iter()
        .map(|n| TensorSpec {
            name: n,
            dims: &dims,
            ty: GgmlType::F16,
        })
        .collect();
    let shape = ModelShape {
        arch: "llama".into(),
        n_layer: 12,
        n_head: 8,
        n_head_kv: 8,
        n_expert: 0,
    };
    let choices = choose_types(Preset::Q4_K_M, &shape, &specs).unwrap();
    let bumped: Vec<usize> = (0..12)
        .filter(|&i| choices[11 - i].ty == GgmlType::Q6_K)
        .collect();
    assert_eq!(bumped, [0, 3, 6, 9, 10, 11]);
}

#[test]
fn fallbacks_follow_row_length() {
    let shape = ModelShape {
        arch: "qwen3".into(),
        n_layer: 1,
        n_head: 4,
        n_head_kv: 2,
        n_expert: 0,
    };
    let spec = |name: &'static str, dims: &'static [u64]| TensorSpec {
        name,
        dims,
        ty: GgmlType::F16,
    };
    let cases = [
        (
            Preset::Q4_K_S,
            spec("blk.0.attn_q.weight", &[64, 64]),
            GgmlType::Q5_0,
        ),
        (
            Preset::Q5_K_S,
            spec("blk.0.attn_q.weight", &[64, 64]),
            GgmlType::Q5_1,
        ),
        (
            Preset::Q6_K,
            spec("blk.0.attn_q.weight", &[64, 64]),
            GgmlType::Q8_0,
        ),
        (
            Preset::Q3_K_S,
            spec("blk.0.attn_q.weight", &[64, 64]),
            GgmlType::IQ4_NL,
        ),
        // No 32-element blocks fit either: F16.
        (
            Preset::Q4_K_S,
            spec("blk.0.attn_q.weight", &[48, 64]),
            GgmlType::F16,
        ),
    ];
    for (preset, t, want) in cases {
        let got = choose_types(preset, &shape, &[t]).unwrap()[0];
        assert_eq!(
            (got.ty, got.fallback),
            (want, true),
            "{preset} {:?}",
            t.dims
        );
    }
    // The legacy types have no fallback: llama.cpp refuses such a tensor.
    let err = choose_types(
        Preset::Q4_0,
        &shape,
        &[spec("blk.0.attn_q.weight", &[48, 64])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("blk.0.attn_q.weight"), "{err}");
    // Norms, 1-D tensors and routers are never quantized.
    for (name, dims) in [
        ("blk.0.attn_norm.weight", &[64u64, 64][..]),
        ("blk.0.attn_q.bias", &[64, 64][..]),
        ("blk.0.ffn_gate_inp.weight", &[64, 8][..]),
        ("blk.0.attn_q.weight", &[64, 1][..]),
    ] {
        let got = choose_types(Preset::Q4_0, &shape, &[spec(name, dims)]).unwrap()[0];
        assert_eq!(got.ty, GgmlType::F16, "{name}");
    }
}
