#!/usr/bin/env bash
# Times `elasticpipe simulate configs/paper/vit_imagenet.toml --mode all`
# (median of 5 runs, wall seconds, with and without the trace), `plan` of
# the same config (median of 5) and a 100-point sweep (10 alphas x 10
# inter-node bandwidths, baseline + autocache per point). Run after
# scripts/setup.sh: bash bench/bench_sim.sh [BINARY]
# (default: $ELASTICPIPE, else ./build/elasticpipe).
source "$(dirname "$0")/sim_common.sh"

wall() {  # wall seconds of a command, its output discarded
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > /dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }' 
}

times=()
for _ in 1 2 3 4 5; do times+=("$(wall "$bin" simulate "$cfg" --mode all --out "$out/sim")"); done
median=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 3p)
printf 'simulate %s --mode all: median %.3f s of 5 (%s)\n' "$cfg" "$median" "$(printf '%.3f ' "${times[@]}")"
notrace=()
for _ in 1 2 3 4 5; do notrace+=("$(wall "$bin" simulate "$cfg" --mode all --set sim.trace=false --out "$out/sim")"); done
median=$(printf '%s\n' "${notrace[@]}" | sort -g | sed -n 3p)
printf 'simulate %s --mode all, no trace: median %.3f s of 5\n' "$cfg" "$median"

plans=()
for _ in 1 2 3 4 5; do plans+=("$(wall "$bin" plan "$cfg")"); done
median=$(printf '%s\n' "${plans[@]}" | sort -g | sed -n 3p)
printf 'plan %s: median %.3f s of 5\n' "$cfg" "$median"

sweep=$(wall "$bin" sweep "$cfg" \
  "${sweep_points[@]}" \
  --out "$out/sweep")
printf 'sweep %s, 100 points (baseline + autocache each), %d jobs: %.1f s (%.2f s per point)\n' \
  "$cfg" "$(nproc)" "$sweep" "$(awk -v s="$sweep" 'BEGIN { print s / 100 }')"
