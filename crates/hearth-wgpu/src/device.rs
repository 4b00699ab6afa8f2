//! Opening an adapter and a device with the adapter's real limits, and catching device errors
//! so that they become `Result`s instead of wgpu's default panic.

use std::sync::{Arc, Mutex};

use crate::fma_probe::fma_is_fused;
use crate::WgpuError;

/// What the backend learnt about its adapter.
#[derive(Clone, Debug)]
pub struct AdapterInfo {
    /// Adapter name and API ("llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)").
    pub name: String,
    /// The kernels use `f16` types (the adapter offers shader-f16 and it was not turned off):
    /// the KV cache is read and written as `vec2<f16>` (kernels/kv_words_f16.wgsl).
    pub shader_f16: bool,
    /// The adapter offers subgroup operations.
    pub subgroups: bool,
    /// WGSL's `fma` is fused on this device (found by running it: see `fma_probe.rs`), and the
    /// 8-bit matmuls use it instead of the exact emulation.
    pub native_fma: bool,
    /// Dispatches are timed on the device (`HEARTH_WGPU_PROFILE`, see `profile.rs`).
    pub timestamps: bool,
    /// The largest storage-buffer binding, in bytes.
    pub max_binding: u64,
    /// The largest buffer, in bytes.
    pub max_buffer: u64,
    /// Workgroup memory a kernel may use, in bytes.
    pub max_workgroup_memory: usize,
}

/// Which multiply-add the 8-bit matmuls use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FmaChoice {
    /// The device's `fma` where a probe finds it fused, the exact emulation elsewhere.
    #[default]
    Probe,
    /// Always the exact emulation (fma.wgsl).
    Emulated,
    /// Always the device's `fma`, fused or not: results then differ from the CPU backend's by
    /// rounding where it is not (for tests of the native kernels on such a device).
    Native,
}

/// A device, its queue and the first error it reported since the last check.
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: AdapterInfo,
    errors: Arc<Mutex<Option<String>>>,
}

impl Gpu {
    /// Open the first high-performance adapter (Metal on macOS, Vulkan elsewhere); subgroup
    /// operations and `f16` types are used when the adapter has them and `subgroups` and
    /// `f16` allow them, and the device's own `fma` as `fma` says.
    pub fn open(subgroups: bool, f16: bool, fma: FmaChoice) -> Result<Gpu, WgpuError> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN | wgpu::Backends::METAL,
            // NOTE: not the debug-build default, which asks for the Vulkan validation layers
            // (absent on most machines, and a warning each run); WGPU_* variables still apply.
            flags: wgpu::InstanceFlags::empty().with_env(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        }))
        .map_err(|e| WgpuError::NoAdapter(format!("{e} (no Vulkan or Metal driver found)")))?;
        let ai = adapter.get_info();
        let mut wanted = wgpu::Features::empty();
        if f16 {
            wanted |= wgpu::Features::SHADER_F16;
        }
        if subgroups {
            wanted |= wgpu::Features::SUBGROUP;
        }
        let profiling = crate::profile::wanted() == crate::profile::Wanted::Gpu;
        if profiling {
            wanted |=
                wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        }
        let features = adapter.features() & wanted;
        let timestamps = profiling
            && features.contains(
                wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES,
            );
        if profiling && !timestamps {
            tracing::warn!(
                "{}: {} cannot time dispatches; not profiling",
                crate::profile::PROFILE_VAR,
                ai.name
            );
        }
        // NOTE: the WebGPU defaults cap a storage binding at 128 MiB, smaller than one
        // embedding table of a small model: ask for everything the adapter has.
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("hearth"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| WgpuError::NoAdapter(format!("{}: {e}", ai.name)))?;
        let errors: Arc<Mutex<Option<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| one_line(&e.to_string()));
        }));
        let sink = errors.clone();
        device.set_device_lost_callback(move |reason, msg| {
            let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| format!("device lost ({reason:?}): {msg}"));
        });
        let native_fma = match fma {
            FmaChoice::Emulated => false,
            FmaChoice::Native => true,
            // A probe that fails to run says nothing about fusing: keep the exact emulation.
            FmaChoice::Probe => fma_is_fused(&device, &queue).unwrap_or(false),
        };
        let info = AdapterInfo {
            name: format!("{} ({:?})", ai.name, ai.backend),
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            native_fma,
            timestamps,
            max_binding: limits.max_storage_buffer_binding_size as u64,
            max_buffer: limits.max_buffer_size,
            max_workgroup_memory: limits.max_compute_workgroup_storage_size as usize,
        };
        Ok(Gpu {
            device,
            queue,
            info,
            errors,
        })
    }

    /// The first error the device reported since the last call, if any.
    pub fn take_error(&self) -> Result<(), WgpuError> {
        let mut slot = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        match slot.take() {
            Some(e) => Err(WgpuError::Device(e)),
            None => Ok(()),
        }
    }
}

/// wgpu's error texts span lines; a log line wants one.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
