#!/usr/bin/env python3
"""Dump a GGUF file's layout as read by gguf-py (the reference reader) into a JSON fixture.

The hearth-gguf tests compare their own reading of the same file against this fixture:
every tensor (name, type, dims in ggml order, offset relative to the data section, size) and
every metadata key (type, and for arrays the length plus the first and last elements).
Floats are recorded as their IEEE bit patterns so the comparison is exact.

Usage: scripts/dump_gguf_tensors.py MODEL.gguf OUT.json
"""

import json
import os
import struct
import sys

import gguf
from gguf import GGUFValueType as T

HEAD_TAIL = 8

TYPE_NAMES = {
    T.UINT8: "u8", T.INT8: "i8", T.UINT16: "u16", T.INT16: "i16", T.UINT32: "u32",
    T.INT32: "i32", T.UINT64: "u64", T.INT64: "i64", T.FLOAT32: "f32", T.FLOAT64: "f64",
    T.BOOL: "bool", T.STRING: "string", T.ARRAY: "array",
}


def encode(value, ty):
    """A JSON-exact form of one scalar: floats as bit patterns, bools as bools."""
    if ty == T.FLOAT32:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    if ty == T.FLOAT64:
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    if ty == T.BOOL:
        return bool(value)
    return value


def dump_field(field):
    types = list(field.types)
    main = types[0]
    if main != T.ARRAY:
        return {"type": TYPE_NAMES[main], "value": encode(field.contents(), main)}
    if len(types) != 2:
        raise SystemExit(f"{field.name}: nested arrays are not dumped")
    sub = types[1]
    n = len(field.data)
    head = field.contents(slice(0, min(n, HEAD_TAIL)))
    tail = field.contents(slice(max(n - HEAD_TAIL, 0), n))
    out = {
        "type": "array",
        "element_type": TYPE_NAMES[sub],
        "len": n,
        "head": [encode(v, sub) for v in head],
        "tail": [encode(v, sub) for v in tail],
    }
    if sub == T.STRING:
        out["total_utf8_bytes"] = sum(len(field.parts[i]) for i in field.data)
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    path, out_path = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(path)
    metadata = {
        name: dump_field(field)
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.")
    }
    tensors = [
        {
            "name": t.name,
            "type": t.tensor_type.name,
            "dims": [int(d) for d in t.shape],
            "offset": int(t.data_offset) - int(reader.data_offset),
            "n_bytes": int(t.n_bytes),
        }
        for t in reader.tensors
    ]
    doc = {
        "file": os.path.basename(path),
        "file_size": os.path.getsize(path),
        "version": int(reader.fields["GGUF.version"].contents()),
        "alignment": int(reader.alignment),
        "data_offset": int(reader.data_offset),
        "metadata_keys": list(metadata),
        "metadata": metadata,
        "tensors": tensors,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
