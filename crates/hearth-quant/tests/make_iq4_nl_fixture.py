#!/usr/bin/env python3
"""Writes tests/data/dequant_iq4_nl.bin: random IQ4_NL blocks and their dequantized values,
computed by the `gguf` Python package (gguf-py, which mirrors ggml's dequantize_row_iq4_nl).

Same record format as make_fixtures.py (little-endian): b"HQFX", u32 record count, then per
record: u32 GGUF type id, u32 n_elements, u32 n_bytes, the raw bytes, n_elements f32 values.

Run from the crate directory: python3 tests/make_iq4_nl_fixture.py
"""

import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants


def main():
    rng = np.random.default_rng(20261122)
    records = []
    # Random index bytes (every nibble value occurs) and finite scales of varied magnitude and
    # both signs; the last record is one block, the others odd and even block counts.
    for n_blocks in (18, 7, 1):
        data = rng.integers(0, 256, size=(n_blocks, 18), dtype=np.uint8)
        d = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-5, 1, n_blocks)).astype(np.float16)
        data[:, 0:2] = d.view(np.uint8).reshape(n_blocks, 2)
        values = quants.dequantize(data.reshape(-1), T.IQ4_NL).astype(np.float32).reshape(-1)
        assert values.size == n_blocks * 32
        records.append((int(T.IQ4_NL), data.tobytes(), values))

    out = bytearray(b"HQFX")
    out += struct.pack("<I", len(records))
    for type_id, raw, values in records:
        out += struct.pack("<III", type_id, values.size, len(raw))
        out += raw
        out += values.astype("<f4").tobytes()
    path = pathlib.Path(__file__).parent / "data" / "dequant_iq4_nl.bin"
    path.write_bytes(bytes(out))
    print(f"wrote {path.name}: {len(records)} records, {len(out)} bytes")


if __name__ == "__main__":
    main()
