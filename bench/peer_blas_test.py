#!/usr/bin/env python3
"""bench/peer_blas.py's detection of the BLAS a peer runs, and its refusal to let a ratio be
reported against an unoptimized one, on /proc/self/maps texts as Debian 12 writes them. No
torch needed: the probe is a stand-in interpreter that prints what a real one would.

    python3 bench/peer_blas_test.py
"""
import json
import os
import stat
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_blas  # noqa: E402

LIB = "/usr/lib/x86_64-linux-gnu"
REFERENCE = f"{LIB}/blas/libblas.so.3.11.0"
REFERENCE_LAPACK = f"{LIB}/lapack/liblapack.so.3.11.0"
OPENBLAS = f"{LIB}/openblas-pthread/libblas.so.3"
OPENBLAS_CORE = f"{LIB}/openblas-pthread/libopenblasp-r0.3.21.so"
NUMPY_OWN = "/usr/local/lib/python3.11/dist-packages/numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so"


def maps(*paths):
    """A /proc/self/maps text mapping each path twice (text and data), among other lines."""
    lines = ["55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 100  /usr/bin/python3.11",
             "55d0c2000000-55d0c2400000 rw-p 00000000 00:00 0    [heap]",
             "7f00000a0000-7f00000b0000 rw-p 00000000 00:00 0 "]
    for i, p in enumerate(paths):
        lines.append(f"7f10{i:04x}0000-7f10{i:04x}8000 r-xp 00000000 08:01 {200 + i}  {p}")
        lines.append(f"7f10{i:04x}8000-7f10{i:04x}9000 rw-p 00008000 08:01 {200 + i}  {p}")
    return "\n".join(lines) + "\n"


class Detection(unittest.TestCase):
    def test_reference_blas_is_named_and_refused(self):
        blas = peer_blas.blas_from_maps(maps(f"{LIB}/libtorch_cpu.so.1.13", REFERENCE, REFERENCE_LAPACK))
        self.assertEqual(blas["name"], "reference BLAS (Netlib)")
        self.assertFalse(blas["optimized"])
        self.assertEqual(blas["files"], [REFERENCE])
        line = peer_blas.refusal(blas)
        self.assertTrue(line.startswith("no ratio: PyTorch runs reference BLAS (Netlib)"), line)
        self.assertIn("libopenblas0-pthread", line)

    def test_debians_openblas_is_optimized(self):
        blas = peer_blas.blas_from_maps(maps(OPENBLAS, OPENBLAS_CORE))
        self.assertEqual(blas["name"], "OpenBLAS")
        self.assertTrue(blas["optimized"])
        self.assertIsNone(peer_blas.refusal(blas))
        self.assertIn(OPENBLAS, peer_blas.describe(blas))

    def test_numpys_private_openblas_does_not_hide_a_reference_blas(self):
        blas = peer_blas.blas_from_maps(maps(REFERENCE, NUMPY_OWN))
        self.assertEqual(blas["name"], "reference BLAS (Netlib)")
        self.assertFalse(blas["optimized"])

    def test_a_reference_blas_beside_openblas_is_reported_and_refused(self):
        blas = peer_blas.blas_from_maps(maps(OPENBLAS_CORE, REFERENCE))
        self.assertEqual(blas["name"], "OpenBLAS + reference BLAS (Netlib)")
        self.assertFalse(blas["optimized"])
        self.assertIsNotNone(peer_blas.refusal(blas))

    def test_mkl_mapped_or_linked_into_libtorch(self):
        self.assertEqual(peer_blas.blas_from_maps(maps("/opt/intel/lib/libmkl_rt.so.2"))["name"], "MKL")
        linked = peer_blas.blas_from_maps(maps("/x/torch/lib/libtorch_cpu.so"), "  - BLAS_INFO=mkl\n  - LAPACK_INFO=mkl")
        self.assertTrue(linked["optimized"])
        self.assertIn("MKL", linked["name"])

    def test_nothing_found_is_not_taken_on_trust(self):
        blas = peer_blas.blas_from_maps(maps("/x/torch/lib/libtorch_cpu.so"), "  - BLAS_INFO=open\n")
        self.assertFalse(blas["optimized"])
        self.assertIn("BLAS_INFO=open", blas["name"])
        self.assertFalse(peer_blas.blas_from_maps("")["optimized"])


class BestOpenblas(unittest.TestCase):
    def test_reference_blas_line_names_it_not_an_openblas_core(self):
        """What the set-up without libopenblas0-pthread gave: the probe loads the reference BLAS.
        One probe, no kernel chosen, and the line says what was loaded."""
        with tempfile.TemporaryDirectory() as tmp:
            calls = os.path.join(tmp, "calls")
            fake = os.path.join(tmp, "python")
            row = {"gflops": 1.5, "rel_err": 1e-7, "blas": peer_blas.blas_from_maps(maps(REFERENCE))}
            with open(fake, "w") as f:
                f.write(f"#!/bin/sh\necho probe >> {calls}\necho '{json.dumps(row)}'\n")
            os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
            choice = peer_blas.best_openblas(1, python=fake)
            with open(calls) as f:
                self.assertEqual(len(f.read().split()), 1)
        self.assertEqual(choice["env"], {})
        self.assertNotIn("OpenBLAS core", choice["line"])
        self.assertTrue(choice["line"].startswith(f"peer BLAS: reference BLAS (Netlib) ({REFERENCE})"), choice["line"])
        self.assertIsNotNone(peer_blas.refusal(choice["blas"]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
