//! A model on the backend it runs on, with that backend's KV cache, behind one object-safe
//! trait: the engine does not need to know which backend it drives.
//!
//! The device factory (`load_runner`) is the one place that names concrete backends; the CUDA
//! one is behind the `cuda` feature and is only chosen when a GPU answers the probe, the wgpu
//! one (Metal on macOS, Vulkan elsewhere) is behind the `wgpu` feature.

use std::sync::Arc;

use hearth_backend::{cpu::CpuBackend, Backend, HostValues, KvSpec};
use hearth_models::{Batch, DecoderConfig, DecoderModel, ModelError, TensorLoader, TensorSource};
use hearth_sampler::Candidate;

use crate::EngineError;

/// Which device runs the model (`--device`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The first CUDA GPU when one is usable; on macOS the Metal GPU through wgpu; else the CPU.
    #[default]
    Auto,
    Cpu,
    /// CUDA GPU number N.
    Cuda(usize),
    /// The first adapter wgpu finds: Metal on macOS, Vulkan elsewhere.
    Wgpu,
}

impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            "wgpu" => Ok(Device::Wgpu),
            _ => match s.strip_prefix("cuda:").map(str::parse) {
                Some(Ok(n)) => Ok(Device::Cuda(n)),
                _ => Err(format!(
                    "unknown device '{s}' (expected auto, cpu, cuda, cuda:N or wgpu)"
                )),
            },
        }
    }
}

/// What a step brings back for its wanted rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Want {
    /// Their logits.
    #[default]
    Logits,
    /// Each one's argmax, found on the device.
    Argmax,
    /// Each one's `k` best candidates, best first, selected on the device.
    Best(usize),
}

/// Where a step's results go: the buffer its [`Want`] names is filled, the others are left
/// alone. The engine keeps one and reuses the allocations from step to step.
#[derive(Debug, Default)]
pub(crate) struct StepBuffers {
    /// `[rows, n_vocab]` logits.
    pub logits: HostValues,
    /// One token id per row.
    pub argmax: Vec<u32>,
    /// `k` candidates per row, best first.
    pub best: Vec<Candidate>,
}

impl StepBuffers {
    /// Whether the buffer `want` fills holds exactly `rows` rows of results.
    pub fn holds(&self, want: Want, rows: usize, n_vocab: usize) -> bool {
        match want {
            Want::Logits => self.logits.len() == rows * n_vocab,
            Want::Argmax => self.argmax.len() == rows,
            Want::Best(k) => self.best.len() == rows * k,
        }
    }
}

/// What the engine needs from a loaded model, whatever backend holds it.
pub(crate) trait ModelRunner: Send {
    fn config(&self) -> &DecoderConfig;
    /// One forward step that brings back what `want` says for `batch.logits_rows` into `out`
    /// (see [`DecoderModel::forward_into`], [`DecoderModel::forward_argmax_into`] and
    /// [`DecoderModel::forward_best_into`]).
    fn forward(
        &mut self,
        want: Want,
        batch: &Batch,
        block_size: usize,
        out: &mut StepBuffers,
    ) -> Result<(), ModelError>;
    /// Whether [`Self::forward_chained`] runs here ([`DecoderModel::chains_argmax`]).
    fn chains_argmax(&self) -> bool;
    /// Whether chained steps run in the background (`Backend::chains_in_background`).
    fn chains_in_background(&self) -> bool;
    /// A greedy step that does not wait for its ids ([`DecoderModel::forward_argmax_chained`]).
    fn forward_chained(
        &mut self,
        batch: &Batch,
        block_size: usize,
        tokens_on_device: bool,
    ) -> Result<(), ModelError>;
    /// The ids of the oldest chained step not yet taken ([`DecoderModel::take_chained_argmax`]).
    fn take_chained(&mut self, ids: &mut Vec<u32>) -> Result<(), ModelError>;
    fn set_tracing(&self, on: bool);
    fn take_trace(&self) -> Vec<f32>;
}

struct Loaded<B: Backend> {
    backend: B,
    model: DecoderModel<B>,
    cache: B::KvCache,
}

impl<B: Backend> ModelRunner for Loaded<B> {
    fn config(&self) -> &DecoderConfig {
        &self.model.config
    }

    fn forward(
        &mut self,
        want: Want,
        batch: &Batch,
        block_size: usize,
        out: &mut StepBuffers,
    ) -> Result<(), ModelError> {
        let (m, be, cache) = (&self.model, &self.backend, &mut self.cache);
        match want {
            Want::Logits => m.forward_into(be, batch, cache, block_size, &mut out.logits),
            Want::Argmax => m.forward_argmax_into(be, batch, cache, block_size, &mut out.argmax),
            Want::Best(k) => m.forward_best_into(be, batch, cache, block_size, k, &mut out.best),
        }
    }

    fn chains_argmax(&self) -> bool {
        self.model.chains_argmax(&self.backend)
    }

    fn chains_in_background(&self) -> bool {
        self.backend.chains_in_background()
    }

    fn forward_chained(
        &mut self,
        batch: &Batch,
        block_size: usize,
        tokens_on_device: bool,
    ) -> Result<(), ModelError> {
        let (m, be, cache) = (&self.model, &self.backend, &mut self.cache);
        m.forward_argmax_chained(be, batch, cache, block_size, tokens_on_device)
    }

    fn take_chained(&mut self, ids: &mut Vec<u32>) -> Result<(), ModelError> {
        self.model.take_chained_argmax(&self.backend, ids)
    }

    fn set_tracing(&self, on: bool) {
        self.model.set_tracing(on);
    }

    fn take_trace(&self) -> Vec<f32> {
        self.model.take_trace()
    }
}

/// Why the GPU path was not taken.
#[cfg_attr(not(any(feature = "cuda", feature = "wgpu")), allow(dead_code))]
enum Unusable {
    /// No usable GPU (no driver, no device, no CUDA support in this build).
    NoGpu(String),
    /// A GPU, but the model has something its kernels do not cover.
    Model(String),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::NoGpu(s) | Unusable::Model(s) => f.write_str(s),
        }
    }
}

/// A loaded runner and what to tell the user about where it runs.
pub(crate) struct LoadedRunner {
    pub runner: Box<dyn ModelRunner>,
    /// The backend's name ("cpu (avx512-vnni, 2 threads)", "cuda:0 (NVIDIA H100 ...)").
    pub backend: String,
    /// CPU threads the backend runs on (0 for a GPU backend).
    pub n_threads: usize,
    /// Why `--device auto` found a GPU but could not use it; printed once.
    pub note: Option<String>,
}

fn load_on<B: Backend + 'static>(
    backend: B,
    config: DecoderConfig,
    tensors: Arc<dyn TensorSource>,
    kv_spec: &KvSpec,
) -> Result<Loaded<B>, EngineError> {
    let loader = TensorLoader::from_source(tensors, &backend);
    let model = DecoderModel::load(config, &loader).map_err(EngineError::Run)?;
    let cache = backend.new_kv_cache(kv_spec)?;
    Ok(Loaded {
        backend,
        model,
        cache,
    })
}

/// Load the model on the device asked for. An explicit `cuda` request fails with the reason;
/// `auto` falls back to the CPU and says why in `note`.
pub(crate) fn load_runner(
    device: Device,
    n_threads: usize,
    config: DecoderConfig,
    tensors: Arc<dyn TensorSource>,
    kv_spec: &KvSpec,
) -> Result<LoadedRunner, EngineError> {
    let note = match device {
        Device::Cpu => None,
        Device::Cuda(n) => {
            return gpu::load(n, config, tensors, kv_spec)?
                .map_err(|why| EngineError::Device(why.to_string()));
        }
        Device::Wgpu => {
            return wgpu::load(config, tensors, kv_spec)?
                .map_err(|why| EngineError::Device(why.to_string()));
        }
        // NOTE: on macOS there is no CUDA; the Apple GPU is reached through wgpu (Metal).
        Device::Auto if cfg!(target_os = "macos") => {
            match wgpu::load(config.clone(), tensors.clone(), kv_spec)? {
                Ok(runner) => return Ok(runner),
                Err(Unusable::NoGpu(_)) => None,
                Err(Unusable::Model(why)) => Some(format!("{why}; running on the CPU")),
            }
        }
        Device::Auto => match gpu::load(0, config.clone(), tensors.clone(), kv_spec)? {
            Ok(runner) => return Ok(runner),
            // No GPU at all is the normal case on most machines: nothing to say.
            Err(Unusable::NoGpu(_)) => None,
            Err(Unusable::Model(why)) => Some(format!("{why}; running on the CPU")),
        },
    };
    let backend = CpuBackend::new(n_threads)?;
    let (name, n_threads) = (backend.name(), backend.n_threads());
    let loaded = load_on(backend, config, tensors, kv_spec)?;
    Ok(LoadedRunner {
        runner: Box::new(loaded),
        backend: name,
        n_threads,
        note,
    })
}

#[cfg(feature = "cuda")]
mod gpu {
    use super::*;

    /// `Ok(Err(why))` when there is no usable GPU number `ordinal` (or the model cannot run on
    /// it); `Err` for a model that failed to load for any other reason.
    pub(super) fn load(
        ordinal: usize,
        config: DecoderConfig,
        tensors: Arc<dyn TensorSource>,
        kv_spec: &KvSpec,
    ) -> Result<Result<LoadedRunner, Unusable>, EngineError> {
        match hearth_cuda::CudaBackend::open(ordinal) {
            Ok(backend) => gpu_runner(backend, config, tensors, kv_spec),
            Err(e) => Ok(Err(Unusable::NoGpu(format!("CUDA device {ordinal}: {e}")))),
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod gpu {
    use super::*;

    pub(super) fn load(
        _ordinal: usize,
        _config: DecoderConfig,
        _tensors: Arc<dyn TensorSource>,
        _kv_spec: &KvSpec,
    ) -> Result<Result<LoadedRunner, Unusable>, EngineError> {
        Ok(Err(Unusable::NoGpu(
            "this build of hearth has no CUDA support".into(),
        )))
    }
}

/// A loaded GPU runner, or why the GPU could not take the model: shared by both GPU backends.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
fn gpu_runner<B: Backend + 'static>(
    backend: B,
    config: DecoderConfig,
    tensors: Arc<dyn TensorSource>,
    kv_spec: &KvSpec,
) -> Result<Result<LoadedRunner, Unusable>, EngineError> {
    let name = backend.name();
    match load_on(backend, config, tensors, kv_spec) {
        Ok(loaded) => Ok(Ok(LoadedRunner {
            runner: Box::new(loaded),
            backend: name,
            n_threads: 0,
            note: None,
        })),
        // A weight type or shape the GPU kernels do not cover: say which, fall back.
        Err(EngineError::Run(ModelError::Backend(e))) | Err(EngineError::Backend(e)) => Ok(Err(
            Unusable::Model(format!("{name} cannot run this model: {e}")),
        )),
        Err(e) => Err(e),
    }
}

#[cfg(feature = "wgpu")]
mod wgpu {
    use super::*;

    /// `Ok(Err(why))` when wgpu finds no usable adapter (or the model cannot run on it).
    pub(super) fn load(
        config: DecoderConfig,
        tensors: Arc<dyn TensorSource>,
        kv_spec: &KvSpec,
    ) -> Result<Result<LoadedRunner, Unusable>, EngineError> {
        match hearth_wgpu::WgpuBackend::open() {
            Ok(backend) => gpu_runner(backend, config, tensors, kv_spec),
            Err(e) => Ok(Err(Unusable::NoGpu(format!("wgpu: {e}")))),
        }
    }
}

#[cfg(not(feature = "wgpu"))]
mod wgpu {
    use super::*;

    pub(super) fn load(
        _config: DecoderConfig,
        _tensors: Arc<dyn TensorSource>,
        _kv_spec: &KvSpec,
    ) -> Result<Result<LoadedRunner, Unusable>, EngineError> {
        Ok(Err(Unusable::NoGpu(
            "this build of hearth has no wgpu support".into(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::Device;

    #[test]
    fn device_names_parse() {
        assert_eq!("auto".parse(), Ok(Device::Auto));
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("cuda".parse(), Ok(Device::Cuda(0)));
        assert_eq!("cuda:1".parse(), Ok(Device::Cuda(1)));
        assert_eq!("wgpu".parse(), Ok(Device::Wgpu));
        for bad in ["gpu", "cuda:", "cuda:x", "CUDA"] {
            let err = bad.parse::<Device>().unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
