#!/usr/bin/env bash
# ckpt_inspect_cli: a valid snapshot is listed (exit 0); a truncated and a bit-flipped copy
# are reported INVALID with the reason (exit 1); no argument or an unknown option is a
# usage error (exit 2).
#   inspect_check.sh CKPT_INSPECT ST_WRITE_SAMPLE
set -uo pipefail
inspect="$1"; writer="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$writer" "$dir/good.safetensors" || fail "writer failed"
out=$("$inspect" "$dir/good.safetensors"); rc=$?
echo "$out"
[[ $rc -eq 0 ]] || fail "valid file: exit $rc"
grep -q "valid, 5 tensors, 172 data bytes, integrity verified" <<<"$out" || fail "valid file: summary line"
grep -q "metadata step = 42" <<<"$out" || fail "valid file: metadata"
head -c 300 "$dir/good.safetensors" > "$dir/cut.safetensors"
out=$("$inspect" "$dir/cut.safetensors"); rc=$?
echo "$out"
[[ $rc -eq 1 ]] || fail "truncated file: exit $rc"
grep -q "INVALID $dir/cut.safetensors: header length .* exceeds" <<<"$out" || fail "truncated file: message"
# Flip one bit in the last data byte (tensor 1.bias, the last in data order).
cp "$dir/good.safetensors" "$dir/flip.safetensors"
size=$(stat -c %s "$dir/flip.safetensors")
last=$(od -A n -t u1 -j $((size - 1)) -N 1 "$dir/flip.safetensors" | tr -d ' ')
printf "$(printf '\\%03o' $((last ^ 1)))" | dd of="$dir/flip.safetensors" bs=1 seek=$((size - 1)) conv=notrunc status=none
out=$("$inspect" "$dir/good.safetensors" "$dir/flip.safetensors"); rc=$?
echo "$out"
[[ $rc -eq 1 ]] || fail "flipped file: exit $rc"
grep -q "INVALID $dir/flip.safetensors: tensor '1.bias': corrupted: crc32c" <<<"$out" || fail "flipped file: message"
"$inspect" >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] || fail "no argument: exit $rc"
# Options: -h is help like --help; an unknown option is a usage error naming it, not a
# file that "cannot open" (exit 1); after -- every argument is a file.
"$inspect" -h | grep -q "usage:" || fail "-h: no usage"
"$inspect" --bogus "$dir/good.safetensors" >"$dir/out" 2>&1; rc=$?
[[ $rc -eq 2 ]] && grep -q "unknown option '--bogus'" "$dir/out" || fail "--bogus: exit $rc, $(cat "$dir/out")"
cp "$dir/good.safetensors" "$dir/-x.safetensors"
(cd "$dir" && "$inspect" -- -x.safetensors) | grep -q "^-x.safetensors: valid" || fail "-- FILE"
echo "ckpt_inspect: all checks passed"
