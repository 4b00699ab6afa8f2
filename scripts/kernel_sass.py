#!/usr/bin/env python3
"""Instruction counts of hearth's CUDA kernels, without a GPU.

Compiles crates/hearth-cuda/kernels (in the order hearth-cuda's compile.rs joins them) with
NVRTC for one architecture, disassembles the CUBIN and prints, for each kernel named, its
registers and every loop that holds a dp4a (IDP; another opcode with --op): its length in
instructions and the most common opcodes. That is how the inner loops of the int8 GEMVs were compared (BENCHMARKS.md,
2026-11-27).

Needs NVIDIA's PyPI wheels, which run on any x86-64 Linux machine:
    python3 -m pip install --target /tmp/cuda-tools \
        nvidia-cuda-nvrtc nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
Usage:
    CUDA_TOOLS=/tmp/cuda-tools scripts/kernel_sass.py [--arch sm_90] [NAME=VALUE ...] KERNEL...
NAME=VALUE pairs become #defines ahead of the source, as HEARTH_CUDA_DEFINES does.
"""

import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

KERNELS = Path(__file__).resolve().parent.parent / "crates/hearth-cuda/kernels"
# The files of compile.rs's KERNEL_SOURCE, in its order.
FILES = re.findall(r'include_str!\("\.\./kernels/([\w.]+)"\)',
                   (KERNELS.parent / "src/compile.rs").read_text())


def tool(root, pattern):
    found = sorted(glob.glob(os.path.join(root, "nvidia", "*", pattern)))
    if not found:
        sys.exit(f"{pattern} not found under {root}/nvidia (see this script's docstring)")
    return found[-1]


def compile_cubin(source, arch, nvrtc_path):
    nvrtc = ctypes.CDLL(nvrtc_path)
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernels.cu", 0, None,
                                None):
        sys.exit("nvrtcCreateProgram failed")
    # The options compile.rs passes.
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"--fmad=true"]
    if nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)):
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        sys.exit(log.value.decode())
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    cubin = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin.raw


def opcode(line):
    text = re.sub(r"^@!?U?P\w+\s+", "", line.split("*/", 1)[1].strip())
    return text.split()[0].split(".")[0] if text else ""


def loops(body, op):
    """Backward branches whose span holds opcode `op`: (start, end, instruction opcodes)."""
    addrs = [int(re.search(r"/\*([0-9a-f]{4,})\*/", line).group(1), 16) for line in body]
    for i, line in enumerate(body):
        m = re.search(r"BRA (?:`\(\.L_x_\d+\) )?(0x[0-9a-f]+)", line)
        if not m or int(m.group(1), 16) >= addrs[i]:
            continue
        start = int(m.group(1), 16)
        ops = [opcode(body[j]) for j in range(len(body)) if start <= addrs[j] <= addrs[i]]
        if op in ops:
            yield start, addrs[i], ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--op", default="IDP", help="list the loops holding this opcode (HMMA: mma)")
    ap.add_argument("items", nargs="+", help="NAME=VALUE defines and kernel names")
    args = ap.parse_args()
    root = os.environ.get("CUDA_TOOLS", "/tmp/cuda-tools")
    defines = [i for i in args.items if "=" in i]
    names = [i for i in args.items if "=" not in i]
    source = "".join("#define {} {}\n".format(*d.split("=", 1)) for d in defines)
    source += "".join((KERNELS / f).read_text() for f in FILES)
    cubin = compile_cubin(source, args.arch, tool(root, "lib/libnvrtc.so*"))
    env = dict(os.environ, PATH=os.path.dirname(tool(root, "bin/nvdisasm")) + ":" +
               os.environ.get("PATH", ""))
    cuobjdump = tool(root, "bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True,
                              env=env, check=True).stdout
        usage = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True,
                               text=True, check=True).stdout
    for name in names:
        res = re.search(rf"Function {re.escape(name)}:\n\s*(REG:\d+ STACK:\d+ SHARED:\d+)", usage)
        m = re.search(rf"Function : {re.escape(name)}\n(.*?)(?=\n\s*Function :|\Z)", sass, re.S)
        if not m:
            print(f"{name}: not in the CUBIN")
            continue
        body = [line for line in m.group(1).split("\n") if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line)]
        print(f"{name}: {len(body)} instructions, {res.group(1) if res else ''}")
        for start, end, ops in loops(body, args.op):
            common = ", ".join(f"{op} {n}" for op, n in Counter(ops).most_common(8))
            print(f"  loop {start:#x}-{end:#x}: {len(ops)} instructions ({common})")


if __name__ == "__main__":
    main()
