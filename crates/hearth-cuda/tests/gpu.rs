//! GPU checks of every kernel against the CPU reference. Without a usable GPU each test prints
//! "skipped: <reason>" and returns, so CI (no GPU) passes while showing what did not run.

use hearth_cuda::conformance::{
    argmax_rows, check_argmax, check_dequant_f16, check_gemv, check_rms_norm, Activations,
};
use hearth_cuda::{
    probe, CudaDevice, CudaError, KernelCache, KernelOrigin, DEQUANT_TYPED_TYPES, GEMV_Q8A_TYPES,
    GEMV_TYPES,
};
use hearth_quant::GgmlType;
use rand::SeedableRng;
use std::io::Write;

/// The opened GPU, or None after printing why the test is skipped.
fn device(cache: &KernelCache) -> Option<CudaDevice> {
    if let Err(e) = probe() {
        // NOTE: written to the stderr handle, not with eprintln!, which the test harness
        // captures: a skipped GPU test must be visible in CI's log.
        let _ = writeln!(std::io::stderr(), "skipped: {e}");
        return None;
    }
    match CudaDevice::open(0, cache) {
        Ok(dev) => Some(dev),
        Err(e) => panic!("the GPU probed fine but could not be opened: {e}"),
    }
}

fn temp_cache(name: &str) -> KernelCache {
    let dir = std::env::temp_dir().join(format!("hearth-cuda-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    KernelCache::at(dir)
}

#[test]
fn gemv_matches_reference_for_every_type_and_odd_shapes() {
    let Some(dev) = device(&KernelCache::default_location()) else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for ty in GEMV_TYPES {
        // 20001 rows: more row groups than one wave of warps, so warps walk several groups
        // (grid-stride) and prefetch across them; odd, so the last group is half empty.
        // 3072 and 5120 columns: int8 rows of two to five shared-memory windows by type (two
        // staged whole, more through two windows in turn).
        let shapes = [
            (64, 512),
            (7, 1024),
            (33, 864),
            (1, 2048),
            (20001, 256),
            (5, 3072),
            (3, 5120),
        ];
        for (rows, cols) in shapes {
            if ty.bytes_for(cols as u64).is_none() {
                continue;
            }
            let mut acts = vec![Activations::F32];
            if GEMV_Q8A_TYPES.contains(&ty) {
                acts.push(Activations::Int8);
            }
            for act in acts {
                let case = check_gemv(&dev, ty, (rows, cols), act, None, &mut rng).unwrap();
                assert!(
                    case.passed(),
                    "{ty} {rows}x{cols} {act:?}: nmse {} > {}",
                    case.error,
                    case.bound
                );
            }
        }
    }
}

/// The GEMM path's f16 dequantizers, specialized and element-wise, give hearth-quant's values
/// to within one f16 rounding step.
#[test]
fn f16_dequantizers_match_reference() {
    let Some(dev) = device(&KernelCache::default_location()) else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for ty in DEQUANT_TYPED_TYPES {
        for (rows, cols) in [(64, 512), (7, 1024), (3, 2048), (20001, 256)] {
            for typed in [true, false] {
                let case =
                    check_dequant_f16(&dev, ty, (rows, cols), typed, None, &mut rng).unwrap();
                assert!(
                    case.passed(),
                    "{ty} {rows}x{cols} typed={typed}: {} values off",
                    case.error
                );
            }
        }
    }
}

#[test]
fn rms_norm_and_argmax_match_reference() {
    let Some(dev) = device(&KernelCache::default_location()) else {
        return;
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    for (rows, dim) in [(1, 896), (4, 100), (2, 5000)] {
        let case = check_rms_norm(&dev, rows, dim, &mut rng).unwrap();
        assert!(
            case.passed(),
            "{rows}x{dim}: {} > {}",
            case.error,
            case.bound
        );
    }
    for cols in [3000, 151936, 999] {
        let case = check_argmax(&dev, cols, None, &mut rng).unwrap();
        assert_eq!(case.error, 0.0, "{cols} columns: rows differ");
    }
}

#[test]
fn kernels_are_cached_and_a_corrupt_entry_is_recompiled() {
    let cache = temp_cache("cache");
    let Some(first) = device(&cache) else {
        return;
    };
    let KernelOrigin::Compiled {
        stored: Some(path), ..
    } = first.kernel_origin().clone()
    else {
        panic!(
            "a fresh cache should compile and store: {}",
            first.kernel_origin()
        );
    };
    drop(first);
    let second = device(&cache).unwrap();
    assert!(matches!(second.kernel_origin(), KernelOrigin::Cache(p) if *p == path));
    drop(second);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&path, bytes).unwrap();
    let third = device(&cache).unwrap();
    match third.kernel_origin() {
        KernelOrigin::Compiled { miss, .. } => assert!(miss.contains("corrupt"), "{miss}"),
        other => panic!("a corrupt entry must be recompiled, got {other}"),
    }
    let _ = std::fs::remove_dir_all(cache.dir().unwrap());
}

#[test]
fn bad_operands_are_errors_naming_the_problem() {
    let Some(dev) = device(&KernelCache::default_location()) else {
        return;
    };
    let err = dev
        .upload_matrix(GgmlType::Q4_K, 2, 100, &[0; 10])
        .err()
        .unwrap();
    assert!(err.to_string().contains("Q4_K"), "{err}");
    let w = dev
        .upload_matrix(GgmlType::Q8_0, 2, 64, &[0; 2 * 68])
        .unwrap();
    let x = dev.upload_f32(&[0.0; 32]).unwrap();
    let mut y = dev.upload_f32(&[0.0; 2]).unwrap();
    let err = dev.gemv(&w, &x, &mut y).unwrap_err();
    assert!(matches!(err, CudaError::Shape { op: "gemv", .. }), "{err}");
    let w = dev.upload_matrix(GgmlType::Q5_0, 1, 32, &[0; 22]).unwrap();
    let err = dev.gemv(&w, &x, &mut y).unwrap_err();
    assert!(err.to_string().contains("Q5_0"), "{err}");
}

#[test]
fn argmax_rows_encode_the_samplers_rules() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let rows = argmax_rows(1000, &mut rng);
    let picks: Vec<u32> = rows.iter().map(|r| hearth_sampler::argmax(r)).collect();
    let tie = rows[1].iter().position(|&v| v == 25.0).unwrap() as u32;
    assert_eq!(picks[1], tie);
    assert!(!rows[2][picks[2] as usize].is_nan());
    assert_eq!(picks[3..], [0, 0, 999]);
}
