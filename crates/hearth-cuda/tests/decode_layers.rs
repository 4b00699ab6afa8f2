//! A decode step's layers as one kernel (kernels/decode_layers.cu) against the same layers run
//! op by op on the GPU (the kernels it shares arithmetic with) and on the CPU backend (the
//! reference): random dense layers of every weight type the kernel decodes, head sizes 64 and
//! 128 with grouped heads, QK-norm or none, both rope layouts with and without frequency
//! factors, over enough positions to cross cache blocks scattered in memory; every other step
//! replays a recorded CUDA graph. Without a usable GPU the test prints "skipped: <reason>".

mod common;

use std::sync::Arc;

use common::{gpu, random_host_weight};
use hearth_backend::cpu::CpuBackend;
use hearth_backend::{
    Activation, AttnBatch, AttnParams, AttnSeq, Backend, DenseLayer, DenseStack, HostWeight,
    KvSpec, KvType, RopeKind, RopeRows, RopeSpec,
};
use hearth_quant::GgmlType;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const BLOCK: usize = 16;
const EPS: f32 = 1e-6;
/// Positions attention takes as one chunk in the one-kernel step (its DL_MIN_CHUNK).
const SHORT: usize = 16;

struct Layer<W> {
    attn_norm: W,
    wq: W,
    wk: W,
    wv: W,
    qk_norms: Option<(W, W)>,
    wo: W,
    ffn_norm: W,
    gate: W,
    up: W,
    down: W,
}

impl<W> Layer<W> {
    fn dense(&self) -> DenseLayer<'_, W> {
        DenseLayer {
            attn_norm: &self.attn_norm,
            wq: &self.wq,
            wk: &self.wk,
            wv: &self.wv,
            qk_norms: self.qk_norms.as_ref().map(|(a, b)| (a, b)),
            wo: &self.wo,
            ffn_norm: &self.ffn_norm,
            gate: &self.gate,
            up: &self.up,
            down: &self.down,
        }
    }
}

/// A shape and the weight types of its layers' matrices (q/k/v/o, gate/up, down).
struct Case {
    n_embd: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    n_ff: usize,
    types: [GgmlType; 3],
    qk_norm: bool,
    rope: RopeKind,
    factors: bool,
}

fn vector(n: usize, rng: &mut impl Rng) -> HostWeight {
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(0.5..1.5)).collect();
    HostWeight {
        name: "norm".into(),
        ty: GgmlType::F32,
        rows: 1,
        cols: n,
        data: Arc::new(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()),
        mlx: None,
    }
}

fn host_layer(c: &Case, rng: &mut impl Rng) -> Layer<HostWeight> {
    let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
    let [t_attn, t_ffn, t_down] = c.types;
    Layer {
        attn_norm: vector(c.n_embd, rng),
        wq: random_host_weight(t_attn, q_dim, c.n_embd, rng),
        wk: random_host_weight(t_attn, kv_dim, c.n_embd, rng),
        wv: random_host_weight(t_attn, kv_dim, c.n_embd, rng),
        qk_norms: c
            .qk_norm
            .then(|| (vector(c.head_dim, rng), vector(c.head_dim, rng))),
        wo: random_host_weight(t_attn, c.n_embd, q_dim, rng),
        ffn_norm: vector(c.n_embd, rng),
        gate: random_host_weight(t_ffn, c.n_ff, c.n_embd, rng),
        up: random_host_weight(t_ffn, c.n_ff, c.n_embd, rng),
        down: random_host_weight(t_down, c.n_embd, c.n_ff, rng),
    }
}

fn load<B: Backend>(be: &B, l: &Layer<HostWeight>) -> Layer<B::Weight> {
    let w = |h: &HostWeight| be.load_weight(h.clone()).expect("load weight");
    Layer {
        attn_norm: w(&l.attn_norm),
        wq: w(&l.wq),
        wk: w(&l.wk),
        wv: w(&l.wv),
        qk_norms: l.qk_norms.as_ref().map(|(a, b)| (w(a), w(b))),
        wo: w(&l.wo),
        ffn_norm: w(&l.ffn_norm),
        gate: w(&l.gate),
        up: w(&l.up),
        down: w(&l.down),
    }
}

/// What one step needs besides the layers.
struct Step<'a> {
    x: &'a [f32],
    pos: usize,
    table: &'a [u32],
    attn: &'a AttnParams,
    rope: &'a RopeSpec,
    n_ff: usize,
}

impl Step<'_> {
    /// The step's one sequence, as attention takes it.
    fn seqs(&self) -> [AttnSeq<'_>; 1] {
        [AttnSeq {
            token_start: 0,
            n_tokens: 1,
            first_pos: self.pos,
            block_table: self.table,
        }]
    }
}

/// The layers op by op, as the decoder runs them.
fn step_ops<B: Backend>(
    be: &B,
    layers: &[Layer<B::Weight>],
    cache: &mut B::KvCache,
    s: &Step,
) -> Vec<f32> {
    let p = s.attn;
    let (q_dim, kv_dim) = (p.n_heads * p.head_dim, p.n_kv_heads * p.head_dim);
    let positions = [s.pos as u32];
    let seqs = s.seqs();
    let batch = AttnBatch {
        seqs: &seqs,
        block_size: BLOCK,
    };
    let mut x = be.upload(s.x, 1, s.x.len()).expect("upload");
    for (il, l) in layers.iter().enumerate() {
        let mut q = be.alloc(1, q_dim).expect("alloc");
        let mut k = be.alloc(1, kv_dim).expect("alloc");
        let mut v = be.alloc(1, kv_dim).expect("alloc");
        be.rms_norm_matmul3(
            &x,
            &l.attn_norm,
            EPS,
            [&l.wq, &l.wk, &l.wv],
            [&mut q, &mut k, &mut v],
        )
        .expect("qkv");
        let mut ctx = be.alloc(1, q_dim).expect("alloc");
        let norms = l.qk_norms.as_ref().map(|(a, b)| (a, b));
        be.qk_norm_rope_attention(
            &mut q,
            &mut k,
            &v,
            norms,
            RopeRows::at(&positions),
            s.rope,
            EPS,
            cache,
            il,
            &batch,
            p,
            &mut ctx,
        )
        .expect("attention");
        be.matmul_add(&l.wo, &ctx, &mut x).expect("o");
        let mut act = be.alloc(1, s.n_ff).expect("alloc");
        be.rms_norm_gated_matmul(
            &x,
            &l.ffn_norm,
            EPS,
            &l.gate,
            &l.up,
            Activation::Silu,
            &mut act,
        )
        .expect("gate/up");
        be.matmul_add(&l.down, &act, &mut x).expect("down");
    }
    be.to_host(&x).expect("to host")
}

/// The layers in one `decode_layers` call, which must take them.
fn step_fused<B: Backend>(
    be: &B,
    layers: &[Layer<B::Weight>],
    cache: &mut B::KvCache,
    s: &Step,
) -> Vec<f32> {
    let positions = [s.pos as u32];
    let seqs = s.seqs();
    let batch = AttnBatch {
        seqs: &seqs,
        block_size: BLOCK,
    };
    let dense: Vec<DenseLayer<B::Weight>> = layers.iter().map(Layer::dense).collect();
    let stack = DenseStack {
        attn: s.attn,
        rope: s.rope,
        eps: EPS,
        activation: Activation::Silu,
        n_ff: s.n_ff,
    };
    let mut x = be.upload(s.x, 1, s.x.len()).expect("upload");
    let took = be
        .decode_layers(
            &mut x,
            &dense,
            &stack,
            RopeRows::at(&positions),
            cache,
            &batch,
        )
        .expect("decode_layers");
    assert!(took, "decode_layers declined a stack it supports");
    be.to_host(&x).expect("to host")
}

/// max |a − b| / max |b|.
fn rel_max(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    let d = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    if a.iter().any(|v| !v.is_finite()) {
        return f32::INFINITY;
    }
    d / scale
}

#[test]
fn one_kernel_decode_matches_the_layers_op_by_op() {
    let Some(gpu) = gpu() else {
        return;
    };
    let gpu = gpu.with_one_kernel_decode(true);
    let cpu = CpuBackend::new(2).expect("cpu backend");
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    use GgmlType::*;
    let cases = [
        Case {
            n_embd: 512,
            n_heads: 8,
            n_kv_heads: 4,
            head_dim: 128,
            n_ff: 1536,
            types: [Q8_0, Q8_0, Q8_0],
            qk_norm: true,
            rope: RopeKind::Neox,
            factors: false,
        },
        Case {
            n_embd: 512,
            n_heads: 8,
            n_kv_heads: 2,
            head_dim: 64,
            n_ff: 768,
            types: [Q4_K, Q4_K, Q6_K],
            qk_norm: false,
            rope: RopeKind::Normal,
            factors: true,
        },
        Case {
            n_embd: 384,
            n_heads: 6,
            n_kv_heads: 6,
            head_dim: 64,
            n_ff: 1024,
            types: [Q4_0, Q8_0, Q4_0],
            qk_norm: false,
            rope: RopeKind::Neox,
            factors: false,
        },
    ];
    let n_layers = 3;
    let n_steps = 40;
    for (ci, c) in cases.iter().enumerate() {
        let host: Vec<Layer<HostWeight>> = (0..n_layers).map(|_| host_layer(c, &mut rng)).collect();
        let on_gpu: Vec<_> = host.iter().map(|l| load(&gpu, l)).collect();
        let on_cpu: Vec<_> = host.iter().map(|l| load(&cpu, l)).collect();
        let attn = AttnParams {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            window: None,
            softcap: None,
        };
        let n_rot = c.head_dim;
        let rope = RopeSpec {
            kind: c.rope,
            n_rot,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: if c.factors {
                (0..n_rot / 2).map(|i| 1.0 + i as f32 / 8.0).collect()
            } else {
                Vec::new()
            },
        };
        let n_blocks = n_steps / BLOCK + 4;
        let mut table: Vec<u32> = (0..n_blocks as u32).collect();
        table.shuffle(&mut rng);
        let spec = KvSpec {
            kv_dims: vec![c.n_kv_heads * c.head_dim; n_layers],
            n_blocks,
            block_size: BLOCK,
            dtype: KvType::F16,
        };
        let mut cache_fused = gpu.new_kv_cache(&spec).expect("gpu cache");
        let mut cache_ops = gpu.new_kv_cache(&spec).expect("gpu cache");
        let mut cache_cpu = cpu.new_kv_cache(&spec).expect("cpu cache");
        let (mut worst_short, mut worst_ops, mut worst_cpu) = (0f32, 0f32, 0f32);
        for pos in 0..n_steps {
            let x: Vec<f32> = (0..c.n_embd).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let s = Step {
                x: &x,
                pos,
                table: &table,
                attn: &attn,
                rope: &rope,
                n_ff: c.n_ff,
            };
            // Replay keys per case and path: step 1 records, later steps replay.
            gpu.begin_forward(Some(100 + 2 * ci as u64));
            let fused = step_fused(&gpu, &on_gpu, &mut cache_fused, &s);
            gpu.begin_forward(Some(101 + 2 * ci as u64));
            let ops = step_ops(&gpu, &on_gpu, &mut cache_ops, &s);
            cpu.begin_forward(None);
            let want = step_ops(&cpu, &on_cpu, &mut cache_cpu, &s);
            // Up to SHORT positions attention is one chunk, merged as the op-by-op kernel does.
            if pos < SHORT {
                worst_short = worst_short.max(rel_max(&fused, &ops));
            }
            worst_ops = worst_ops.max(rel_max(&fused, &ops));
            worst_cpu = worst_cpu.max(rel_max(&fused, &want));
        }
        eprintln!(
            "case {ci} ({:?}, hd {}): one kernel vs op by op {worst_short:.2e} (first {SHORT} \
             steps), {worst_ops:.2e} (all), vs cpu {worst_cpu:.2e}",
            c.types, c.head_dim
        );
        // NOTE: the same arithmetic as the op-by-op kernels but for the order of the f64 sums
        // of squares in the norms (a different f32 mean only at a rounding midpoint) and, past
        // one chunk of positions, attention's softmax: each chunk rounds its weights to f16
        // against its own max and sum (the op-by-op kernel against the whole span's, as the
        // CPU does). The int8 activations turn such differences into steps of a quantum now
        // and then: 2.8e-2 on an H100, within the bound against the CPU below.
        assert!(
            worst_short <= 1e-6,
            "case {ci}: one kernel vs op by op {worst_short:e} within one chunk"
        );
        assert!(
            worst_ops <= 5e-2,
            "case {ci}: one kernel vs op by op {worst_ops:e}"
        );
        // The CPU quantizes activations the same way but sums in another order, and rounding
        // differences grow through the layers: the bound of the engine's CUDA-vs-CPU test
        // (first measured here: 3.0e-2 for three Q8_0 layers of random weights).
        assert!(
            worst_cpu <= 5e-2,
            "case {ci}: one kernel vs cpu {worst_cpu:e}"
        );
    }
}

#[test]
fn one_kernel_decode_declines_what_it_lacks() {
    let Some(gpu) = gpu() else {
        return;
    };
    let gpu = gpu.with_one_kernel_decode(true);
    let mut rng = rand::rngs::StdRng::seed_from_u64(78);
    // Head size 32: no kernel for it; the layers stay to the caller and x is untouched.
    let c = Case {
        n_embd: 256,
        n_heads: 8,
        n_kv_heads: 8,
        head_dim: 32,
        n_ff: 512,
        types: [GgmlType::Q8_0; 3],
        qk_norm: false,
        rope: RopeKind::Neox,
        factors: false,
    };
    let layers = [load(&gpu, &host_layer(&c, &mut rng))];
    let attn = AttnParams {
        n_heads: 8,
        n_kv_heads: 8,
        head_dim: 32,
        scale: 1.0,
        window: None,
        softcap: None,
    };
    let rope = RopeSpec {
        kind: RopeKind::Neox,
        n_rot: 32,
        freq_base: 10000.0,
        freq_scale: 1.0,
        freq_factors: Vec::new(),
    };
    let spec = KvSpec {
        kv_dims: vec![256],
        n_blocks: 2,
        block_size: BLOCK,
        dtype: KvType::F16,
    };
    let mut cache = gpu.new_kv_cache(&spec).expect("cache");
    let table = [1u32, 0];
    let seqs = [AttnSeq {
        token_start: 0,
        n_tokens: 1,
        first_pos: 0,
        block_table: &table,
    }];
    let batch = AttnBatch {
        seqs: &seqs,
        block_size: BLOCK,
    };
    let dense: Vec<_> = layers.iter().map(Layer::dense).collect();
    let stack = DenseStack {
        attn: &attn,
        rope: &rope,
        eps: EPS,
        activation: Activation::Silu,
        n_ff: 512,
    };
    gpu.begin_forward(None);
    let x0: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let mut x = gpu.upload(&x0, 1, 256).expect("upload");
    let took = gpu
        .decode_layers(
            &mut x,
            &dense,
            &stack,
            RopeRows::at(&[0]),
            &mut cache,
            &batch,
        )
        .expect("decode_layers");
    assert!(!took);
    assert_eq!(gpu.to_host(&x).expect("to host"), x0);
}
