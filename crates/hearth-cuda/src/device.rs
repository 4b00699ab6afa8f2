//! One GPU, opened: context, stream, and the loaded kernel module.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaSlice, CudaStream};
use cudarc::nvrtc::Ptx;
use hearth_quant::GgmlType;

use crate::error::{driver, shape};
use crate::probe::guarded;
use crate::{
    compile_cubin, nvrtc_version, probe_device, CacheKey, CudaError, GpuInfo, KernelCache,
    KERNEL_SOURCE,
};

/// Every kernel the host side launches, by its `extern "C"` name.
pub(crate) const KERNEL_NAMES: [&str; 99] = [
    "decode_layers",
    "step_gate",
    "gemv_f16",
    "gemv_q8_0",
    "gemv_q4_0",
    "gemv_q4_k",
    "gemv_q6_k",
    "rms_norm_f32",
    "argmax_f32",
    "argmax_split_f32",
    "top_k_f32",
    "top_k_split_f32",
    "embed_rows",
    "dequant_to_f16",
    "gemv_any",
    "f32_to_f16",
    "rms_norm_groups",
    "rope_rows",
    "glu",
    "add_f32",
    "scale_f32",
    "gather_rows",
    "kv_write",
    "attention_hd32",
    "attention_hd64",
    "attention_hd128",
    "attention_hd256",
    "attention_hd32_wide",
    "attention_hd64_wide",
    "attention_hd128_wide",
    "attention_split_scores_hd32",
    "attention_split_values_hd32",
    "attention_split_scores_hd64",
    "attention_split_values_hd64",
    "attention_split_scores_hd128",
    "attention_split_values_hd128",
    "attention_split_scores_hd256",
    "attention_split_values_hd256",
    "attention_gqa_scores_hd64",
    "attention_gqa_values_hd64",
    "attention_gqa_scores_hd128",
    "attention_gqa_values_hd128",
    "attention_gqa_scores_hd256",
    "attention_gqa_values_hd256",
    "attention_hd256_wide",
    "gemv3_q8_0",
    "gemv3_q4_0",
    "gemv3_q4_k",
    "gemv3_q6_k",
    "qk_norm_rope",
    "qk_norm_rope_pairs",
    "quantize_q8_1",
    "gemv_q8a_q8_0",
    "gemv_q8a_q4_0",
    "gemv_q8a_q4_k",
    "gemv_q8a_q6_k",
    "gemv_q8a_own_q8_0",
    "gemv_q8a_own_q4_0",
    "gemv_q8a_own_q4_k",
    "gemv_q8a_own_q6_k",
    "gemv_q8a_rows4_q8_0",
    "gemv_q8a_rows4_q4_0",
    "gemv_q8a_rows4_q6_k",
    "gemv3_q8a_q8_0",
    "gemv3_q8a_q4_0",
    "gemv3_q8a_q4_k",
    "gemv3_q8a_q6_k",
    "gemv3_q8a_mixed",
    "scatter_add_rows",
    "dequant_to_f16_typed",
    "gemv_mlx",
    "dequant_mlx_to_f16",
    "flash_prefill_hd16",
    "flash_prefill_hd32",
    "flash_prefill_hd64",
    "flash_prefill_hd96",
    "flash_prefill_hd128",
    "flash_prefill_hd256",
    "flash_stats_hd16",
    "flash_stats_hd32",
    "flash_stats_hd64",
    "flash_stats_hd96",
    "flash_stats_hd128",
    "flash_stats_hd256",
    "flash_combine",
    "embed_mlx_rows",
    "rms_norm_quantize",
    "mmq_q8_0",
    "mmq_q4_k",
    "mmq_q6_k",
    "mmq3_q8_0",
    "mmq3_q4_k",
    "mmq3_q6_k",
    "mmf_q8_0",
    "mmf_q4_k",
    "mmf_q6_k",
    "mmf3_q8_0",
    "mmf3_q4_k",
    "mmf3_q6_k",
];

/// Bytes of padding after a weight matrix: the GEMV kernels' last 16-byte load of a row may
/// reach up to 15 bytes past it.
pub(crate) const WEIGHT_PADDING: usize = 16;

/// Sets the per-thread stack the context reserves to 0.
///
/// NOTE: the driver reserves it for every thread the GPU can hold at once, 1 KiB by default:
/// 264 MiB on an H100 (2,048 threads on each of 132 multiprocessors). A bare context measured
/// 518 MiB with it and 254 MiB without it. hearth's kernels call no functions (everything is
/// inlined), and for a kernel that does need local memory (its own or a library's) the driver
/// grows the reservation at launch, to what that kernel needs.
fn shrink_stack_reservation(ctx: &Arc<CudaContext>) -> Result<(), CudaError> {
    ctx.bind_to_thread().map_err(driver("context"))?;
    // SAFETY: sets a limit of the context bound just above; no work is queued yet.
    unsafe {
        cudarc::driver::sys::cuCtxSetLimit(cudarc::driver::sys::CUlimit::CU_LIMIT_STACK_SIZE, 0)
    }
    .result()
    .map_err(driver("stack size limit"))
}

/// Where the kernels of an opened device came from.
#[derive(Clone, Debug)]
pub enum KernelOrigin {
    /// Loaded from this cache entry.
    Cache(PathBuf),
    /// Compiled by NVRTC in `seconds`; `miss` says why the cache had nothing usable and
    /// `stored` where the result went (None when storing failed or there is no cache).
    Compiled {
        seconds: f64,
        miss: String,
        stored: Option<PathBuf>,
    },
}

impl std::fmt::Display for KernelOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelOrigin::Cache(p) => write!(f, "kernels loaded from cache {}", p.display()),
            KernelOrigin::Compiled {
                seconds,
                miss,
                stored,
            } => {
                write!(f, "kernels compiled by NVRTC in {seconds:.2} s ({miss})")?;
                match stored {
                    Some(p) => write!(f, ", cached at {}", p.display()),
                    None => f.write_str(", not cached"),
                }
            }
        }
    }
}

/// A weight matrix in GPU memory, in its GGUF block layout: `[n_rows, n_cols]`, row-major.
pub struct QuantMatrix {
    pub(crate) ty: GgmlType,
    pub(crate) n_rows: usize,
    pub(crate) n_cols: usize,
    /// Row bytes × n_rows, then [`WEIGHT_PADDING`] zero bytes.
    pub(crate) data: CudaSlice<u8>,
}

impl QuantMatrix {
    /// The weight type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }
    /// Output rows.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    /// Input columns.
    pub fn n_cols(&self) -> usize {
        self.n_cols
    }
    /// Bytes of weights (without padding): what one GEMV must read.
    pub fn weight_bytes(&self) -> usize {
        self.data.len() - WEIGHT_PADDING
    }
}

/// An opened GPU with the hearth kernels loaded.
pub struct CudaDevice {
    info: GpuInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    functions: HashMap<&'static str, CudaFunction>,
    origin: KernelOrigin,
}

impl CudaDevice {
    /// Opens GPU `ordinal`, loading the kernels from `cache` or compiling them (and storing
    /// the result). A missing or unusable GPU is [`CudaError::Unavailable`].
    pub fn open(ordinal: usize, cache: &KernelCache) -> Result<Self, CudaError> {
        let info = probe_device(ordinal)?;
        let ctx = guarded("cuCtx", || CudaContext::new(ordinal))?.map_err(driver("context"))?;
        // SAFETY: all work goes through the one stream below, so cudarc's cross-stream events
        // are not needed; they also break CUDA graph capture, which the decode path will use.
        unsafe { ctx.disable_event_tracking() };
        shrink_stack_reservation(&ctx)?;
        let stream = ctx.new_stream().map_err(driver("stream creation"))?;
        let (module, origin) = load_module(&ctx, &info, cache)?;
        let mut functions = HashMap::new();
        let carveout = uniform_carveout(&info);
        for name in KERNEL_NAMES {
            let f = module
                .load_function(name)
                .map_err(driver("kernel lookup"))?;
            if carveout && !KEEP_L1.contains(&name) {
                f.set_attribute(
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                    sys::CUshared_carveout::CU_SHAREDMEM_CARVEOUT_MAX_SHARED as i32,
                )
                .map_err(driver("kernel shared-memory carveout"))?;
            }
            functions.insert(name, f);
        }
        Ok(CudaDevice {
            info,
            ctx,
            stream,
            functions,
            origin,
        })
    }

    /// The most local memory (register spills, arrays) a thread of any of hearth's kernels
    /// needs, in bytes.
    pub fn kernel_local_bytes(&self) -> usize {
        let local = cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES;
        self.functions
            .values()
            .filter_map(|f| f.get_attribute(local).ok())
            .max()
            .unwrap_or(0)
            .max(0) as usize
    }

    /// The device's properties.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }
    /// Where the kernels came from.
    pub fn kernel_origin(&self) -> &KernelOrigin {
        &self.origin
    }
    /// The context (for allocation and events).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// The stream every operation of this device is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(crate) fn function(&self, name: &'static str) -> Result<&CudaFunction, CudaError> {
        self.functions.get(name).ok_or(CudaError::Driver {
            during: "kernel lookup",
            message: format!("kernel {name} not loaded"),
        })
    }

    /// Copies `bytes` (`n_rows` rows of `n_cols` elements of `ty`, GGUF layout) to the GPU.
    pub fn upload_matrix(
        &self,
        ty: GgmlType,
        n_rows: usize,
        n_cols: usize,
        bytes: &[u8],
    ) -> Result<QuantMatrix, CudaError> {
        let op = "upload_matrix";
        let row_bytes = ty.bytes_for(n_cols as u64).ok_or_else(|| {
            shape(
                op,
                format!("{n_cols} columns is not a whole number of {ty} blocks"),
            )
        })?;
        let expected = (row_bytes as usize).checked_mul(n_rows);
        if expected != Some(bytes.len()) {
            return Err(shape(
                op,
                format!(
                    "{n_rows}x{n_cols} {ty} needs {expected:?} bytes, got {}",
                    bytes.len()
                ),
            ));
        }
        let mut data = self
            .stream
            .alloc_zeros::<u8>(bytes.len() + WEIGHT_PADDING)
            .map_err(driver("weight allocation"))?;
        let mut body = data.slice_mut(..bytes.len());
        self.stream
            .memcpy_htod(bytes, &mut body)
            .map_err(driver("weight upload"))?;
        Ok(QuantMatrix {
            ty,
            n_rows,
            n_cols,
            data,
        })
    }

    /// Copies `values` to a new GPU buffer.
    pub fn upload_f32(&self, values: &[f32]) -> Result<CudaSlice<f32>, CudaError> {
        self.stream.clone_htod(values).map_err(driver("upload"))
    }

    /// A new GPU buffer of `len` f32 values, every byte 0xFF (NaN), so that an element a
    /// kernel fails to write shows up in any comparison.
    pub fn alloc_poisoned_f32(&self, len: usize) -> Result<CudaSlice<f32>, CudaError> {
        self.upload_f32(&vec![f32::from_bits(u32::MAX); len])
    }

    /// Copies a GPU buffer back (waits for the stream).
    pub fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        src: &CudaSlice<T>,
    ) -> Result<Vec<T>, CudaError> {
        self.stream.clone_dtoh(src).map_err(driver("download"))
    }

    /// Waits for all queued work; a kernel fault surfaces here.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream.synchronize().map_err(driver("synchronize"))
    }
}

/// `HEARTH_CUDA_CARVEOUT=0` leaves every kernel's split of on-chip memory between L1 and shared
/// memory to the driver, and compiles the gated GEMV's early trigger off (to compare).
const CARVEOUT_VAR: &str = "HEARTH_CUDA_CARVEOUT";

/// Kernels that keep the driver's split: they load their weights through L1 into registers
/// (Q8A_DIRECT_Q4K, kernels/gemv_q8a.cu), and the L1 left beside the most shared memory holds
/// too few of those loads in flight.
const KEEP_L1: [&str; 3] = ["gemv_q8a_q4_k", "gemv_q8a_own_q4_k", "gemv3_q8a_q4_k"];

/// Whether every kernel but [`KEEP_L1`]'s asks for the most shared memory an SM can give
/// (Hopper and later, unless turned off). Blocks of two kernels seem to share a
/// multiprocessor only where both want the same split: with the driver's choice, which differs
/// from kernel to kernel, the gated GEMV letting the down projection start early
/// (Q8A_TRIGGER, kernels/gemv_q8a.cu) measured 7% slower; with one split, faster.
///
/// NOTE (H200, BENCHMARKS.md 2026-11-30, later; `binary_ab.sh`, two rounds, against the
/// driver's split and no early trigger): with both, Qwen3-0.6B Q8_0 tg128 1,429 / 1,432 ->
/// 1,459 / 1,453 tok/s, 64 sequences 19,272 / 19,075 -> 20,100 / 20,155; the early trigger
/// alone 1,324 / 1,323. Every kernel at the most shared memory, the Q4_K ones too, cost
/// Qwen3-0.6B Q4_K_M 0.4-0.9% and Llama-3.1-8B Q4_K_M 1.3-1.4%; with KEEP_L1, even and 0.3%.
fn uniform_carveout(info: &GpuInfo) -> bool {
    info.compute_capability.0 >= 9 && !carveout_turned_off()
}

/// Whether `HEARTH_CUDA_CARVEOUT=0` is set.
fn carveout_turned_off() -> bool {
    std::env::var(CARVEOUT_VAR).is_ok_and(|v| v == "0")
}

/// The environment variable of [`kernel_source`].
const DEFINES_VAR: &str = "HEARTH_CUDA_DEFINES";

/// [`KERNEL_SOURCE`], after a `#define` for each `NAME=VALUE` of `HEARTH_CUDA_DEFINES`
/// (space-separated): tuning constants the kernels leave open (`#ifndef`, such as
/// `Q8A_WINDOW_BYTES`) can then be measured without a rebuild. The defines are part of the
/// source, so of the cache key too.
///
/// Without the one carveout (`HEARTH_CUDA_CARVEOUT=0`) the int8 GEMVs' early trigger, a loss
/// then, is compiled off too (`Q8A_TRIGGER 0`), unless the defines name it.
fn kernel_source() -> std::borrow::Cow<'static, str> {
    let defines = std::env::var(DEFINES_VAR).unwrap_or_default();
    let mut source = String::new();
    for d in defines.split_whitespace() {
        let (name, value) = d.split_once('=').unwrap_or((d, ""));
        source.push_str(&format!("#define {name} {value}\n"));
    }
    if carveout_turned_off() && !defines.contains("Q8A_TRIGGER") {
        source.push_str("#define Q8A_TRIGGER 0\n");
    }
    if source.is_empty() {
        return KERNEL_SOURCE.into();
    }
    source.push_str(KERNEL_SOURCE);
    source.into()
}

/// Loads the kernel module from the cache, or compiles it (and caches it). A cached entry the
/// driver rejects is treated like a corrupt one: recompiled and overwritten.
fn load_module(
    ctx: &Arc<CudaContext>,
    info: &GpuInfo,
    cache: &KernelCache,
) -> Result<(Arc<cudarc::driver::CudaModule>, KernelOrigin), CudaError> {
    let arch = info.arch();
    let nvrtc = guarded("nvrtcVersion", nvrtc_version)?.map_err(CudaError::Compile)?;
    let source = kernel_source();
    let key = CacheKey::new(&source, &arch, info.driver_version, nvrtc);
    let miss = match cache.load(&key) {
        Ok(cubin) => match ctx.load_module(Ptx::from_binary(cubin)) {
            Ok(module) => {
                let path = cache.path(&key).unwrap_or_default();
                return Ok((module, KernelOrigin::Cache(path)));
            }
            Err(e) => format!("cached entry rejected by the driver: {e:?}"),
        },
        Err(miss) => miss.to_string(),
    };
    let start = Instant::now();
    let cubin = guarded("nvrtcCompileProgram", || {
        compile_cubin(&source, "hearth_kernels.cu", &arch)
    })?
    .map_err(CudaError::Compile)?;
    let seconds = start.elapsed().as_secs_f64();
    let stored = cache.store(&key, &cubin).ok();
    let module = ctx
        .load_module(Ptx::from_binary(cubin))
        .map_err(driver("module load"))?;
    Ok((
        module,
        KernelOrigin::Compiled {
            seconds,
            miss,
            stored,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_that_keep_their_l1_are_kernels_of_the_module() {
        for name in KEEP_L1 {
            assert!(
                KERNEL_NAMES.contains(&name),
                "{name} is not in KERNEL_NAMES"
            );
        }
    }
}
