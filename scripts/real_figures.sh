#!/usr/bin/env bash
# Draws the overall table, the speedup breakdown and the timing of caching
# (SPEC §7) from three real training runs, elasticpipe train output folders
# of one config, data, epochs and cluster, into OUT (default
# out/real_figures):
#   bash scripts/real_figures.sh BASELINE_RUN NO_CACHE_RUN METHOD_RUN [OUT]
# BASELINE_RUN: no freezing    (--set 'planner.freeze_policy="none"')
# NO_CACHE_RUN: freezing, no cache (--set 'planner.cache="off"')
# METHOD_RUN:   freezing and the cache, the full method (--set 'planner.cache="on"')
# Writes overall.png, .csv and .md (METHOD_RUN against BASELINE_RUN: the
# measured total times, their ratio, the final accuracies),
# speedup_breakdown.png (throughput per epoch of the three; speedups in
# total time over BASELINE_RUN) and cache_timing.png (METHOD_RUN against
# NO_CACHE_RUN). Runs that differ in model, data, epochs, batch size or
# cluster, or that do not match their role (a baseline that freezes, a run
# with the cache that never had it on, ...), stop it with one ERROR line
# and exit code 2.
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  echo "ERROR: real_figures.sh: expected BASELINE_RUN NO_CACHE_RUN METHOD_RUN [OUT], found $# arguments" >&2
  exit 2
fi
base=$1 nocache=$2 method=$3 out=${4:-out/real_figures}
plots=$(cd "$(dirname "$0")/../plots" && pwd)  # the run folders stay relative to the caller's directory
py=/usr/bin/python3  # Debian's, which sees python3-matplotlib
if ! "$py" -c 'import matplotlib' 2> /dev/null; then
  echo "ERROR: $py has no matplotlib: apt-get install python3-matplotlib (scripts/setup.sh does)" >&2
  exit 2
fi
mkdir -p "$out"

# The two scripts that check the runs' roles first (the baseline, the cache).
"$py" "$plots/overall_table.py" --pair "$base" "$method" --out "$out/overall.png"
"$py" "$plots/cache_timing.py" --with-cache "$method" --without-cache "$nocache" --out "$out/cache_timing.png"
"$py" "$plots/speedup_breakdown.py" "$base" "$nocache" "$method" \
  --label "no freezing ($(basename "$base"))" --label "freezing, no cache ($(basename "$nocache"))" \
  --label "freezing + cache ($(basename "$method"))" --out "$out/speedup_breakdown.png"
echo "wrote $out/overall.png, overall.csv, overall.md, speedup_breakdown.png, cache_timing.png"
