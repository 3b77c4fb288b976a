#!/usr/bin/env python3
"""ringfence as a library: install, find_package, a program of one's own.

    install_test.py BUILD_DIR SOURCE_DIR

1. `cmake --install BUILD_DIR --prefix P` into a temporary prefix: the package, the
   launcher and the headers land there.
2. examples/spirals is configured and built OUTSIDE the tree against P only
   (-DCMAKE_PREFIX_PATH=P; a copy of the example, so nothing of the source tree is near).
3. It runs alone (one process), then under P/bin/ringfence run -n 2 without faults and with
   rank 1 SIGKILLed at step 100: every replica of both jobs ends on one digest, the killed
   job after one recovery. The example's main.cpp stays under 100 lines.
Every command has a deadline; on expiry its process group is SIGKILLed and the test fails.
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check  # noqa: E402

DEADLINE_S = 240
DIGEST = re.compile(r"spirals: step (\d+), world (\d+), recoveries (\d+), final loss \S+, state (\S+)")


def run(cmd, log):
    rc, out = rf_testlib.run(cmd, log, DEADLINE_S)
    check(rc == 0, f"{' '.join(cmd)}: exit {rc}:\n{out[-1500:]}")
    return out


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="rf_install_")
    prefix, example, exbuild = (os.path.join(tmp, x) for x in ("prefix", "spirals", "spirals-build"))
    try:
        lines = sum(1 for _ in open(os.path.join(source, "examples", "spirals", "main.cpp")))
        check(lines < 100, f"examples/spirals/main.cpp has {lines} lines, not under 100")
        run(["cmake", "--install", build, "--prefix", prefix], f"{tmp}/install.txt")
        for f in ("lib/cmake/ringfence/ringfenceConfig.cmake", "bin/ringfence", "include/ringfence/ddp/trainer.h",
                  "lib/librf_ddp.a"):
            check(os.path.exists(os.path.join(prefix, f)), f"the install has no {f}")
        shutil.copytree(os.path.join(source, "examples", "spirals"), example)
        run(["cmake", "-S", example, "-B", exbuild, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"],
            f"{tmp}/configure.txt")
        run(["cmake", "--build", exbuild, "-j", "2"], f"{tmp}/build.txt")
        prog, launcher = os.path.join(exbuild, "spirals"), os.path.join(prefix, "bin", "ringfence")
        alone = DIGEST.findall(run([prog, "200"], f"{tmp}/alone.txt"))
        check(len(alone) == 1 and alone[0][:3] == ("199", "1", "0"), f"alone: {alone}")
        clean = DIGEST.findall(run([launcher, "run", "-n", "2", "--quiet", "--", prog, "200"], f"{tmp}/clean.txt"))
        killed = DIGEST.findall(run([launcher, "run", "-n", "2", "--quiet", "--inject", "kill:rank=1:step=100", "--",
                                     prog, "200"], f"{tmp}/killed.txt"))
        check(len(clean) == 2 and len({d for *_, d in clean}) == 1, f"clean W = 2: replicas {clean}")
        check(len(killed) == 2 and {d for *_, d in killed} == {d for *_, d in clean},
              f"killed at step 100: {killed}, failure-free {clean}")
        check(any(int(r) >= 1 for _, _, r, _ in killed), f"killed at step 100: no recovery reported: {killed}")
        if clean and killed:
            print(f"spirals ({lines} lines) against the installed package: W = 2 {clean[0][3]}, with rank 1 killed "
                  f"at step 100 {killed[0][3]}; alone (W = 1) {alone[0][3] if alone else None}")
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("installed, built against the package from outside the tree, same digest with a kill")


if __name__ == "__main__":
    main()
