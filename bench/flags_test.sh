#!/usr/bin/env bash
# The benchmarks' flags (bench/flags.h): --help lists the flags (exit 0), and a bad flag
# or value is a usage error naming it (exit 2) before anything runs.
#   flags_test.sh DDP_BENCH COMM_BENCH GEMM_BENCH CKPT_BENCH TRAIN_BENCH RECOVERY_WORKER MEMORY_PROBE
# Every case here exits at parsing; `timeout` bounds each call in case one does not.
set -u
ddp=$1 comm=$2 gemm=$3 ckpt=$4 train=$5 worker=$6 probe=$7
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect RC PATTERN PROGRAM ARGS...: exit status RC and PATTERN (grep -E) in its output.
expect() {
  local want=$1 pattern=$2
  shift 2
  timeout 20 "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [[ $rc != "$want" ]] || ! grep -qE -- "$pattern" "$tmp/out"; then
    echo "FAIL: $(basename "$1") ${*:2}: exit $rc (want $want), output: $(head -c 600 "$tmp/out")"
    fails=$((fails + 1))
  fi
}

for b in "$ddp" "$comm" "$gemm" "$ckpt" "$train" "$worker" "$probe"; do
  expect 0 '^usage: ' "$b" --help
  expect 0 '^  --help, -h ' "$b" -h
  expect 2 "unknown flag '--bogus' \(see --help\)" "$b" --bogus
done
expect 0 '^  --rounds N ' "$ddp" --help
expect 0 '^  --ranks N ' "$comm" --help
expect 0 '^  --reps N ' "$gemm" --help
expect 0 '^  --keep N ' "$ckpt" --help
expect 2 'ckpt_bench: --threads: 2000 must be in 1 .. 1024' "$ckpt" --threads 2000

# ddp_bench: a number that is not one, a count that would run nothing.
expect 2 "ddp_bench: --rounds: 'abc' is not an integer" "$ddp" --rounds abc
expect 2 'ddp_bench: --rounds: -1 must be >= 1' "$ddp" --rounds -1
expect 2 'ddp_bench: --rounds: 0 must be >= 1' "$ddp" --rounds=0
expect 2 "ddp_bench: --steps: '10x' is not an integer" "$ddp" --steps 10x
expect 2 'ddp_bench: --rounds: missing value \(see --help\)$' "$ddp" --rounds
expect 2 "ddp_bench: --rounds: missing value \(the next argument is the flag '--steps'\)" "$ddp" --rounds --steps 5
expect 2 'ddp_bench: --warmup 10 leaves no measured step of --steps 10' "$ddp" --steps 10
expect 2 "ddp_bench: --variants ft,nope: unknown variant 'nope'" "$ddp" --variants ft,nope
expect 2 "ddp_bench: --model: 'resnet' is not mlp or cnn" "$ddp" --model resnet

# comm_bench
expect 2 "comm_bench: -n: 'x' is not an integer" "$comm" -n x
expect 2 "comm_bench: -b: '12Q' is not a size" "$comm" -b 12Q
expect 2 'comm_bench: -f: 1 must be > 1' "$comm" -f 1
expect 2 'comm_bench: --ranks: 65 must be in 1 .. 64' "$comm" --ranks 65
expect 2 'comm_bench: --no-shm takes no value' "$comm" --no-shm=1
expect 2 "comm_bench: --backend: 'nccl' is not ucx, gloo or mpi" "$comm" --backend nccl

# gemm_bench
expect 2 "gemm_bench: --rounds: 'abc' is not an integer" "$gemm" --rounds abc
expect 2 'gemm_bench: --reps: 0 must be >= 1' "$gemm" --reps 0
expect 2 "gemm_bench: --kernel: 'fast' is not packed, small or routed" "$gemm" --kernel fast

# ckpt_bench: the last argument unknown is unknown, not a flag missing its value.
expect 2 "ckpt_bench: unknown flag '--bogus'" "$ckpt" --batch 4 --bogus
expect 2 'ckpt_bench: --every: missing value \(see --help\)$' "$ckpt" --every
# --dir is emptied first, but only of checkpoint files: anything else is refused, kept.
mkdir "$tmp/mine" && echo keep >"$tmp/mine/notes.txt"
expect 2 "ckpt_bench: --dir $tmp/mine holds notes.txt, which is no checkpoint" "$ckpt" --dir "$tmp/mine"
[[ -f "$tmp/mine/notes.txt" ]] || { echo "FAIL: ckpt_bench removed $tmp/mine/notes.txt"; fails=$((fails + 1)); }

# train_bench (compare_torch.py and tests/models/page_faults.sh drive it)
expect 0 '^  --no-malloc-tuning ' "$train" --help
expect 2 "train_bench: --batch: 'x' is not an integer \(see --help\)" "$train" --batch x
expect 2 'train_bench: --steps: 0 must be >= 1' "$train" --steps 0
expect 2 'train_bench: --threads: missing value \(see --help\)$' "$train" --threads
expect 2 "train_bench: --model: 'resnet' is not mlp, cnn or both" "$train" --model resnet
expect 2 'train_bench: --no-malloc-tuning takes no value' "$train" --no-malloc-tuning=1

# recovery_worker (recovery_bench.py drives it under `ringfence run`): every flag that
# script passes is listed, and a bad one fails before any job work.
for f in --model --steps --audit-dir --batch --data-dir --ckpt-dir --ckpt-every --resume; do
  expect 0 "^  $f " "$worker" --help
done
expect 2 "recovery_worker: --steps: '4O' is not an integer" "$worker" --model mlp --steps 4O
expect 2 'recovery_worker: --batch: -5 must be >= 1' "$worker" --batch -5
expect 2 "recovery_worker: --model: 'resnet' is not mlp, cnn or big" "$worker" --model resnet
expect 2 "recovery_worker: --audit-dir: missing value \(the next argument is the flag '--steps'\)" \
  "$worker" --audit-dir --steps 5
expect 2 "recovery_worker: unknown flag '--fail-step'" "$worker" --fail-step 3
expect 2 'recovery_worker: --bucket-mib: 0 must be in 1 .. ' "$worker" --bucket-mib 0

# memory_probe: MODE [MB] then flags.
expect 0 '^usage: memory_probe stall\|peer\|teardown\|overlap ' "$probe" --help
expect 2 "memory_probe: unknown mode 'stal' \(stall, peer, teardown or overlap\)" "$probe" stal
expect 2 'memory_probe: no mode given' "$probe"
expect 2 "memory_probe: MB: '4x' is not an integer" "$probe" stall 4x
expect 2 'memory_probe: --rounds: 0 must be >= 1' "$probe" stall --rounds 0
expect 2 'memory_probe: --rounds: missing value \(see --help\)$' "$probe" peer 8 --rounds
expect 2 "memory_probe: unknown flag '--bogus'" "$probe" teardown --bogus
# --mb is a size_t: its range is [1, 1 << 20] (it was [1, -1]: every value refused).
expect 2 'memory_probe: no mode given' "$probe" --mb 5
expect 2 'memory_probe: overlap takes no MB' "$probe" overlap 800
expect 2 'memory_probe: overlap takes no MB' "$probe" overlap --mb 800
expect 2 'memory_probe: --mb: 0 must be in 1 .. 1048576' "$probe" --mb 0

if [[ $fails != 0 ]]; then
  echo "$fails failure(s)"
  exit 1
fi
echo "OK: bench flags"
