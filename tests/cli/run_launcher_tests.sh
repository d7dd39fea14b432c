#!/usr/bin/env bash
# The launchers users run, for real (run_multiprocess_tests.sh covers our
# own, --nproc): torchrun (--no-python) with two nodes of two processes on
# this machine, by static and by c10d rendezvous, and Open MPI's mpirun
# train tests/cli/configs/dp_tiny.toml to the same weights, byte for byte,
# as `train --nproc 4`; ranks started on other settings refuse together;
# a rank killed under `torchrun --max-restarts 1`
# with `--resume auto` is restarted by torchrun and continues from the
# run's last checkpoint, ending with the uninterrupted run's weights.
set -u
bin=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$root/tests/cli/configs/dp_tiny.toml
# torchrun comes with PyPI's torch (the build's venv: scripts/setup.sh),
# mpirun with Debian's openmpi-bin.
torchrun=
for t in "$(dirname "$bin")/torch-venv/bin/torchrun" "$root/build/torch-venv/bin/torchrun" "$(command -v torchrun)"; do
  [ -n "$t" ] && [ -x "$t" ] && { torchrun=$t; break; }
done
mpirun=$(command -v mpirun || true)
if [ -z "$torchrun" ] || [ -z "$mpirun" ]; then
  echo "skipped: no torchrun (${torchrun:-none}) or mpirun (${mpirun:-none}): scripts/setup.sh installs both"
  exit 77
fi
# The restart case resumes, so it fills the activation cache in other
# batches: on Debian's LibTorch it runs on the reference BLAS, as in
# run_multiprocess_tests.sh (which says why).
if ldd "$(dirname "$bin")/elasticpipe-exec" | grep -q 'libblas\.so\.3'; then
  blas=$(dpkg -L libblas3 2> /dev/null | grep '/blas/libblas.so.3$' | head -1)
  [ -n "$blas" ] || { echo "FAIL: the reference BLAS (Debian package libblas3) is not installed"; exit 1; }
  export LD_LIBRARY_PATH=$(dirname "$blas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
# A free port for each rendezvous: jobs of other builds may run beside.
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# check NAME RC: the job's exit code, its log shown when wrong.
check() {
  if [ "$2" -eq 0 ]; then ok; else bad "$1: exit $2"; tail -n 15 "$tmp/$1"*.log | sed 's/^/  | /'; fi
}
same_weights() {
  cmp -s "$tmp/$1/weights.bin" "$tmp/$2/weights.bin" && ok || bad "$2: other final weights than $1"
}

# torchrun's agent hosts the job's store, speaking its own torch's protocol:
# its ranks must be built on that LibTorch (the PyPI build; Debian's 1.13
# build meets a torchrun of its own torch, which PyPI has no longer).
same_torch=1
ldd "$(dirname "$bin")/elasticpipe-exec" | grep -q "$(dirname "$(dirname "$torchrun")")" || same_torch=0
[ "$same_torch" = 1 ] || echo "torchrun cases skipped: $torchrun is another torch than $(dirname "$bin")/elasticpipe-exec's LibTorch"

two_nodes=(--set cluster.nodes=2 --set cluster.gpus_per_node=2)
"$bin" train "$cfg" --nproc 4 --out "$tmp/ref22" "${two_nodes[@]}" > "$tmp/ref22.log" 2>&1
check ref22 $?

if [ "$same_torch" = 1 ]; then
# 1. torchrun, static rendezvous: one torchrun per node, node ranks given.
p=$(port)
for n in 0 1; do
  timeout 300 "$torchrun" --nnodes 2 --node-rank $n --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$p" \
    --no-python "$bin" train "$cfg" --out "$tmp/static" "${two_nodes[@]}" > "$tmp/static-$n.log" 2>&1 &
done
rc=0
for job in $(jobs -p); do wait "$job" || rc=$?; done
check static $rc
same_weights ref22 static
# Rank 0 is a client of torchrun's agent's store: as a server it failed
# to bind the agent's port, and c10d said so on stderr. (The agents' own
# store clients may log their shutdown: those lines are torchrun's.)
! grep -h "server socket .* has failed to bind" "$tmp"/static-*.log && ok || bad "static: rank 0 served a store"

# 2. torchrun, c10d rendezvous: the nodes find each other at one endpoint.
p=$(port)
for n in 0 1; do
  timeout 300 "$torchrun" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$p" \
    --rdzv-id "ep-$p" --no-python "$bin" train "$cfg" --out "$tmp/c10d" "${two_nodes[@]}" > "$tmp/c10d-$n.log" 2>&1 &
done
rc=0
for job in $(jobs -p); do wait "$job" || rc=$?; done
check c10d $rc
same_weights ref22 c10d
fi

# 3. Open MPI: four ranks on this machine, the store's address passed on.
"$bin" train "$cfg" --nproc 4 --out "$tmp/ref4" > "$tmp/ref4.log" 2>&1
check ref4 $?
p=$(port)
timeout 300 "$mpirun" --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 -x "MASTER_PORT=$p" \
  -x LD_LIBRARY_PATH "$bin" train "$cfg" --out "$tmp/mpi" > "$tmp/mpi.log" 2>&1
check mpi $?
same_weights ref4 mpi

# 4. Ranks started apart on other settings (torchrun's variables, set by
#    hand): every rank refuses before the first step, naming what differs.
p=$(port)
pids=()
for r in 0 1; do
  lr=$([ $r = 0 ] && echo 2e-3 || echo 0.5)
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 120 \
    "$bin" train "$cfg" --out "$tmp/apart" --set cluster.gpus_per_node=2 --set training.lr=$lr > "$tmp/apart-$r.log" 2>&1 &
  pids+=($!)
done
for r in 0 1; do
  wait "${pids[$r]}" && rc=0 || rc=$?
  [ "$rc" -eq 2 ] && grep -q "rank $r: the ranks of this job disagree: the config .* of rank(s) 1 differ" "$tmp/apart-$r.log" &&
    ok || { bad "apart: rank $r exited $rc without naming the disagreement"; tail -3 "$tmp/apart-$r.log"; }
done
[ ! -e "$tmp/apart/weights.bin" ] && ok || bad "apart: weights written by ranks that disagree"

[ "$same_torch" = 1 ] || { echo "launcher tests: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

# 5. torchrun's own restart: a rank killed after the run's second
#    checkpoint; torchrun restarts every worker with the same command, and
#    --resume auto continues from the last checkpoint.
long=(--set data.num_train_samples=4000 --set exec.checkpoint_every=3)
"$bin" train "$cfg" --nproc 4 --out "$tmp/full" "${long[@]}" > "$tmp/full.log" 2>&1
check full $?
restart() {
  rm -rf "$tmp/restarted"
  timeout 300 "$torchrun" --standalone --nproc-per-node 4 --max-restarts 1 --no-python \
    "$bin" train "$cfg" --out "$tmp/restarted" "${long[@]}" --resume auto > "$tmp/restarted.log" 2>&1 &
  local agent=$! first=
  for _ in $(seq 1 1200); do
    [ -z "$first" ] && first=$(cat "$tmp/restarted/checkpoints/latest" 2> /dev/null)
    [ -n "$first" ] && [ "$(cat "$tmp/restarted/checkpoints/latest" 2> /dev/null)" != "$first" ] && break
    sleep 0.05
  done
  # timeout's child is torchrun's agent (Python); the workers are its children.
  local torchrun_pid
  torchrun_pid=$(pgrep -P $agent | head -1)
  victim=$([ -n "$torchrun_pid" ] && pgrep -P "$torchrun_pid" | sed -n 3p)
  local missed=0
  { [ -z "$victim" ] || grep -q "^trained" "$tmp/restarted.log"; } && missed=1
  [ -n "$victim" ] && kill -9 "$victim" 2> /dev/null
  wait "$agent"
  rc=$?
  return "$missed"
}
for attempt in 1 2 3; do
  restart && break
  echo "torchrun restart: attempt $attempt missed the job (it had ended); again"
done
check restarted $rc
grep -q -- "--resume auto: continuing from $tmp/restarted/checkpoints" "$tmp/restarted.log" && ok ||
  { bad "the restarted workers did not continue from the checkpoint"; tail -15 "$tmp/restarted.log" | sed 's/^/  | /'; }
same_weights full restarted
! grep -h "server socket .* has failed to bind" "$tmp/restarted.log" && ok || bad "restarted: rank 0 served a store"

echo "launcher tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
