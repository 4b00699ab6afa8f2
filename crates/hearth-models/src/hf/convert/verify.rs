//! The written file, read back through hearth's GGUF path, must configure the model the
//! folder's config.json does.

use super::ConvertArch;
use crate::DecoderConfig;

/// `Ok` when `written` (from the GGUF header) runs the model `folder` (from config.json)
/// describes; else the setting that differs, for an error about config.json.
pub fn same_model(
    folder: &DecoderConfig,
    written: &DecoderConfig,
    arch: &ConvertArch,
) -> Result<(), String> {
    let mut want = folder.clone();
    let mut got = written.clone();
    if arch.permute_qk {
        // The Q / K rows were permuted for adjacent-pair rope: the same computation.
        want.rope.kind = got.rope.kind;
        want.rope_sliding.kind = got.rope_sliding.kind;
    }
    // f32 keys and tensors against values computed in f64.
    if close(want.attn_scale, got.attn_scale) {
        got.attn_scale = want.attn_scale;
    }
    for (w, g) in [
        (&want.rope, &mut got.rope),
        (&want.rope_sliding, &mut got.rope_sliding),
    ] {
        if close(w.freq_scale, g.freq_scale) {
            g.freq_scale = w.freq_scale;
        }
        let same = w.freq_factors.len() == g.freq_factors.len()
            && w.freq_factors
                .iter()
                .zip(&g.freq_factors)
                .all(|(a, b)| close(*a, *b));
        if same {
            g.freq_factors.clone_from(&w.freq_factors);
        }
    }
    if want == got {
        return Ok(());
    }
    let (a, b) = (format!("{want:#?}"), format!("{got:#?}"));
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let i = (0..a.len().min(b.len()))
        .find(|&i| a[i] != b[i])
        .unwrap_or(0);
    // The enclosing field of a nested value (`rope: RopeSpec {` → `rope.`).
    let indent = |s: &str| s.len() - s.trim_start().len();
    let parent = (0..i)
        .rev()
        .find(|&j| indent(a[j]) < indent(a[i]) && indent(a[j]) > 0)
        .and_then(|j| a[j].trim().split(':').next())
        .map(|field| format!("{field}."))
        .unwrap_or_default();
    // `field: value` of one line; an optional or nested value reads as set / not set.
    let split = |line: &str| {
        let line = line.trim().trim_end_matches(',');
        let (field, value) = line.split_once(": ").unwrap_or(("", line));
        let value = match value {
            "None" => "not set",
            v if v.ends_with('(') || v.ends_with('{') => "set",
            v => v,
        };
        (field.to_string(), value.to_string())
    };
    let (field, want) = split(a[i]);
    let (_, got) = split(b.get(i).copied().unwrap_or(""));
    Err(format!(
        "llama.cpp's \"{}\" keys cannot carry this configuration: {parent}{field} is {want} \
         from config.json, but {got} read back from the converted file",
        arch.gguf,
    ))
}

/// Equal within f32 rounding of a value computed in f64.
fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs())
}
