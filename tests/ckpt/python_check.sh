#!/usr/bin/env bash
# ckpt_python_safetensors: both directions of interoperability. A snapshot written by our
# C++ writer is checked with Python's safetensors package and numpy; a file written by
# Python's safetensors is checked with our C++ reader. The packages are required (scripts/setup
# installs them): without them the test FAILS saying how to install them, so the suite
# never silently shrinks.  Usage: python_check.sh WRITER CHECK_SCRIPT
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
  echo "FAIL: no python3 with the 'safetensors' and 'numpy' packages; install them with scripts/setup" \
       "(or: python3 -m pip install safetensors numpy)" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$writer" "$dir/sample.safetensors"
echo "using $py ($("$py" -c 'import safetensors; print("safetensors", safetensors.__version__)'))"
"$py" "$check" "$dir/sample.safetensors"
"$py" "$check" --write "$dir/from_python.safetensors"
"$writer" --check "$dir/from_python.safetensors"
