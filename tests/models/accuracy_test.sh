#!/usr/bin/env bash
# One epoch of Fashion-MNIST with the programs' defaults (batch 128, SGD lr 0.05,
# momentum 0.9, seed 0); the test accuracy must reach the bar.
#   accuracy_test.sh PROGRAM MIN_ACCURACY
set -euo pipefail
prog="$1"; bar="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prog" --epochs 1 --log-interval 100 --metrics "$tmp/m.json"
python3 - "$tmp/m.json" "$bar" <<'PY'
import json, sys
acc = json.load(open(sys.argv[1]))["test_accuracy"]
bar = float(sys.argv[2])
print(f"test accuracy {acc:.4f}, bar {bar}")
sys.exit(0 if acc >= bar else 1)
PY
