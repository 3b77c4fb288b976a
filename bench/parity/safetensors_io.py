"""Reading ringfence's files without PyTorch: safetensors (F32 tensors) and Fashion-MNIST's
IDX files. Shared by bench/parity (parity.py, drift.py) and bench/exact."""
import gzip
import json
import struct
import sys

import numpy as np


def read_safetensors_f32(path):
    """Reads the F32 tensors of a safetensors file (u64 header length, JSON header, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype="<f4").reshape(e["shape"]).copy()
    return out


def read_idx(path, ndims):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    magic = raw[:4]
    if magic[:3] != b"\x00\x00\x08" or magic[3] != ndims:
        sys.exit(f"{path}: not an unsigned-byte IDX file with {ndims} dimensions")
    dims = struct.unpack(">" + "I" * ndims, raw[4:4 + 4 * ndims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)
