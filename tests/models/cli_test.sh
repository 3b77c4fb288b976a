#!/usr/bin/env bash
# train_mlp / train_cnn as programs: exit codes, the files scripts rely on, checkpoint flags.
#   cli_test.sh BIN_DIR
set -euo pipefail
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for prog in train_mlp train_cnn; do
  "$bin/$prog" --help | grep -q -- "--batch-log" || fail "$prog --help lacks --batch-log"
  set +e
  "$bin/$prog" --bogus 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc == 2 ]] || fail "$prog --bogus exited $rc, want 2"
  grep -q -- "--bogus" "$tmp/err" || fail "$prog --bogus: error does not name the flag"
  set +e
  "$bin/$prog" --data-dir "$tmp/nowhere" 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc == 1 ]] || fail "$prog with a missing data dir exited $rc, want 1"
  grep -q "nowhere" "$tmp/err" || fail "$prog: missing-data error does not name the path"
done

"$bin/train_mlp" --synthetic 300 --batch 64 --max-steps 4 --log-interval 2 \
  --metrics "$tmp/m.json" --loss-log "$tmp/loss.jsonl" --batch-log "$tmp/batch.jsonl" > "$tmp/out"
grep -q "samples/s" "$tmp/out" || fail "no live samples/s line"
grep -q "test accuracy" "$tmp/out" || fail "no test accuracy line"
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/m.json"))
for k in ("test_accuracy", "final_loss", "steps", "samples_per_sec", "state_digest"):
    assert k in m, f"metrics lacks {k}"
assert m["steps"] == 4, m
assert len(m["state_digest"]) == 32
losses = [json.loads(l) for l in open(f"{d}/loss.jsonl")]
assert [l["step"] for l in losses] == [0, 1, 2, 3], losses
assert abs(losses[-1]["loss"] - m["final_loss"]) < 1e-6
batches = [json.loads(l) for l in open(f"{d}/batch.jsonl")]
assert [b["step"] for b in batches] == [0, 1, 2, 3]
assert all(len(b["indices"]) == 64 for b in batches)
seen = [i for b in batches for i in b["indices"]]
assert len(set(seen)) == len(seen) and all(0 <= i < 300 for i in seen), "a batch repeats or leaves the dataset"
PY
# Checkpoint flags as a user meets them (the kill/resume guarantees: tests/ckpt).
quick=(--synthetic 300 --batch 64 --max-steps 2 --log-interval 0)
"$bin/train_mlp" "${quick[@]}" --ckpt-dir "$tmp/ck" --resume > "$tmp/out" \
  || fail "--resume on an empty --ckpt-dir should start fresh"
grep -q "warning: resume: no valid checkpoint in $tmp/ck (none found); starting fresh" "$tmp/out" \
  || fail "--resume on an empty dir: no warning"
[[ -f "$tmp/ck/ckpt-000000001.safetensors" ]] || fail "no checkpoint at the end of training"
set +e
"$bin/train_mlp" "${quick[@]}" --ckpt-dir "$tmp/ck" > /dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 1 ]] && grep -q "already holds checkpoints" "$tmp/err" \
  || fail "a fresh start in a directory holding checkpoints was not refused (exit $rc)"
set +e
"$bin/train_mlp" "${quick[@]}" --resume-from "$tmp/nope.safetensors" > /dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 1 ]] && grep -q "nope.safetensors: cannot open" "$tmp/err" \
  || fail "--resume-from a missing file: exit $rc, $(cat "$tmp/err")"
set +e
"$bin/train_cnn" "${quick[@]}" --resume-from "$tmp/ck/ckpt-000000001.safetensors" > /dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 1 ]] && grep -q "model 'mlp', expected 'cnn'" "$tmp/err" \
  || fail "train_cnn --resume-from an MLP checkpoint: exit $rc, $(cat "$tmp/err")"
set +e
"$bin/train_mlp" "${quick[@]}" --resume 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 2 ]] && grep -q -- "--resume: needs --ckpt-dir" "$tmp/err" || fail "--resume without --ckpt-dir: exit $rc"
echo "PASS"
