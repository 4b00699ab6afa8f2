#!/usr/bin/env python3
"""Where a CUDA process's GPU memory goes before any model is loaded.

Run on a GPU machine: python3 scripts/device/context_memory.py [variant ...]
Each variant runs in a fresh process and prints the device memory in use (cuMemGetInfo, the
whole GPU) after each stage, plus nvidia-smi's figure for the process. Variants:
  plain       a context, then cuBLAS, then 20 allocations of 2 MiB + 16 bytes and of 1 MiB
  stack0      as plain, with the per-thread stack limit set to 0 right after the context
  nocublas    the context only, held while nvidia-smi looks
  limits0     the context with the stack, printf FIFO and device malloc heap limits set to 0
              (the driver's floor where it has one), each reported, held while nvidia-smi looks
  stack0held  the context with the stack limit at 0 (as hearth sets it), held while nvidia-smi
              looks; run it under environment settings (CUDA_DEVICE_MAX_CONNECTIONS, ...) to
              see what they change
Stdlib only (ctypes): libcuda.so.1 from the driver, libcublas from the CUDA toolkit.
"""
import ctypes
import glob
import os
import subprocess
import sys
import time

MIB = 1 << 20


def cuda():
    lib = ctypes.CDLL("libcuda.so.1")
    return lib


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: CUresult {rc}")


def used(lib):
    free = ctypes.c_size_t()
    total = ctypes.c_size_t()
    check(lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return total.value - free.value


def smi_mib(pid):
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        p, m = [s.strip() for s in line.split(",")]
        if p == str(pid):
            return int(m)
    return None


def cublas():
    names = ["libcublas.so", "libcublas.so.13", "libcublas.so.12"]
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    for pattern in ["/usr/local/cuda*/lib64/libcublas.so*", "/usr/local/lib/python3*/dist-packages/nvidia/cu*/lib/libcublas.so*"]:
        for path in sorted(glob.glob(pattern)):
            try:
                return ctypes.CDLL(path)
            except OSError:
                pass
    return None


def run(variant, base):
    lib = cuda()
    check(lib.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    report = lambda stage: print(
        f"{variant:9} {stage:34} {(used(lib) - base) / MIB:8.1f} MiB"
        f"   nvidia-smi {smi_mib(os.getpid())} MiB",
        flush=True,
    )
    report("context")
    if variant == "stack0":
        for limit, name in [(0, "stack"), (1, "printf fifo"), (2, "malloc heap")]:
            value = ctypes.c_size_t()
            lib.cuCtxGetLimit(ctypes.byref(value), limit)
            print(f"{variant:9} default {name} limit {value.value}")
        check(lib.cuCtxSetLimit(0, ctypes.c_size_t(0)), "cuCtxSetLimit")
        report("stack limit 0")
    if variant == "limits0":
        for limit, name in [(0, "stack"), (1, "printf fifo"), (2, "malloc heap")]:
            rc = lib.cuCtxSetLimit(limit, ctypes.c_size_t(0))
            value = ctypes.c_size_t()
            lib.cuCtxGetLimit(ctypes.byref(value), limit)
            print(f"{variant:9} {name} limit set to 0: CUresult {rc}, now {value.value}")
            report(f"{name} limit 0")
        time.sleep(1)
        report("held")
        return
    if variant == "stack0held":
        check(lib.cuCtxSetLimit(0, ctypes.c_size_t(0)), "cuCtxSetLimit")
        time.sleep(1)
        report("held, stack 0")
        return
    if variant == "nocublas":
        time.sleep(1)
        report("held")
        return
    blas = cublas()
    if blas is None:
        print("no libcublas found")
    else:
        h = ctypes.c_void_p()
        check(blas.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        report("cublasCreate")
    ptrs = []
    for size, label in [(2 * MIB + 16, "20 x (2 MiB + 16 B)"), (MIB, "20 x 1 MiB"), (4 * MIB, "20 x 4 MiB")]:
        before = used(lib)
        for _ in range(20):
            p = ctypes.c_uint64()
            check(lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)), "cuMemAlloc")
            ptrs.append(p)
        grew = (used(lib) - before) / MIB
        print(f"{variant:9} {label:34} grew {grew:8.1f} MiB (asked {20 * size / MIB:.1f})")
    report("end")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        run(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    base = 0  # absolute figures: the differences between stages are what matter
    for variant in sys.argv[1:] or ["plain", "stack0", "nocublas", "limits0"]:
        subprocess.run([sys.executable, __file__, "--child", variant, str(base)], check=False)
