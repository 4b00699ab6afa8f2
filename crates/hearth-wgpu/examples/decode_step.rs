//! Where the time of one decode step goes on the wgpu backend: a Qwen3-0.6B-shaped step
//! (random Q8_0 weights, one sequence, `CTX` cached positions) made of the same backend calls
//! as the decoder, timed as a whole (host recording apart from the device) and op by op.
//!
//! usage: cargo run --example decode_step -- [LAYERS [CTX [VOCAB [REPS]]]]
//! (defaults 28 256 65536 3; VOCAB 151936 needs an adapter whose bindings take 157 MiB)
//!
//! Op by op, each op is recorded `REPS` times and read back once, so the time per op is its
//! device time plus its share of host recording; `host` lines are the recording alone.

use std::sync::Arc;
use std::time::Instant;

use hearth_backend::{
    Activation, AttnBatch, AttnParams, AttnSeq, Backend, HostWeight, KvSpec, KvType, RopeKind,
    RopeRows, RopeSpec,
};
use hearth_quant::GgmlType;
use hearth_wgpu::{WgpuBackend, WgpuKvCache, WgpuTensor, WgpuWeight};

// Qwen3-0.6B.
const N_EMBD: usize = 1024;
const N_HEADS: usize = 16;
const N_KV_HEADS: usize = 8;
const HEAD_DIM: usize = 128;
const N_FF: usize = 3072;
const BLOCK_SIZE: usize = 16;

struct Layer {
    norm: WgpuWeight,
    q_norm: WgpuWeight,
    k_norm: WgpuWeight,
    wq: WgpuWeight,
    wk: WgpuWeight,
    wv: WgpuWeight,
    wo: WgpuWeight,
    gate: WgpuWeight,
    up: WgpuWeight,
    down: WgpuWeight,
}

/// A random weight; Q8_0 for matrices, f32 for vectors.
fn weight(be: &WgpuBackend, seed: u64, rows: usize, cols: usize) -> WgpuWeight {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let vals: Vec<f32> = (0..rows * cols)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 0.04 - 0.02
        })
        .collect();
    let ty = if rows == 1 {
        GgmlType::F32
    } else {
        GgmlType::Q8_0
    };
    let mut bytes = vec![0u8; cols / ty.block_size() * ty.type_size() * rows];
    let row_bytes = bytes.len() / rows;
    for (src, dst) in vals.chunks(cols).zip(bytes.chunks_mut(row_bytes)) {
        hearth_quant::quantize_row(ty, src, dst).expect("quantize");
    }
    be.load_weight(HostWeight {
        name: format!("w{seed}"),
        ty,
        rows,
        cols,
        data: Arc::new(bytes),
        mlx: None,
    })
    .expect("load weight")
}

struct Step<'a> {
    be: &'a WgpuBackend,
    layers: &'a [Layer],
    lm_head: &'a WgpuWeight,
    vocab: usize,
    out_norm: &'a WgpuWeight,
    cache: WgpuKvCache,
    table: Vec<u32>,
    pos: usize,
}

fn rope() -> RopeSpec {
    RopeSpec {
        kind: RopeKind::Neox,
        n_rot: HEAD_DIM,
        freq_base: 1e6,
        freq_scale: 1.0,
        freq_factors: Vec::new(),
    }
}

fn attn_params() -> AttnParams {
    AttnParams {
        n_heads: N_HEADS,
        n_kv_heads: N_KV_HEADS,
        head_dim: HEAD_DIM,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        window: None,
        softcap: None,
    }
}

impl Step<'_> {
    fn attention_block(&mut self, il: usize, x: &mut WgpuTensor) {
        let (be, l) = (self.be, &self.layers[il]);
        let h = be.rms_norm_copy(x, &l.norm, 1e-6).expect("norm");
        let mut q = be.alloc(1, N_HEADS * HEAD_DIM).expect("alloc");
        let mut k = be.alloc(1, N_KV_HEADS * HEAD_DIM).expect("alloc");
        let mut v = be.alloc(1, N_KV_HEADS * HEAD_DIM).expect("alloc");
        be.matmul3([&l.wq, &l.wk, &l.wv], &h, [&mut q, &mut k, &mut v])
            .expect("qkv");
        let pos = [self.pos as u32];
        be.qk_norm_rope(
            &mut q,
            &mut k,
            Some((&l.q_norm, &l.k_norm)),
            RopeRows::at(&pos),
            HEAD_DIM,
            &rope(),
            1e-6,
        )
        .expect("rope");
        let seqs = [AttnSeq {
            token_start: 0,
            n_tokens: 1,
            first_pos: self.pos,
            block_table: &self.table,
        }];
        let batch = AttnBatch {
            seqs: &seqs,
            block_size: BLOCK_SIZE,
        };
        let mut ctx = be.alloc(1, N_HEADS * HEAD_DIM).expect("alloc");
        be.attention(
            &q,
            &k,
            &v,
            &mut self.cache,
            il,
            &batch,
            &attn_params(),
            &mut ctx,
        )
        .expect("attention");
        be.matmul_add(&l.wo, &ctx, x).expect("wo");
    }

    fn ffn_block(&self, il: usize, x: &mut WgpuTensor) {
        let (be, l) = (self.be, &self.layers[il]);
        let h = be.rms_norm_copy(x, &l.norm, 1e-6).expect("norm");
        let mut act = be.alloc(1, N_FF).expect("alloc");
        be.gated_matmul(&l.gate, &l.up, &h, Activation::Silu, &mut act)
            .expect("gate/up");
        be.matmul_add(&l.down, &act, x).expect("down");
    }

    fn head(&self, x: &mut WgpuTensor) -> WgpuTensor {
        let be = self.be;
        be.rms_norm(x, self.out_norm, N_EMBD, 1e-6).expect("norm");
        let mut logits = be.alloc(1, self.vocab).expect("alloc");
        be.matmul(self.lm_head, x, &mut logits).expect("lm head");
        logits
    }

    /// One whole decode step: (host recording seconds, total seconds).
    fn run(&mut self) -> (f64, f64) {
        let t0 = Instant::now();
        let mut x = self.be.upload(&[0.01; N_EMBD], 1, N_EMBD).expect("x");
        for il in 0..self.layers.len() {
            self.attention_block(il, &mut x);
            self.ffn_block(il, &mut x);
        }
        let logits = self.head(&mut x);
        let host = t0.elapsed().as_secs_f64();
        self.be.to_host(&logits).expect("read back");
        (host, t0.elapsed().as_secs_f64())
    }
}

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// Record `f` `reps` times, read `probe` back; milliseconds per repetition.
fn time_op(be: &WgpuBackend, reps: usize, probe: &WgpuTensor, mut f: impl FnMut()) -> f64 {
    be.to_host(probe).expect("sync");
    let t0 = Instant::now();
    for _ in 0..reps {
        f();
    }
    be.to_host(probe).expect("sync");
    t0.elapsed().as_secs_f64() * 1e3 / reps as f64
}

fn main() {
    let (n_layers, ctx, vocab, reps) = (arg(1, 28), arg(2, 256), arg(3, 65536), arg(4, 3));
    let be = match WgpuBackend::open() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("decode_step: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", be.name());
    let t = Instant::now();
    let layers: Vec<Layer> = (0..n_layers)
        .map(|i| {
            let s = 100 * i as u64;
            Layer {
                norm: weight(&be, s + 1, 1, N_EMBD),
                q_norm: weight(&be, s + 2, 1, HEAD_DIM),
                k_norm: weight(&be, s + 3, 1, HEAD_DIM),
                wq: weight(&be, s + 4, N_HEADS * HEAD_DIM, N_EMBD),
                wk: weight(&be, s + 5, N_KV_HEADS * HEAD_DIM, N_EMBD),
                wv: weight(&be, s + 6, N_KV_HEADS * HEAD_DIM, N_EMBD),
                wo: weight(&be, s + 7, N_EMBD, N_HEADS * HEAD_DIM),
                gate: weight(&be, s + 8, N_FF, N_EMBD),
                up: weight(&be, s + 9, N_FF, N_EMBD),
                down: weight(&be, s + 10, N_EMBD, N_FF),
            }
        })
        .collect();
    let lm_head = weight(&be, 7, vocab, N_EMBD);
    let out_norm = weight(&be, 8, 1, N_EMBD);
    let n_blocks = (ctx + 1).div_ceil(BLOCK_SIZE);
    let cache = be
        .new_kv_cache(&KvSpec {
            kv_dims: vec![N_KV_HEADS * HEAD_DIM; n_layers],
            n_blocks,
            block_size: BLOCK_SIZE,
            dtype: KvType::F16,
        })
        .expect("cache");
    println!(
        "{n_layers} layers, vocab {vocab}, {ctx} cached positions; weights made in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut step = Step {
        be: &be,
        layers: &layers,
        lm_head: &lm_head,
        vocab,
        out_norm: &out_norm,
        cache,
        table: (0..n_blocks as u32).collect(),
        pos: ctx,
    };
    step.run(); // compiles the kernels
    for _ in 0..reps {
        let before = be.dispatches_recorded();
        let (host, total) = step.run();
        println!(
            "step   {:9.2} ms   host recording {:7.2} ms   {} dispatches",
            total * 1e3,
            host * 1e3,
            be.dispatches_recorded() - before
        );
    }

    // Op by op, over the whole model (per step).
    let probe = be.alloc(1, 4).expect("probe");
    let mut x = be.upload(&[0.01; N_EMBD], 1, N_EMBD).expect("x");
    let n = n_layers;
    let attn = time_op(&be, reps, &probe, || {
        for il in 0..n {
            step.attention_block(il, &mut x);
        }
    });
    let ffn = time_op(&be, reps, &probe, || {
        for il in 0..n {
            step.ffn_block(il, &mut x);
        }
    });
    let head = time_op(&be, reps, &probe, || {
        step.head(&mut x);
    });
    let h = be.alloc(1, N_EMBD).expect("h");
    let mut ctx_out = be.alloc(1, N_HEADS * HEAD_DIM).expect("ctx");
    let q = be.alloc(1, N_HEADS * HEAD_DIM).expect("q");
    let kv = be.alloc(1, N_KV_HEADS * HEAD_DIM).expect("kv");
    let seqs = [AttnSeq {
        token_start: 0,
        n_tokens: 1,
        first_pos: ctx,
        block_table: &step.table,
    }];
    let batch = AttnBatch {
        seqs: &seqs,
        block_size: BLOCK_SIZE,
    };
    let attention_only = time_op(&be, reps, &probe, || {
        for il in 0..n {
            be.attention(
                &q,
                &kv,
                &kv,
                &mut step.cache,
                il,
                &batch,
                &attn_params(),
                &mut ctx_out,
            )
            .expect("attention");
        }
    });
    let mut ff = be.alloc(1, N_FF).expect("ff");
    let gemv_ff = time_op(&be, reps, &probe, || {
        for l in &layers {
            be.matmul(&l.gate, &h, &mut ff).expect("gate");
        }
    });
    let norms = time_op(&be, reps, &probe, || {
        for l in &layers {
            let _ = be.rms_norm_copy(&h, &l.norm, 1e-6).expect("norm");
        }
    });
    println!("per step, op by op (ms, device + recording):");
    println!("  attention blocks  {attn:9.2}   (norm, qkv, qk-norm, rope, attention, o)");
    println!("  ffn blocks        {ffn:9.2}   (norm, gate, up, glu, down)");
    println!("  head              {head:9.2}   (norm, lm head)");
    println!("  attention alone   {attention_only:9.2}");
    println!("  one gate GEMV     {gemv_ff:9.2}   (x {n} layers; [{N_FF}, {N_EMBD}])");
    println!("  rms_norm_copy     {norms:9.2}   (x {n} layers)");
}
