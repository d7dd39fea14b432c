#!/usr/bin/env bash
# What-if at scale: wall seconds and peak memory (/usr/bin/time) of
#   simulate configs/paper/vit_imagenet.toml --mode all on 64 nodes x 16
#     GPUs (1,024 devices), sim.collectives = phases, then analytic;
#   the same on 512 nodes x 16 GPUs (8,192 devices), phases, untraced;
#   plan of that config on 8,192 devices;
#   configs/scale/vit_imagenet_dgx_h100.toml (128 DGX H100 nodes, four
#     leaf switches), all modes;
#   the 100-point sweep of bench_sim.sh with phases, then with steps.
# One run each, in that order. Run after scripts/setup.sh:
#   bash bench/bench_scale.sh [BINARY]   (default: $ELASTICPIPE, else ./build/elasticpipe)
source "$(dirname "$0")/sim_common.sh"

measure() {  # label, command...: one line, wall seconds and peak resident memory
  local label=$1
  shift
  if ! /usr/bin/time -f "%e %M" -o "$out/time" "$@" > /dev/null 2> "$out/err"; then cat "$out/err" >&2; exit 1; fi
  read -r wall kb < "$out/time"
  printf '%-58s %7.2f s %7.0f MB\n' "$label" "$wall" "$(awk -v k="$kb" 'BEGIN { print k / 1024 }')"
}

n1024=(--set cluster.nodes=64 --set cluster.gpus_per_node=16)
n8192=(--set cluster.nodes=512 --set cluster.gpus_per_node=16)
measure "simulate, 1,024 devices, all modes, phases" "$bin" simulate "$cfg" --mode all "${n1024[@]}" \
  --set sim.collectives=phases --out "$out/s"
measure "simulate, 1,024 devices, all modes, analytic" "$bin" simulate "$cfg" --mode all "${n1024[@]}" \
  --set sim.collectives=analytic --out "$out/s"
measure "simulate, 8,192 devices, all modes, phases, no trace" "$bin" simulate "$cfg" --mode all "${n8192[@]}" \
  --set sim.collectives=phases --set sim.trace=false --out "$out/s"
measure "plan, 8,192 devices" "$bin" plan "$cfg" "${n8192[@]}"
measure "simulate configs/scale/vit_imagenet_dgx_h100.toml, all modes" "$bin" simulate \
  configs/scale/vit_imagenet_dgx_h100.toml --mode all --out "$out/s"
for model in phases steps; do
  measure "sweep, 100 points (baseline + autocache), $model" "$bin" sweep "$cfg" \
    "${sweep_points[@]}" \
    --set sim.collectives=$model --out "$out/sweep"
done
