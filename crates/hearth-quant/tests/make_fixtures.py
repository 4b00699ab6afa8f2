#!/usr/bin/env python3
"""Writes tests/data/dequant.bin: random blocks of each type and their dequantized values,
computed by the `gguf` Python package (gguf-py, which mirrors ggml's reference code).

Format (little-endian): b"HQFX", u32 record count, then per record:
u32 GGUF type id, u32 n_elements, u32 n_bytes, the raw bytes, n_elements f32 values.

Run from the crate directory: python3 tests/make_fixtures.py
"""

import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# (type, block bytes, block elements, offsets of f16 scale fields, blocks to write)
TYPES = [
    (T.Q4_0, 18, 32, [0], 8),
    (T.Q4_1, 20, 32, [0, 2], 8),
    (T.Q5_0, 22, 32, [0], 8),
    (T.Q5_1, 24, 32, [0, 2], 8),
    (T.Q8_0, 34, 32, [0], 8),
    (T.Q2_K, 84, 256, [80, 82], 3),
    (T.Q3_K, 110, 256, [108], 3),
    (T.Q4_K, 144, 256, [0, 2], 3),
    (T.Q5_K, 176, 256, [0, 2], 3),
    (T.Q6_K, 210, 256, [208], 3),
]


def random_blocks(rng, type_size, f16_offsets, n_blocks):
    data = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in f16_offsets:
        # Finite scales of varied magnitude, both signs (mins may be negative in files too).
        vals = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-4, 1, n_blocks)).astype(np.float16)
        data[:, off:off + 2] = vals.view(np.uint8).reshape(n_blocks, 2)
    return data.reshape(-1)


def main():
    rng = np.random.default_rng(20240607)
    records = []
    for qtype, type_size, block, f16_offsets, n_blocks in TYPES:
        data = random_blocks(rng, type_size, f16_offsets, n_blocks)
        values = quants.dequantize(data, qtype).astype(np.float32).reshape(-1)
        assert values.size == n_blocks * block
        records.append((int(qtype), data.tobytes(), values))

    # Q8_K (activation type, not in gguf-py): f32 d, 256 i8, 16 i16 sums; value = d * q.
    n_blocks = 3
    data = rng.integers(0, 256, size=(n_blocks, 292), dtype=np.uint8)
    d = (rng.standard_normal(n_blocks) * 1e-2).astype(np.float32)
    data[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    qs = data[:, 4:260].view(np.int8).astype(np.float32)
    records.append((int(T.Q8_K), data.tobytes(), (d[:, None] * qs).astype(np.float32).reshape(-1)))

    x = rng.standard_normal(100).astype(np.float32) * 3
    records.append((int(T.F32), x.tobytes(), x))
    h = x.astype(np.float16)
    records.append((int(T.F16), h.tobytes(), h.astype(np.float32)))
    bf = (x.view(np.uint32) >> 16).astype(np.uint16)
    records.append((int(T.BF16), bf.tobytes(), quants.dequantize(bf.view(np.uint8), T.BF16).astype(np.float32).reshape(-1)))

    out = bytearray(b"HQFX")
    out += struct.pack("<I", len(records))
    for type_id, raw, values in records:
        out += struct.pack("<III", type_id, values.size, len(raw))
        out += raw
        out += values.astype("<f4").tobytes()
    path = pathlib.Path(__file__).parent / "data" / "dequant.bin"
    path.write_bytes(bytes(out))
    print(f"wrote {path.name}: {len(records)} records, {len(out)} bytes")


if __name__ == "__main__":
    main()
