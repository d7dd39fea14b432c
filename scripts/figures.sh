#!/usr/bin/env bash
# Regenerates every figure and table of SPEC §7 from scratch into OUT
# (default out/figures): simulates the shipped paper configs as the paper
# evaluated them (its decisions, planner.objective = "paper"; each replica
# with its own batch, training.batch_policy = "per_pipeline"; speedups over
# its GPipe baseline, --reference gpipe), then runs every plot script on the
# traces. PNGs, plus CSV and markdown for tables. The speedups over the best
# plan without freezing are simulate's default (docs/RESULTS.md).
# Run after scripts/setup.sh: bash scripts/figures.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/figures}
bin=./build/elasticpipe
py=/usr/bin/python3  # Debian's, which sees python3-matplotlib
if ! "$py" -c 'import matplotlib' 2> /dev/null; then
  echo "ERROR: $py has no matplotlib: apt-get install python3-matplotlib (scripts/setup.sh does)" >&2
  exit 2
fi
[ -x "$bin" ] || { echo "ERROR: $bin missing: run bash scripts/setup.sh first" >&2; exit 2; }
runs=$out/runs
mkdir -p "$runs"

paper=(--reference gpipe --set planner.objective=paper --set 'training.batch_policy="per_pipeline"')
echo "simulating the paper's workloads (all modes)..."
for c in vit_imagenet vit_cifar100 bert_large_squad bert_base_sst2; do
  "$bin" simulate "configs/paper/$c.toml" "${paper[@]}" --out "$runs/$c" > "$runs/$c.txt"
done
echo "simulating ViT-B/16 / ImageNet for several alpha..."
alphas=()
for a in 0.2 0.3333333333333333 0.4 0.5; do
  "$bin" simulate configs/paper/vit_imagenet.toml --mode autocache "${paper[@]}" --set "planner.alpha=$a" \
    --set sim.trace=false --out "$runs/alpha_$a" > /dev/null
  alphas+=("$runs/alpha_$a")
done

echo "drawing..."
vit=$runs/vit_imagenet
"$py" plots/freeze_curve.py "${alphas[@]}" --out "$out/freeze_curve.png"
"$py" plots/overall_table.py "$runs/vit_imagenet" "$runs/vit_cifar100" "$runs/bert_large_squad" \
  "$runs/bert_base_sst2" --out "$out/overall.png"
"$py" plots/speedup_breakdown.py "$vit" --out "$out/speedup_breakdown.png"
"$py" plots/alpha_tuning.py "${alphas[@]}" --out "$out/alpha_tuning.png"
"$py" plots/optimal_chunks.py "$vit" --out "$out/optimal_chunks.png"
"$py" plots/cache_timing.py "$vit" --out "$out/cache_timing.png"
"$py" plots/comm_compute_table.py "$vit" --out "$out/comm_compute.png"
"$py" plots/transition_table.py "$vit" --out "$out/transitions.png"
# The first plan (K = 8, M = 46) and the steady K = 2 one (plans 7-9 repeat it, traced once).
"$py" plots/timeline.py "$vit" --plan 0 --out "$out/timeline_K8.png"
"$py" plots/timeline.py "$vit" --plan 6 --out "$out/timeline_K2.png"
echo "wrote $out/*.png, *.csv, *.md (runs in $runs)"
