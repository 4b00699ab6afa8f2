//! The CUDA op conformance table: every op and weight type on random data of real model shapes
//! against the CPU reference, with each GEMV's bandwidth next to the device's copy bandwidth.
//!
//! Usage: `cuda-conformance [--quick] [--load-only] [--device N]`
//! - `--quick`: small shapes only, no timing.
//! - `--load-only`: open the device (loading or compiling the kernels), report, exit.
//!
//! Without a usable GPU it prints the one-line reason and "skipped", and exits 0. Any case
//! outside its bound makes the exit status 1.

use std::process::ExitCode;

use hearth_cuda::conformance::{
    check_argmax, check_dequant_f16, check_gemv, check_rms_norm, copy_bandwidth, Activations,
    CaseResult, TimingPlan,
};
use hearth_cuda::{
    probe_device, CudaDevice, CudaError, KernelCache, DEQUANT_TYPED_TYPES, GEMV_Q8A_TYPES,
    GEMV_TYPES,
};
use rand::SeedableRng;

/// (rows, cols) of the GEMV cases: the attention, FFN and vocabulary shapes of Qwen2-0.5B
/// (hidden 896) and Qwen3-0.6B (hidden 1024), and Llama-3-8B's FFN. K-quant types skip shapes
/// whose columns are not whole 256-element blocks (real GGUFs store those tensors otherwise).
const GEMV_SHAPES: [(usize, usize); 10] = [
    (896, 896),
    (4864, 896),
    (896, 4864),
    (151936, 896),
    (1024, 1024),
    (3072, 1024),
    (1024, 3072),
    (151936, 1024),
    (14336, 4096),
    (4096, 14336),
];
/// Small shapes: rows not a multiple of the 4 rows per thread block, and (864 columns) rows that
/// start off 16-byte alignment for the 32-element block types.
const QUICK_SHAPES: [(usize, usize); 3] = [(64, 512), (7, 1024), (33, 864)];

struct Args {
    quick: bool,
    load_only: bool,
    device: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        quick: false,
        load_only: false,
        device: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--load-only" => args.load_only = true,
            "--device" => {
                let v = it.next().ok_or("--device needs a number")?;
                args.device = v
                    .parse()
                    .map_err(|_| format!("--device: not a number: {v}"))?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cuda-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = probe_device(args.device) {
        println!("{e}");
        println!("skipped");
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            println!("FAILED: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<bool, CudaError> {
    let dev = CudaDevice::open(args.device, &KernelCache::default_location())?;
    println!("device: {}", dev.info());
    println!("{}", dev.kernel_origin());
    if args.load_only {
        return Ok(true);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x4ea7);
    let (shapes, plan, copy_gbps) = if args.quick {
        (&QUICK_SHAPES[..], None, None)
    } else {
        let plan = TimingPlan::for_device(&dev)?;
        let gbps = copy_bandwidth(&dev, 1 << 30)?;
        println!(
            "device-to-device copy: {gbps:.0} GB/s (bytes read + written, median of 20, 1 GiB)"
        );
        (&GEMV_SHAPES[..], Some(plan), Some(gbps))
    };
    print_header();
    let mut all_passed = true;
    for ty in GEMV_TYPES {
        for &(rows, cols) in shapes {
            if ty.bytes_for(cols as u64).is_none() {
                continue;
            }
            let case = check_gemv(
                &dev,
                ty,
                (rows, cols),
                Activations::F32,
                plan.as_ref(),
                &mut rng,
            )?;
            all_passed &= print_case(&case, copy_gbps);
            if GEMV_Q8A_TYPES.contains(&ty) {
                let act = Activations::Int8;
                let case = check_gemv(&dev, ty, (rows, cols), act, plan.as_ref(), &mut rng)?;
                all_passed &= print_case(&case, copy_gbps);
            }
        }
    }
    // The GEMM path's dequantizers, specialized and element-wise, on the largest shape.
    let &(rows, cols) = shapes.last().unwrap_or(&(256, 256));
    for ty in DEQUANT_TYPED_TYPES {
        if ty.bytes_for(cols as u64).is_none() {
            continue;
        }
        for typed in [true, false] {
            let case = check_dequant_f16(&dev, ty, (rows, cols), typed, plan.as_ref(), &mut rng)?;
            all_passed &= print_case(&case, copy_gbps);
        }
    }
    for (rows, dim) in [(1, 896), (64, 4096), (3, 2048), (5, 100)] {
        all_passed &= print_case(&check_rms_norm(&dev, rows, dim, &mut rng)?, None);
    }
    for cols in [151936, 128256, 32000, 1001] {
        let case = check_argmax(&dev, cols, plan.as_ref(), &mut rng)?;
        all_passed &= print_case(&case, copy_gbps);
    }
    println!(
        "{}",
        if all_passed {
            "all cases passed"
        } else {
            "SOME CASES FAILED"
        }
    );
    Ok(all_passed)
}

fn print_header() {
    println!(
        "{:<14} {:<5} {:>12} {:>10} {:>10} {:<4} {:>9} {:>8} {:>8}",
        "op", "dtype", "shape", "error", "bound", "ok", "median", "GB/s", "of copy"
    );
}

/// Prints one line; returns whether the case passed. Timed argmax lines time one row.
fn print_case(case: &CaseResult, copy_gbps: Option<f64>) -> bool {
    let ok = case.passed();
    let timing = match (case.timing, copy_gbps) {
        (Some(t), Some(copy)) => format!(
            "{:>7.2}us {:>8.0} {:>7.1}%",
            t.seconds * 1e6,
            t.gbps(),
            100.0 * t.gbps() / copy
        ),
        _ => String::new(),
    };
    println!(
        "{:<14} {:<5} {:>12} {:>10.2e} {:>10.2e} {:<4} {}",
        case.op,
        case.dtype,
        case.shape,
        case.error,
        case.bound,
        if ok { "ok" } else { "FAIL" },
        timing
    );
    ok
}
