#!/usr/bin/env bash
# After warm-up, a training step of either reference model must fault (almost) no pages:
# on these machines each costs ~13 us, and buffers are meant to be allocated once and
# reused (core/allocator.h). Release builds only (sanitizer allocators quarantine memory).
#   page_faults.sh TRAIN_BENCH
set -euo pipefail
out=$("$1" --model both --steps 20 --warmup 3)
echo "$out"
echo "$out" | python3 -c '
import re, sys
rates = [float(m) for m in re.findall(r"([0-9.]+) page faults/step", sys.stdin.read())]
assert len(rates) == 2, "expected a line per model"
bad = [r for r in rates if r > 0.5]
sys.exit("FAIL: page faults per step after warm-up: %s" % rates if bad else 0)
'
