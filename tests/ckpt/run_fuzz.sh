#!/usr/bin/env bash
# ckpt_fuzz_safetensors: runs the libFuzzer target for SECONDS from a seed corpus (a real
# snapshot from st_write_sample plus a few hand-made headers). Any crash, sanitizer report,
# leak, timeout or non-FormatError exception fails the test; the input that caused it is
# kept in $RF_FUZZ_ARTIFACTS (default: the build's Testing dir) and printed as hex.
#   run_fuzz.sh FUZZER WRITER DICT SECONDS
set -euo pipefail
fuzzer="$1"; writer="$2"; dict="$3"; seconds="$4"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
"$writer" "$work/corpus/sample.safetensors"
printf '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' > "$work/h1"
le64_of_size() { local n; n=$(stat -c %s "$1"); printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x00\\x00\\x00\\x00' \
  $((n & 255)) $(((n >> 8) & 255)) $(((n >> 16) & 255)) $(((n >> 24) & 255)))"; }
{ le64_of_size "$work/h1"; cat "$work/h1"; head -c 8 /dev/zero; } > "$work/corpus/small.safetensors"
printf '{"__metadata__":{"k":"v"}}' > "$work/h2"
{ le64_of_size "$work/h2"; cat "$work/h2"; } > "$work/corpus/meta_only.safetensors"
artifacts="${RF_FUZZ_ARTIFACTS:-$PWD}/"
echo "fuzzing the safetensors reader for ${seconds}s (artifacts in $artifacts)"
rc=0
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -dict="$dict" \
  -artifact_prefix="$artifacts" -print_final_stats=1 "$work/corpus" > "$work/log" 2>&1 || rc=$?
tail -n 25 "$work/log"
if [[ $rc -ne 0 ]]; then
  echo "FUZZER FAILED (exit $rc)"
  for f in "$artifacts"crash-* "$artifacts"leak-* "$artifacts"timeout-* "$artifacts"oom-*; do
    [[ -f "$f" ]] && { echo "== $f"; od -A d -c "$f" | head -n 20; }
  done
  exit 1
fi
grep -q "Done [0-9]* runs" "$work/log" || { echo "the fuzzer did not report its runs"; exit 1; }
echo "fuzz: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$work/log")"
