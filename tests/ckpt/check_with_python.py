"""Python side of the safetensors interoperability check.

    check_with_python.py FILE           opens a snapshot written by st_write_sample with
                                        the `safetensors` package and numpy, and compares
                                        every value, the metadata, and each tensor's CRC32C
                                        (recomputed bitwise here, independently of C++)
    check_with_python.py --write FILE   writes the same values with safetensors' own
                                        writer, for `st_write_sample --check FILE`
"""
import json
import re
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def expected_tensors():
    return {
        "1.weight": (np.arange(12, dtype=np.float32) * np.float32(0.5) - np.float32(2.0)).reshape(3, 4),
        "1.bias": np.float32(1.0) / np.arange(1, 4, dtype=np.float32),
        "optim.1.weight.momentum": np.arange(5, dtype=np.float64) / 7.0,
        "ints": np.array([-5, 0, 7, -(2**63), 2**63 - 1], dtype=np.int64),
        "uints": np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64).reshape(2, 2),
    }


def write(path: str) -> int:
    save_file(expected_tensors(), path, metadata={"writer": "python"})
    print(f"python safetensors wrote {path}")
    return 0


def main(path: str) -> int:
    t = load_file(path)
    expected = expected_tensors()
    failures = []
    if sorted(t) != sorted(expected):
        failures.append(f"names: got {sorted(t)}, expected {sorted(expected)}")
    for name, want in expected.items():
        got = t.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
            failures.append(f"{name}: got {got.dtype} {got.shape} {got.ravel()[:6]}, expected {want.dtype} {want.shape} {want.ravel()[:6]}")
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    want_meta = {"format": "ringfence-snapshot", "format_version": "1", "model": "sample", "step": "42",
                 "generation": "2", "world_size": "3", "optimizer": "sgd"}
    for k, v in want_meta.items():
        if meta.get(k) != v:
            failures.append(f"metadata {k}: got {meta.get(k)!r}, expected {v!r}")
    if json.loads(meta.get("optimizer_hparams", "{}")) != {"lr": 0.05, "momentum": 0.9}:
        failures.append(f"optimizer_hparams: {meta.get('optimizer_hparams')!r}")
    crcs = json.loads(meta.get("crc32c", "{}"))
    for name, arr in t.items():
        mine = f"{crc32c(arr.tobytes()):08x}"
        if crcs.get(name) != mine:
            failures.append(f"crc32c of {name}: file says {crcs.get(name)}, Python computes {mine}")
    if not re.fullmatch(r"x3:[0-9a-f]{32}", meta.get("state_digest", "")):  # version "x3": XXH3-128
        failures.append(f"state_digest: {meta.get('state_digest')!r}")
    for f in failures:
        print("MISMATCH:", f)
    print(f"python safetensors check: {len(expected)} tensors, {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        sys.exit(write(sys.argv[2]))
    sys.exit(main(sys.argv[1]))
