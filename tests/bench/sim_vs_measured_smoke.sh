#!/usr/bin/env bash
# bench/sim_vs_measured.py's plumbing, on a tiny model on the CPU (--smoke):
# profile, simulate, the three kinds of train run, each one's trace diff
# CSV, validate, and the tables and verdicts made from them.
#   sim_vs_measured_smoke.sh ELASTICPIPE SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out/table.md" 2> /dev/null; exit 1; }
"$py" "$src/bench/sim_vs_measured.py" "$out" --smoke --bin "$bin" --validate-iterations 1 > "$out/stdout" 2>&1 ||
  { tail -40 "$out/stdout"; exit 1; }
for f in profile.json sim/trace.json summary.csv table.md logs/validate.log; do
  [ -s "$out/$f" ] || fail "missing $f"
done
for run in first_r1 traced_r1 configured_r1; do
  for f in epochs.csv trace.json diff.csv; do [ -s "$out/runs/$run/$f" ] || fail "missing runs/$run/$f"; done
done
# Each table: a row per epoch, then the whole run, each with all three runs'
# figures; every figure a number with its error.
epochs=$(grep -c '^exec,' "$out/runs/configured_r1/epochs.csv")
[ "$epochs" -ge 2 ] || fail "the smoke run trained $epochs epochs"
cell='[0-9.]+( \([+-][0-9.]+%\))?'
# A frozen count where the runs and the simulation acted otherwise on a step reads "8\|9".
rows=$(grep -cE "^\| [0-9]+ \| [0-9]+(\\\\\|[0-9]+)? \| [0-9.]+ \| $cell \| $cell \| $cell \|$" "$out/table.md")
[ "$rows" -eq $((3 * epochs)) ] || fail "$rows epoch rows in the three tables for $epochs epochs"
grep -qE "^\| all \| +\| [0-9.]+ \| $cell \| $cell \| $cell \|$" "$out/table.md" || fail "no whole-run row"
grep -qE "^\| start \| +\| [0-9.]+ \| $cell \| $cell \| $cell \|$" "$out/table.md" || fail "no start row"
! grep -q "n/a" "$out/table.md" || fail "a value is missing (n/a)"
# A verdict per run; only the first run, without a chunk memo, searched in its start.
[ "$(grep -cE '^- (first|traced|configured)_r1: (NOT )?within ±5% in every epoch' "$out/table.md")" -eq 3 ] ||
  fail "not one verdict per run"
grep -qE '^- first_r1: .*its chunk search \([0-9.]+ s\) ran in its start' "$out/table.md" ||
  fail "the first run's chunk search is not named"
! grep -qE '^- (traced|configured)_r1: .*chunk search' "$out/table.md" || fail "a run with the memo searched"
grep -q "MAPE" "$out/table.md" || fail "no validate table"
# summary.csv: every run's diff rows, named.
[ "$(grep -c '^first_r1,first,' "$out/summary.csv")" -eq $((epochs + 2)) ] || fail "summary.csv: first_r1's rows"
# Refusals: one ERROR line and exit 2.
refused "--set nodot=1" "$py" "$src/bench/sim_vs_measured.py" "$out/bad" --bin "$bin" --set nodot=1
refused "--rounds 0" "$py" "$src/bench/sim_vs_measured.py" "$out/bad" --bin "$bin" --rounds 0
refused "--bin missing" "$py" "$src/bench/sim_vs_measured.py" "$out/bad" --bin "$out/none"
refused "no traced iterations" "$py" "$src/bench/sim_vs_measured.py" "$out/bad" --bin "$bin" \
  --set exec.trace_iterations=0
echo "sim_vs_measured smoke: $epochs epochs, three runs, tables complete"
