//! Run-time CPU feature detection: which kernel family to use, and the AMX gate.

use std::sync::OnceLock;

/// The family of dot-product kernels chosen for this CPU, decided once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelLevel {
    /// Portable Rust, any target.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512 F/BW/DQ/VL and VNNI (plus AVX2, FMA, F16C).
    Avx512Vnni,
}

impl KernelLevel {
    /// The name shown by `hearth show` and the benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            KernelLevel::Scalar => "scalar",
            KernelLevel::Avx2 => "avx2",
            KernelLevel::Avx512Vnni => "avx512-vnni",
        }
    }
}

/// The kernel level of this CPU (detected on first call, then cached).
pub fn kernel_level() -> KernelLevel {
    static LEVEL: OnceLock<KernelLevel> = OnceLock::new();
    *LEVEL.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> KernelLevel {
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    let avx512 = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni");
    match (avx2, avx512) {
        (true, true) => KernelLevel::Avx512Vnni,
        (true, false) => KernelLevel::Avx2,
        _ => KernelLevel::Scalar,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> KernelLevel {
    KernelLevel::Scalar
}

/// True when the CPU has AMX (tile, int8 and bf16) and the kernel granted this process the
/// AMX tile-data state. False on any failure; never panics. Cached after the first call.
pub fn amx_usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(amx_detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_detect() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 7 must exist before it is read.
    let max_leaf = __cpuid(0).eax;
    if max_leaf < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    let amx_bf16 = edx & (1 << 22) != 0;
    let amx_tile = edx & (1 << 24) != 0;
    let amx_int8 = edx & (1 << 25) != 0;
    if !(amx_bf16 && amx_tile && amx_int8) {
        return false;
    }
    // NOTE: Linux keeps the 8 KiB tile-data state off until a process asks for it; without the
    // grant the first tile instruction faults (SIGILL).
    const ARCH_GET_XCOMP_PERM: libc::c_long = 0x1022;
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these codes only reads/writes the permission mask we pass.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    if rc != 0 {
        return false;
    }
    let mut mask: u64 = 0;
    // SAFETY: the kernel writes one u64 to `mask`, which lives for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_GET_XCOMP_PERM,
            &mut mask as *mut u64,
        )
    };
    rc == 0 && mask & (1 << XFEATURE_XTILEDATA) != 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn amx_detect() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_stable_and_does_not_crash() {
        let first = amx_usable();
        assert_eq!(first, amx_usable());
        assert_eq!(kernel_level(), kernel_level());
        assert!(["scalar", "avx2", "avx512-vnni"].contains(&kernel_level().name()));
    }
}
