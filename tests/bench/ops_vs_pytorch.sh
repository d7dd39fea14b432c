#!/usr/bin/env bash
# ElasticPipe's backward runs no autograd node more often than PyTorch's
# (bench/ops_vs_pytorch.py --check), without freezing and with 3 layers
# frozen. Needs scripts/setup.sh's Python with torch, and a build against
# its LibTorch; CTest reports the test skipped otherwise.
#   ops_vs_pytorch.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
py=$src/build/torch-venv/bin/python
if ! [ -x "$py" ] || ! "$py" -c 'import torch' 2>/dev/null; then
  echo "skipped: no Python with torch at $py (scripts/setup.sh installs it)"
  exit 77
fi
# Bad arguments: one ERROR line and exit 2, before anything runs.
for bad in "--set model=x" "--frozen 12" "--frozen a"; do
  rc=0; out=$("$py" "$src/bench/ops_vs_pytorch.py" --bin "$build" $bad 2>&1) || rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q '^ERROR: ' <<< "$out" ||
    { echo "FAIL: $bad: exit $rc: $out"; exit 1; }
done
exec "$py" "$src/bench/ops_vs_pytorch.py" --bin "$build" --check --frozen 0,3
