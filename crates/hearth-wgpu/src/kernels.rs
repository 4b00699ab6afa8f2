//! The WGSL sources, assembled per kernel and weight type, and their bind-group layouts.
//!
//! WGSL has no includes: a module is the prelude, then (for weight kernels) the block readers,
//! then the kernel file with `DEQ`, `BLOCK` and `BLOCK_BYTES` replaced for one weight type (for
//! the 8-bit matmuls `QTILE`, `QBLOCK` and `QBLOCK_BYTES`).

use hearth_quant::GgmlType;

const PRELUDE: &str = include_str!("kernels/prelude.wgsl");
const DEQUANT: &str = include_str!("kernels/dequant.wgsl");
const MATMUL: &str = include_str!("kernels/matmul.wgsl");
const MATMUL_SHARED: &str = include_str!("kernels/matmul_shared.wgsl");
const MATMUL_SUBGROUP: &str = include_str!("kernels/matmul_subgroup.wgsl");
const MATMUL_INT8_COMMON: &str = include_str!("kernels/matmul_int8_common.wgsl");
const MATMUL_INT8: &str = include_str!("kernels/matmul_int8.wgsl");
const MATMUL_INT8_QKV: &str = include_str!("kernels/matmul_int8_qkv.wgsl");
const MATMUL_INT8_GLU: &str = include_str!("kernels/matmul_int8_glu.wgsl");
const INT8_INPUT_QUANTIZED: &str = include_str!("kernels/int8_input_quantized.wgsl");
const INT8_INPUT_NORMED: &str = include_str!("kernels/int8_input_normed.wgsl");
const QUANTIZE: &str = include_str!("kernels/quantize.wgsl");
const QUANTIZE_COMMON: &str = include_str!("kernels/quantize_common.wgsl");
const FMA: &str = include_str!("kernels/fma.wgsl");
const EXACT: &str = include_str!("kernels/exact.wgsl");
const DOUBLE_WORD: &str = include_str!("kernels/double_word.wgsl");
const EMBED: &str = include_str!("kernels/embed.wgsl");
const ELEMENTWISE: &str = include_str!("kernels/elementwise.wgsl");
const NORM: &str = include_str!("kernels/norm.wgsl");
const ROPE: &str = include_str!("kernels/rope.wgsl");
const ATTENTION_COMMON: &str = include_str!("kernels/attention_common.wgsl");
const ATTENTION: &str = include_str!("kernels/attention.wgsl");
const ATTENTION_SPLIT: &str = include_str!("kernels/attention_split.wgsl");
const KV_WORDS: &str = include_str!("kernels/kv_words.wgsl");
const KV_WORDS_F16: &str = include_str!("kernels/kv_words_f16.wgsl");
const MLX_COMMON: &str = include_str!("kernels/mlx_common.wgsl");
const MLX_MATMUL_COMMON: &str = include_str!("kernels/mlx_matmul_common.wgsl");
const MLX_MATMUL: &str = include_str!("kernels/mlx_matmul.wgsl");
const MLX_MATMUL_QKV: &str = include_str!("kernels/mlx_matmul_qkv.wgsl");
const MLX_MATMUL_GLU: &str = include_str!("kernels/mlx_matmul_glu.wgsl");
const MLX_EMBED: &str = include_str!("kernels/mlx_embed.wgsl");
const ARGMAX: &str = include_str!("kernels/argmax.wgsl");
const TOP_K: &str = include_str!("kernels/top_k.wgsl");

/// Weight types the matmul and embed kernels read.
pub const WEIGHT_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Weight types with an 8-bit matmul (activations quantized on the device, integer dots).
pub const INT8_TYPES: &[GgmlType] = &[
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Where an 8-bit matmul finds its activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int8Input {
    /// Quantized already, in quantize.wgsl's layout (kernels/int8_input_quantized.wgsl).
    Quantized,
    /// f32 rows before their RMSNorm, which each workgroup norms and quantizes to Q8_0 into
    /// `words` words of its own memory (`row_words`; kernels/int8_input_normed.wgsl). Only
    /// for weight types with Q8_0 activations.
    NormedRow { words: u32 },
}

impl Int8Input {
    /// (row, token) outputs per workgroup of the 8-bit matmul (`JOBS`), 16 threads each.
    pub const fn jobs(self) -> usize {
        match self {
            Int8Input::Quantized => 4,
            Int8Input::NormedRow { .. } => 16,
        }
    }
}

/// Words of workgroup memory that hold one row of `cols` activations quantized to Q8_0 (the
/// quants, then the block scales).
pub fn row_words(cols: usize) -> usize {
    cols / 4 + cols / 32
}

/// Bytes of workgroup memory an 8-bit matmul module needs besides its
/// `Int8Input::NormedRow` words: the lane chains and mins (matmul_int8_common.wgsl), the
/// norm's sums (int8_input_normed.wgsl), quantize_common.wgsl's `part_max` and the SwiGLU's sums, rounded up.
pub const INT8_NORMED_OVERHEAD: usize = 5120;

/// One WGSL module: which source, and for weight kernels which type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    /// The weight type, and whether the reduction uses subgroup operations.
    Matmul(GgmlType, bool),
    /// The 8-bit matmul of a weight type of [`INT8_TYPES`] (no subgroup operations: its
    /// final sum has a fixed order), and whether it uses the device's `fma` (`true`, where
    /// that is fused) or the exact emulation of fma.wgsl.
    MatmulInt8(GgmlType, bool),
    /// `MatmulInt8` over two or three weights of a group (q, k, v) in one dispatch, and
    /// where its activations are.
    MatmulInt8Qkv(GgmlType, bool, Int8Input),
    /// `MatmulInt8` over a gate and an up weight of a group, with the SwiGLU.
    MatmulInt8Glu(GgmlType, bool, Int8Input),
    /// Activation quantization to Q8_0 / Q8_K blocks for `MatmulInt8`, with exact.wgsl's
    /// division over the device's `fma` or not, as `Elementwise`.
    Quantize(bool),
    Embed(GgmlType),
    /// The matmul of an MLX affine-quantized weight: bits (4 or 8) and group size (see
    /// `mlx.rs`).
    MatmulMlx(u32, u32),
    /// `MatmulMlx` over two or three weights of a group (q, k, v) in one dispatch.
    MatmulMlxQkv(u32, u32),
    /// `MatmulMlx` over a gate and an up weight of a group, with the SwiGLU (whose exact
    /// functions use the device's `fma` or not, as `Elementwise`).
    MatmulMlxGlu(u32, u32, bool),
    /// Rows of an MLX affine-quantized embedding table, any bits.
    EmbedMlx,
    /// The modules below divide, take square roots or exp with exact.wgsl, whose corrections
    /// use the device's `fma` (`true`) or fma.wgsl's exact one, as `MatmulInt8`.
    Elementwise(bool),
    Norm(bool),
    Rope,
    /// Attention, and whether the KV cache's words are typed `vec2<f16>` (adapters with
    /// shader-f16) rather than u32 (kernels/kv_words.wgsl).
    Attention(bool, bool),
    /// Attention split over the positions, for few tokens over a long context.
    AttentionSplit(bool, bool),
    /// The index of each row's largest value (greedy decoding).
    Argmax,
    /// The k best values of each row (sampling with a top-k stage).
    TopK,
}

/// How a kernel binds a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

use Access::{Read as R, ReadWrite as RW};

impl Module {
    /// Every module, for tests that compile them all.
    pub fn all() -> Vec<Module> {
        let mut all: Vec<Module> = WEIGHT_TYPES
            .iter()
            .flat_map(|&t| [Module::Matmul(t, false), Module::Matmul(t, true)])
            .collect();
        for native_fma in [false, true] {
            for &t in INT8_TYPES {
                all.push(Module::MatmulInt8(t, native_fma));
                let mut inputs = vec![Int8Input::Quantized];
                if int8_reader(t).is_some_and(|r| r.act == GgmlType::Q8_0) {
                    let words = row_words(1024) as u32;
                    inputs.push(Int8Input::NormedRow { words });
                }
                for input in inputs {
                    all.extend([
                        Module::MatmulInt8Qkv(t, native_fma, input),
                        Module::MatmulInt8Glu(t, native_fma, input),
                    ]);
                }
            }
        }
        all.extend(WEIGHT_TYPES.iter().map(|&t| Module::Embed(t)));
        all.extend([Module::Rope, Module::EmbedMlx, Module::Argmax, Module::TopK]);
        for bits in hearth_quant::MlxSpec::BITS {
            for gs in hearth_quant::MlxSpec::GROUP_SIZES.map(|gs| gs as u32) {
                all.extend([
                    Module::MatmulMlx(bits, gs),
                    Module::MatmulMlxQkv(bits, gs),
                    Module::MatmulMlxGlu(bits, gs, false),
                    Module::MatmulMlxGlu(bits, gs, true),
                ]);
            }
        }
        for native_fma in [false, true] {
            all.extend([
                Module::Quantize(native_fma),
                Module::Elementwise(native_fma),
                Module::Norm(native_fma),
            ]);
            for f16 in [false, true] {
                all.extend([
                    Module::Attention(native_fma, f16),
                    Module::AttentionSplit(native_fma, f16),
                ]);
            }
        }
        all
    }

    /// The bindings of group 0, in binding order.
    pub fn bindings(self) -> &'static [Access] {
        match self {
            // Int8Input::NormedRow adds the norm weight's binding at the end.
            Module::MatmulInt8Glu(.., Int8Input::NormedRow { .. }) => &[R, R, RW, R, R],
            Module::MatmulInt8Qkv(.., Int8Input::NormedRow { .. }) => &[R, R, RW, RW, RW, R, R],
            Module::Matmul(..)
            | Module::MatmulInt8(..)
            | Module::MatmulInt8Glu(..)
            | Module::Embed(_)
            | Module::MatmulMlx(..)
            | Module::MatmulMlxGlu(..)
            | Module::EmbedMlx => &[R, R, RW, R],
            Module::MatmulInt8Qkv(..) | Module::MatmulMlxQkv(..) => &[R, R, RW, RW, RW, R],
            Module::Elementwise(_) => &[RW, R, R, R],
            Module::Norm(_) => &[RW, R, R, R, RW, RW, R],
            Module::Rope => &[RW, R, R],
            Module::Quantize(_) => &[R, RW, R],
            Module::Attention(..) => &[R, R, R, RW, RW, RW, R, R, RW, R, R],
            Module::AttentionSplit(..) => &[R, R, R, RW, R, R, RW],
            Module::Argmax => &[R, RW, RW, R],
            Module::TopK => &[R, RW, R, RW],
        }
    }

    /// The complete WGSL source.
    pub fn source(self) -> String {
        match self {
            Module::Matmul(t, false) => weight_source(&[MATMUL, MATMUL_SHARED], t),
            Module::Matmul(t, true) => weight_source(&[MATMUL, MATMUL_SUBGROUP], t),
            Module::MatmulInt8(t, f) => int8_source(t, f, MATMUL_INT8, Int8Input::Quantized),
            Module::MatmulInt8Qkv(t, f, input) => int8_source(t, f, MATMUL_INT8_QKV, input),
            Module::MatmulInt8Glu(t, f, input) => int8_source(t, f, MATMUL_INT8_GLU, input),
            Module::Embed(t) => weight_source(&[EMBED], t),
            Module::MatmulMlx(bits, gs) => mlx_source(bits, gs, MLX_MATMUL, ""),
            Module::MatmulMlxQkv(bits, gs) => mlx_source(bits, gs, MLX_MATMUL_QKV, ""),
            Module::MatmulMlxGlu(bits, gs, f) => {
                mlx_source(bits, gs, MLX_MATMUL_GLU, &exact_math(f))
            }
            Module::EmbedMlx => format!("{PRELUDE}\n{DEQUANT}\n{MLX_COMMON}\n{MLX_EMBED}"),
            Module::Quantize(f) => with_exact(f, &[QUANTIZE_COMMON, QUANTIZE]),
            Module::Rope => format!("{PRELUDE}\n{ROPE}"),
            Module::Argmax => format!("{PRELUDE}\n{ARGMAX}"),
            Module::TopK => format!("{PRELUDE}\n{TOP_K}"),
            Module::Elementwise(f) => with_exact(f, &[ELEMENTWISE]),
            Module::Norm(f) => with_exact(f, &[QUANTIZE_COMMON, DOUBLE_WORD, NORM]),
            Module::Attention(f, f16) => with_kv_words(
                f16,
                with_exact(
                    f,
                    &[QUANTIZE_COMMON, DOUBLE_WORD, ATTENTION_COMMON, ATTENTION],
                ),
            ),
            Module::AttentionSplit(f, f16) => {
                with_kv_words(f16, with_exact(f, &[ATTENTION_COMMON, ATTENTION_SPLIT]))
            }
        }
    }

    /// Whether the module needs subgroup operations from the device.
    pub fn uses_subgroups(self) -> bool {
        matches!(self, Module::Matmul(_, true))
    }

    /// Whether the module needs shader-f16 from the device.
    pub fn uses_f16(self) -> bool {
        matches!(
            self,
            Module::Attention(_, true) | Module::AttentionSplit(_, true)
        )
    }
}

/// `(elements per block, bytes per block, reader function)` of a weight type the kernels read.
pub fn block_reader(ty: GgmlType) -> Option<(u32, u32, &'static str)> {
    Some(match ty {
        GgmlType::F32 => (1, 4, "deq_f32"),
        GgmlType::F16 => (1, 2, "deq_f16"),
        GgmlType::Q8_0 => (32, 34, "deq_q8_0"),
        GgmlType::Q4_0 => (32, 18, "deq_q4_0"),
        GgmlType::Q4_1 => (32, 20, "deq_q4_1"),
        GgmlType::Q5_0 => (32, 22, "deq_q5_0"),
        GgmlType::Q4_K => (256, 144, "deq_q4_k"),
        GgmlType::Q5_K => (256, 176, "deq_q5_k"),
        GgmlType::Q6_K => (256, 210, "deq_q6_k"),
        _ => return None,
    })
}

fn weight_source(parts: &[&str], ty: GgmlType) -> String {
    // Module::all() and the backend only build modules for WEIGHT_TYPES.
    let (block, bytes, reader) = block_reader(ty).unwrap_or((1, 4, "deq_f32"));
    let kernel = parts
        .concat()
        .replace("BLOCK_BYTES", &format!("{bytes}u"))
        .replace("BLOCK", &format!("{block}u"))
        .replace("DEQ", reader);
    format!("{PRELUDE}\n{DEQUANT}\n{kernel}")
}

/// How the 8-bit matmul reads weight type `ty`, or `None` for types without one.
pub struct Int8Reader {
    /// Elements and bytes per block.
    pub block: u32,
    pub block_bytes: u32,
    /// The WGSL functions for one lane of a block and for the lanes of the mins.
    pub lane: &'static str,
    pub mins: &'static str,
    /// The activation type: the one the CPU backend quantizes to for `ty`
    /// (`hearth_quant::vec_dot_type`).
    pub act: GgmlType,
}

/// The [`Int8Reader`] of weight type `ty`, or `None` for types without an 8-bit matmul.
pub fn int8_reader(ty: GgmlType) -> Option<Int8Reader> {
    let (block, block_bytes, lane, mins, act) = match ty {
        GgmlType::Q8_0 => (32, 34, "lane_q8_0", "no_mins", GgmlType::Q8_0),
        GgmlType::Q4_0 => (32, 18, "lane_q4_0", "no_mins", GgmlType::Q8_0),
        GgmlType::Q5_0 => (32, 22, "lane_q5_0", "no_mins", GgmlType::Q8_0),
        GgmlType::Q4_K => (256, 144, "lane_q4_k", "mins_k4", GgmlType::Q8_K),
        GgmlType::Q5_K => (256, 176, "lane_q5_k", "mins_k4", GgmlType::Q8_K),
        GgmlType::Q6_K => (256, 210, "lane_q6_k", "no_mins", GgmlType::Q8_K),
        _ => return None,
    };
    Some(Int8Reader {
        block,
        block_bytes,
        lane,
        mins,
        act,
    })
}

/// An MLX matmul module: entry point file `entry` over mlx_matmul_common.wgsl for `bits`-bit
/// values in groups of `gs`, with `extra` (functions the entry point needs).
fn mlx_source(bits: u32, gs: u32, entry: &str, extra: &str) -> String {
    let kernel = format!("{entry}\n{MLX_MATMUL_COMMON}")
        .replace("BITS", &format!("{bits}u"))
        .replace("GS", &format!("{gs}u"));
    format!("{PRELUDE}\n{DEQUANT}\n{MLX_COMMON}\n{extra}\n{kernel}")
}

/// `fma_rn` as the device's own `fma`, for devices where the probe found it fused.
const NATIVE_FMA: &str =
    "fn fma_rn(a: f32, b: f32, c: f32) -> f32 {\n    return fma(a, b, c);\n}\n";

/// `fma_rn` and exact.wgsl's functions (see [`Module::Elementwise`]).
pub fn exact_math(native_fma: bool) -> String {
    let fma = if native_fma { NATIVE_FMA } else { FMA };
    format!("{fma}\n{EXACT}")
}

/// The prelude, exact.wgsl and `parts`.
fn with_exact(native_fma: bool, parts: &[&str]) -> String {
    format!(
        "{PRELUDE}\n{}\n{}",
        exact_math(native_fma),
        parts.join("\n")
    )
}

/// `source` with the KV cache's word type and its conversions: `vec2<f16>` (`f16`, behind the
/// `enable f16;` that must open the module) or u32.
fn with_kv_words(f16: bool, source: String) -> String {
    if f16 {
        format!("enable f16;\n{source}\n{KV_WORDS_F16}")
    } else {
        format!("{source}\n{KV_WORDS}")
    }
}

/// matmul_int8_common.wgsl, without its sixteen-block loop where fma is emulated.
///
/// NOTE: with fma.wgsl's exact emulation each `fma_rn` is dozens of operations, and sixteen of
/// them unrolled made lavapipe's shader compiler take minutes per module; where the device's
/// fma is fused the loop is short code and keeps more loads in flight.
fn int8_common(native_fma: bool) -> String {
    if native_fma {
        return MATMUL_INT8_COMMON.to_string();
    }
    match (
        MATMUL_INT8_COMMON.find("// WIDE_BEGIN"),
        MATMUL_INT8_COMMON.find("// WIDE_END"),
    ) {
        (Some(a), Some(b)) if a < b => format!(
            "{}{}",
            &MATMUL_INT8_COMMON[..a],
            &MATMUL_INT8_COMMON[b + "// WIDE_END".len()..]
        ),
        _ => MATMUL_INT8_COMMON.to_string(),
    }
}

/// The 8-bit matmul module of weight type `ty` with entry point file `entry`, reading its
/// activations as `input` says.
fn int8_source(ty: GgmlType, native_fma: bool, entry: &str, input: Int8Input) -> String {
    // Module::all() and the backend only build these modules for INT8_TYPES.
    let Some(r) = int8_reader(ty) else {
        return format!("// no 8-bit matmul for {ty}");
    };
    let input_src = match input {
        Int8Input::Quantized => INT8_INPUT_QUANTIZED.to_string(),
        Int8Input::NormedRow { words } => {
            // The norm weight's binding follows the entry's last one (see `bindings`).
            let norm_binding = if entry == MATMUL_INT8_QKV { 6 } else { 4 };
            let row = INT8_INPUT_NORMED
                .replace("NORM_BINDING", &norm_binding.to_string())
                .replace("ACT_WORDS", &format!("{words}u"));
            format!("{QUANTIZE_COMMON}\n{DOUBLE_WORD}\n{row}")
        }
    };
    let jobs = input.jobs();
    let kernel = format!("{entry}\n{input_src}\n{}", int8_common(native_fma))
        .replace("GROUP_THREADS", &(16 * jobs).to_string())
        .replace("JOB_COUNT", &jobs.to_string())
        .replace("CHAIN_SLOTS", &(16 * jobs).to_string())
        .replace("MIN_SLOTS", &(8 * jobs).to_string())
        .replace("QBLOCK_BYTES", &format!("{}u", r.block_bytes))
        .replace("QBLOCK", &format!("{}u", r.block))
        .replace("QLANE", r.lane)
        .replace("QMINS", r.mins);
    format!("{PRELUDE}\n{DEQUANT}\n{}\n{kernel}", exact_math(native_fma))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sixteen_block_loop_is_only_where_fma_is_native() {
        let wide = "let e15 = QLANE";
        assert!(int8_common(true).contains(wide));
        let emulated = int8_common(false);
        assert!(!emulated.contains(wide));
        // The narrower loops stay.
        assert!(emulated.contains("let d7 = QLANE"), "{emulated}");
        assert!(Module::MatmulInt8(GgmlType::Q8_0, false)
            .source()
            .contains("fn job_chains"));
    }
}
