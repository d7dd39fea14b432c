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
for cfg in "$root"/configs/paper/*.toml "$root"/configs/small/*.toml "$root"/configs/scale/*.toml \
  "$root"/configs/gpu/*.toml; do
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
expect_rc 0 "plan, global batch" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --set planner.objective=paper \
  --set 'training.batch_policy="global"'
expect_text "plan shows the replicas splitting the global batch" \
  "batch policy global (the same global batch and updates in every plan): samples per pipeline, lr scale: T=0:400,1 T=1:400,1 T=2:400,1 T=3:200,1"
expect_rc 0 "plan --json" -- "$bin" plan "$root/configs/paper/vit_imagenet.toml" --json
expect_text "plan --json schema" '"schema": "elasticpipe.plan/2"'
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
for f in summary.json epochs.csv chunks.csv plan.json trace.json; do
  if [ -s "$tmp/sim/$f" ]; then ok; else bad "simulate did not write $f"; fi
done
# The simulated run carries out the planner's plans and nothing else: every
# epoch of the last mode (configured: the config as train runs it) is its
# plan's, as plan.json (the planner's to_json) has it.
python3 - "$tmp/sim/plan.json" "$tmp/sim/epochs.csv" "$tmp/sim/summary.json" <<'PY' && ok || bad "simulate's epochs are not plan.json's plans"
import csv, json, sys
plan, rows, summary = json.load(open(sys.argv[1])), list(csv.DictReader(open(sys.argv[2]))), json.load(open(sys.argv[3]))
assert plan["schema"] == "elasticpipe.plan/2"
assert summary["reference"] == "baseline" and [m["mode"] for m in summary["modes"]][0] == "baseline"
mine = [r for r in rows if r["mode"] == "configured"]
for p in plan["plans"]:
    for e in range(*p["epochs"]):
        r = mine[e]
        got = [int(r[k]) for k in ("frozen_layers", "K", "M", "replicas")]
        assert got == [p["frozen_layers"], p["K"], p["M"], p["replicas"]], (e, got, p["frozen_layers"], p["K"])
        assert p["frozen_layers"] <= p["frozen_allowed"]
PY
if [ "$(grep -c '^sim,' "$tmp/sim/epochs.csv")" -eq 21 ]; then ok; else bad "epochs.csv: expected 7 modes x 3 epochs"; fi
# Per-layer freezing (decision 0037): the plan shows the set per stage and
# why; the simulated epochs train each plan's layers frozen inside.
vit="$root/configs/paper/vit_imagenet.toml"
expect_rc 0 "plan, per-layer freezing" -- "$bin" plan "$vit" --set planner.freeze_policy=gradient_norm_per_layer \
  --set planner.autopipe=false --set 'planner.cache="off"'
expect_text "plan shows the layers frozen inside per stage" "layers frozen inside, per stage: - | 2 | - | - | - | 8 | 9 10 | -"
expect_text "plan says why it chose them" "frozen set chosen by time: layers 2 8 9 10 (on the slowest stages)"
expect_rc 0 "simulate, per-layer freezing" -- "$bin" simulate "$vit" --mode freeze --out "$tmp/sim_pl" \
  --set planner.freeze_policy=gradient_norm_per_layer
expect_text "simulate shows the layers frozen inside" "0+4"
python3 - "$tmp/sim_pl/plan.json" "$tmp/sim_pl/epochs.csv" <<'PY' && ok || bad "simulate, per-layer: epochs.csv's frozen_inside is not plan.json's"
import csv, json, sys
plan, rows = json.load(open(sys.argv[1])), list(csv.DictReader(open(sys.argv[2])))
mine = [r for r in rows if r["mode"] == "freeze"]
assert any(p["frozen_inside"] for p in plan["plans"])
for p in plan["plans"]:
    for e in range(*p["epochs"]):
        assert mine[e]["frozen_inside"] == (" ".join(map(str, p["frozen_inside"])) or "-"), (e, mine[e], p["frozen_inside"])
PY
# Speedups over the best plan without freezing, which always runs; the
# paper's baseline on request; every mode row says what it trains.
expect_rc 0 "simulate one method mode" -- "$bin" simulate "$small" --mode autocache --out "$tmp/sim_ac" --set data.num_train_samples=1024
expect_text "the reference runs too" "speedup: over baseline, the best plan without freezing"
python3 - "$tmp/sim_ac/summary.json" <<'PY' && ok || bad "simulate --mode autocache: the summary lacks its reference"
import json, sys
s = json.load(open(sys.argv[1]))
assert [m["mode"] for m in s["modes"]] == ["baseline", "autocache"] and s["reference"] == "baseline"
assert s["modes"][0]["speedup"] == 1.0 and s["modes"][1]["speedup"] > 0
assert all(m["final_accuracy"] is None and m["fits_memory"] for m in s["modes"])
PY
expect_rc 0 "simulate --reference gpipe" -- "$bin" simulate "$small" --mode autocache --reference gpipe --out "$tmp/sim_gp" --set data.num_train_samples=1024
expect_text "the paper's reference, named" "speedup: over gpipe, the paper's baseline"
expect_rc 2 "simulate --reference autocache" -- "$bin" simulate "$small" --reference autocache --out "$tmp/sim_bad"
expect_text "reference refused" "ERROR: --reference: expected baseline (the best plan without freezing) or gpipe"
# The paper's batch policy changes the training: said, with the numbers.
expect_rc 0 "simulate per_pipeline" -- "$bin" simulate "$root/configs/paper/vit_imagenet.toml" --mode autocache --out "$tmp/sim_pp" \
  --set 'training.batch_policy="per_pipeline"'
expect_text "a mode that trains otherwise is named" "autocache trains otherwise than baseline: global batch"
# A plan that does not fit says so in its row; its speedup is no answer.
expect_rc 0 "simulate a model that does not fit" -- "$bin" simulate "$small" --mode autocache --out "$tmp/sim_oom" \
  --set data.num_train_samples=1024 --set cluster.device.memory_bytes=1e6
expect_text "does not fit, said" "baseline does not fit"
expect_text "no speedup without a reference that fits" "no speedup: baseline does not fit"
expect_rc 0 "simulate one mode" -- "$bin" simulate "$small" --mode baseline --out "$tmp/sim1" --set data.num_train_samples=1024
expect_text "one mode" "baseline"
expect_rc 2 "simulate bad mode" -- "$bin" simulate "$small" --mode fastest --out "$tmp/simx"
expect_text "simulate bad mode" "ERROR: --mode: expected"
expect_rc 2 "simulate zero bandwidth" -- "$bin" simulate "$small" --set cluster.intra_node.bandwidth_bytes_per_s=0 --out "$tmp/simz"
expect_text "zero bandwidth names the key" "key 'cluster.intra_node.bandwidth_bytes_per_s': expected a number in [1000, 1e+15] (bytes/s, 1 kB/s to 1 PB/s), found 0"
expect_rc 0 "sweep" -- "$bin" sweep "$small" --set planner.alpha=0.25,0.5 --set data.num_train_samples=1024 --out "$tmp/sweep"
if [ "$(wc -l < "$tmp/sweep/sweep.csv")" -eq 3 ]; then ok; else bad "sweep.csv: expected a header and 2 rows"; cat "$tmp/sweep/sweep.csv"; fi
expect_rc 2 "sweep with a bad point runs nothing" -- "$bin" sweep "$small" --set planner.alpha=0.25,1.5 --out "$tmp/sweepbad"
expect_text "sweep bad point" "planner.alpha"
if [ ! -e "$tmp/sweepbad" ]; then ok; else bad "a sweep with a bad point wrote output"; fi
# --mode all is every mode; a quoted value's comma is text, not a split.
expect_rc 0 "sweep --mode all" -- "$bin" sweep "$small" --set planner.alpha=0.5 --set data.num_train_samples=1024 \
  --mode all --out "$tmp/sweepall"
head -1 "$tmp/sweepall/sweep.csv" | grep -q "baseline_total_s.*gpipe_total_s.*autocache_total_s.*configured_updates$" && ok ||
  bad "sweep --mode all: not every mode in sweep.csv: $(head -1 "$tmp/sweepall/sweep.csv")"
expect_rc 0 "sweep a quoted comma" -- "$bin" sweep "$small" --set 'cluster.name="a,b"' --set data.num_train_samples=1024 \
  --mode baseline --out "$tmp/sweepname"
expect_text "one point" "sweep: 1 point x 1 mode"

# --- trace diff ---------------------------------------------------------------
expect_rc 0 "trace diff" -- "$bin" trace diff "$tmp/sim/trace.json" "$tmp/sim/trace.json"
expect_text "trace diff table" "forward"
expect_text "trace diff self is exact" "0.00%"
expect_text "trace diff per epoch" "largest |error|: 0.0% per epoch, 0.0% per iteration"
printf '{"traceEvents": [' > "$tmp/broken.json"
expect_rc 2 "trace diff malformed" -- "$bin" trace diff "$tmp/broken.json" "$tmp/sim/trace.json"
expect_text "trace diff malformed names the file" "ERROR: $tmp/broken.json"

# --- bad input: one ERROR line, exit 2, nothing else ------------------------
sed 's/^nodes = 2/nodes = 2\nnodez = 3/' "$root/configs/paper/vit_imagenet.toml" > "$tmp/bad.toml"
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
# Each key once: a key given twice to --set is refused.
small_data=(--set data.num_train_samples=512 --set data.num_test_samples=128)
small=("${small_data[@]}" --set training.epochs=2)
expect_rc 0 "train" -- "$bin" train "$fm" "${small[@]}" --set "exec.chunk_memo=\"$tmp/chunk_memo.json\"" --out "$tmp/train" \
  --progress-every 0.1
expect_text "train epoch line" "epoch 2/2  loss"
expect_text "train transition line" "transition frozen 0->1 K 2->2"
# The chunk search is timed once per machine and said, since no epoch holds it.
expect_text "train says its chunk search" "chunk search for K = 2: M = 2 ("
expect_text "train says where the search is kept" "kept in $tmp/chunk_memo.json for later runs"
expect_rc 2 "train --progress-every 0" -- "$bin" train "$fm" --progress-every 0
expect_text "says what --progress-every takes" "expected a number of seconds in [0.1, 86400], found '0'"
# Without a terminal, progress lines within an epoch: loss, pace, time left
# (an epoch of 32 iterations: several tenths of a second on any machine).
expect_rc 0 "train with progress lines" -- "$bin" train "$fm" --set data.num_train_samples=2048 \
  --set data.num_test_samples=128 --set training.epochs=1 --set "exec.chunk_memo=\"$tmp/chunk_memo.json\"" \
  --out "$tmp/train_progress" --progress-every 0.1
grep -qE '^epoch 1/1  [0-9]+/32 iterations \([0-9]+%\)  loss [0-9.]+  [0-9]+ samples/s  about [0-9]+ s left in the epoch$' \
  <<<"$out" && ok || bad "train printed no progress line within an epoch: $(head -c 600 <<<"$out")"
for f in summary.json epochs.csv trace.json grad_norms.csv plan.json weights.bin; do
  [ -s "$tmp/train/$f" ] && ok || bad "train wrote no $f"
done
# Metadata numbers are JSON numbers (alpha, the chunk search's seconds), not number-like strings.
numeric_strings=$(python3 - "$tmp/train/trace.json" "$tmp/train/summary.json" <<'PY'
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    meta = d["otherData"]["metadata"] if "otherData" in d else d["metadata"]
    for k, v in meta.items():
        if isinstance(v, str):
            try:
                float(v)
                print(f"{path}: {k} = {v!r}")
            except ValueError:
                pass
PY
)
[ -z "$numeric_strings" ] && ok || bad "metadata numbers written as strings: $numeric_strings"
grep -q '"chunk_search_before_first_epoch_s": *[0-9]' "$tmp/train/trace.json" && ok || bad "the chunk search's seconds are not a number"
# A CPU run that uses the cache prints a host line, with no pinned memory to name.
expect_rc 0 "train with the cache on" -- "$bin" train "$fm" "${small[@]}" --set 'planner.cache="on"' \
  --set "exec.chunk_memo=\"$tmp/chunk_memo.json\"" --out "$tmp/train_cache"
expect_text "a cached epoch's host line" "  host: 8 iterations"
grep -q "chunk search" <<<"$out" && bad "a run whose chunk timings are kept searched again" || ok
grep -q chunk_search_before_first_epoch_s "$tmp/train_cache/trace.json" && bad "a run that searched nothing says it did" || ok
grep -q "pinned memory" <<<"$out" && bad "a CPU run's host line names pinned memory" || ok
# An alpha run computes no gradient norms (its policy reads none): its
# grad_norms.csv has the header alone, and replaying it says how to record them.
[ "$(cat "$tmp/train/grad_norms.csv")" = "step,layer,grad_norm" ] && ok || bad "an alpha run recorded gradient norms"
expect_rc 2 "replaying a run without gradient norms" -- "$bin" simulate "$fm" "${small[@]}" --mode freeze \
  --set 'planner.freeze_policy="replay"' --set "planner.replay_grad_norms_file=\"$tmp/train/grad_norms.csv\"" \
  --out "$tmp/replay"
expect_text "says how to record gradient norms" "no step recorded"
# A gradient-norm run records them, and the simulator replays them through Eq. 1.
expect_rc 0 "train on gradient norms" -- "$bin" train "$fm" "${small[@]}" --set 'planner.freeze_policy="gradient_norm"' \
  --set "exec.chunk_memo=\"$tmp/chunk_memo.json\"" --out "$tmp/train_norms"
[ "$(wc -l < "$tmp/train_norms/grad_norms.csv")" -gt 1 ] && ok || bad "a gradient-norm run recorded no gradient norms"
expect_rc 0 "simulate replays train's grad norms" -- "$bin" simulate "$fm" "${small[@]}" --mode freeze \
  --set 'planner.freeze_policy="replay"' --set "planner.replay_grad_norms_file=\"$tmp/train_norms/grad_norms.csv\"" \
  --out "$tmp/replay"
# A simulated and a real trace of the same config align.
expect_rc 0 "trace diff sim vs exec" -- "$bin" trace diff "$tmp/replay/trace.json" "$tmp/train/trace.json"
expect_text "trace diff sim vs exec per epoch" "per epoch (the epochs.csv beside each trace"
# That run searched its chunks in its start (above): its trace says so, and the diff with it;
# both runs' starts, in no epoch, side by side.
expect_text "trace diff names the real run's chunk search" "second: its chunk search ran in its start ("
expect_text "trace diff compares the starts" "start (before epoch 1, in no epoch): first "
# simulate --mode configured carries out the config as train runs it: with
# decisions that depend on no measurement (the paper's, a fixed M, the
# cache on), both run the same layout in every epoch, and trace diff
# compares like with like.
same=("${small[@]}" --set planner.objective=paper --set planner.chunk_search=false --set planner.M=4 --set 'planner.cache="on"')
expect_rc 0 "simulate as configured" -- "$bin" simulate "$fm" "${same[@]}" --mode configured --out "$tmp/sim_conf"
expect_rc 0 "train the simulated config" -- "$bin" train "$fm" "${same[@]}" --out "$tmp/train_conf"
python3 - "$tmp/sim_conf/epochs.csv" "$tmp/train_conf/epochs.csv" <<'PY' && ok || bad "simulate --mode configured and train ran other layouts"
import csv, sys
sim = [r for r in csv.DictReader(open(sys.argv[1])) if r["mode"] == "configured"]
real = list(csv.DictReader(open(sys.argv[2])))
keys = ("epoch", "frozen_layers", "K", "M", "replicas", "cache")
assert len(sim) == len(real) == 2, (len(sim), len(real))
for s, r in zip(sim, real):
    assert [s[k] for k in keys] == [r[k] for k in keys], ([s[k] for k in keys], [r[k] for k in keys])
PY
expect_rc 0 "trace diff of the same run" -- "$bin" trace diff "$tmp/sim_conf/trace.json" "$tmp/train_conf/trace.json"
grep -q "other layouts\|layouts differ" <<<"$out" && bad "trace diff found other layouts: $out" || ok
# Fine-tuning from the weights a training wrote: a new classifier (head.)
# keeps its seeded values; another model's file is a config error naming the key.
# The new task: five held-apart classes, relabelled 0..4 (a 5-way head).
expect_rc 0 "fine-tune from train's weights" -- "$bin" train "$fm" "${small_data[@]}" --set training.epochs=1 \
  --set 'data.classes=[5, 6, 7, 8, 9]' --set model.num_labels=5 \
  --set "training.init_weights=\"$tmp/train/weights.bin\"" --set 'training.init_keep=["head."]' --out "$tmp/finetune"
expect_text "fine-tune names its initial weights" "initial weights from $tmp/train/weights.bin"
expect_rc 2 "class subset with the wrong label count" -- "$bin" train "$fm" "${small[@]}" \
  --set 'data.classes=[5, 6, 7]' --out "$tmp/finetune3"
expect_text "class subset label count names the key" "key 'model.num_labels'"
expect_rc 2 "initial weights of another model" -- "$bin" train "$fm" "${small_data[@]}" --set training.epochs=1 \
  --set model.num_hidden_layers=2 --set "training.init_weights=\"$tmp/train/weights.bin\"" --out "$tmp/finetune2"
expect_text "initial weights mismatch names the key" "key 'training.init_weights'"
expect_text "initial weights mismatch names the parameter" "is not in the model"
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
# A device the build or machine cannot use is refused, never replaced by the CPU
# (CUDA_VISIBLE_DEVICES="" hides every GPU, so this holds on a GPU machine too).
CUDA_VISIBLE_DEVICES="" expect_rc 2 "train on cuda with no GPU visible" -- "$bin" train "$fm" "${small[@]}" \
  --set 'exec.device="cuda"' --out "$tmp/cuda"
expect_text "cuda refusal names the key" "key 'exec.device': expected cpu ("

# --- calibration: profile, simulate --profile, validate ----------------------
dp="$root/tests/cli/configs/dp_tiny.toml"
expect_rc 0 "profile" -- "$bin" profile "$dp" --out "$tmp/profile.json" --repeats 2
expect_text "profile prints the fits" "compute attention/backward"
grep -q '"what": "cache_probe_setup"' "$tmp/profile.json" && ok || bad "profile lacks the cache probe's set-up"
grep -q '"what": "first_iteration"' "$tmp/profile.json" && ok || bad "profile lacks the first iteration's one-off work"
grep -q '"what": "device_context"' "$tmp/profile.json" && ok || bad "profile lacks the device context's creation"
grep -q '"what": "freeze_warmup"' "$tmp/profile.json" && ok || bad "profile lacks a freeze step's warm-up"
# Whole probes, set up, at 1 and half the layers (dp_tiny: 4 layers), and the fits table says them.
/usr/bin/python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))["cache_probes"]
sys.exit(not ([q["frozen_layers"] for q in p] == [1, 2] and all(q["seconds"] > 0 and q["samples"] == 16 for q in p)))' \
  "$tmp/profile.json" && ok || bad "profile lacks whole probes at 1 and 2 frozen layers"
expect_text "profile's fits table gives the whole probes" "cache probes (timed whole, set up): 1 frozen, batch 16:"
# Under bf16 it also times a later micro-batch's forward (the weights' bf16 copies reused).
expect_rc 0 "profile in bf16" -- "$bin" profile "$dp" --set 'training.precision="bf16"' --out "$tmp/profile_bf16.json" \
  --repeats 2
expect_text "a bf16 profile fits forward_again" "compute attention/forward_again"
expect_text "a profile fits the input's gradient alone" "compute attention/backward_input"
# The sublayers' times at each micro-batch size add up to the whole model run as one chain, as profiled;
# forward_again is there for every kind and size in bf16 only; backward_input (the input's gradient alone, a
# layer frozen inside) for attention and mlp at every size, scaled as the backward is.
/usr/bin/python3 - "$tmp/profile.json" "$tmp/profile_bf16.json" <<'PY' && ok || bad "profile's sublayers do not add up to its model chain"
import json, re, sys
for path, ops in ((sys.argv[1], 3), (sys.argv[2], 4)):
    p = json.load(open(path))
    L = int(re.search(r"L=(\d+)", p["model"]).group(1))
    count = {"stem": 1, "attention": L, "mlp": L, "head": 1}
    chain = {(c["op"], c["samples"]): c["seconds"] for c in p["model_chain"]}
    total = {}
    for c in p["compute"]:
        if c["op"] == "backward_input":
            continue
        key = (c["op"], c["samples"])
        total[key] = total.get(key, 0) + count[c["sublayer_kind"]] * c["seconds"]
    assert chain and set(chain) == set(total), (sorted(chain), sorted(total))
    for key, t in total.items():
        assert abs(t - chain[key]) <= 1e-9 * chain[key], (path, key, t, chain[key])
    sizes = {c["samples"] for c in p["compute"]}
    kinds = {(c["sublayer_kind"], c["op"], c["samples"]) for c in p["compute"]}
    assert len(kinds) == (4 * ops + 2) * len(sizes), (path, len(kinds))
    inside = {(c["sublayer_kind"], c["samples"]) for c in p["compute"] if c["op"] == "backward_input"}
    assert inside == {(k, b) for k in ("attention", "mlp") for b in sizes}, (path, sorted(inside))
    assert (ops == 4) == any(c["op"] == "forward_again" for c in p["compute"]), path
PY
expect_rc 0 "simulate with a fitted cost model" -- "$bin" simulate "$dp" --mode baseline --profile "$tmp/profile.json" \
  --out "$tmp/simprof"
expect_text "simulate names the fitted model" "fitted cost model"
expect_rc 0 "validate" -- "$bin" validate "$dp" --profile "$tmp/profile.json" --iterations 1 --rounds 2
expect_text "validate reports held-out statistics" "held-out plans"
expect_text "validate reports Kendall tau" "Kendall tau"
expect_text "validate measures in passes" "pass 2 of 2"
expect_text "validate reports the spread between passes" "the median of 2 passes"
# profile and validate time the configured device: a CUDA config where no GPU is visible is refused, never timed on the CPU
CUDA_VISIBLE_DEVICES="" expect_rc 2 "profile of a CUDA config" -- "$bin" profile "$dp" --set 'exec.device="cuda"' \
  --out "$tmp/cuda_profile.json"
expect_text "profile's refusal names the key" "key 'exec.device': expected cpu ("
[ ! -e "$tmp/cuda_profile.json" ] && ok || bad "a refused profile wrote its file"
# (a profile that says it was recorded on a GPU: a CPU one is refused first, naming both devices)
sed 's/fp32 on cpu/fp32 on cuda/' "$tmp/profile.json" > "$tmp/gpu_profile.json"
CUDA_VISIBLE_DEVICES="" expect_rc 2 "validate of a CUDA config" -- "$bin" validate "$dp" --set 'exec.device="cuda"' \
  --profile "$tmp/gpu_profile.json" --iterations 1 --rounds 1
expect_text "validate's refusal names the key" "key 'exec.device': expected cpu ("
printf '{"schema": "elasticpipe.profile/1", "environment": "x", "model": "y", "compute": [{"sublayer_kind": "mlp", "op": "forward", "samples": 2, "seconds": "abc"}], "p2p": [], "allreduce": [], "cache": [], "optimizer": [], "transitions": []}' > "$tmp/bad_profile.json"
expect_rc 2 "a malformed profile" -- "$bin" simulate "$dp" --profile "$tmp/bad_profile.json" --out "$tmp/x"
expect_text "malformed profile names the field" "compute[0].seconds"
expect_rc 2 "a profile of another model" -- "$bin" simulate "$root/configs/paper/vit_imagenet.toml" --profile "$tmp/profile.json" --out "$tmp/x"
expect_text "both models named" "the profile was recorded on 'vit L=4 H=16 heads=2 I=32 image=8/4, fp32 on cpu', but $root/configs/paper/vit_imagenet.toml trains 'vit L=12 H=768"
expect_rc 2 "a CPU fp32 profile for a bf16 training" -- "$bin" simulate "$dp" --profile "$tmp/profile.json" --out "$tmp/x" \
  --set 'training.precision="bf16"'
expect_text "the precision named" "fp32 on cpu', but $dp trains 'vit L=4 H=16 heads=2 I=32 image=8/4, bf16 on cpu'"

# --- hostile input and faults: exit 2 naming the input, or it works ---------
bert="$root/configs/small/tiny_bert_synthetic.toml"
# Mode lists: an empty one is refused before anything is written; repeats count once.
expect_rc 2 "simulate --mode ''" -- "$bin" simulate "$bert" --mode '' --out "$tmp/m0"
expect_text "empty mode list" "ERROR: --mode: expected all|baseline|gpipe|freeze|autopipe|autodp|autocache|configured, found ''"
[ ! -e "$tmp/m0" ] && ok || bad "simulate --mode '' created its output folder"
expect_rc 2 "sweep --mode ''" -- "$bin" sweep "$bert" --mode '' --set planner.alpha=0.25 --out "$tmp/m1"
[ ! -e "$tmp/m1/sweep.csv" ] && ok || bad "sweep --mode '' wrote sweep.csv"
expect_rc 2 "simulate --mode baseline," -- "$bin" simulate "$bert" --mode baseline, --out "$tmp/m2"
expect_rc 0 "simulate --mode all,all" -- "$bin" simulate "$bert" --mode all,all,baseline --out "$tmp/m3" --set data.num_train_samples=1024
[ "$(grep -c '^sim,' "$tmp/m3/epochs.csv")" -eq 21 ] && ok || bad "--mode all,all: expected 7 modes x 3 epochs"

# A full disk: no "wrote", exit 2 naming the file, the previous run's files intact.
cp -r "$tmp/sim" "$tmp/before"
out=$(trap '' XFSZ; ulimit -f 8; "$bin" simulate "$bert" --out "$tmp/sim" --set data.num_train_samples=1024 --set planner.alpha=0.5 2>&1)
rc=$?
[ "$rc" -eq 2 ] && ok || bad "simulate on a full disk: exit $rc, expected 2"
expect_text "full disk names the file" "ERROR: $tmp/sim/"
expect_text "full disk says why" "File too large (nothing written)"
grep -q "^wrote" <<<"$out" && bad "simulate on a full disk printed 'wrote'" || ok
for f in summary.json epochs.csv chunks.csv trace.json; do
  cmp -s "$tmp/before/$f" "$tmp/sim/$f" && ok || bad "a failed write changed $f"
done
[ -z "$(find "$tmp/sim" -name '.*tmp*')" ] && ok || bad "a failed write left temporary files"
out=$(trap '' XFSZ; ulimit -f 0; "$bin" sweep "$bert" --set planner.alpha=0.25 --set data.num_train_samples=1024 --out "$tmp/sweepfull" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && ok || bad "sweep on a full disk: exit $rc, expected 2"
expect_text "sweep on a full disk names sweep.csv" "ERROR: $tmp/sweepfull/sweep.csv: write failed"
[ ! -e "$tmp/sweepfull/sweep.csv" ] && ok || bad "sweep on a full disk left a sweep.csv"
# A real full file system, where this user may mount one.
mkdir -p "$tmp/tiny"
if mount -t tmpfs -o size=64k tmpfs "$tmp/tiny" 2> /dev/null; then
  expect_rc 2 "simulate on a full tmpfs" -- "$bin" simulate "$bert" --out "$tmp/tiny/run" --set data.num_train_samples=1024
  expect_text "full tmpfs" "No space left on device (nothing written)"
  [ -z "$(ls "$tmp/tiny/run" 2> /dev/null)" ] && ok || bad "a full tmpfs kept a partial file: $(ls "$tmp/tiny/run")"
  mount -o remount,ro "$tmp/tiny"
  expect_rc 2 "simulate onto a read-only file system" -- "$bin" simulate "$bert" --out "$tmp/tiny/ro"
  expect_text "read-only --out named" "ERROR: --out $tmp/tiny/ro: cannot create the output folder: Read-only file system"
  umount "$tmp/tiny"
fi
# An output folder that cannot be created.
touch "$tmp/plainfile"
expect_rc 2 "--out under a file" -- "$bin" simulate "$bert" --out "$tmp/plainfile/run"
expect_text "--out under a file names it" "ERROR: --out $tmp/plainfile/run: cannot create the output folder: Not a directory"

# Config integers: 64 bits, range-checked, reported as written.
expect_rc 2 "epochs beyond 32 bits" -- "$bin" plan "$bert" --set training.epochs=4294967298
expect_text "epochs as written" "key 'training.epochs': expected an integer <= 10000 (passes over the data; the longest published trainings run a few thousand), found 4294967298"
expect_rc 2 "samples near INT64_MAX" -- "$bin" plan "$bert" --set data.num_train_samples=9223372036854775807
expect_text "samples bound with its reason" "expected an integer <= 1000000000000 (a trillion samples"
# Physical quantities: what SimGrid deadlocked or aborted on.
expect_rc 2 "bandwidth 1e-300" -- "$bin" simulate "$bert" --set cluster.intra_node.bandwidth_bytes_per_s=1e-300 --out "$tmp/bw"
expect_text "bandwidth range" "key 'cluster.intra_node.bandwidth_bytes_per_s': expected a number in [1000, 1e+15]"
expect_rc 2 "latency 1e18" -- "$bin" simulate "$bert" --set cluster.intra_node.latency_s=1e18 --out "$tmp/lat"
expect_text "latency range" "key 'cluster.intra_node.latency_s': expected a number in [0, 10]"
expect_rc 2 "lr = inf" -- "$bin" plan "$bert" --set training.lr=inf
expect_text "lr must be finite" "key 'training.lr': expected a finite number, found float inf"
# --set: one value per flag, errors blamed on the flag.
expect_rc 2 "--set with a line break" -- "$bin" plan "$bert" --set $'training.epochs=3\nplanner.alpha=0.9'
expect_text "--set line break" "ERROR: --set training.epochs: the value holds a line break"
expect_rc 2 "--set inline table" -- "$bin" plan "$bert" --set 'cluster.intra_node={bandwidth_bytes_per_s = 0, latency_s = 1e-6}'
expect_text "--set inline table blames the flag" "ERROR: --set cluster.intra_node: key 'cluster.intra_node.bandwidth_bytes_per_s'"

# Runaways: refused at once, with the reason.
expect_rc 2 "schedule K=1024 M=100000" -- timeout 10 "$bin" schedule --K 1024 --M 100000
expect_text "schedule size bound" "K x M x v = 102400000 chunk passes, expected at most 1000000"
expect_rc 2 "sweep of 1001 points" -- "$bin" sweep "$bert" --set "planner.alpha=$(seq -s, 0.0001 0.0001 0.1001)" --out "$tmp/huge"
expect_text "sweep size bound" "the sweep has more than 1000 points"
expect_rc 2 "simulate 512 devices" -- timeout 10 "$bin" simulate "$root/configs/paper/vit_imagenet.toml" --set cluster.nodes=64 --out "$tmp/n64"
expect_text "simulated devices bound" "ERROR: --set cluster.nodes: key 'cluster.nodes': expected at most 256 devices to simulate with sim.collectives = \"steps\""
expect_rc 2 "sweep up to 512 devices" -- timeout 10 "$bin" sweep "$root/configs/paper/vit_imagenet.toml" --set cluster.nodes=2,64 --out "$tmp/n64s"
expect_text "sweep checks every point" "expected at most 256 devices to simulate with sim.collectives"
expect_rc 0 "simulate 320 devices, phases" -- timeout 60 "$bin" simulate "$bert" --set cluster.nodes=80 --set sim.collectives=phases --out "$tmp/n80"
expect_text "320 devices simulated" "autocache"
expect_rc 2 "unknown collective model" -- timeout 10 "$bin" simulate "$bert" --set sim.collectives=tree --out "$tmp/tree"
expect_text "collective models named" "expected one of steps|phases|analytic, found string \"tree\""
# [sim] and [exec] are read by their back ends, yet every command checks them.
expect_rc 2 "plan checks [exec]" -- "$bin" plan "$bert" --set exec.trace_iteratons=1
expect_text "[exec]'s unknown key named" "key 'exec.trace_iteratons': expected a known key of [exec] (see docs/CONFIG.md), found unknown key (did you mean exec.trace_iterations?)"
expect_rc 2 "plan checks [sim]" -- "$bin" plan "$bert" --set sim.measure_iterations=1
expect_text "[sim]'s range named" "key 'sim.measure_iterations': expected an integer >= 2"
expect_rc 2 "train --nproc 1000" -- timeout 10 "$bin" train "$fm" --nproc 1000
expect_text "nproc bound" "ERROR: --nproc: expected an integer in [1, 256] (each rank is a LibTorch process"
expect_rc 2 "train --nproc 8 on 4 devices" -- timeout 10 "$bin" train "$fm" --nproc 8
expect_text "nproc checked before starting" "ERROR: --nproc 8: this job has 8 processes"
grep -q "rank" <<<"$out" && bad "train --nproc 8 started ranks" || ok
expect_rc 2 "MASTER_PORT is read" -- env MASTER_PORT=http "$bin" train "$fm" --nproc 4
expect_text "MASTER_PORT named" "environment variable MASTER_PORT: expected a TCP port in 1..65535, found 'http'"
# A sweep says how big it is and shows progress without a terminal.
expect_rc 0 "sweep announces itself" -- "$bin" sweep "$bert" --set planner.alpha=0.25,0.5 --set data.num_train_samples=1024 --out "$tmp/sweep2"
expect_text "sweep size announced" "sweep: 2 points x 2 modes"
expect_text "sweep progress" "sweep: 2/2 points done (100%)"

# A training of years simulated (ImageNet x 10000): written, read back, diffed.
expect_rc 0 "simulate a multi-year what-if" -- "$bin" simulate "$root/configs/paper/vit_imagenet.toml" --mode autocache \
  --set data.num_train_samples=12811670000 --out "$tmp/long"
hours=$(awk '$1 == "autocache" && $3 ~ /^[0-9.]+$/ { print int($3) }' <<<"$out" | head -1)
[ "${hours:-0}" -gt 8760 ] && ok || bad "the long what-if is not longer than a year ($hours h)"
expect_rc 0 "trace diff of the long run" -- "$bin" trace diff "$tmp/long/trace.json" "$tmp/long/trace.json"

# trace diff with nothing to compare.
printf '{"displayTimeUnit":"ms","otherData":{"schema":"elasticpipe.trace/3","source":"sim","config":"x","mode":"m","metadata":{}},"traceEvents":[]}' > "$tmp/empty.json"
expect_rc 2 "trace diff of an empty trace" -- "$bin" trace diff "$tmp/empty.json" "$tmp/sim/trace.json"
expect_text "empty trace refused" "the first trace has no GPU spans to compare"
expect_rc 0 "simulate the tiny ViT" -- "$bin" simulate "$root/configs/small/tiny_vit_fmnist.toml" --mode baseline --out "$tmp/vit" \
  --set data.num_train_samples=1024
expect_rc 2 "trace diff ViT vs BERT" -- "$bin" trace diff "$tmp/vit/trace.json" "$tmp/sim/trace.json"
expect_text "different models refused" "the traces are of different workloads: model 'vit L=4' in the first, 'bert L=4' in the second"
expect_rc 0 "simulate the tiny ViT, wider and another batch" -- "$bin" simulate "$root/configs/small/tiny_vit_fmnist.toml" \
  --mode baseline --out "$tmp/vit-wide" --set data.num_train_samples=1024 --set model.hidden_size=128 \
  --set model.intermediate_size=512 --set training.batch_size=32
expect_rc 2 "trace diff of two sizes" -- "$bin" trace diff "$tmp/vit-wide/trace.json" "$tmp/vit/trace.json"
expect_text "two sizes refused" "different workloads: workload 'hidden 128, intermediate 512"
expect_rc 0 "trace diff of two sizes, asked" -- "$bin" trace diff "$tmp/vit-wide/trace.json" "$tmp/vit/trace.json" --any-workload

# Two jobs on one --out: the second is refused, naming the first.
"$bin" train "$fm" "${small_data[@]}" --set training.epochs=3 --out "$tmp/locked" > "$tmp/locked.log" 2>&1 &
first=$!
for _ in $(seq 1 1200); do grep -q "^pid" "$tmp/locked/.elasticpipe.lock" 2> /dev/null && break; sleep 0.05; done
expect_rc 2 "a second job on the same --out" -- "$bin" simulate "$bert" --out "$tmp/locked"
expect_text "the holder is named" "ERROR: --out $tmp/locked: the output folder is in use by another job (pid $first: "
wait "$first" && ok || bad "the first job failed: $(tail -3 "$tmp/locked.log")"

# Ctrl-C of a training: its node-shared cache file is removed. (A
# background job of a script starts with SIGINT ignored: restored first.)
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  "$bin" train "$fm" --set data.num_train_samples=4096 --set data.num_test_samples=128 --set training.epochs=3 \
  --set 'planner.cache="on"' --set "exec.cache_memory_dir=\"$tmp/shm\"" --out "$tmp/interrupted" > "$tmp/interrupted.log" 2>&1 &
job=$!
for _ in $(seq 1 3600); do compgen -G "$tmp/shm/elasticpipe-*.cache" > /dev/null && break; sleep 0.05; done
compgen -G "$tmp/shm/elasticpipe-*.cache" > /dev/null && ok || bad "the training never created its cache file"
kill -INT "$job"
wait "$job"
[ $? -ne 0 ] && ok || bad "an interrupted training exited 0"
compgen -G "$tmp/shm/elasticpipe-*.cache" > /dev/null && bad "Ctrl-C left $(ls "$tmp/shm")" || ok

# A diverged training stops (exit 2) before it checkpoints or writes
# anything of its state: a good run's checkpoints and outputs survive it,
# and resuming from them with a sane lr gives the good run's weights.
expect_rc 0 "a good training" -- "$bin" train "$fm" "${small[@]}" --set 'training.optimizer="sgd"' --out "$tmp/diverged"
cp "$tmp/diverged/weights.bin" "$tmp/good_weights.bin"
latest=$(cat "$tmp/diverged/checkpoints/latest")
expect_rc 2 "the same training diverging in epoch 2" -- "$bin" train "$fm" "${small[@]}" --set 'training.optimizer="sgd"' \
  --set training.lr=1e9 --out "$tmp/diverged" --resume "$tmp/diverged/checkpoints/step-0000000008"
expect_text "divergence named" "ERROR: training diverged at epoch 2, iteration"
expect_text "last good checkpoint named" "the last good checkpoint is $tmp/diverged/checkpoints"
[ "$(cat "$tmp/diverged/checkpoints/latest")" = "$latest" ] && ok || bad "a diverged training moved checkpoints/latest"
cmp -s "$tmp/good_weights.bin" "$tmp/diverged/weights.bin" && ok || bad "a diverged training overwrote weights.bin"
expect_rc 0 "resume the good checkpoint with a sane lr" -- "$bin" train "$fm" "${small[@]}" --set 'training.optimizer="sgd"' \
  --out "$tmp/diverged" --resume "$tmp/diverged/checkpoints/step-0000000008"
cmp -s "$tmp/good_weights.bin" "$tmp/diverged/weights.bin" && ok || bad "resuming after the divergence changed the final weights"
expect_rc 2 "a training diverging before its first checkpoint" -- "$bin" train "$fm" "${small[@]}" \
  --set 'training.optimizer="sgd"' --set training.lr=1e9 --out "$tmp/diverged0"
expect_text "no checkpoint to go back to" "no checkpoint was written before it: start again with a smaller training.lr"
[ ! -e "$tmp/diverged0/weights.bin" ] && ok || bad "a diverged training wrote weights.bin"
# torchrun's and Open MPI's variables both set: used and ignored, said so.
expect_rc 0 "two launchers' variables" -- env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 OMPI_COMM_WORLD_RANK=0 \
  "$bin" train "$fm" "${small_data[@]}" --set training.epochs=1 --out "$tmp/twolaunchers"
expect_text "two launchers warned" "WARNING: the job's place is read from RANK (torchrun); OMPI_COMM_WORLD_RANK (mpirun) is set too and ignored"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
