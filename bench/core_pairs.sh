#!/usr/bin/env bash
# Whether two busy cores slow each other on this machine: a single-thread
# C loop (ten naive 192x192 matrix products per run, 8 runs) alone, then two
# copies started together, ROUNDS times (default 3). Prints each run's ms.
# On a VM whose vCPUs share physical cores, one of the pair runs slower
# than alone; that is what makes CPU plans of several workers slower than
# `validate` predicts from sublayers profiled one worker at a time.
#   bash bench/core_pairs.sh [ROUNDS]
set -euo pipefail
rounds=${1:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/mm.c" <<'C'
#include <stdio.h>
#include <time.h>
#define N 192
static double a[N][N], b[N][N], c[N][N];
int main(void) {
  struct timespec t0, t1;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) a[i][j] = i + j, b[i][j] = i - j;
  for (int r = 0; r < 8; r++) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int rep = 0; rep < 10; rep++)
      for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++)
          for (int j = 0; j < N; j++) c[i][j] += a[i][k] * b[k][j];
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.1f ", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
  }
  printf("\n");
  return c[1][1] == 0.5;
}
C
cc -O2 -o "$dir/mm" "$dir/mm.c"
for _ in $(seq "$rounds"); do
  echo "alone: $("$dir/mm")"
  "$dir/mm" > "$dir/a" & "$dir/mm" > "$dir/b"; wait
  echo "pair:  $(cat "$dir/a")"
  echo "       $(cat "$dir/b")"
done
