#!/usr/bin/env bash
# ckpt_python_safetensors: both directions of interoperability. A snapshot written by our
# C++ writer is checked with Python's safetensors package and numpy; a file written by
# Python's safetensors is checked with our C++ reader. Exit 77 (ctest: skipped) only when no python3 with both
# packages can be found, printing why.  Usage: python_check.sh WRITER CHECK_SCRIPT
set -euo pipefail
writer="$1"
check="$2"
py=""
for cand in /usr/bin/python3 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import safetensors.numpy, numpy" >/dev/null 2>&1; then
    py="$cand"
    break
  fi
done
if [[ -z "$py" ]]; then
  echo "SKIPPED: no python3 with the 'safetensors' and 'numpy' packages (pip install safetensors numpy)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$writer" "$dir/sample.safetensors"
echo "using $py ($("$py" -c 'import safetensors; print("safetensors", safetensors.__version__)'))"
"$py" "$check" "$dir/sample.safetensors"
"$py" "$check" --write "$dir/from_python.safetensors"
"$writer" --check "$dir/from_python.safetensors"
