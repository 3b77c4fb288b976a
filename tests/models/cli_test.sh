#!/usr/bin/env bash
# train_mlp / train_cnn as programs: exit codes, the files scripts rely on, checkpoint flags.
#   cli_test.sh BIN_DIR
set -euo pipefail
bin="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for prog in train_mlp train_cnn; do
  "$bin/$prog" --help | grep -- "--batch-log" > /dev/null || fail "$prog --help lacks --batch-log"
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
  for flag in "--device D" "--backend B"; do
    "$bin/$prog" --help | grep -- "$flag" > /dev/null || fail "$prog --help lacks $flag"
  done
  # --device / --backend: a bad value, NCCL on the CPU, exit 2 naming the flag.
  for bad in "--device gpu:--device" "--backend mpi:--backend" "--backend nccl:--backend nccl: needs a GPU"; do
    set +e
    "$bin/$prog" ${bad%%:*} 2>"$tmp/err"; rc=$?
    set -e
    [[ $rc == 2 ]] || fail "$prog ${bad%%:*} exited $rc, want 2"
    grep -q -- "${bad#*:}" "$tmp/err" || fail "$prog ${bad%%:*}: error does not say '${bad#*:}': $(cat "$tmp/err")"
  done
done

# --device cuda where there is no GPU (no CUDA in the build, or none on the machine): exit 2
# before training, with CUDA's reason. On a machine with a GPU the same probe trains 0 steps.
set +e
"$bin/train_mlp" --device cuda --synthetic 64 --batch 32 --max-steps 0 --log-interval 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
set -e
if [[ $rc != 0 ]]; then
  [[ $rc == 2 ]] || fail "--device cuda without a GPU exited $rc, want 2: $(cat "$tmp/err")"
  grep -q -- "--device cuda: no CUDA device to use (" "$tmp/err" || fail "--device cuda: unclear error: $(cat "$tmp/err")"
  [[ ! -s "$tmp/out" ]] || fail "--device cuda without a GPU printed before failing: $(cat "$tmp/out")"
  set +e
  "$bin/train_mlp" --device cuda:7 --backend nccl 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q -- "--device cuda:7: no CUDA device to use" "$tmp/err" || fail "--device cuda:7: exit $rc"
fi

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
assert m["device"] == "cpu" and m["backend"] == "ucx", m
assert m["steps"] == 4, m
assert m["state_digest"].startswith("x3:") and len(m["state_digest"]) == 35, m["state_digest"]  # version + 128 bits
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
"$bin/train_mlp" "${quick[@]}" --ckpt-dir "$tmp/ck" --resume > "$tmp/out" 2>&1 \
  || fail "--resume on an empty --ckpt-dir should start fresh"
grep -q "warn ckpt: resume: no valid checkpoint in $tmp/ck (none found); starting fresh" "$tmp/out" \
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
# An absurd size is an error that says what happened ("std::bad_alloc" did not).
set +e
"$bin/train_mlp" --synthetic 1000000000000 --max-steps 1 > /dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 1 ]] && grep -q "out of memory (is --synthetic or --batch too large" "$tmp/err" \
  || fail "--synthetic 10^12: exit $rc, $(cat "$tmp/err")"
# Resuming with another --batch or --seed: a warning (step s no longer sees its samples),
# and one when the checkpoint is past the end of this run.
"$bin/train_mlp" --synthetic 300 --batch 30 --max-steps 10 --log-interval 0 --ckpt-dir "$tmp/order" > /dev/null
"$bin/train_mlp" --synthetic 300 --batch 60 --seed 3 --log-interval 0 --ckpt-dir "$tmp/order" --resume \
  > "$tmp/out" 2>&1 || fail "resume with another --batch: $(cat "$tmp/out")"
grep -q 'ckpt-000000009.safetensors was trained with data order {"batch":30,"samples":300,"seed":0}, continuing with {"batch":60,"samples":300,"seed":3}' "$tmp/out" \
  || fail "no data-order warning: $(cat "$tmp/out")"
grep -q "warn train: the checkpoint holds step 9, this run has 5 steps: nothing left to train" "$tmp/out" \
  || fail "no nothing-left warning: $(cat "$tmp/out")"
# Outputs that cannot be written fail BEFORE training, not after it (an hour's run would
# lose its result), and a failed run leaves an existing --metrics file as it was.
for prog in train_mlp train_cnn; do
  set +e
  "$bin/$prog" "${quick[@]}" --metrics "$tmp/no/such/dir/m.json" > "$tmp/out" 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc == 1 ]] && grep -q -- "--metrics $tmp/no/such/dir/m.json: cannot open for writing" "$tmp/err" \
    || fail "$prog --metrics to a missing directory: exit $rc, $(cat "$tmp/err")"
  ! grep -q "parameters\|test accuracy" "$tmp/out" || fail "$prog trained before refusing an unwritable --metrics"
done
echo '{"kept": true}' > "$tmp/old.json"
set +e
"$bin/train_mlp" "${quick[@]}" --metrics "$tmp/old.json" --init "$tmp/nope.safetensors" > /dev/null 2>&1; rc=$?
set -e
[[ $rc == 1 ]] || fail "a missing --init file with --metrics: exit $rc"
grep -q '"kept": true' "$tmp/old.json" || fail "a failed run changed the existing --metrics file"
[[ ! -e "$tmp/new.json" ]] || fail "setup"
set +e
"$bin/train_mlp" "${quick[@]}" --metrics "$tmp/new.json" --init "$tmp/nope.safetensors" > /dev/null 2>&1
set -e
[[ ! -e "$tmp/new.json" ]] || fail "a run that failed left behind the --metrics file it checked"
# --resume in a directory holding another model's checkpoints: refused, and they stay as
# they were (before, train_cnn started fresh there and overwrote / pruned the MLP's files).
cp "$tmp/ck/ckpt-000000001.safetensors" "$tmp/mlp-ckpt-copy"
set +e
"$bin/train_cnn" "${quick[@]}" --ckpt-dir "$tmp/ck" --resume > /dev/null 2>"$tmp/err"; rc=$?
set -e
[[ $rc == 1 ]] && grep -q "holds the state of another run" "$tmp/err" && grep -q "model 'mlp', expected 'cnn'" "$tmp/err" \
  || fail "train_cnn --resume in the MLP's --ckpt-dir: exit $rc, $(cat "$tmp/err")"
cmp -s "$tmp/ck/ckpt-000000001.safetensors" "$tmp/mlp-ckpt-copy" || fail "the MLP's checkpoint was changed"
[[ $(ls "$tmp/ck" | grep -c safetensors) == 1 ]] || fail "checkpoints were added to the MLP's directory: $(ls "$tmp/ck")"
# Under ringfence run every worker checks --metrics at its start (any may be rank 0 at the
# end): before, rank 0 failed after training and the job still ended DONE, exit 0.
if [[ -x "$bin/ringfence" ]]; then
  set +e
  "$bin/ringfence" run -n 2 --quiet -- "$bin/train_mlp" "${quick[@]}" --metrics "$tmp/no/such/dir/m.json" \
    > "$tmp/out" 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc != 0 ]] && grep -q -- "--metrics $tmp/no/such/dir/m.json: cannot open for writing" "$tmp/err" \
    || fail "ringfence run with an unwritable --metrics: exit $rc, $(tail -5 "$tmp/err")"
  ! grep -q "test accuracy" "$tmp/out" || fail "ringfence run trained before refusing an unwritable --metrics"
  # --cuda-graph is by hand only: under ringfence run every worker refuses it at its start
  # (exit 2) and the job stops with the reason, nobody restarted.
  set +e
  "$bin/ringfence" run -n 1 --quiet -- "$bin/train_mlp" "${quick[@]}" --device cuda --cuda-graph \
    > "$tmp/out" 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc != 0 ]] && grep -q -- "--cuda-graph: only by hand (one process); under ringfence run the step is not captured" \
    "$tmp/err" || fail "ringfence run with --cuda-graph: exit $rc, $(tail -5 "$tmp/err")"
  # --loss-log is written by slot 0 alone, but every worker checks it: when slot 0 alone
  # failed, the others waited out --min-world-timeout (once per incarnation of slot 0).
  set +e
  "$bin/ringfence" run -n 2 --quiet --min-world-timeout 5s -- "$bin/train_mlp" "${quick[@]}" \
    --loss-log "$tmp/no/such/dir/l.jsonl" > "$tmp/out" 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc != 0 ]] && grep -q -- "--loss-log $tmp/no/such/dir/l.jsonl: cannot open for writing" "$tmp/err" \
    && ! grep -q "fewer than the minimum world size" "$tmp/err" \
    || fail "ringfence run with an unwritable --loss-log: exit $rc, $(tail -5 "$tmp/err")"
  # A damaged test set (t10k images cut short) fails the job at its start: before, the
  # workers loaded it only at the end, after training.
  mkdir "$tmp/data"
  python3 - "$tmp/data" <<'PY'
import struct, sys
d = sys.argv[1]
def idx(name, dims, payload):
    open(f"{d}/{name}", "wb").write(bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", x) for x in dims) + payload)
for split, n in (("train", 64), ("t10k", 32)):
    idx(f"{split}-images-idx3-ubyte", [n, 28, 28], bytes(i % 251 for i in range(n * 784)))
    idx(f"{split}-labels-idx1-ubyte", [n], bytes(i % 10 for i in range(n)))
PY
  truncate -s 5000 "$tmp/data/t10k-images-idx3-ubyte"
  set +e
  "$bin/ringfence" run -n 2 --quiet -- "$bin/train_mlp" --data-dir "$tmp/data" --batch 32 --max-steps 2 \
    --log-interval 0 > "$tmp/out" 2>"$tmp/err"; rc=$?
  set -e
  [[ $rc != 0 ]] && grep -q "t10k-images-idx3-ubyte: truncated" "$tmp/err" \
    || fail "ringfence run with a truncated test set: exit $rc, $(tail -5 "$tmp/err")"
  ! grep -q "== train_mlp slot" "$tmp/out" || fail "ringfence run trained before loading the test set"
fi
echo "PASS"
