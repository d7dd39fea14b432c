#!/usr/bin/env bash
# ElasticPipe against plain PyTorch on one GPU: ViT-B/16, batch 128, bf16,
# AdamW (configs/gpu/vit_b16_h100.toml), runs alternated over rounds
# (ElasticPipe, PyTorch, ElasticPipe, PyTorch, ...):
#   - K = 1 without freezing (train --set planner.freeze_policy="none")
#     against the PyTorch peer (bench/pytorch_peer.py) eager, and once with
#     torch.compile: samples/s, ratio of medians;
#   - the config as shipped (freezing at alpha = 1/3): each epoch's samples/s
#     and frozen layers from epochs.csv, against the peer with --frozen L
#     for every L met (steady state), and the peer freezing as it goes
#     (--epochs: an epoch per ElasticPipe epoch, each timed whole); the gain
#     of each frozen epoch over the unfrozen one.
# Prints markdown tables; writes OUT/{runs.csv,summary.csv,table.md}, every
# run's log (OUT/logs/) and each train run's epochs.csv (OUT/runs/).
#
#   bash bench/gpu_vs_pytorch.sh [OUT] [--rounds 3] [--bin ELASTICPIPE] [--python PYTHON]
#        [--no-compile] [--config FILE] [--set k=v ...] [--smoke]
#
# OUT defaults to /tmp/gpu-bench. The binary: --bin, else $EP_BIN, else
# $EP_BUILD/elasticpipe, else build/elasticpipe. The Python with torch:
# --python, else $PYTHON, else build/torch-venv/bin/python where it exists,
# else python3. --smoke runs a tiny model on the CPU (seconds): it checks the
# bench, not the numbers. The defaults are sized for about 3 minutes on one
# H100 (--no-compile or --rounds 2 for less).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=/tmp/gpu-bench
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then out=$1; shift; fi
bin=${EP_BIN:-${EP_BUILD:+$EP_BUILD/elasticpipe}}
bin=${bin:-$root/build/elasticpipe}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$root/build/torch-venv/bin/python" ]; then py=$root/build/torch-venv/bin/python; else py=python3; fi
fi
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --bin=*) bin=${1#--bin=}; shift ;;
    --python) py=$2; shift 2 ;;
    --python=*) py=${1#--python=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
command -v "$py" > /dev/null || { echo "ERROR: python '$py' not found (--python or PYTHON)" >&2; exit 2; }
"$py" -c 'import torch' 2> /dev/null || { echo "ERROR: '$py' has no torch (--python or PYTHON)" >&2; exit 2; }
exec "$py" "$root/bench/gpu_vs_pytorch.py" --out "$out" --bin "$bin" --python "$py" ${args[@]+"${args[@]}"}
