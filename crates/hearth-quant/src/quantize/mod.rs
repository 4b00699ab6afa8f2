//! Weight quantization: reference quantizers that write the same bytes as llama.cpp's
//! `quantize_row_*_ref` (what `llama-quantize` uses without an importance matrix), the
//! per-tensor type mix of its presets, and whole-tensor conversion in parallel.
//!
//! - [`quantize_row`]: f32 to Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL (llama.cpp's
//!   fallback for Q2_K / Q3_K rows), F16, BF16 or F32.
//! - [`choose_types`]: which type each tensor of a model gets under a [`Preset`].
//! - [`convert_tensors`]: dequantize and requantize many tensors over a rayon pool.

mod convert;
mod iq4_nl;
mod kquants;
mod kquants45;
mod legacy;
mod mix;
mod preset;
mod search;

pub use convert::{convert_tensor, convert_tensors, TensorJob};
pub use mix::{
    choose_types, is_quantizable, llama_tensor_order, MixError, ModelShape, TensorSpec, TypeChoice,
};
pub use preset::{Preset, QUANTIZATION_VERSION};

use half::{bf16, f16};

use crate::blocks::{QK, QK_K};
use crate::error::{check_len, row_bytes};
use crate::{GgmlType, QuantError};

/// True when [`quantize_row`] can write `ty`.
pub fn supports_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_NL
    )
}

/// Quantizes `src` (a whole number of `ty` blocks) into `dst` (exactly the bytes they take).
///
/// Blocks are independent, so any split of a tensor into whole blocks gives the same bytes.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let expected = row_bytes(ty, src.len())?;
    check_len(ty, "destination bytes", expected, dst.len())?;
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&s.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f16::from_f32(*s).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f32_to_bf16(*s).to_le_bytes());
            }
        }
        GgmlType::Q4_0 => each_block::<QK, _>(src, dst, legacy::q4_0),
        GgmlType::Q4_1 => each_block::<QK, _>(src, dst, legacy::q4_1),
        GgmlType::Q5_0 => each_block::<QK, _>(src, dst, legacy::q5_0),
        GgmlType::Q5_1 => each_block::<QK, _>(src, dst, legacy::q5_1),
        GgmlType::Q8_0 => each_block::<QK, _>(src, dst, legacy::q8_0),
        GgmlType::Q2_K => each_block::<QK_K, _>(src, dst, kquants::q2_k),
        GgmlType::Q3_K => each_block::<QK_K, _>(src, dst, kquants::q3_k),
        GgmlType::Q4_K => each_block::<QK_K, _>(src, dst, kquants45::q4_k),
        GgmlType::Q5_K => each_block::<QK_K, _>(src, dst, kquants45::q5_k),
        GgmlType::Q6_K => each_block::<QK_K, _>(src, dst, kquants::q6_k),
        GgmlType::IQ4_NL => each_block::<QK, _>(src, dst, iq4_nl::iq4_nl),
        _ => return Err(QuantError::Unsupported { ty, op: "quantize" }),
    }
    Ok(())
}

/// f32 to bf16 as ggml rounds it: to nearest even, NaN kept quiet with its sign and top bits.
fn f32_to_bf16(v: f32) -> bf16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return bf16::from_bits(((u >> 16) | 64) as u16);
    }
    bf16::from_bits((u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16)
}

/// Runs `f` over each `N`-element block of `src`, writing its bytes to `dst` (lengths checked
/// by the caller).
fn each_block<const N: usize, B: bytemuck::Pod>(
    src: &[f32],
    dst: &mut [u8],
    f: fn(&[f32; N]) -> B,
) {
    let size = std::mem::size_of::<B>();
    for (x, out) in src.chunks_exact(N).zip(dst.chunks_exact_mut(size)) {
        // NOTE: chunks_exact yields exactly N elements, so the conversion cannot fail.
        let x: &[f32; N] = x.try_into().expect("chunks_exact yields N elements");
        out.copy_from_slice(bytemuck::bytes_of(&f(x)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        use search::nearest_int;
        for (v, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
        ] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
    }

    #[test]
    fn bf16_rounds_like_ggml() {
        // 1 + 2^-8 is a tie between bf16 1.0 and 1.0078125: to even gives 1.0.
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0).to_bits(), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0).to_bits(), 0x3f82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)).to_bits(), 0x7fc0);
    }

    #[test]
    fn rejects_bad_lengths_and_types() {
        let mut dst = [0u8; 18];
        let err = quantize_row(GgmlType::Q4_0, &[0.0; 31], &mut dst).unwrap_err();
        assert!(err.to_string().contains("Q4_0"), "{err}");
        let err = quantize_row(GgmlType::Q4_0, &[0.0; 32], &mut dst[..17]).unwrap_err();
        assert!(err.to_string().contains("destination"), "{err}");
        let err = quantize_row(GgmlType::IQ2_XXS, &[0.0; 256], &mut [0u8; 66]).unwrap_err();
        assert!(err.to_string().contains("IQ2_XXS"), "{err}");
    }
}
