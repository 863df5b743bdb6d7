#!/usr/bin/python3
"""Writes the tensor-file fixtures used by tests/test_io.cpp into tests/data/io/.

The .npy files are written by NumPy itself; the safetensors file by the small
hand-coded writer below (struct + json, following the published format).
expected.json records, for every fixture, the shape, dtype and values as NumPy
computes them, so the C++ tests compare against an independent reference.

Run with: /usr/bin/python3 scripts/make_io_fixtures.py
"""
import json
import math
import os
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "io")

DTYPE_NAMES = {np.float32: "f32", np.float16: "f16", np.int32: "i32", np.int64: "i64", np.bool_: "bool"}


def json_value(x):
    """A float/int/bool as JSON; non-finite floats as the strings nan/inf/-inf."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def describe(arr, dtype_name):
    return {"dtype": dtype_name, "shape": list(arr.shape), "values": [json_value(v) for v in arr.ravel(order="C")]}


def save_npy(name, arr, version=None):
    path = os.path.join(OUT, name)
    if version is None:
        np.save(path, arr, allow_pickle=arr.dtype == object)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)


def bf16_bits(values):
    """Rounds f32 values to bfloat16 bits (round to nearest even, as the safetensors writers do)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_values(bits16):
    return (bits16.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, dtype string, shape, raw little-endian bytes), stored in list order."""
    header, data, offset = {}, b"", 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {"npy": {}, "safetensors": {}}

    npy_arrays = {
        "f32.npy": np.array([[1.5, -2.0, 0.1], [np.inf, -np.inf, np.nan]], dtype=np.float32),
        "f16.npy": np.array([0.1, -65504.0, 6e-8, 1.0 / 3.0], dtype=np.float16),
        "i32.npy": np.array([-7, 0, 123456, 16777216], dtype=np.int32),
        "i64.npy": np.array([[-1, 2], [1 << 40, 5]], dtype=np.int64),
        "bool.npy": np.array([True, False, True, True, False]),
        "scalar.npy": np.array(2.5, dtype=np.float32),
        "empty.npy": np.zeros((0, 3), dtype=np.float32),
    }
    for name, arr in npy_arrays.items():
        save_npy(name, arr)
        expected["npy"][name] = describe(arr, DTYPE_NAMES[arr.dtype.type])

    v2 = np.array([[1.0, 2.0], [3.0, -4.5]], dtype=np.float32)
    save_npy("v2.npy", v2, version=(2, 0))
    expected["npy"]["v2.npy"] = describe(v2, "f32")
    v3 = np.array([7, -8, 9], dtype=np.int32)
    save_npy("v3.npy", v3, version=(3, 0))
    expected["npy"]["v3.npy"] = describe(v3, "i32")

    # Column-major arrays (what np.save writes for a transposed array): read into row-major order.
    save_npy("fortran.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    save_npy("fortran_3d_i64.npy", np.asfortranarray(np.arange(24, dtype=np.int64).reshape(2, 3, 4)))

    # Files that must be refused.
    save_npy("object.npy", np.array([1, "a", None], dtype=object))
    save_npy("bigendian.npy", np.arange(3, dtype=">f4"))
    save_npy("f64.npy", np.array([1.0, 2.0], dtype=np.float64))

    # safetensors: one tensor of every dtype; "f32_unaligned" starts at an odd offset.
    f32 = np.array([[0.5, -1.25, 3.0], [1e-3, 100.0, -0.0]], dtype=np.float32)
    boolean = np.array([True, False, True])
    f32u = np.array([6.5, -7.75], dtype=np.float32)
    f16 = np.array([[0.1, -2.5], [65504.0, 1e-7]], dtype=np.float16)
    bf16 = bf16_bits([1.0 / 3.0, -2.7, 1e30, 0.5])
    i32 = np.array([-3, 0, 40000], dtype=np.int32)
    i64 = np.array([[1 << 33], [-9]], dtype=np.int64)
    tensors = [
        ("f32", "F32", f32.shape, f32.astype("<f4").tobytes(), f32, "f32"),
        ("bool", "BOOL", boolean.shape, boolean.astype(np.uint8).tobytes(), boolean, "bool"),
        ("f32_unaligned", "F32", f32u.shape, f32u.astype("<f4").tobytes(), f32u, "f32"),
        ("f16", "F16", f16.shape, f16.astype("<f2").tobytes(), f16, "f16"),
        ("bf16", "BF16", (2, 2), bf16.astype("<u2").tobytes(), bf16_values(bf16).reshape(2, 2), "bf16"),
        ("i32", "I32", i32.shape, i32.astype("<i4").tobytes(), i32, "i32"),
        ("i64", "I64", i64.shape, i64.astype("<i8").tobytes(), i64, "i64"),
    ]
    metadata = {"format": "pt", "source": "make_io_fixtures"}
    write_safetensors(os.path.join(OUT, "all.safetensors"), [t[:4] for t in tensors], metadata)
    expected["safetensors"]["all.safetensors"] = {
        "metadata": metadata,
        "tensors": {name: describe(values, dt) for name, _, _, _, values, dt in tensors},
    }

    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
