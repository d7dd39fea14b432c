#!/usr/bin/env bash
# End-to-end tests of the elasticpipe CLI: exit codes, error messages, and
# golden outputs (tests/golden/*.txt; regenerate with UPDATE_GOLDEN=1 and
# review the diff).
set -u
bin=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_rc RC NAME -- CMD...: runs CMD, checks its exit code, keeps output in $out.
expect_rc() {
  local want=$1 name=$2
  shift 3
  out=$("$@" 2>&1)
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, expected $want"; echo "$out" | head -20; fi
}

expect_text() {
  local name=$1 needle=$2
  if grep -qF -- "$needle" <<<"$out"; then ok; else bad "$name: output lacks '$needle'"; echo "$out" | head -20; fi
}

golden() {
  local name=$1
  local file="$root/tests/golden/$name.txt"
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then printf '%s\n' "$out" > "$file"; ok; return; fi
  if diff -u "$file" <(printf '%s\n' "$out") > "$tmp/diff"; then ok; else bad "golden $name differs:"; head -40 "$tmp/diff"; fi
}

# --- plan -----------------------------------------------------------------
for cfg in "$root"/configs/paper/*.toml "$root"/configs/small/*.toml; do
  expect_rc 0 "plan $(basename "$cfg")" -- "$bin" plan "$cfg"
  expect_text "plan $(basename "$cfg")" "predicted training time"
done
expect_rc 0 "plan vit_imagenet" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --set planner.objective=paper
expect_text "plan explains compression" "rejected, K stays"
expect_text "plan names the freeze source" "alpha bound"
expect_rc 0 "plan vit_imagenet, objective time" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml"
expect_text "plan names its objective" "objective: time"
expect_text "plan lists the alternatives it weighed" "alternatives weighed"
expect_rc 2 "plan with an unknown objective" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --set planner.objective=fast
expect_text "unknown objective names the key" "key 'planner.objective': expected one of time|paper, found string \"fast\""
expect_rc 0 "plan --json" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --json
expect_text "plan --json schema" '"schema": "elasticpipe.plan/1"'
expect_rc 0 "plan --set" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --set planner.compression=memory --set planner.alpha=0.5
expect_text "plan --set memory" "compression: memory"
cd "$root"  # golden outputs name the config by its path relative to the repo
expect_rc 0 "golden plan tiny_bert" -- "$bin" plan configs/small/tiny_bert_synthetic.toml
golden plan_tiny_bert
expect_rc 0 "golden plan tiny_bert, objective paper" -- "$bin" plan configs/small/tiny_bert_synthetic.toml --set planner.objective=paper
golden plan_tiny_bert_paper

# --- schedule ---------------------------------------------------------------
expect_rc 0 "schedule gpipe" -- "$bin" schedule --K 4 --M 8 --kind gpipe
expect_text "gpipe bubble (K-1)/(M+K-1) = 3/11" "bubble fraction 0.272727"
golden schedule_gpipe_K4_M8
expect_rc 0 "schedule 1f1b" -- "$bin" schedule --K 4 --M 8 --kind 1f1b
golden schedule_1f1b_K4_M8
expect_rc 0 "schedule looping" -- "$bin" schedule --K 4 --M 8 --kind looping --v 2
golden schedule_looping_bf_K4_M8_v2
expect_rc 0 "schedule looping_df" -- "$bin" schedule --K 4 --M 8 --kind looping_df --v 2
golden schedule_looping_df_K4_M8_v2
expect_rc 0 "schedule csv" -- "$bin" schedule --K 2 --M 2 --kind gpipe --csv
expect_text "schedule csv" "0,0F0,0SEND_F0>1"
expect_rc 0 "schedule from config" -- "$bin" schedule "$root/configs/small/tiny_bert_synthetic.toml" --K 4 --M 8
expect_text "schedule kind from config" "1f1b K=4 M=8"

# --- simulate and sweep -------------------------------------------------------
small="$root/configs/small/tiny_bert_synthetic.toml"
expect_rc 0 "simulate" -- "$bin" simulate "$small" --out "$tmp/sim" --set data.num_train_samples=1024
expect_text "simulate prints the modes" "autocache"
expect_text "simulate prints speedup" "speedup"
for f in summary.json epochs.csv chunks.csv trace.json; do
  if [ -s "$tmp/sim/$f" ]; then ok; else bad "simulate did not write $f"; fi
done
if [ "$(grep -c '^sim,' "$tmp/sim/epochs.csv")" -eq 15 ]; then ok; else bad "epochs.csv: expected 5 modes x 3 epochs"; fi
expect_rc 0 "simulate one mode" -- "$bin" simulate "$small" --mode baseline --out "$tmp/sim1" --set data.num_train_samples=1024
expect_text "one mode" "baseline"
expect_rc 2 "simulate bad mode" -- "$bin" simulate "$small" --mode fastest --out "$tmp/simx"
expect_text "simulate bad mode" "ERROR: --mode: expected"
expect_rc 2 "simulate zero bandwidth" -- "$bin" simulate "$small" --set cluster.intra_node.bandwidth_bytes_per_s=0 --out "$tmp/simz"
expect_text "zero bandwidth names the key" "key 'cluster.intra_node.bandwidth_bytes_per_s': expected a number > 0, found 0"
expect_rc 0 "sweep" -- "$bin" sweep "$small" --set planner.alpha=0.25,0.5 --set data.num_train_samples=1024 --out "$tmp/sweep"
if [ "$(wc -l < "$tmp/sweep/sweep.csv")" -eq 3 ]; then ok; else bad "sweep.csv: expected a header and 2 rows"; cat "$tmp/sweep/sweep.csv"; fi
expect_rc 2 "sweep with a bad point runs nothing" -- "$bin" sweep "$small" --set planner.alpha=0.25,1.5 --out "$tmp/sweepbad"
expect_text "sweep bad point" "planner.alpha"
if [ ! -e "$tmp/sweepbad" ]; then ok; else bad "a sweep with a bad point wrote output"; fi

# --- trace diff ---------------------------------------------------------------
expect_rc 0 "trace diff" -- "$bin" trace diff "$tmp/sim/trace.json" "$tmp/sim/trace.json"
expect_text "trace diff table" "forward"
expect_text "trace diff self is exact" "0.00%"
printf '{"traceEvents": [' > "$tmp/broken.json"
expect_rc 2 "trace diff malformed" -- "$bin" trace diff "$tmp/broken.json" "$tmp/sim/trace.json"
expect_text "trace diff malformed names the file" "ERROR: $tmp/broken.json"

# --- bad input: one ERROR line, exit 2, nothing else ------------------------
sed 's/^gpus_per_node = 8/gpus_per_node = 8\nnodez = 3/' "$root/configs/paper/vit_imagenet.toml" > "$tmp/bad.toml"
line=$(grep -n '^nodez' "$tmp/bad.toml" | cut -d: -f1)
expect_rc 2 "unknown key" -- "$bin" plan "$tmp/bad.toml"
expect_text "unknown key names file:line and key" "ERROR: $tmp/bad.toml:$line:9: key 'cluster.nodez': expected a known key"
sed 's/alpha = 0.3333333333333333/alpha = 1.5/' "$root/configs/paper/vit_imagenet.toml" > "$tmp/alpha.toml"
expect_rc 2 "alpha out of range" -- "$bin" plan "$tmp/alpha.toml"
line=$(grep -n '^alpha = 1.5' "$tmp/alpha.toml" | cut -d: -f1)
expect_text "alpha names line" "ERROR: $tmp/alpha.toml:$line:9: key 'planner.alpha': expected a number in (0, 1), found 1.5"
expect_rc 2 "too many GPUs" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --set planner.K=16
expect_text "too many GPUs message" "ERROR: --set planner.K: key 'planner.K': expected at most cluster.gpus_per_node = 8"
expect_rc 2 "missing file" -- "$bin" plan "$tmp/none.toml"
expect_rc 2 "no subcommand" -- "$bin"
expect_rc 2 "unknown subcommand" -- "$bin" frobnicate
expect_rc 2 "schedule bad kind" -- "$bin" schedule --K 4 --M 8 --kind zigzag
expect_text "schedule bad kind" "ERROR: --kind: expected"
expect_rc 2 "schedule v with gpipe" -- "$bin" schedule --K 4 --M 8 --kind gpipe --v 2
expect_text "schedule v with gpipe" "ERROR:"
expect_rc 0 "help" -- "$bin" --help
expect_rc 0 "plan help" -- "$bin" plan --help
expect_text "plan help lists --set" "--set"
expect_rc 0 "schedule help" -- "$bin" schedule --help

# --- train (real LibTorch training, tiny slices of Fashion-MNIST) -----------
fm="$root/configs/fashion_mnist_vit_tiny.toml"
small=(--set data.num_train_samples=512 --set data.num_test_samples=128 --set training.epochs=2)
expect_rc 0 "train" -- "$bin" train "$fm" "${small[@]}" --out "$tmp/train"
expect_text "train epoch line" "epoch 2/2  loss"
expect_text "train transition line" "transition frozen 0->1 K 2->2"
for f in summary.json epochs.csv trace.json grad_norms.csv plan.json weights.bin; do
  [ -s "$tmp/train/$f" ] && ok || bad "train wrote no $f"
done
# The simulator replays the real run's gradient norms through Eq. 1.
expect_rc 0 "simulate replays train's grad norms" -- "$bin" simulate "$fm" "${small[@]}" --mode freeze \
  --set 'planner.freeze_policy="replay"' --set "planner.replay_grad_norms_file=\"$tmp/train/grad_norms.csv\"" \
  --out "$tmp/replay"
# A simulated and a real trace of the same config align.
expect_rc 0 "trace diff sim vs exec" -- "$bin" trace diff "$tmp/replay/trace.json" "$tmp/train/trace.json"
expect_rc 2 "train without the dataset" -- "$bin" train "$fm" --set 'data.path="/nonexistent/fmnist"'
expect_text "missing dataset names the package" "dataset-fashion-mnist"
expect_text "missing dataset names the path" "/nonexistent/fmnist"
mkdir -p "$tmp/badidx"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  printf '\x00\x00\x08\x01\x00\x00\x00\x01\x00' > "$tmp/badidx/$f"
done
expect_rc 2 "train on a wrong-magic IDX file" -- "$bin" train "$fm" --set "data.path=\"$tmp/badidx\""
expect_text "wrong magic is named" "magic"
expect_rc 2 "train with AutoDP replicas" -- "$bin" train "$fm" --set planner.autodp=true --set 'planner.compression="memory"'
expect_text "one process per pipeline: --nproc named" "run elasticpipe train --nproc 4"
expect_rc 2 "train on a simulated-only dataset" -- "$bin" train "$root/configs/paper/vit_cifar100.toml"
expect_text "dataset name refused at file:line" "vit_cifar100.toml:"

# --- calibration: profile, simulate --profile, validate ----------------------
dp="$root/tests/cli/configs/dp_tiny.toml"
expect_rc 0 "profile" -- "$bin" profile "$dp" --out "$tmp/profile.json" --repeats 2
expect_text "profile prints the fits" "compute attention/backward"
expect_rc 0 "simulate with a fitted cost model" -- "$bin" simulate "$dp" --mode baseline --profile "$tmp/profile.json" \
  --out "$tmp/simprof"
expect_text "simulate names the fitted model" "fitted cost model"
expect_rc 0 "validate" -- "$bin" validate "$dp" --profile "$tmp/profile.json" --iterations 1
expect_text "validate reports held-out statistics" "held-out plans"
expect_text "validate reports Kendall tau" "Kendall tau"
printf '{"schema": "elasticpipe.profile/1", "environment": "x", "model": "y", "compute": [{"sublayer_kind": "mlp", "op": "forward", "samples": 2, "seconds": "abc"}], "p2p": [], "allreduce": [], "cache": [], "optimizer": [], "transitions": []}' > "$tmp/bad_profile.json"
expect_rc 2 "a malformed profile" -- "$bin" simulate "$dp" --profile "$tmp/bad_profile.json" --out "$tmp/x"
expect_text "malformed profile names the field" "compute[0].seconds"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
