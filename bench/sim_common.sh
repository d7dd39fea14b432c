# Sourced by the simulator benches (bench_sim.sh, bench_scale.sh): the
# binary to time ($1, else $ELASTICPIPE, else ./build/elasticpipe) in
# `bin`, the paper's ViT config in `cfg`, a scratch folder in `out`
# (removed on exit), and the 100-point sweep's lists in `sweep_points`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${1:-${ELASTICPIPE:-./build/elasticpipe}}
[ -x "$bin" ] || { echo "$(basename "$0"): no executable $bin (build it, or pass its path)" >&2; exit 2; }
cfg=configs/paper/vit_imagenet.toml
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sweep_points=(--set planner.alpha=0.1,0.2,0.25,0.3,0.333,0.4,0.5,0.6,0.7,0.8
              --set cluster.inter_node.bandwidth_bytes_per_s=1e9,2e9,3e9,4e9,5e9,6e9,7e9,8e9,10e9,12.5e9)
