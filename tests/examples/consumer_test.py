#!/usr/bin/env python3
"""The installed package carries its C++ standard: a consumer needs find_package and one
target, nothing else.

    consumer_test.py BUILD_DIR            # installs BUILD_DIR into a temporary prefix
    consumer_test.py --prefix P           # uses an install that is already there

1. `cmake --install BUILD_DIR --prefix P` (unless --prefix is given).
2. A program of a few lines (a tensor from a std::span, a TrainerConfig) is configured and
   built outside the tree against P with a CMakeLists of exactly what docs/your-model.md
   shows: find_package(ringfence REQUIRED) and target_link_libraries(... ringfence::ddp),
   no CMAKE_CXX_STANDARD, with the system compiler at its default standard (GCC 12:
   gnu++17). The exported targets' INTERFACE compile feature cxx_std_20 must put a C++20
   flag on the compile line.
3. It runs and prints what it built.
Every command has a deadline; on expiry its process group is SIGKILLed and the test fails.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check  # noqa: E402

DEADLINE_S = 240

CMAKELISTS = """cmake_minimum_required(VERSION 3.25)
project(consumer LANGUAGES CXX)
find_package(ringfence REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE ringfence::ddp)
"""

MAIN = """#include <cstdio>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ddp/trainer.h"

int main() {
  const std::vector<float> v{1, 2, 3};
  const rf::Tensor t = rf::Tensor::from({3}, std::span<const float>(v));
  const rf::ddp::TrainerConfig config;
  std::printf("consumer: %lld elements, global batch %lld\\n", static_cast<long long>(t.numel()),
              static_cast<long long>(config.global_batch));
  return 0;
}
"""


def run(cmd, log):
    rc, out = rf_testlib.run(cmd, log, DEADLINE_S)
    check(rc == 0, f"{' '.join(cmd)}: exit {rc}:\n{out[-3000:]}")
    return rc, out


def main():
    args = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="rf_consumer_")
    source, build = os.path.join(tmp, "consumer"), os.path.join(tmp, "consumer-build")
    try:
        if args[:1] == ["--prefix"] and len(args) == 2:
            prefix = os.path.abspath(args[1])
        elif len(args) == 1:
            prefix = os.path.join(tmp, "prefix")
            run(["cmake", "--install", os.path.abspath(args[0]), "--prefix", prefix], f"{tmp}/install.txt")
        else:
            sys.exit(__doc__)
        os.makedirs(source)
        with open(os.path.join(source, "CMakeLists.txt"), "w") as f:
            f.write(CMAKELISTS)
        with open(os.path.join(source, "main.cpp"), "w") as f:
            f.write(MAIN)
        check("CXX_STANDARD" not in CMAKELISTS, "the consumer's CMakeLists must not set a standard")
        rc, _ = run(["cmake", "-S", source, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"],
                    f"{tmp}/configure.txt")
        if rc == 0:
            rc, out = run(["cmake", "--build", build, "--verbose"], f"{tmp}/build.txt")
            compile_lines = [ln for ln in out.splitlines() if "main.cpp" in ln and " -c " in ln]
            check(any("-std=c++20" in ln or "-std=gnu++20" in ln for ln in compile_lines),
                  f"no C++20 flag on the consumer's compile line: {compile_lines}")
        if rc == 0:
            _, out = run([os.path.join(build, "consumer")], f"{tmp}/run.txt")
            check("consumer: 3 elements, global batch 128" in out, f"the consumer printed: {out!r}")
            print(out.strip())
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("a consumer with find_package and ringfence::ddp only, no CMAKE_CXX_STANDARD, "
                                "builds in C++20 and runs")


if __name__ == "__main__":
    main()
