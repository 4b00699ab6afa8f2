//! Sparse mixture-of-experts feed-forward blocks (Mixtral, Qwen 3 MoE).
//!
//! ```text
//!  router logits = W_router · h            [n_tokens, n_expert]
//!  per token:  p = softmax(logits); keep the top k; (optionally) renormalise them to sum 1
//!  per expert e with routed rows R_e and weights w_e:
//!              y = W_down_e · (act(W_gate_e · h[R_e]) * (W_up_e · h[R_e]))
//!              x[R_e] += w_e · y
//! ```
//!
//! Each expert runs once per forward on the rows routed to it, so a batch costs one gated
//! matmul per expert that any of its tokens chose. Each row's experts are added in expert
//! order whatever else is in the batch, so batched and one-at-a-time runs agree exactly.

use hearth_backend::{Activation, Backend};
use hearth_gguf::Metadata;

use crate::{ModelError, TensorLoader};

/// How a sparse block routes tokens to experts.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts each token is sent to (top-k).
    pub n_expert_used: usize,
    /// Hidden width of one expert's feed-forward.
    pub n_ff_expert: usize,
    /// Renormalise the chosen experts' probabilities to sum to 1 (Mixtral always;
    /// Qwen 3 MoE when `norm_topk_prob`).
    pub norm_topk_prob: bool,
}

impl MoeConfig {
    /// Check that the counts make sense; `key` names the top-k setting in errors.
    pub fn validate(&self, key: &str) -> Result<(), String> {
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return Err(format!(
                "{key}: {} experts per token of {}",
                self.n_expert_used, self.n_expert
            ));
        }
        Ok(())
    }

    /// The sparse-block settings of a GGUF file's `{arch}.expert_*` keys, or `None` when
    /// `{arch}.expert_count` is absent or 0 (a dense model). `n_ff_key` holds an expert's
    /// width (llama.cpp's Mixtral uses `feed_forward_length`, Qwen 3 MoE
    /// `expert_feed_forward_length`).
    pub fn from_gguf(
        meta: &Metadata,
        arch: &str,
        n_ff_key: &str,
    ) -> Result<Option<Self>, ModelError> {
        let key = |k: &str| format!("{arch}.{k}");
        let n_expert = match meta.get_u32(&key("expert_count"))? {
            None | Some(0) => return Ok(None),
            Some(n) => n as usize,
        };
        let n_expert_used = meta.require_u32(&key("expert_used_count"))? as usize;
        let n_ff_expert = meta.require_u32(&key(n_ff_key))? as usize;
        if n_ff_expert == 0 {
            return Err(ModelError::BadConfig {
                key: key(n_ff_key),
                reason: "must be positive".into(),
            });
        }
        // NOTE: llama.cpp renormalises the top-k weights of both Mixtral and Qwen 3 MoE.
        let norm_topk_prob = meta.get_bool(&key("expert_weights_norm"))?.unwrap_or(true);
        let unsupported = |k: &str, reason: &str| ModelError::BadConfig {
            key: key(k),
            reason: reason.into(),
        };
        // llama.cpp's gating functions: 1 softmax, 2 sigmoid (DeepSeek V3 and others).
        if meta
            .get_u32(&key("expert_gating_func"))?
            .is_some_and(|f| f != 1)
        {
            return Err(unsupported(
                "expert_gating_func",
                "is not softmax (1); other gating is not supported yet",
            ));
        }
        if meta
            .get_u32(&key("expert_shared_count"))?
            .is_some_and(|n| n > 0)
        {
            return Err(unsupported(
                "expert_shared_count",
                "is set; shared experts are not supported yet",
            ));
        }
        let c = Self {
            n_expert,
            n_expert_used,
            n_ff_expert,
            norm_topk_prob,
        };
        c.validate(&key("expert_used_count"))
            .map_err(|reason| ModelError::BadConfig {
                key: key("expert_used_count"),
                reason,
            })?;
        Ok(Some(c))
    }
}

/// One expert: a gated feed-forward block.
struct Expert<W> {
    gate: W, // experts.E.gate_proj (w1)  [n_ff_expert, n_embd]
    up: W,   // experts.E.up_proj (w3)    [n_ff_expert, n_embd]
    down: W, // experts.E.down_proj (w2)  [n_embd, n_ff_expert]
}

/// A sparse feed-forward block: a router and its experts.
pub struct SparseFfn<W> {
    router: W, // mlp.gate / block_sparse_moe.gate  [n_expert, n_embd]
    experts: Vec<Expert<W>>,
    config: MoeConfig,
}

impl<W> SparseFfn<W> {
    /// Load layer `il`'s router and experts (llama.cpp names: `blk.N.ffn_gate_inp`,
    /// `blk.N.ffn_{gate,up,down}_exps`), each expert a weight of its own in its stored type.
    pub fn load<B: Backend<Weight = W>>(
        loader: &TensorLoader<B>,
        il: usize,
        config: &MoeConfig,
        n_embd: usize,
    ) -> Result<Self, ModelError> {
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let (n_expert, n_ff) = (config.n_expert, config.n_ff_expert);
        let mut experts = Vec::with_capacity(n_expert);
        for e in 0..n_expert {
            experts.push(Expert {
                gate: loader.load_expert(&n("ffn_gate_exps"), e, n_expert, n_ff, n_embd)?,
                up: loader.load_expert(&n("ffn_up_exps"), e, n_expert, n_ff, n_embd)?,
                down: loader.load_expert(&n("ffn_down_exps"), e, n_expert, n_embd, n_ff)?,
            });
        }
        Ok(Self {
            router: loader.load(&n("ffn_gate_inp"), n_expert, n_embd)?,
            experts,
            config: config.clone(),
        })
    }

    /// `x += Σ_e w_e · expert_e(h)` over each row's chosen experts; `h` and `x` are
    /// `[n_tokens, n_embd]`.
    pub fn forward_add<B: Backend<Weight = W>>(
        &self,
        be: &B,
        h: &B::Tensor,
        act: Activation,
        x: &mut B::Tensor,
    ) -> Result<(), ModelError> {
        let (n_tokens, _) = be.shape(h);
        let c = &self.config;
        let mut logits = be.alloc(n_tokens, c.n_expert)?; // [n_tokens, n_expert]
        be.matmul(&self.router, h, &mut logits)?;
        // NOTE: which rows go where decides the shapes of the expert matmuls, so the routing
        // is read back to the host.
        let routes = route(&be.to_host(&logits)?, c);
        for (expert, (rows, weights)) in self.experts.iter().zip(&routes) {
            if rows.is_empty() {
                continue;
            }
            let hx = be.gather_rows(h, rows)?; // [rows.len(), n_embd]
            let mut act_out = be.alloc(rows.len(), c.n_ff_expert)?; // [rows.len(), n_ff_expert]
            be.gated_matmul(&expert.gate, &expert.up, &hx, act, &mut act_out)?;
            let (_, n_embd) = be.shape(&hx);
            let mut y = be.alloc(rows.len(), n_embd)?;
            be.matmul(&expert.down, &act_out, &mut y)?;
            be.scatter_add_rows(x, &y, rows, weights)?;
        }
        Ok(())
    }
}

/// Per expert, the rows routed to it and their weights, from router logits
/// `[n_tokens, n_expert]`: softmax, top `n_expert_used` (ties to the lower index), and
/// renormalised when the config says so.
fn route(logits: &[f32], c: &MoeConfig) -> Vec<(Vec<usize>, Vec<f32>)> {
    let mut out = vec![(Vec::new(), Vec::new()); c.n_expert];
    let mut order: Vec<usize> = Vec::with_capacity(c.n_expert);
    for (row, l) in logits.chunks_exact(c.n_expert).enumerate() {
        let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let exp: Vec<f32> = l.iter().map(|v| (v - max).exp()).collect();
        let sum: f32 = exp.iter().sum();
        order.clear();
        order.extend(0..c.n_expert);
        // NOTE: a stable sort keeps the lower index first among equal probabilities.
        order.sort_by(|&a, &b| exp[b].total_cmp(&exp[a]));
        let chosen = &order[..c.n_expert_used];
        let probs: Vec<f32> = chosen.iter().map(|&e| exp[e] / sum).collect();
        let total: f32 = probs.iter().sum();
        for (&e, &p) in chosen.iter().zip(&probs) {
            out[e].0.push(row);
            out[e].1.push(if c.norm_topk_prob { p / total } else { p });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(norm: bool) -> MoeConfig {
        MoeConfig {
            n_expert: 4,
            n_expert_used: 2,
            n_ff_expert: 8,
            norm_topk_prob: norm,
        }
    }

    #[test]
    fn routing_takes_the_top_k_of_the_softmax() {
        // Row 0 prefers experts 2 then 0; row 1 prefers 3 then 2.
        let logits = [1.0, 0.0, 2.0, -1.0, 0.0, 0.0, 1.0, 3.0];
        let r = route(&logits, &config(false));
        let p0: Vec<f32> = {
            let e: Vec<f32> = logits[..4].iter().map(|v| v.exp()).collect();
            let s: f32 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        };
        let close = |a: f32, b: f32| (a - b).abs() < 1e-6;
        assert_eq!(r[0].0, vec![0]);
        assert!(close(r[0].1[0], p0[0]), "{:?} vs {p0:?}", r[0]);
        assert_eq!(r[1], (vec![], vec![]));
        assert_eq!(r[2].0, vec![0, 1]);
        assert!(close(r[2].1[0], p0[2]), "{:?} vs {p0:?}", r[2]);
        assert_eq!(r[3].0, vec![1]);
        let n = route(&logits, &config(true));
        let w0 = n[0].1[0] + n[2].1[0];
        assert!((w0 - 1.0).abs() < 1e-6, "renormalised weights sum to {w0}");
        assert!((n[2].1[0] - p0[2] / (p0[2] + p0[0])).abs() < 1e-7);
    }

    #[test]
    fn ties_go_to_the_lower_expert() {
        let r = route(&[0.5; 4], &config(true));
        assert_eq!(r[0], (vec![0], vec![0.5]));
        assert_eq!(r[1], (vec![0], vec![0.5]));
        assert!(r[2].0.is_empty() && r[3].0.is_empty());
    }
}
