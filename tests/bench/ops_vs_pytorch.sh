#!/usr/bin/env bash
# ElasticPipe's backward runs no autograd node more often than PyTorch's
# (bench/ops_vs_pytorch.py --check), without freezing and with 3 layers
# frozen. Needs scripts/setup.sh's Python with torch, and a build against
# its LibTorch; CTest reports the test skipped otherwise.
#   ops_vs_pytorch.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
source "$(dirname "$0")/lib.sh"
torch_python "$src"
# Bad arguments: refused before anything runs.
for bad in "--set model=x" "--frozen 12" "--frozen a"; do
  refused "$bad" "$py" "$src/bench/ops_vs_pytorch.py" --bin "$build" $bad
done
exec "$py" "$src/bench/ops_vs_pytorch.py" --bin "$build" --check --frozen 0,3
