#!/usr/bin/env bash
# Tests of the figure scripts (plots/): usage run_plot_tests.sh BIN ROOT.
# Simulates small runs and trains tiny real ones with BIN, runs every script
# with --describe (and scripts/real_figures.sh), checks the PNG and the
# described data (tests/plots/check_figures.py), then feeds the scripts bad
# input. The last line is "N passed, N failed".
set -u
BIN=$1 ROOT=$2
PY=/usr/bin/python3  # Debian's, with python3-matplotlib; the python3 on PATH may lack it
PLOTS=$ROOT/plots CHECK=$ROOT/tests/plots/check_figures.py
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0 failed=0
pass() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
finish() { echo "$passed passed, $failed failed"; exit $((failed > 0)); }

if ! $PY -c 'import matplotlib' 2>/dev/null; then
  fail "$PY has no matplotlib: apt-get install python3-matplotlib"
  finish
fi

# ---- input: small simulated runs ----
VIT=$ROOT/configs/small/tiny_vit_fmnist.toml
for a in 0.2 0.33 0.5; do
  "$BIN" simulate "$VIT" --set data.num_train_samples=2048 --set planner.alpha=$a --out "$T/vit_a$a" >/dev/null ||
    { fail "simulate $VIT alpha=$a"; finish; }
done
"$BIN" simulate "$ROOT/configs/small/tiny_bert_synthetic.toml" --out "$T/bert" >/dev/null ||
  { fail "simulate tiny_bert_synthetic"; finish; }
RUN=$T/vit_a0.5  # freezes 0 -> 2 -> 3 layers, K 4 -> 1, cache fill then read

# plot NAME SCRIPT RUN_DIR... [-- KEY VALUE ...]: run SCRIPT, check its PNG
# (and tables), then its description. Each KEY VALUE goes to the checker as
# is and to the script as --KEY VALUE, plan_id becoming --plan.
plot() {
  local name=$1 script=$2; shift 2
  local inputs=() opts=() check_opts=()
  while [[ $# -gt 0 && $1 != -- ]]; do inputs+=("$1"); shift; done
  if [[ $# -gt 0 ]]; then
    shift
    check_opts=(-- "$@")
    while [[ $# -gt 0 ]]; do opts+=("--${1%_id}" "$2"); shift 2; done
  fi
  local out=$T/fig/$name
  if ! $PY "$PLOTS/$script.py" "${inputs[@]}" "${opts[@]}" --out "$out.png" --describe "$out.json" 2>"$out.err"; then
    fail "$name: exit code $?: $(cat "$out.err")"
    return
  fi
  [[ $(head -c 8 "$out.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] && pass || fail "$name: $out.png is not a PNG"
  if [[ $script == *_table ]]; then
    [[ -s $out.csv && -s $out.md ]] && pass || fail "$name: no $out.csv or $out.md"
  fi
  $PY "$CHECK" "$script" "$out.json" "${inputs[@]}" "${check_opts[@]}" && pass || fail "$name: described data"
}

mkdir -p "$T/fig"
plot freeze_curve freeze_curve "$T"/vit_a0.2 "$T"/vit_a0.33 "$T"/vit_a0.5
plot overall_table overall_table "$RUN" "$T/bert"
plot speedup_breakdown speedup_breakdown "$RUN"
plot alpha_tuning alpha_tuning "$T"/vit_a0.2 "$T"/vit_a0.33 "$T"/vit_a0.5
plot optimal_chunks optimal_chunks "$RUN"
plot cache_timing cache_timing "$RUN"
plot comm_compute_table comm_compute_table "$RUN"
plot transition_table transition_table "$RUN"
plot transition_table_bert transition_table "$T/bert"
plot timeline timeline "$RUN"
plot timeline_plan1 timeline "$RUN" -- plan_id 1 replica 2
plot timeline_bert timeline "$T/bert"

# ---- a real executor run (Fashion-MNIST, a few hundred samples): source exec,
# one mode "train", loss and accuracy measured, no chunks.csv (the figures
# must not assume a simulation). The cache is on, so that the run is also the
# full method of the figures from real runs below ----
train() {  # train NAME [--set KEY=VALUE ...]: a real run into $T/NAME, all runs of one size
  local name=$1; shift
  "$BIN" train "$ROOT/configs/fashion_mnist_vit_tiny.toml" --set data.num_train_samples=768 \
    --set data.num_test_samples=256 --set training.epochs=3 "$@" --out "$T/$name" >/dev/null ||
    fail "elasticpipe train $name $* for the executor's figures"
}
train exec --set 'planner.cache="on"'
plot exec_freeze_curve freeze_curve "$T/exec"
plot exec_overall_table overall_table "$T/exec"
plot exec_speedup_breakdown speedup_breakdown "$T/exec"
plot exec_alpha_tuning alpha_tuning "$T/exec"
plot exec_comm_compute_table comm_compute_table "$T/exec"
plot exec_transition_table transition_table "$T/exec"
plot exec_timeline timeline "$T/exec"

# ---- the figures from real runs: a baseline without freezing, freezing
# without the cache, and $T/exec (freezing and the cache); scripts/real_figures.sh
# draws the same ----
train real_base --set 'planner.freeze_policy="none"'
train real_nocache --set 'planner.cache="off"'
plot real_overall_table overall_table --pair "$T/real_base" "$T/exec"
plot real_overall_mixed overall_table "$RUN" --pair "$T/real_base" "$T/exec" --pair "$T/real_base" "$T/real_nocache"
plot real_speedup_breakdown speedup_breakdown "$T/real_base" "$T/real_nocache" "$T/exec"
plot real_speedup_labels speedup_breakdown "$T/real_base" "$T/exec" --label "no freezing" --label "freezing + cache"
plot real_cache_timing cache_timing --with-cache "$T/exec" --without-cache "$T/real_nocache"
if bash "$ROOT/scripts/real_figures.sh" "$T/real_base" "$T/real_nocache" "$T/exec" "$T/real_figures" >"$T/real_figures.log" 2>&1; then
  for f in overall speedup_breakdown cache_timing; do
    [[ $(head -c 8 "$T/real_figures/$f.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] && pass ||
      fail "real_figures.sh: $f.png is not a PNG"
  done
  # The same table as overall_table.py's, whose values are checked above.
  cmp -s "$T/real_figures/overall.csv" "$T/fig/real_overall_table.csv" && cmp -s "$T/real_figures/overall.md" \
    "$T/fig/real_overall_table.md" && pass || fail "real_figures.sh: overall.csv or .md differ from overall_table.py's"
else
  fail "scripts/real_figures.sh: $(tail -3 "$T/real_figures.log")"
fi

# ---- where the method pays: bench/where_it_pays.py --smoke (two cluster sizes,
# one length, a small data set, both models simulated), then a written table
# with a crossover, a line that pays again after it, a method that does not
# fit (hollow) and a baseline that does not fit (no speedup) ----
if $PY "$ROOT/bench/where_it_pays.py" --smoke --bin "$BIN" --jobs 2 --out "$T/pays" >"$T/pays.log" 2>&1; then
  grep -q '^- ViT-B/16, ImageNet-1k, 3 epochs: ' "$T/pays.log" && pass || fail "where_it_pays.py: no crossover line"
  plot where_it_pays where_it_pays "$T/pays"
  [[ -s $T/fig/where_it_pays.csv && -s $T/fig/where_it_pays.md ]] && pass || fail "where_it_pays: no table"
else
  fail "bench/where_it_pays.py --smoke: $(tail -3 "$T/pays.log")"
fi
mkdir -p "$T/pays_written"
cat >"$T/pays_written/points.csv" <<'EOF'
model,config,nodes,gpus,epochs,freeze_interval_epochs,baseline_s,method_s,speedup,baseline_fits,method_fits,global_batch,updates
A,a.toml,2,16,3,1,10,5,2,1,1,128,300
A,a.toml,4,32,3,1,10,9.9996,1.00004,1,1,256,150
A,a.toml,8,64,3,1,10,9,1.11111,1,1,512,75
A,a.toml,2,16,30,3,100,50,2,1,0,128,3000
A,a.toml,4,32,30,3,100,60,,0,1,256,1500
"B, with a comma",b.toml,2,16,3,1,10,11,0.909091,1,1,64,600
EOF
plot where_it_pays_written where_it_pays "$T/pays_written"
# The bench's refusals: one ERROR line, exit code 2.
for bad in "--nodes 2,x" "--nodes 2048" "--epochs 0" "--set cluster.nodes=4" "--config $T/none.toml" "--bin $T/none"; do
  err=$($PY "$ROOT/bench/where_it_pays.py" $bad --out "$T/pays_bad" 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 2 && $err == ERROR:* && $err != *$'\n'* ]] && pass || fail "where_it_pays.py $bad: exit code $rc: $err"
done

# ---- bad input: exit code 2, one line "ERROR: ..." naming the problem, no traceback ----
# expect_error NAME WANTED SCRIPT ARGS...: WANTED must appear in the message.
expect_error() {
  local name=$1 want=$2 script=$3; shift 3
  local err rc
  err=$($PY "$PLOTS/$script.py" "$@" --out "$T/fig/bad.png" 2>&1 >/dev/null)
  rc=$?
  if [[ $rc -eq 2 && $err == ERROR:* && $err != *Traceback* && $err == *"$want"* && $err != *$'\n'* ]]; then
    pass
  else
    fail "$name: expected exit code 2 and one line 'ERROR: ...$want...', got $rc: $err"
  fi
}
broken() {  # broken NAME: a fresh copy of $RUN to break
  cp -r "$RUN" "$T/$1" && echo "$T/$1"
}

expect_error missing_dir "$T/no_such_run" freeze_curve "$T/no_such_run"
d=$(broken no_trace) && rm "$d/trace.json"
expect_error missing_trace "no_trace/trace.json" timeline "$d"
d=$(broken truncated) && head -c 3000 "$RUN/trace.json" >"$d/trace.json"
expect_error truncated_trace "truncated/trace.json: not valid JSON" timeline "$d"
d=$(broken header) && sed -i '1s/,cache,/,cached,/' "$d/epochs.csv"
expect_error csv_header "header/epochs.csv:1: header: missing column 'cache'" speedup_breakdown "$d"
d=$(broken value) && sed -i '2s/^\([^,]*,[^,]*,[^,]*,[^,]*,[^,]*,[^,]*,\)[^,]*/\1four/' "$d/epochs.csv"
expect_error csv_value "value/epochs.csv:2: column 'K': expected an integer, found 'four'" cache_timing "$d"
# A file written before frozen_inside (decision 0037) still reads: its layers are none.
d=$(broken before_inside) && cut -d, -f1-5,7- "$RUN/epochs.csv" >"$d/epochs.csv"
plot before_inside cache_timing "$d"
d=$(broken inside) && sed -i '2s/^\([^,]*,[^,]*,[^,]*,[^,]*,[^,]*,\)[^,]*/\15 3/' "$d/epochs.csv"
expect_error csv_inside "inside/epochs.csv:2: column 'frozen_inside': expected '-' or ascending layers like '4 7', found '5 3'" cache_timing "$d"
d=$(broken chunks) && sed -i '1s/chosen/picked/' "$d/chunks.csv"
expect_error chunks_header "chunks/chunks.csv:1: header" optimal_chunks "$d"
d=$(broken schema) && sed -i 's|elasticpipe.trace/3|elasticpipe.trace/4|' "$d/summary.json"
expect_error schema_version "schema/summary.json: schema 'elasticpipe.trace/4'" freeze_curve "$d"
d=$(broken zero) && rm "$d/trace.json" && ln -s /dev/zero "$d/trace.json"
expect_error zero_trace "zero/trace.json: not a regular file" timeline "$d"
d=$(broken deep) && $PY -c "print('[' * 200000 + ']' * 200000)" >"$d/summary.json"
expect_error deep_summary "deep/summary.json: JSON nested too deep" freeze_curve "$d"
expect_error unknown_mode "no rows for mode 'nosuch'" optimal_chunks "$RUN" --mode nosuch
expect_error unknown_plan "no plan 99" timeline "$RUN" --plan 99
expect_error bad_option "--plan: invalid int value" timeline "$RUN" --plan x
# Real runs that cannot be compared, or in the wrong role.
d=$T/other_model && cp -r "$T/exec" "$d" && $PY -c 'import json, sys
s = json.load(open(sys.argv[1])); s["metadata"]["model"] = "vit L=6"; json.dump(s, open(sys.argv[1], "w"))' "$d/summary.json"
expect_error real_other_model "other_model/summary.json: metadata 'model' is \"vit L=6\", but" overall_table --pair "$T/real_base" "$d"
expect_error real_breakdown_other "other_model/summary.json: metadata 'model'" speedup_breakdown "$T/real_base" "$d"
expect_error real_cache_other "other_model/summary.json has \"vit L=6\"" cache_timing --with-cache "$d" --without-cache "$T/real_nocache"
expect_error real_pair_simulated "vit_a0.5/summary.json: 7 modes" overall_table --pair "$RUN" "$T/exec"
expect_error real_pair_swapped "exec/epochs.csv: 1 layer(s) frozen in epoch 1; expected a baseline without freezing" \
  overall_table --pair "$T/exec" "$T/real_base"
expect_error real_cache_swapped "real_nocache/epochs.csv: column 'cache' is 0 in every epoch" \
  cache_timing --with-cache "$T/real_nocache" --without-cache "$T/exec"
expect_error real_cache_half "found --with-cache" cache_timing --with-cache "$T/exec"
expect_error real_cache_one "exec/summary.json: one mode (train)" cache_timing "$T/exec"
expect_error real_no_runs "expected RUN_DIR... or --pair BASE_DIR METHOD_DIR, found neither" overall_table
expect_error real_labels "1 --label for 2 RUN_DIRs" speedup_breakdown "$T/real_base" "$T/exec" --label base
err=$(bash "$ROOT/scripts/real_figures.sh" "$T/exec" "$T/real_nocache" "$T/real_base" "$T/real_bad" 2>&1 >/dev/null)
rc=$?
[[ $rc -eq 2 && $err == "ERROR: "*"expected a baseline without freezing"* && $err != *$'\n'* ]] && pass ||
  fail "real_figures.sh with the runs swapped: expected exit code 2 and one ERROR line, got $rc: $err"
expect_error pays_missing "no_such_run/points.csv" where_it_pays "$T/no_such_run"
d=$T/pays_header && mkdir -p "$d" && sed '1s/,speedup,/,gain,/' "$T/pays_written/points.csv" >"$d/points.csv"
expect_error pays_header "pays_header/points.csv:1: header: missing column 'speedup'" where_it_pays "$d"
d=$T/pays_value && mkdir -p "$d" && sed '2s/,128,300$/,many,300/' "$T/pays_written/points.csv" >"$d/points.csv"
expect_error pays_value "pays_value/points.csv:2: column 'global_batch': expected a non-negative integer, found 'many'" where_it_pays "$d"

finish
