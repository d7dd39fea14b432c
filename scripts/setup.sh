#!/usr/bin/env bash
# Installs what is missing (Debian bookworm packages only), then configures
# and builds ElasticPipe into build/. Safe to run again: it installs nothing
# that is already there and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# libtorch-dev + libgloo-dev: the executor (LibTorch 1.13, CPU; c10d headers need gloo's);
# dataset-fashion-mnist: the real dataset configs/fashion_mnist_vit_tiny.toml trains on;
# libopenblas0-openmp: an optimised BLAS for LibTorch's matrix products (Debian's libtorch calls
#   libblas.so.3, the unoptimised reference BLAS unless another provides it: 6-8x slower steps);
# libblas3: that reference BLAS, which the bitwise kill-and-resume tests run on (tests/cli);
# libeigen3-dev: the least-squares fits of the calibrated cost model (planner/fitted_cost_model).
packages=(cmake g++ make pkg-config ccache catch2 libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libeigen3-dev libsimgrid-dev
          python3-matplotlib libtorch-dev libgloo-dev libopenblas0-openmp libblas3 zlib1g-dev dataset-fashion-mnist)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build -j"$(nproc)"
