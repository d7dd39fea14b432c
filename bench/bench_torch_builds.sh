#!/usr/bin/env bash
# The two LibTorch builds and the PyTorch peer on one machine, runs
# alternated, medians over rounds: samples/s of a plain LibTorch loop and of
# the executor at K = 1 (bench_exec, at the machine's cores and at one
# intra-op thread), from build/ (PyPI's torch 2.x) and build-debian/
# (Debian's 1.13), and of the same ViT in PyTorch eager (bench/pytorch_peer.py
# on build/'s torch).
#   bash bench/bench_torch_builds.sh [CONFIG] [ROUNDS] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=${1:-configs/fashion_mnist_vit_tiny.toml}
rounds=${2:-3}
iters=${3:-15}
for b in build build-debian; do
  [ -x "$b/bench_exec" ] || { echo "ERROR: $b/bench_exec is missing: build it first (scripts/setup.sh, --torch debian)" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cores=$(nproc)
for r in $(seq "$rounds"); do
  for b in build build-debian; do
    "$b/bench_exec" "$cfg" "$iters" 1 > "$out/$b.$r" 2>&1 || { cat "$out/$b.$r"; exit 1; }
  done
  for t in "$cores" 1; do
    build/torch-venv/bin/python bench/pytorch_peer.py "$cfg" --iterations "$iters" --repeats 1 --threads "$t" \
      > "$out/peer$t.$r" 2>&1 || { cat "$out/peer$t.$r"; exit 1; }
  done
  echo "round $r of $rounds done" >&2
done
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
# field FILE-PREFIX PATTERN: the samples/s of the line matching PATTERN, median over rounds
field() { for r in $(seq "$rounds"); do grep -E "$2" "$out/$1.$r" | head -1 | sed -E 's/.* ([0-9.]+) samples\/s.*/\1/'; done | median; }
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $cfg, $rounds rounds x $iters iterations, samples/s (medians)"
printf '%-40s %12s %12s\n' "" "torch 2.x" "Debian 1.13"
for t in "$cores intra-op threads" "1 intra-op thread"; do
  printf '%-40s %12s %12s\n' "plain LibTorch loop, $t" "$(field build "plain LibTorch loop, $t")" \
    "$(field build-debian "plain LibTorch loop, $t")"
  printf '%-40s %12s %12s\n' "executor K=1 M=1, $t" "$(field build "executor K=1 M=1, $t")" \
    "$(field build-debian "executor K=1 M=1, $t")"
done
printf '%-40s %12s\n' "PyTorch eager, $cores intra-op threads" "$(field "peer$cores" '^median')"
printf '%-40s %12s\n' "PyTorch eager, 1 intra-op thread" "$(field peer1 '^median')"
echo "BLAS: torch 2.x: $(grep -h '^BLAS' "$out/build.1"); Debian: $(grep -h '^BLAS' "$out/build-debian.1")"
