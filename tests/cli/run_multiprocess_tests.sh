#!/usr/bin/env bash
# Multi-process training through the CLI: `train --nproc 4` on Gloo, with
# tests/cli/configs/dp_tiny.toml (2 replicas of K = 2, then 4 of K = 1 after
# a freeze, with the node-shared cache filled and then advanced).
set -u
bin=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$root/tests/cli/configs/dp_tiny.toml
# A resumed job fills the activation cache again, in other batches than the
# interrupted one did. OpenBLAS's value for one row of a product depends on
# the rows computed with it (its edge kernels round differently); the
# reference BLAS's does not. So the checks below that a resumed job ends
# with bitwise the same weights run every job on the reference libblas
# (libblas3, which setup installs with Debian's LibTorch); one job at the end
# runs on the BLAS that users get. PyPI's LibTorch carries its own BLAS (MKL)
# and loads no libblas.so.3: there every job runs on that, and the bitwise
# checks hold on it too.
default_ld=${LD_LIBRARY_PATH:-}
if ldd "$(dirname "$bin")/elasticpipe-exec" | grep -q 'libblas\.so\.3'; then
  blas=$(dpkg -L libblas3 2> /dev/null | grep '/blas/libblas.so.3$' | head -1)
  [ -n "$blas" ] || { echo "FAIL: the reference BLAS (Debian package libblas3) is not installed"; exit 1; }
  export LD_LIBRARY_PATH=$(dirname "$blas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "bitwise resume checks on the reference BLAS ($blas)"
else
  echo "bitwise resume checks on the BLAS built into LibTorch (no libblas.so.3 loaded)"
fi
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# run NAME RC -- CMD...: runs CMD (output in $tmp/NAME.log), checks its exit code.
run() {
  local name=$1 want=$2
  shift 3
  "$@" > "$tmp/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, expected $want"; sed 's/^/  | /' "$tmp/$name.log" | tail -20; fi
}
has() {  # has NAME TEXT: the run's output contains TEXT
  grep -qF -- "$2" "$tmp/$1.log" && ok || { bad "$1: no '$2' in its output"; sed 's/^/  | /' "$tmp/$1.log" | tail -20; }
}
# same_losses A B [FROM]: iterations.csv of runs A and B agree within 1e-5 (from iteration FROM on)
same_losses() {
  if awk -F, -v from="${3:-0}" 'NR == FNR { if (FNR > 1) a[$1] = $2; next }
       FNR > 1 && $1 >= from { n++; d = a[$1] - $2; if (d < 0) d = -d; if (!($1 in a) || d > 1e-5) { print "iteration " $1 ": " a[$1] " vs " $2; bad = 1 } }
       END { exit bad || n == 0 }' "$1/iterations.csv" "$2/iterations.csv"; then ok; else bad "losses differ: $1 vs $2"; fi
}

# 1. A 2 -> 4 replica transition: the runtime check that every replica
#    holds identical weights and optimizer state passes, and every sample is
#    trained on exactly once per epoch across the processes.
run dp 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/dp" --set exec.record_samples=true \
  --set exec.checkpoint_every=2 --set exec.checkpoint_keep=100
has dp "replicas 2 hold identical weights and optimizer state"
has dp "transition frozen 0->2 K 2->1 replicas 2->4"
has dp "replicas 4 hold identical weights and optimizer state"
has dp "epoch 3/3"
if awk -F, '{ seen[$1 "," $3]++ } END { for (k in seen) if (seen[k] != 1) { print "sample " k " seen " seen[k] " times"; bad = 1 }
             n = 0; for (k in seen) n++; if (n != 3 * 250) { print n " (epoch, sample) pairs, expected 750"; bad = 1 }; exit bad }' \
  "$tmp"/dp/samples/rank*.csv; then ok; else bad "sampler: not exactly once per epoch across ranks"; fi
for r in 0 1 2 3; do [ -s "$tmp/dp/samples/rank$r.csv" ] && ok || bad "rank $r trained on nothing"; done
[ -s "$tmp/dp/transitions.json" ] && grep -q '"state_transfer_s"' "$tmp/dp/transitions.json" && ok || bad "no transitions.json"
# The trace holds every rank's traced iterations, each on its own devices:
# 2 pipelines of K = 2 (ranks 0, 1) in epoch 1, then 4 of K = 1.
if python3 - "$tmp/dp/trace.json" << 'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
seen = {}
for e in d["traceEvents"]:
    if e["ph"] == "X" and e["cat"] == "forward":
        a = e["args"]
        seen.setdefault(a["epoch"], set()).add((a["replica"], a["stage"], names[e["pid"], e["tid"]]))
want = {0: {(0, 0, "cpu0"), (0, 1, "cpu1"), (1, 0, "cpu2"), (1, 1, "cpu3")}}
want.update({e: {(r, 0, "cpu%d" % r) for r in range(4)} for e in (1, 2)})  # epochs count from 0 here
ranks = d["otherData"]["metadata"].get("traced_ranks")
ok = seen == want and ranks == "ranks 0,1,2,3"
print("" if ok else "forward spans (replica, stage, device) per epoch %s, traced_ranks %r; expected %s" % (seen, ranks, want))
sys.exit(0 if ok else 1)
PY
then ok; else bad "trace.json: not every rank's iterations on its own devices"; fi
# The plans the processes ran are the planner's, byte for byte: the
# executor predicts with the cost model here (exec.chunk_search_iterations = 0).
"$bin" plan "$cfg" --json > "$tmp/planned.json" && cmp -s "$tmp/planned.json" "$tmp/dp/plan.json" && ok ||
  bad "the executor's plan.json differs from elasticpipe plan --json"

# 1a. The time objective (the default) on the same job: its choice of K
#     and replicas from the start (the global batch of 32 split among them),
#     still the planner's plans byte for byte.
run dp_time 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/dp_time" --set planner.objective=time
has dp_time "epoch 3/3"
"$bin" plan "$cfg" --json --set planner.objective=time > "$tmp/planned_time.json" &&
  cmp -s "$tmp/planned_time.json" "$tmp/dp_time/plan.json" && ok ||
  bad "objective time: the executor's plan.json differs from elasticpipe plan --json"

# 1b. Two (simulated) nodes of 2 devices: node-sharded sampler and one
#     cache file per node; still exactly once, replicas still identical.
run nodes2 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/nodes2" --set cluster.nodes=2 --set cluster.gpus_per_node=2 \
  --set exec.record_samples=true
has nodes2 "replicas 4 hold identical weights and optimizer state"
has nodes2 "epoch 3/3"
if awk -F, '{ seen[$1 "," $3]++ } END { n = 0; for (k in seen) { n++; if (seen[k] != 1) bad = 1 }; exit bad || n != 750 }' \
  "$tmp"/nodes2/samples/rank*.csv; then ok; else bad "two nodes: not exactly once per epoch"; fi

# 1c. training.batch_policy = "global": the replicas split one global batch
#     (32: 2 x 16, then 4 x 8 after the 2 -> 4 transition), so the losses are
#     those of one pipeline training on the whole global batch in one process.
run global 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/global" --set 'training.batch_policy="global"' \
  --set exec.record_samples=true
has global "transition frozen 0->2 K 2->1 replicas 2->4"
has global "replicas 4 hold identical weights and optimizer state"
if awk -F, '{ seen[$1 "," $3]++ } END { n = 0; for (k in seen) { n++; if (seen[k] != 1) bad = 1 }; exit bad || n != 750 }' \
  "$tmp"/global/samples/rank*.csv; then ok; else bad "global batch: not exactly once per epoch"; fi
run global_one 0 -- "$bin" train "$cfg" --out "$tmp/global_one" --set cluster.gpus_per_node=2 \
  --set planner.autodp=false --set training.batch_size=32
same_losses "$tmp/global" "$tmp/global_one"

# 2. The loss sequence after the transition equals that of a job that starts
#    with 4 replicas in the same state (resumed from a checkpoint taken after
#    the transition, epoch 2 iteration 2 = global step 10), and its final
#    weights are the same.
step10=$(ls -d "$tmp"/dp/checkpoints/step-*10 2> /dev/null | head -1)
if [ -n "$step10" ]; then
  run from4 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/from4" --resume "$step10"
  has from4 "resumed from"
  same_losses "$tmp/dp" "$tmp/from4" 10
  cmp -s "$tmp/dp/weights.bin" "$tmp/from4/weights.bin" && ok || bad "resumed 4-replica job: other final weights"
else
  bad "no checkpoint at step 10 in $tmp/dp/checkpoints: $(ls "$tmp/dp/checkpoints" | tr '\n' ' ')"
fi

# 2b. Resuming that mid-epoch checkpoint (4 replicas) with 2 replicas
#     (AutoDP off: the initial pipelines shrink in place) still trains on
#     every sample exactly once per epoch: the interrupted run's slots before
#     the checkpoint (64 = 2 iterations x 4 replicas x 8: the global batch of
#     32 split four ways) plus the resumed run's.
if [ -n "$step10" ]; then
  run fewer 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/fewer" --resume "$step10" \
    --set planner.autodp=false --set exec.record_samples=true
  has fewer "2 replicas (saved with 4)"
  if awk -F, 'FILENAME ~ /fewer/ { if ($1 >= 1) seen[$1 "," $3]++; next }
               $1 == 1 && $2 < 64 { seen[$1 "," $3]++ }
               END { n = 0; for (k in seen) { n++; if (seen[k] != 1) { print "sample " k " seen " seen[k] " times"; bad = 1 } }
                     if (n != 2 * 250) { print n " (epoch, sample) pairs, expected 500"; bad = 1 }; exit bad }' \
    "$tmp"/dp/samples/rank*.csv "$tmp"/fewer/samples/rank*.csv; then ok; else bad "resume with 2 replicas: not exactly once"; fi
fi

# 2c. With the chunk search timed for real and the time objective, a job
#     resumed in another layout (AutoDP off) meets K the interrupted run
#     never timed: rank 0 times them as it replays, and hands its timings to
#     the others before they replay (none waits for a timing that never comes).
timed=(--set exec.chunk_search_iterations=1 --set planner.objective=time --set "exec.chunk_memo=\"$tmp/memo.json\"")
run timed 0 -- "$bin" train "$cfg" --nproc 2 --out "$tmp/timed" "${timed[@]}" --set cluster.gpus_per_node=2 \
  --set exec.checkpoint_every=2 --set exec.checkpoint_keep=100
last=$(ls -d "$tmp"/timed/checkpoints/step-* 2> /dev/null | tail -1)
if [ -n "$last" ]; then
  rm -f "$tmp/memo.json"
  run timed_other 0 -- "$bin" train "$cfg" --nproc 2 --out "$tmp/timed_other" --resume "$last" "${timed[@]}" \
    --set cluster.gpus_per_node=2 --set planner.autodp=false
  has timed_other "resumed from"
else
  bad "no checkpoint in $tmp/timed/checkpoints"
fi

# 3. The cached path (fill, then advance) gives the same losses as recomputing
#    the frozen layers, from host memory and from the disk tier.
run nocache 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/nocache" --set 'planner.cache="off"'
same_losses "$tmp/dp" "$tmp/nocache"
run disk 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/disk" --set cluster.host.memory_bytes=1000 \
  --set "exec.cache_disk_dir=\"$tmp/diskcache\""
grep -q '"tier": "disk"' "$tmp/disk/plan.json" && ok || bad "the disk tier was not planned"
same_losses "$tmp/dp" "$tmp/disk"

# 4. kill -9 of one process mid-epoch brings the job down (exit != 0);
#    --resume then gives the same final weights as the uninterrupted run.
long=(--set data.num_train_samples=4000 --set exec.checkpoint_every=3 --set "exec.cache_memory_dir=\"$tmp/shm\"")
run full 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/full" "${long[@]}"
# Waits for the 2 -> 4 transition at epoch 1's end (logged once the plan is
# entered and the node's cache file exists; the epoch line comes before
# the epoch's last checkpoint, which a wait from it could take for the next),
# then for the next checkpoint (mid-epoch 2, while the cache is being
# filled), stops the ranks
# where they are and kills rank 2. The job lasts a few seconds: where this
# shell was kept from polling until it had ended (a loaded machine), the
# window was missed, not the behaviour, and the job runs again.
kill_mid_epoch() {
  rm -rf "$tmp/killed" "$tmp/shm"
  "$bin" train "$cfg" --nproc 4 --out "$tmp/killed" "${long[@]}" > "$tmp/killed.log" 2>&1 &
  launcher=$!
  local first=
  for _ in $(seq 1 1200); do
    if [ -z "$first" ] && grep -q "transition frozen" "$tmp/killed.log" 2> /dev/null; then first=$(cat "$tmp/killed/checkpoints/latest"); fi
    [ -n "$first" ] && [ "$(cat "$tmp/killed/checkpoints/latest")" != "$first" ] && break
    sleep 0.05
  done
  local ranks
  ranks=$(pgrep -P "$launcher")
  [ -n "$ranks" ] && kill -STOP $ranks 2> /dev/null
  victim=$(sed -n 3p <<< "$ranks")  # rank 2, an onboarded replica
  local missed=0
  # Stopped (T) mid-run, not exited (gone, or a zombie Z the launcher has not reaped).
  local state
  state=$([ -n "$victim" ] && awk '{print $3}' "/proc/$victim/stat" 2> /dev/null)
  if [ -z "$state" ] || [ "$state" = Z ] || grep -q "^trained" "$tmp/killed.log"; then missed=1; fi
  [ "$missed" = 0 ] && { compgen -G "$tmp/shm/elasticpipe-*.cache" > /dev/null && ok || bad "no cache file before the kill"; }
  [ -n "$victim" ] && kill -9 "$victim" 2> /dev/null
  [ -n "$ranks" ] && kill -CONT $ranks 2> /dev/null
  wait "$launcher"
  rc=$?
  return "$missed"
}
for attempt in 1 2 3; do
  kill_mid_epoch && break
  echo "kill -9 mid-epoch: attempt $attempt missed the job's epoch 2 (it had ended); again"
done
[ "$rc" -ne 0 ] && ok || bad "killed job exited 0 (victim '$victim')"
grep -q "killed by signal 9" "$tmp/killed.log" && ok || { bad "launcher did not report the kill"; tail -5 "$tmp/killed.log"; }
# The launcher removed the node's cache file the ranks had filled.
compgen -G "$tmp/shm/elasticpipe-*.cache" > /dev/null && bad "kill -9 of a rank left $(ls "$tmp/shm")" || ok
run resumed 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/killed" "${long[@]}" --resume "$tmp/killed/checkpoints"
has resumed "resumed from"
cmp -s "$tmp/full/weights.bin" "$tmp/killed/weights.bin" && ok || bad "kill -9 + resume: final weights differ from the uninterrupted run"
same_losses "$tmp/full" "$tmp/killed"

# 5. Refusals: a wrong process count, a checkpoint of another model, a corrupted one.
run wrong_nproc 2 -- "$bin" train "$cfg" --nproc 3 --out "$tmp/w"
has wrong_nproc "needs one per device"
run no_nproc 2 -- "$bin" train "$cfg" --out "$tmp/w"
has no_nproc "--nproc 4"
run other_model 2 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/w" --resume "$tmp/dp/checkpoints" --set model.hidden_size=32
has other_model "model.hidden_size"
latest=$(cat "$tmp/dp/checkpoints/latest")
cp -r "$tmp/dp/checkpoints/$latest" "$tmp/corrupt"
printf 'X' | dd of="$tmp/corrupt/state.bin" bs=1 seek=200 conv=notrunc 2> /dev/null
run corrupt 2 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/w" --resume "$tmp/corrupt"
has corrupt "corrupted"

# 6. On the BLAS users get (OpenBLAS where installed): the job trains, its
#    replicas stay identical, and the cached path's losses equal those of
#    recomputing the frozen layers within rounding.
LD_LIBRARY_PATH=$default_ld run blas 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/blas"
has blas "replicas 4 hold identical weights and optimizer state"
LD_LIBRARY_PATH=$default_ld run blas_nocache 0 -- "$bin" train "$cfg" --nproc 4 --out "$tmp/blas_nocache" \
  --set 'planner.cache="off"'
same_losses "$tmp/blas" "$tmp/blas_nocache"

echo "multi-process tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
