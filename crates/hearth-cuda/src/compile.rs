//! NVRTC: CUDA C source to CUBIN for one GPU architecture.

use std::ffi::{c_char, CStr, CString};

use cudarc::nvrtc::{result, sys};

/// The whole kernel program: the files of `kernels/`, shared helpers first.
pub const KERNEL_SOURCE: &str = concat!(
    include_str!("../kernels/common.cuh"),
    "\n",
    include_str!("../kernels/gemv.cu"),
    "\n",
    include_str!("../kernels/gemv_q8a.cu"),
    "\n",
    include_str!("../kernels/mmq.cu"),
    "\n",
    include_str!("../kernels/reduce.cu"),
    "\n",
    include_str!("../kernels/top_k.cu"),
    "\n",
    include_str!("../kernels/dequant.cu"),
    "\n",
    include_str!("../kernels/mlx.cu"),
    "\n",
    include_str!("../kernels/model.cu"),
    "\n",
    include_str!("../kernels/attention_split.cu"),
    "\n",
    include_str!("../kernels/flash_prefill.cu"),
    "\n",
    include_str!("../kernels/attention_gqa.cu"),
    "\n",
    include_str!("../kernels/mmq_f16.cu"),
    "\n",
    include_str!("../kernels/decode_layers.cu"),
    "\n",
    include_str!("../kernels/step_gate.cu"),
);

/// The NVRTC library's version (major, minor). Call only after [`crate::probe`] succeeded.
pub fn nvrtc_version() -> Result<(i32, i32), String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both pointers are to live locals.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| format!("nvrtcVersion failed: {e:?}"))?;
    Ok((major, minor))
}

/// Compiles `source` to a CUBIN for `arch` (e.g. "sm_90"). The error carries NVRTC's log.
/// Call only after [`crate::probe`] succeeded (NVRTC must be loadable).
pub fn compile_cubin(source: &str, name: &str, arch: &str) -> Result<Vec<u8>, String> {
    let src = CString::new(source).map_err(|_| "kernel source contains a NUL byte".to_string())?;
    let name = CString::new(name).map_err(|_| "program name contains a NUL byte".to_string())?;
    let prog = result::create_program(&src, Some(&name))
        .map_err(|e| format!("nvrtcCreateProgram failed: {e:?}"))?;
    let options = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        // NOTE: no fast-math: the kernels are checked against references at f32 rounding, and
        // flushing denormals or approximate division would move results for no speed here.
        "--fmad=true".to_string(),
    ];
    // SAFETY: `prog` was just created and is destroyed once, below.
    let compiled = unsafe { result::compile_program(prog, &options) };
    let outcome = match compiled {
        Ok(()) => unsafe { cubin(prog) },
        Err(e) => Err(format!("NVRTC failed for {arch} ({e:?}):\n{}", unsafe {
            log(prog)
        })),
    };
    // SAFETY: as above.
    let _ = unsafe { result::destroy_program(prog) };
    outcome
}

/// # Safety
/// `prog` must be a live, successfully compiled program.
unsafe fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, String> {
    let mut size = 0usize;
    sys::nvrtcGetCUBINSize(prog, &mut size)
        .result()
        .map_err(|e| format!("nvrtcGetCUBINSize failed: {e:?}"))?;
    if size == 0 {
        return Err("NVRTC produced an empty CUBIN (was a virtual arch requested?)".into());
    }
    let mut out = vec![0u8; size];
    sys::nvrtcGetCUBIN(prog, out.as_mut_ptr() as *mut c_char)
        .result()
        .map_err(|e| format!("nvrtcGetCUBIN failed: {e:?}"))?;
    Ok(out)
}

/// # Safety
/// `prog` must be a live program.
unsafe fn log(prog: sys::nvrtcProgram) -> String {
    match result::get_program_log(prog) {
        Ok(raw) if !raw.is_empty() => CStr::from_ptr(raw.as_ptr()).to_string_lossy().into_owned(),
        _ => "(no log)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_source_exports_every_kernel_the_host_loads() {
        for name in crate::device::KERNEL_NAMES {
            let decl = format!("{name}(");
            assert!(
                KERNEL_SOURCE.contains(&decl),
                "kernel {name} missing from kernels/*.cu"
            );
        }
        assert!(
            !KERNEL_SOURCE.contains("#include"),
            "NVRTC has no toolkit headers here"
        );
    }

    /// The other way round: a kernel the source exports but the host does not load cannot be
    /// launched ("kernel ... not loaded" at run time).
    #[test]
    fn the_host_loads_every_kernel_the_source_exports() {
        let marker = "extern \"C\" __global__ void ";
        for (i, _) in KERNEL_SOURCE.match_indices(marker) {
            let mut rest = KERNEL_SOURCE[i + marker.len()..].trim_start();
            // `__launch_bounds__(N)` may stand between `void` and the name.
            if let Some(after) = rest.strip_prefix("__launch_bounds__") {
                rest = after.split_once(')').map_or("", |(_, r)| r).trim_start();
            }
            let name = rest.split('(').next().unwrap_or("").trim();
            assert!(
                crate::device::KERNEL_NAMES.contains(&name),
                "kernel {name} is not in KERNEL_NAMES (device.rs)"
            );
        }
    }

    /// Kernels are launched so that each may start before the one before it ends
    /// (backend/dependent_launch.rs). One that reads earlier results without first calling
    /// `await_previous_kernels` would race, and only sometimes: so every kernel must call it,
    /// itself or through a device function that does.
    #[test]
    fn every_kernel_awaits_the_kernels_before_it() {
        let functions = function_definitions(KERNEL_SOURCE);
        let kernels: Vec<_> = functions.iter().filter(|f| f.kernel).collect();
        assert!(kernels.len() >= 40, "found {} kernels", kernels.len());
        // Device functions that wait, directly or through another: to a fixed point.
        let mut waiting = vec!["await_previous_kernels".to_string()];
        loop {
            let more: Vec<String> = functions
                .iter()
                .filter(|f| !f.kernel && !waiting.contains(&f.name))
                .filter(|f| calls_any(&f.body, &waiting))
                .map(|f| f.name.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            waiting.extend(more);
        }
        for k in kernels {
            assert!(
                calls_any(&k.body, &waiting),
                "kernel {} never calls await_previous_kernels",
                k.name
            );
        }
    }

    struct Function {
        name: String,
        kernel: bool,
        body: String,
    }

    /// The `__global__` and `__device__` functions with a body in CUDA source `src`.
    fn function_definitions(src: &str) -> Vec<Function> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(i) = src[at..].find("__").map(|i| at + i) {
            at = i + 2;
            let kernel = src[i..].starts_with("__global__");
            if !kernel && !src[i..].starts_with("__device__") {
                continue;
            }
            // A definition: a parameter list, then `{` before any `;`.
            let rest = &src[i..];
            let (Some(open), semi) = (rest.find('{'), rest.find(';')) else {
                break;
            };
            if semi.is_some_and(|s| s < open) || !rest[..open].contains('(') {
                continue;
            }
            let mut header = &rest[..open];
            if let Some(b) = header.find("__launch_bounds__") {
                header = header[b..].split_once(')').map_or("", |(_, h)| h);
            }
            let name = header.split('(').next().unwrap_or("");
            let name = name.split_whitespace().last().unwrap_or("").to_string();
            let mut depth = 0;
            let mut end = open;
            for (j, c) in rest[open..].char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = open + j;
                    break;
                }
            }
            out.push(Function {
                name,
                kernel,
                body: rest[open + 1..end].to_string(),
            });
            at = i + end;
        }
        out
    }

    /// Whether `body` calls one of `names` (plainly or with template arguments).
    fn calls_any(body: &str, names: &[String]) -> bool {
        names.iter().any(|n| {
            body.match_indices(n.as_str()).any(|(i, _)| {
                let before = body[..i].chars().last();
                let after = body[i + n.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && matches!(after, Some('(') | Some('<'))
            })
        })
    }

    #[test]
    fn the_top_k_kernel_holds_as_many_candidates_as_the_host_asks_for() {
        let define = format!("#define TOP_K_MAX {}", crate::backend::TOP_K_MAX);
        assert!(
            KERNEL_SOURCE.contains(&define),
            "kernels/top_k.cu lacks `{define}`"
        );
    }

    /// The wide attention kernels' blocks are launched with the host's width; a kernel
    /// compiled for fewer warps would write past its shared arrays.
    #[test]
    fn the_wide_attention_kernels_have_the_width_the_host_launches() {
        let define = format!(
            "#define ATTN_WIDE_WARPS {}",
            crate::backend::ATTN_WIDE_WARPS
        );
        assert!(
            KERNEL_SOURCE.contains(&define),
            "kernels/model.cu lacks `{define}`"
        );
    }

    /// The host sizes its splits so that none is empty (splits of at least as many positions
    /// as there are splits) and no more than a warp's lanes hold their results.
    #[test]
    fn the_split_attention_kernels_take_the_hosts_fewest_positions_a_split() {
        for define in [
            format!("#define ATTN_SPLIT_MIN {}", crate::backend::ATTN_SPLIT_MIN),
            format!(
                "#define ATTN_MAX_SPLITS {}",
                crate::backend::ATTN_MAX_SPLITS
            ),
        ] {
            assert!(KERNEL_SOURCE.contains(&define), "kernels lack `{define}`");
        }
    }

    /// The tensor-core split attention's blocks, shared memory and split counts are the
    /// host's: a kernel of other sizes would read or write past what the launch gives it.
    #[test]
    fn the_tensor_core_split_attention_kernels_have_the_hosts_sizes() {
        use crate::backend::{GQA_BK, GQA_MAX_GROUP, GQA_MAX_SPLITS, GQA_STAGES, GQA_THREADS};
        for define in [
            format!("#define GQA_WARPS {}", GQA_THREADS / 32),
            format!("#define GQA_BK {GQA_BK}"),
            format!("#define GQA_STAGES {GQA_STAGES}"),
            format!("#define GQA_MAX_GROUP {GQA_MAX_GROUP}"),
            format!("#define GQA_MAX_SPLITS {GQA_MAX_SPLITS}"),
        ] {
            assert!(KERNEL_SOURCE.contains(&define), "kernels lack `{define}`");
        }
    }

    /// NVRTC needs no GPU, so wherever the library loads (with or without a driver) the
    /// kernels must compile. `scripts/test.sh` fetches the library (`scripts/setup-nvrtc.sh`)
    /// and sets HEARTH_REQUIRE_NVRTC=1, which makes its absence a failure rather than a skip.
    #[test]
    fn kernels_compile_with_nvrtc_where_it_is_present() {
        // SAFETY: loads the vendor's library the way the bindings would.
        if !unsafe { sys::is_culib_present() } {
            let required = std::env::var("HEARTH_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "HEARTH_REQUIRE_NVRTC=1 but no NVRTC library loads"
            );
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipped: no NVRTC library (libnvrtc.so)");
            return;
        }
        let (major, _) = nvrtc_version().unwrap();
        assert!(major >= 12, "NVRTC {major}");
        // The two ends of the source's `__CUDA_ARCH__` branches: sm_75 (Turing) compiles the
        // tensor-core kernels without their `mma` and `cp.async` (never launched there, see
        // `GpuInfo::has_mma`); sm_90 takes every branch from 800 and from 900 up (sm_80 and
        // sm_89 differ from it only by lacking the 900-and-up launch control). One thread an
        // architecture: a compile takes about 40 s on one core.
        std::thread::scope(|scope| {
            let compiles = ["sm_75", "sm_90"].map(|arch| {
                scope.spawn(move || {
                    (
                        arch,
                        compile_cubin(KERNEL_SOURCE, "hearth_kernels.cu", arch),
                    )
                })
            });
            for compile in compiles {
                let (arch, cubin) = compile.join().unwrap();
                let cubin = cubin.unwrap_or_else(|e| panic!("{arch}: {e}"));
                assert_eq!(&cubin[..4], b"\x7fELF", "{arch}: a CUBIN is an ELF image");
            }
        });
        let err = compile_cubin("this is not CUDA", "bad.cu", "sm_90").unwrap_err();
        assert!(err.contains("bad.cu") || err.contains("error"), "{err}");
    }
}
