#!/usr/bin/env python3
"""The house rules on size, checked: no production source file over 500 lines, and no
function over 60 lines in the layers that hold the control flow (ddp/, elastic/, apps/,
comm/ucx/).

A file's size is its line count (wc -l). A function's is lizard's "length": the lines from
its signature to its closing brace, comments and blank lines included. Production sources
are the .h/.cpp/.cu/.cuh files under the library and program folders (not tests/, bench/).

Exit 0: within the rules; 1: a violation (each named, file:line); 77: lizard is missing
(skipped: scripts/setup installs it from PyPI).
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCTION = ["base", "core", "kernels", "comm", "ckpt", "ddp", "elastic", "apps", "models"]
SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}
MAX_FILE_LINES = 500
FUNCTION_DIRS = ["ddp", "elastic", "apps", "comm/ucx"]
MAX_FUNCTION_LINES = 60


def production_files(dirs):
    for d in dirs:
        for p in sorted((ROOT / d).rglob("*")):
            if p.suffix in SUFFIXES and p.is_file():
                yield p


def main():
    problems = []
    for p in production_files(PRODUCTION):
        n = sum(1 for _ in p.open(encoding="utf-8", errors="replace"))
        if n > MAX_FILE_LINES:
            problems.append(f"{p.relative_to(ROOT)}: {n} lines (at most {MAX_FILE_LINES})")
    try:
        import lizard
    except ImportError:
        print("SKIPPED: lizard is not installed (pip install lizard; scripts/setup does): "
              "function lengths not checked")
        for line in problems:
            print(line)
        return 1 if problems else 77
    functions = 0
    for p in production_files(FUNCTION_DIRS):
        if p.suffix == ".cu":
            continue  # lizard does not parse CUDA launch syntax; no .cu file lives in these folders
        info = lizard.analyze_file(str(p))
        for f in info.function_list:
            functions += 1
            if f.length > MAX_FUNCTION_LINES:
                problems.append(f"{p.relative_to(ROOT)}:{f.start_line}: {f.name} is {f.length} lines "
                                f"(at most {MAX_FUNCTION_LINES})")
    for line in problems:
        print(line)
    print(f"check_sizes: {len(problems)} violation(s); {functions} functions in {', '.join(FUNCTION_DIRS)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
