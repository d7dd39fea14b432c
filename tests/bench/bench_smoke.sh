#!/usr/bin/env bash
# bench/gpu_vs_pytorch.sh's plumbing, on a tiny model on the CPU (--smoke):
# every run, the parsing of both systems' outputs and the tables. Needs the
# Python with PyPI's torch (scripts/setup.sh's build/torch-venv); CTest
# reports the test skipped where there is none.
#   bench_smoke.sh ELASTICPIPE SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
source "$(dirname "$0")/lib.sh"
torch_python "$src"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bash "$src/bench/gpu_vs_pytorch.sh" "$out" --smoke --rounds 1 --bin "$bin" --python "$py" > "$out/stdout" 2>&1 ||
  { tail -40 "$out/stdout"; exit 1; }
fail() { echo "FAIL: $*"; cat "$out/table.md"; exit 1; }
for f in runs.csv summary.csv table.md logs/peer_epochs_r1.log runs/ep_freeze_r1/epochs.csv; do
  [ -s "$out/$f" ] || fail "missing $f"
done
grep -q "PyTorch as epochs samples/s" "$out/table.md" || fail "no 'as epochs' column"
# One row per epoch of the freeze run, each with a number in every column.
epochs=$(($(wc -l < "$out/runs/ep_freeze_r1/epochs.csv") - 1))
rows=$(grep -cE '^\| [0-9]+( \(warm-up\))? \| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9.]+ \| [0-9.]+x \|' "$out/table.md")
[ "$rows" -eq "$epochs" ] || fail "$rows freeze rows for $epochs epochs"
! grep -q "n/a" "$out/table.md" || fail "a value is missing (n/a)"
# Stopped from outside (SIGTERM), the bench ends the run going (in its own
# session, so nothing else would) before it exits 143: no orphan left to load
# the device under whatever is measured next.
printf '#!/bin/bash\nsleep 300 &\necho $! $$ > "${0%%/*}/stuck.pids"\nwait\n' > "$out/stuck"
chmod +x "$out/stuck"
"$py" "$src/bench/gpu_vs_pytorch.py" --out "$out/stop" --smoke --rounds 1 --bin "$out/stuck" --python "$py" > "$out/stop.log" 2>&1 &
bench=$!
for _ in $(seq 100); do [ -s "$out/stuck.pids" ] && break; sleep 0.1; done
[ -s "$out/stuck.pids" ] || { kill $bench; fail "SIGTERM: the run never started ($(cat "$out/stop.log"))"; }
kill -TERM $bench
rc=0; wait $bench || rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: the bench exited $rc, expected 143 ($(cat "$out/stop.log"))"
for pid in $(cat "$out/stuck.pids"); do
  ! kill -0 "$pid" 2> /dev/null || { kill -KILL "$pid"; fail "SIGTERM: run process $pid outlived the bench"; }
done
# A bad --set is one ERROR line and exit 2 in both scripts, never a traceback.
for bad in model=x cluster.transition=1 nodot=1; do
  for script in pytorch_peer.py gpu_vs_pytorch.py; do
    args=("$src/configs/gpu/vit_b16_h100.toml"); [ $script = gpu_vs_pytorch.py ] && args=(--config "${args[0]}" --out "$out/bad" --bin "$bin" --python "$py")
    refused "$script --set $bad" "$py" "$src/bench/$script" "${args[@]}" --set "$bad"
  done
done
echo "bench smoke: $epochs epochs, tables complete"
