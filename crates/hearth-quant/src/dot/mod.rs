//! Dot products of a weight row with an activation row of the weight type's `vec_dot_type`,
//! with one kernel table per CPU level chosen once at run time.

pub mod scalar;

// NOTE: x86 first: its macros are textually scoped to the modules declared after it.
#[cfg(target_arch = "x86_64")]
#[macro_use]
mod x86;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

use std::sync::OnceLock;

use crate::blocks::*;
use crate::cpu::{kernel_level, KernelLevel};
use crate::error::{check_len, row_bytes};
use crate::{GgmlType, QuantError};

/// A dot kernel over raw row bytes. `w` and `a` hold exactly the same number of elements of the
/// weight type and its activation type; kernels may assume that and nothing about alignment.
pub(crate) type DotFn = fn(w: &[u8], a: &[u8]) -> f32;

/// One weight row against four activation rows (four tokens) at once, reusing the unpacked
/// weights; same length contract as [`DotFn`] for every activation row.
pub(crate) type Dot4Fn = fn(w: &[u8], a: [&[u8]; 4]) -> [f32; 4];

/// Packs one row of `n_blocks` blocks into `dst` (see [`PackedTile`]).
pub(crate) type PackFn = fn(src: &[u8], n_blocks: usize, dst: &mut [u8]);

/// 4 packed weight rows (`stride` bytes apart) x 4 packed activation rows of `n_blocks`
/// blocks each.
pub(crate) type PackedTileFn =
    fn(w: &[u8], stride: usize, a: [&[u8]; 4], n_blocks: usize) -> [f32; 16];

/// Prefill kernels on packed operands: weight rows and quantized activation rows are unpacked
/// once per `matmul` call into register-ready pairs of blocks, and a 4-row x 4-token tile runs
/// on those (see `avx512/packed.rs` for the layout).
#[derive(Clone, Copy)]
pub(crate) struct PackedTile {
    /// Bytes of one packed pair of weight blocks.
    w_pair: usize,
    /// Bytes of one packed pair of activation blocks.
    a_pair: usize,
    /// Whether both packed rows end in one f32 per block (weight mins, activation sums),
    /// zero-padded to a multiple of 16.
    per_block: bool,
    pack_w: PackFn,
    pack_a: PackFn,
    tile: PackedTileFn,
}

impl PackedTile {
    fn tail_bytes(&self, n_blocks: usize) -> usize {
        if self.per_block {
            n_blocks.div_ceil(16) * 64
        } else {
            0
        }
    }

    /// Bytes of one packed weight row of `n_blocks` blocks.
    pub fn w_row_bytes(&self, n_blocks: usize) -> usize {
        n_blocks.div_ceil(2) * self.w_pair + self.tail_bytes(n_blocks)
    }

    /// Bytes of one packed activation row of `n_blocks` blocks.
    pub fn a_row_bytes(&self, n_blocks: usize) -> usize {
        n_blocks.div_ceil(2) * self.a_pair + self.tail_bytes(n_blocks)
    }

    /// Packs one weight row of `n_blocks` blocks into `dst` ([`Self::w_row_bytes`] bytes).
    pub fn pack_weights(&self, ty: GgmlType, w: &[u8], n_blocks: usize, dst: &mut [u8]) {
        // NOTE: real checks, not debug ones: the kernels read and write through raw pointers.
        assert!(w.len() >= n_blocks * ty.type_size() && dst.len() >= self.w_row_bytes(n_blocks));
        (self.pack_w)(w, n_blocks, dst)
    }

    /// Packs one activation row (of the weight type's `vec_dot_type`, `n_blocks` blocks) into
    /// `dst` ([`Self::a_row_bytes`] bytes).
    pub fn pack_acts(&self, act: GgmlType, a: &[u8], n_blocks: usize, dst: &mut [u8]) {
        assert!(a.len() >= n_blocks * act.type_size() && dst.len() >= self.a_row_bytes(n_blocks));
        (self.pack_a)(a, n_blocks, dst)
    }

    /// 4 packed weight rows (`stride` bytes apart in `w`) x 4 packed activation rows of
    /// `n_blocks` blocks: lane `4 * r + k` is `dot(row r, token k)`.
    pub fn tile(&self, w: &[u8], stride: usize, a: [&[u8]; 4], n_blocks: usize) -> [f32; 16] {
        let (wb, ab) = (self.w_row_bytes(n_blocks), self.a_row_bytes(n_blocks));
        assert!(stride >= wb && w.len() >= 3 * stride + wb);
        assert!(a.iter().all(|r| r.len() >= ab));
        (self.tile)(w, stride, a, n_blocks)
    }
}

/// The activation type llama.cpp pairs with weight type `ty`, or `None` when there is no dot
/// kernel for `ty`.
pub fn vec_dot_type(ty: GgmlType) -> Option<GgmlType> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K => Q8_K,
        F32 => F32,
        F16 => F16,
        BF16 => BF16,
        _ => return None,
    })
}

/// Views both rows as blocks and runs a typed reference kernel on them.
fn typed<X: bytemuck::Pod, Y: bytemuck::Pod>(w: &[u8], a: &[u8], f: fn(&[X], &[Y]) -> f32) -> f32 {
    // NOTE: callers checked both lengths against the row's block count.
    let x = view_blocks::<X>(w).expect("weight row length checked by the caller");
    let y = view_blocks::<Y>(a).expect("activation row length checked by the caller");
    f(&x, &y)
}

/// The scalar reference kernel for weight type `ty`.
pub(crate) fn scalar_kernel(ty: GgmlType) -> Option<DotFn> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => |w, a| typed(w, a, scalar::dot_q4_0_q8_0),
        Q4_1 => |w, a| typed(w, a, scalar::dot_q4_1_q8_1),
        Q5_0 => |w, a| typed(w, a, scalar::dot_q5_0_q8_0),
        Q5_1 => |w, a| typed(w, a, scalar::dot_q5_1_q8_1),
        Q8_0 => |w, a| typed(w, a, scalar::dot_q8_0_q8_0),
        Q2_K => |w, a| typed(w, a, scalar::dot_q2_k_q8_k),
        Q3_K => |w, a| typed(w, a, scalar::dot_q3_k_q8_k),
        Q4_K => |w, a| typed(w, a, scalar::dot_q4_k_q8_k),
        Q5_K => |w, a| typed(w, a, scalar::dot_q5_k_q8_k),
        Q6_K => |w, a| typed(w, a, scalar::dot_q6_k_q8_k),
        IQ4_NL => |w, a| typed(w, a, scalar::dot_iq4_nl_q8_0),
        F32 => |w, a| typed(w, a, scalar::dot_f32),
        F16 => |w, a| typed(w, a, scalar::dot_f16),
        BF16 => |w, a| typed(w, a, scalar::dot_bf16),
        _ => return None,
    })
}

/// The fastest kernel for `ty` on this CPU (chosen once per process).
pub(crate) fn fast_kernel(ty: GgmlType) -> Option<DotFn> {
    static TABLE: OnceLock<Vec<(GgmlType, DotFn)>> = OnceLock::new();
    let table = TABLE.get_or_init(|| build_table(kernel_level()));
    table.iter().find(|e| e.0 == ty).map(|e| e.1)
}

fn build_table(level: KernelLevel) -> Vec<(GgmlType, DotFn)> {
    use GgmlType::*;
    let all = [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, F32, F16, BF16,
    ];
    all.iter()
        .filter_map(|&ty| {
            let simd = match level {
                KernelLevel::Scalar => None,
                #[cfg(target_arch = "x86_64")]
                // SAFETY: kernel_level() reported AVX-512 F/BW/DQ/VL/VNNI plus AVX2/FMA/F16C.
                KernelLevel::Avx512Vnni => unsafe { avx512::kernel(ty) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: kernel_level() reported AVX2, FMA and F16C.
                KernelLevel::Avx2 => unsafe { avx2::kernel(ty) },
                #[cfg(not(target_arch = "x86_64"))]
                _ => None,
            };
            simd.or_else(|| scalar_kernel(ty)).map(|f| (ty, f))
        })
        .collect()
}

/// The one-row x four-token kernel for `ty` on this CPU, where there is one.
pub(crate) fn fast_kernel_x4(ty: GgmlType) -> Option<Dot4Fn> {
    static TABLE: OnceLock<Vec<(GgmlType, Dot4Fn)>> = OnceLock::new();
    let table = TABLE.get_or_init(|| build_table_x4(kernel_level()));
    table.iter().find(|e| e.0 == ty).map(|e| e.1)
}

fn build_table_x4(level: KernelLevel) -> Vec<(GgmlType, Dot4Fn)> {
    use GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q8_0, IQ4_NL, Q4_K, Q6_K]
        .iter()
        .filter_map(|&ty| match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: kernel_level() reported AVX-512 F/BW/DQ/VL/VNNI plus AVX2/FMA/F16C.
            KernelLevel::Avx512Vnni => unsafe { avx512::kernel_x4(ty) }.map(|f| (ty, f)),
            _ => None,
        })
        .collect()
}

/// The packed prefill kernels for `ty` on this CPU, where there are some.
pub(crate) fn fast_packed(ty: GgmlType) -> Option<PackedTile> {
    static TABLE: OnceLock<Vec<(GgmlType, PackedTile)>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        use GgmlType::*;
        [Q4_0, Q4_1, Q5_0, Q8_0]
            .iter()
            .filter_map(|&ty| match kernel_level() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: kernel_level() reported AVX-512 F/BW/DQ/VL/VNNI plus AVX2/FMA/F16C.
                KernelLevel::Avx512Vnni => unsafe { avx512::kernel_packed(ty) }.map(|f| (ty, f)),
                _ => None,
            })
            .collect()
    });
    table.iter().find(|e| e.0 == ty).map(|e| e.1)
}

/// The kernel table of a given level, for tests that compare levels on the same CPU.
#[cfg(test)]
pub(crate) fn kernels_at(level: KernelLevel) -> Vec<(GgmlType, DotFn)> {
    build_table(level)
}

/// Dot product of `n` elements: `w` holds them in weight type `ty`, `a` in `vec_dot_type(ty)`
/// (e.g. quantized with [`crate::quantize_activations`]). Uses the fastest kernel of this CPU.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, QuantError> {
    let (f, act) = kernel_and_act(ty, "vec_dot")?;
    check_len(ty, "weight row bytes", row_bytes(ty, n)?, w.len())?;
    check_len(act, "activation row bytes", row_bytes(act, n)?, a.len())?;
    Ok(f(w, a))
}

/// Like [`vec_dot`] but always with the scalar reference kernel.
pub fn vec_dot_reference(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, QuantError> {
    let unsupported = QuantError::Unsupported { ty, op: "vec_dot" };
    let f = scalar_kernel(ty).ok_or(unsupported.clone())?;
    let act = vec_dot_type(ty).ok_or(unsupported)?;
    check_len(ty, "weight row bytes", row_bytes(ty, n)?, w.len())?;
    check_len(act, "activation row bytes", row_bytes(act, n)?, a.len())?;
    Ok(f(w, a))
}

/// The fast kernel for `ty` and its activation type, or an `Unsupported` error naming `op`.
pub(crate) fn kernel_and_act(
    ty: GgmlType,
    op: &'static str,
) -> Result<(DotFn, GgmlType), QuantError> {
    match (fast_kernel(ty), vec_dot_type(ty)) {
        (Some(f), Some(act)) => Ok((f, act)),
        _ => Err(QuantError::Unsupported { ty, op }),
    }
}

#[cfg(test)]
pub(crate) mod tests;
