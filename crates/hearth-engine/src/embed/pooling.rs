//! How token hidden states become one vector per text: the sentence-transformers modules of a
//! folder (`modules.json`, its `Pooling` module's `config.json`, a `Normalize` module).

use std::path::Path;

use serde_json::Value;

use crate::EngineError;

/// Which token states make the text's vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolingMode {
    /// The mean over all tokens (special tokens included, as sentence-transformers does).
    Mean,
    /// The first token (`[CLS]`).
    Cls,
    /// The last token (decoder-only embedding models).
    LastToken,
}

/// The pooling and normalization a model's own configuration asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pooling {
    pub mode: PoolingMode,
    /// L2-normalize the pooled vector (a `Normalize` module is present).
    pub normalize: bool,
}

fn bad(path: &Path, reason: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("{}: {reason}", path.display()))
}

fn read_json(path: &Path) -> Result<Value, EngineError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(path, e))?;
    serde_json::from_str(&text).map_err(|e| bad(path, e))
}

impl Pooling {
    /// Read `dir/modules.json`; without one, `default` unnormalized (what sentence-transformers
    /// builds for a plain transformers folder is mean pooling; decoder folders get last-token).
    pub fn from_dir(dir: &Path, default: PoolingMode) -> Result<Self, EngineError> {
        let path = dir.join("modules.json");
        if !path.is_file() {
            return Ok(Self {
                mode: default,
                normalize: false,
            });
        }
        let Value::Array(modules) = read_json(&path)? else {
            return Err(bad(&path, "is not a list of modules"));
        };
        let mut mode = None;
        let mut normalize = false;
        for (i, m) in modules.iter().enumerate() {
            let field = |key: &str| m.get(key).and_then(Value::as_str);
            let ty =
                field("type").ok_or_else(|| bad(&path, format!("module {i} has no 'type'")))?;
            let short = ty.rsplit('.').next().unwrap_or(ty);
            match short {
                "Transformer" => {}
                "Normalize" => normalize = true,
                "Pooling" => {
                    let sub = field("path").unwrap_or("");
                    mode = Some(read_pooling(&dir.join(sub).join("config.json"))?);
                }
                _ => {
                    return Err(bad(
                        &path,
                        format!("module {i}: type '{ty}' is not supported yet"),
                    ))
                }
            }
        }
        Ok(Self {
            mode: mode.unwrap_or(default),
            normalize,
        })
    }

    /// Pool the hidden states `[n_tokens, n_embd]` of one text into its vector.
    pub fn apply(&self, hidden: &[f32], n_embd: usize) -> Vec<f32> {
        let n = hidden.len() / n_embd.max(1);
        let mut v = vec![0.0f32; n_embd];
        if n > 0 {
            match self.mode {
                PoolingMode::Cls => v.copy_from_slice(&hidden[..n_embd]),
                PoolingMode::LastToken => v.copy_from_slice(&hidden[(n - 1) * n_embd..]),
                PoolingMode::Mean => {
                    let mut sum = vec![0.0f64; n_embd];
                    for row in hidden.chunks_exact(n_embd) {
                        sum.iter_mut().zip(row).for_each(|(s, &x)| *s += x as f64);
                    }
                    v.iter_mut()
                        .zip(&sum)
                        .for_each(|(o, s)| *o = (s / n as f64) as f32);
                }
            }
        }
        if self.normalize {
            l2_normalize(&mut v);
        }
        v
    }
}

/// `v / max(‖v‖, 1e-12)`, as torch's `F.normalize`.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let d = norm.max(1e-12);
    v.iter_mut().for_each(|x| *x = (*x as f64 / d) as f32);
}

/// The mode a sentence-transformers `Pooling` config turns on (exactly one is supported).
fn read_pooling(path: &Path) -> Result<PoolingMode, EngineError> {
    let json = read_json(path)?;
    let on = |key: &str| json.get(key).and_then(Value::as_bool) == Some(true);
    let mut modes = Vec::new();
    for (key, mode) in [
        ("pooling_mode_mean_tokens", Some(PoolingMode::Mean)),
        ("pooling_mode_cls_token", Some(PoolingMode::Cls)),
        ("pooling_mode_lasttoken", Some(PoolingMode::LastToken)),
        ("pooling_mode_max_tokens", None),
        ("pooling_mode_mean_sqrt_len_tokens", None),
        ("pooling_mode_weightedmean_tokens", None),
    ] {
        if on(key) {
            let mode = mode.ok_or_else(|| bad(path, format!("'{key}' is not supported yet")))?;
            modes.push((key, mode));
        }
    }
    match modes.as_slice() {
        [(_, mode)] => Ok(*mode),
        [] => Err(bad(path, "turns on no pooling mode")),
        _ => Err(bad(
            path,
            "turns on several pooling modes (concatenated pooling is not supported yet)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_modes_pick_the_right_rows() {
        let hidden = [1.0, 2.0, 3.0, 6.0]; // two tokens, n_embd 2
        let pool = |mode, normalize| Pooling { mode, normalize }.apply(&hidden, 2);
        assert_eq!(pool(PoolingMode::Mean, false), vec![2.0, 4.0]);
        assert_eq!(pool(PoolingMode::Cls, false), vec![1.0, 2.0]);
        assert_eq!(pool(PoolingMode::LastToken, false), vec![3.0, 6.0]);
        let n = pool(PoolingMode::LastToken, true);
        assert!((n[0] - 1.0 / 5f32.sqrt()).abs() < 1e-7, "{n:?}");
    }
}
